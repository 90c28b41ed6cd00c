"""A 4-replica local job's start: from the submit request until the last replica runs its command, beside
a shell script starting the same 4 commands in the background, in the same run. Each command prints the
time it began. Run: python bench/launch.py [times]
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time

from harness import Server, table

REPLICAS = 4
COMMAND = 'echo "began $(date +%s.%N)"'
BEGAN = re.compile(r"began (\d+\.\d+)")


def by_script() -> float:
    """ms from starting the script until its last command began."""
    script = "".join(f"sh -c '{COMMAND}' & " for _ in range(REPLICAS)) + "wait"
    started = time.time()
    printed = subprocess.run(["sh", "-c", script], check=True, capture_output=True, text=True).stdout
    return (max(float(t) for t in BEGAN.findall(printed)) - started) * 1000


def by_distrain(server: Server, name: str) -> float:
    """ms from sending the submit until the job's last replica began."""
    started = time.time()
    server.submit(name, COMMAND, replicas={"worker": {"count": REPLICAS}},
                  policy={"success": "all-workers"})  # worker 0's end stops none of the others
    assert server.wait(name)["phase"] == "Succeeded"
    printed = server.request_text(f"jobs/{name}/logs")
    began = [float(t) for t in BEGAN.findall(printed)]
    assert len(began) == REPLICAS, printed
    server.request("DELETE", f"jobs/{name}")
    return (max(began) - started) * 1000


def measure(times: int = 10) -> list[tuple]:
    with Server() as server:
        by_distrain(server, "warm")
        ours, script = [], []
        for i in range(times):  # alternated, so both meet the same machine
            ours.append(by_distrain(server, f"launch-{i}"))
            script.append(by_script())
    ms, baseline = statistics.median(ours), statistics.median(script)
    return [(f"{REPLICAS}-replica local job, submit to last replica running: ms", ms, baseline,
             f"a shell script starting the {REPLICAS} commands", ms / baseline, "within 10% or 100 ms")]


if __name__ == "__main__":
    print(table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 10)))
