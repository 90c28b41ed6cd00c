"""TensorBoard memory: every tab of two 3-replica jobs (each replica's and each whole job's) open at once,
beside one TensorBoard started by hand on one job's event files, in the same run.

Memory is the resident set of the TensorBoard processes and their data servers, once each tab's runs
have loaded. Run: python bench/tensorboard_memory.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import psutil
from harness import HEADERS, Server, table

from jupyter_distrain.backends.local.processes import free_ports
from jupyter_distrain.server.tensorboard import BOARD_PROGRAM

WRITE = """
import os, time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
writer = EventFileWriter(os.environ["DISTRAIN_LOG_DIR"])
for step in range(1000):
    value = summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / (step + 1))
    writer.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=summary_pb2.Summary(value=[value])))
writer.close()
"""
JOBS = ("one", "two")
REPLICAS = ("chief-0", "worker-0", "worker-1")


def runs(url: str) -> list[str]:
    with urllib.request.urlopen(urllib.request.Request(url, headers=HEADERS), timeout=120) as response:
        return json.loads(response.read())


def resident_mb(processes: list[psutil.Process]) -> float:
    """The resident memory of the processes and their children, in MB."""
    every = {p.pid: p for p in processes} | {c.pid: c for p in processes for c in p.children(recursive=True)}
    return sum(p.memory_info().rss for p in every.values()) / 1e6


def boards(root) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if BOARD_PROGRAM in (p.info["cmdline"] or []) and str(root) in " ".join(p.info["cmdline"])]


def until(condition, seconds: float = 120):
    deadline = time.monotonic() + seconds
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.5)
    return result


def measure() -> list[tuple]:
    with Server() as server:
        (server.code / "write.py").write_text(WRITE)
        for job in JOBS:
            server.submit(job, "python write.py", replicas={"chief": {}, "worker": {"count": 2}},
                          framework="tensorflow", tensorboard={"enabled": True})
        for job in JOBS:
            assert server.wait(job)["phase"] == "Succeeded"
        tabs = [(job, replica) for job in JOBS for replica in (*REPLICAS, "all")]
        for job, replica in tabs:  # each tab's page asks for its runs first
            until(lambda: any(run.split("/")[0] in (job, *REPLICAS)  # <job>/<replica> on one board, else <replica>
                              for run in runs(f"{server.url}/distrain/tensorboard/{job}/{replica}/data/runs")))
        time.sleep(5)  # a reload or two
        open_tabs = boards(server.root)
        tabs_mb = resident_mb(open_tabs)

        logdir = server.root / "outputs" / JOBS[0] / "training_logs"
        port = free_ports(1)[0]
        by_hand = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port),
                                    "--host", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            until(lambda: _answers(f"http://127.0.0.1:{port}/data/runs"))
            time.sleep(5)
            one_mb = resident_mb([psutil.Process(by_hand.pid)])
        finally:
            by_hand.terminate()
            by_hand.wait()
    return [(f"{len(tabs)} TensorBoard tabs of {len(JOBS)} jobs: resident MB ({len(open_tabs)} TensorBoard)",
             tabs_mb, one_mb, "one TensorBoard by hand", tabs_mb / one_mb, "<= 1.1")]


def _answers(url: str) -> bool:
    try:
        return bool(runs(url))
    except OSError:
        return False


if __name__ == "__main__":
    print(table(measure()))
