"""Process helpers of the local backend (and of the server's TensorBoards): identity that survives pid reuse,
group signals, lifetimes bound to a parent (Linux's prctl), free ports, a process tree's memory, GPUs."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
from contextlib import ExitStack
from typing import Callable, Protocol, Sequence

import psutil


STARTED_TOLERANCE = 0.05  # seconds; psutil create_time is rounded
TERMINATING = (signal.SIGTERM, signal.SIGINT)  # the signals that stop a supervisor and so its job


def started_at(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def alive(pid: int | None, started: float | None) -> bool:
    """Whether the process `pid` that started at `started` still runs (not a reused pid, not a zombie)."""
    if not pid or started is None:
        return False
    try:
        process = psutil.Process(pid)
        return abs(process.create_time() - started) < STARTED_TOLERANCE and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def signal_group(pgid: int, sig: int) -> None:
    """Signal a whole process group; a group that is already gone is fine."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class GroupLeader(Protocol):
    """A process leading a process group of its own (asyncio's, or accounted.AccountedProcess)."""

    pid: int

    async def wait(self) -> int: ...


async def stop_groups(processes: Sequence[GroupLeader], grace: float) -> None:
    """SIGTERM each process's group; SIGKILL the groups of those still running after `grace` seconds."""
    import asyncio  # loaded already by whoever awaits this; the module itself stays light for the CLI

    for process in processes:
        signal_group(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.gather(*(p.wait() for p in processes)), grace)
    except asyncio.TimeoutError:
        for process in processes:
            signal_group(process.pid, signal.SIGKILL)
        await asyncio.gather(*(p.wait() for p in processes))


PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36  # <linux/prctl.h>


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0):
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def become_subreaper() -> None:
    """Adopt this process's orphaned descendants (a daemon a child double-forked), in place of init."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def dies_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A `preexec_fn` by which the child gets `sig` when the thread that started it ends (for a server's
    TensorBoards: its main thread, so the server's process); a parent already gone kills it at once."""
    parent = os.getpid()

    def bind() -> None:
        _prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return bind


def replica_ports(count: int) -> list[int]:
    """Ports for `count` replicas, free on 127.0.0.1 right now, each with the port after it: a replica may use
    that one too (as a pod may any port), for its framework's second service (Paddle's gloo store)."""
    with ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            first = stack.enter_context(socket.socket())
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            try:
                stack.enter_context(socket.socket()).bind(("127.0.0.1", port + 1))
            except (OSError, OverflowError):
                continue  # the next one is taken: this one stays bound until the end, so is not found again
            ports.append(port)
        return ports


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now, all distinct."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def tree_usage(pid: int) -> tuple[list[psutil.Process], int]:
    """A process and its descendants, and their resident memory in bytes."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return [], 0
    rss = 0
    for process in processes:
        try:
            rss += process.memory_info().rss
        except psutil.Error:
            pass
    return processes, rss


def gpus() -> list[dict]:
    """This machine's NVIDIA GPUs with their use, or [] without nvidia-smi."""
    rows = _nvidia_smi("--query-gpu=index,uuid,name,utilization.gpu,memory.used,memory.total")
    return [
        {"index": int(i), "uuid": uuid, "name": name, "utilization": _num(util),
         "memory_used_mib": _num(used), "memory_total_mib": _num(total)}
        for i, uuid, name, util, used, total in rows
    ]


def gpu_processes() -> dict[int, tuple[str, float | None]]:
    """pid -> (GPU uuid, GPU memory in MiB) for every process using a GPU."""
    rows = _nvidia_smi("--query-compute-apps=pid,gpu_uuid,used_memory")
    return {int(pid): (uuid, _num(used)) for pid, uuid, used in rows}


def _nvidia_smi(query: str) -> list[list[str]]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]


def _num(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None

