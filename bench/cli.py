"""The `distrain` command's start: `--help`, and `list` with 1,000 jobs of 5 replicas each, beside the
interpreter starting and exiting (`python -c pass`), in the same run. Run: python bench/cli.py [times]

Each command runs as installed: from bytecode, which pip compiles at install (here kept in a directory of
the run's own, written by a first run of each command, whatever PYTHONDONTWRITEBYTECODE says).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import python, table
from stored import jobs_in  # tests/stored.py (harness puts tests/ on the path)

JOBS = 1000


def seconds(command: list[str], env: dict, times: int) -> float:
    """The median wall time of `command`, in ms."""
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)  # writes its bytecode
    runs = []
    for _ in range(times):
        began = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        runs.append((time.perf_counter() - began) * 1000)
    return statistics.median(runs)


def measure(times: int = 20) -> list[tuple]:
    with tempfile.TemporaryDirectory(prefix="distrain-bench-") as home:
        root = Path(home)
        jobs_in(root, JOBS)
        env = {**os.environ, "DISTRAIN_HOME": str(root), "DISTRAIN_BACKEND": "local",
               "PYTHONPYCACHEPREFIX": str(root / "bytecode")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        distrain = str(Path(python()).with_name("distrain"))
        baseline = seconds([python(), "-c", "pass"], env, times)
        help_ms = seconds([distrain, "--help"], env, times)
        list_ms = seconds([distrain, "list"], env, times)
    return [("`distrain --help`: ms", help_ms, baseline, "python -c pass", help_ms / baseline, "<= 150 ms"),
            (f"`distrain list`, {JOBS} jobs: ms", list_ms, baseline, "python -c pass", list_ms / baseline, "<= 150 ms")]


if __name__ == "__main__":
    print(table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 20)))
