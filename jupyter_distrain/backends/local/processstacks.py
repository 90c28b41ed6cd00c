"""The stacks of a local job's replicas: their processes' threads dumped by py-spy (native frames too, where it can
unwind them), and those kept with a run's logs when it hung.

A stack dump reads the process's memory: the job's own user may, where the kernel lets processes of that user read
each other's (Yama's ptrace_scope 0), or where the process declares it (ptrace_scope 1, the default of most
distributions): every Python process of a replica does as it starts (see replica_site/sitecustomize.py). Processes
forked without a new interpreter (a DataLoader's workers) make no declaration: under ptrace_scope 1 they are
shown with the error py-spy gives.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import psutil

from ...errors import Unavailable
from ...incluster import stackdump
from ...stacks import compared

KEPT = "stacks.json"  # the stacks kept with a run's logs when it hung (policy.hang_after)


def py_spy() -> str:
    """The py-spy installed with this package (beside its interpreter), else the one on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise Unavailable("py-spy, which takes the stacks, is not installed: pip install py-spy")
    return found


def python_processes(pid: int) -> list[psutil.Process]:
    """A replica's process and its descendants that run Python, parents before their children."""
    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []
    found = []
    for process in tree:
        try:
            if "python" in Path(process.exe()).name:
                found.append(process)
        except psutil.Error:
            pass
    return found


def take(replicas: dict[str, int], lock_dir: Path) -> dict:
    """The stacks of local replicas' processes (replica name -> its process id), all dumped at once (their locks in
    `lock_dir`, one of this user's own): `compared`."""
    trees = {name: python_processes(pid) for name, pid in replicas.items()}
    taken = time.time()
    dumped = stackdump.dumps(py_spy(), [p.pid for tree in trees.values() for p in tree], lock_dir)
    return compared({name: [{"pid": p.pid, "command": _command(p), **dumped[p.pid]} for p in tree]
                     for name, tree in trees.items()}, taken)


def keep(log_dir: Path, taken: dict) -> None:
    """Keep stacks (take's, with why) with a run's logs, in place of any kept before."""
    partial = log_dir / f".{KEPT}.partial"
    partial.write_text(json.dumps(taken))
    os.replace(partial, log_dir / KEPT)


def kept_in(log_dir: Path) -> dict | None:
    """The stacks kept with a run's logs, or None."""
    try:
        return json.loads((log_dir / KEPT).read_text())
    except FileNotFoundError:
        return None


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""
