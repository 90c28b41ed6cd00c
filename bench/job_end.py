"""A short local job's two ends: from the submit until its first replica runs its first instruction, and from
its last replica's exit until the job's end is reported, beside a shell starting the same processes and waiting
for them, in the same run. Each replica prints the time it began and, as its last instruction, the time it
exits. The end is reported three ways: by `GET jobs/{name}` (asked every 10 ms), by the job's log stream (its
"end" message, what the panel and the client's followed logs wait for) and by `distrain submit --follow`
exiting (from a terminal: no launcher, the supervisor starts from a new interpreter).
Run: python bench/job_end.py [times]
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness import FINISHED, Server, python, table

REPLICAS = 2
PROGRAM = """import os, time
print(f"began {time.time()!r}", flush=True)  # one write each: the processes by hand share one pipe
print(f"exits {time.time()!r}", flush=True)
os._exit(0)
"""
COMMAND = "python end.py"
BEGAN, EXITS = re.compile(r"began (\d+\.\d+)"), re.compile(r"exits (\d+\.\d+)")
SPEC = {"replicas": {"worker": {"count": REPLICAS}}, "policy": {"success": "all-workers"}}  # all of them run to the end


def env_with_python() -> dict[str, str]:
    """`python` the interpreter that runs the jobs (a job's supervisor puts its directory first on PATH)."""
    return {**os.environ, "PATH": f"{Path(python()).parent}:{os.environ.get('PATH', '')}"}


def times(printed: str) -> tuple[float, float]:
    """The first replica's first instruction and the last one's exit, as they printed them."""
    began, exits = [float(t) for t in BEGAN.findall(printed)], [float(t) for t in EXITS.findall(printed)]
    assert len(began) == len(exits) == REPLICAS, printed
    return min(began), max(exits)


def by_hand(code: Path) -> tuple[float, float]:
    """ms from starting the shell until the first process began, and from the last one's exit until the shell's
    `wait` returned, as its parent sees it."""
    script = f"{COMMAND} & " * REPLICAS + "wait"
    started = time.time()
    shell = subprocess.Popen(["sh", "-c", script], cwd=code, env=env_with_python(), stdout=subprocess.PIPE, text=True)
    printed, _ = shell.communicate()
    reported = time.time()
    began, exited = times(printed)
    return (began - started) * 1000, (reported - exited) * 1000


def by_api(server: Server, name: str) -> tuple[float, float, float]:
    """ms from sending the submit until the first replica began, from the last replica's exit until
    `GET jobs/{name}` says the job ended, and until the job's log stream sent its end."""
    streamed: list[float] = []

    def stream() -> None:
        assert server.stream_end(name)["type"] == "end"
        streamed.append(time.time())

    started = time.time()
    server.submit(name, COMMAND, **SPEC)
    follower = threading.Thread(target=stream)
    follower.start()
    while (job := server.request("GET", f"jobs/{name}"))["phase"] not in FINISHED:
        time.sleep(0.01)
    seen = time.time()
    follower.join()
    assert job["phase"] == "Succeeded", job
    began, exited = times(server.request_text(f"jobs/{name}/logs"))
    server.request("DELETE", f"jobs/{name}")
    return (began - started) * 1000, (seen - exited) * 1000, (streamed[0] - exited) * 1000


def by_cli(server: Server, name: str) -> tuple[float, float]:
    """ms from starting `distrain submit --follow` until the first replica began, and from the last replica's exit
    until the command exited."""
    spec = server.code.parent / f"{name}.json"  # JSON is YAML
    spec.write_text(json.dumps({"name": name, "code": {"path": str(server.code)}, "command": COMMAND, **SPEC}))
    env = {**env_with_python(), "DISTRAIN_HOME": str(server.root), "DISTRAIN_BACKEND": "local"}
    started = time.time()
    printed = subprocess.run([str(Path(python()).with_name("distrain")), "submit", "-f", str(spec), "--follow"],
                             env=env, check=True, capture_output=True, text=True).stdout
    reported = time.time()
    began, exited = times(printed)
    server.request("DELETE", f"jobs/{name}")
    return (began - started) * 1000, (reported - exited) * 1000


def measure(count: int = 10) -> list[tuple]:
    with Server() as server:
        (server.code / "end.py").write_text(PROGRAM)
        by_api(server, "warm")
        by_cli(server, "warm-cli")
        api, cli, hand = [], [], []
        for i in range(count):  # alternated, so each meets the same machine
            api.append(by_api(server, f"end-{i}"))
            hand.append(by_hand(server.code))
            cli.append(by_cli(server, f"end-cli-{i}"))
    def median(runs: list[tuple], i: int) -> float:
        return statistics.median(run[i] for run in runs)

    start, end = median(hand, 0), median(hand, 1)
    shell = f"a shell starting the {REPLICAS} processes and waiting"
    return [
        (f"{REPLICAS}-replica local job, submit (API) to first replica's first instruction: ms", median(api, 0), start,
         shell, median(api, 0) / start, "-"),
        ("`distrain submit --follow` started to first replica's first instruction: ms", median(cli, 0), start, shell,
         median(cli, 0) / start, "-"),
        ("last replica's exit to the end in `GET jobs/{name}` (asked every 10 ms): ms", median(api, 1), end, shell,
         median(api, 1) / end, "<= 200 ms"),
        ("last replica's exit to the log stream's end message: ms", median(api, 2), end, shell, median(api, 2) / end,
         "<= 200 ms"),
        ("last replica's exit to `distrain submit --follow` exiting: ms", median(cli, 1), end, shell,
         median(cli, 1) / end, "<= 200 ms"),
    ]


if __name__ == "__main__":
    print(table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 10)))
