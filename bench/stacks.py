"""How long "Where is it now?" takes: `GET jobs/{name}/stacks` of a local job of 3 and of 16 replicas, each waiting
in a function of its own, beside dumping the same processes by hand with py-spy one after another (as a user
would, a terminal per replica), in the same run. Both unwind native frames.
Run: python bench/stacks.py [times]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import Server, table

PROGRAM = """import time
def wait_here():
    time.sleep(3600)
wait_here()
"""


def by_api(server: Server, name: str) -> float:
    """ms for one stacks request."""
    started = time.perf_counter()
    found = server.request("GET", f"jobs/{name}/stacks")
    assert all(r["frames"] for r in found["replicas"]), found
    return (time.perf_counter() - started) * 1000


def by_hand(pids: list[int]) -> float:
    """ms to dump each process with py-spy, one after another."""
    py_spy = str(Path(sys.executable).with_name("py-spy"))
    started = time.perf_counter()
    for pid in pids:
        subprocess.run([py_spy, "dump", "--native", "--pid", str(pid)], check=True, capture_output=True)
    return (time.perf_counter() - started) * 1000


def measure(count: int = 5) -> list[tuple]:
    rows = []
    with Server() as server:
        (server.code / "wait.py").write_text(PROGRAM)
        for replicas in (3, 16):
            name = f"waits-{replicas}"
            server.submit(name, "python wait.py", replicas={"worker": {"count": replicas}})
            server.wait(name, ("Running",))
            found = server.request("GET", f"jobs/{name}/stacks")["replicas"]
            while not all(r["frames"] for r in found):  # until every interpreter started
                time.sleep(0.2)
                found = server.request("GET", f"jobs/{name}/stacks")["replicas"]
            pids = [r["processes"][-1]["pid"] for r in found]  # the Python under the replica's shell
            api, hand = [], []
            for _ in range(count):  # alternated, so each meets the same machine
                api.append(by_api(server, name))
                hand.append(by_hand(pids))
            server.request("DELETE", f"jobs/{name}")
            api_ms, hand_ms = statistics.median(api), statistics.median(hand)
            rows.append((f"stacks of a {replicas}-replica local job (GET jobs/{{name}}/stacks): ms", api_ms, hand_ms,
                         f"py-spy dump --native of each of the {replicas}, one after another", api_ms / hand_ms,
                         "<= 1"))
    return rows


if __name__ == "__main__":
    print(table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5)))
