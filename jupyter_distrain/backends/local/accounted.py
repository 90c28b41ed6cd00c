"""A replica's process, started in a session of its own and reaped with wait4, which tells what it used: the CPU
time of the process and of every descendant it waited for (a shell's command, a launcher's workers), measured by
the kernel when the process ends, nothing sampled or missed. Its largest resident set is the kernel's too (its
processes' high-water marks), but for one case: a process started from this large one counts this one's size as
its own at first (the kernel keeps the high-water mark across the exec), so a peak below that size is the one seen
in the processes' own marks (VmHWM), looked at while they run (`look`). A descendant left running when its
replica's group is killed (a daemon outside the group) is not counted. Looking at them also notes the TensorBoard
event files they hold open, wherever they are (`event_files`)."""

from __future__ import annotations

import asyncio
import os
import threading
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import psutil

KIB = 1024 if os.uname().sysname == "Linux" else 1  # ru_maxrss: kibibytes on Linux, bytes on macOS
EVENT_FILE = "events.out.tfevents."  # how TensorBoard's writers (TensorFlow's, Keras's, PyTorch's) name their files


@dataclass(frozen=True)
class Used:
    cpu_seconds: float = 0.0
    peak_memory: int | None = None  # bytes; None: not known

    def __add__(self, other: Used) -> Used:
        """What two processes used one after the other: their CPU seconds summed, the larger peak."""
        peaks = [peak for peak in (self.peak_memory, other.peak_memory) if peak is not None]
        return Used(self.cpu_seconds + other.cpu_seconds, max(peaks, default=None))


class AccountedProcess:
    """`/bin/sh -c SCRIPT` in `cwd`, its output to the file descriptors given; `wait()` answers its return code as
    asyncio's processes do (-N for signal N); once it has ended, `used` has its CPU seconds and peak memory."""

    def __init__(self, script: str, cwd: Path, env: dict[str, str], stdout: int, stderr: int):
        # posix_spawn takes no directory: a shell changes to it, then becomes the script's, as asyncio would start it
        argv = ["/bin/sh", "-c", 'cd -- "$0" || exit 126; exec /bin/sh -c "$1"', str(cwd), script]
        self.pid = os.posix_spawn(argv[0], argv, env, setsid=True, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, stdout, 1),
            (os.POSIX_SPAWN_DUP2, stderr, 2),
        ])
        self.inherited = high_water(os.getpid()) or 0  # at least what the kernel counted for it at its start
        self.seen = 0  # the largest of its processes' high-water marks when looked at
        self.event_files: set[str] = set()  # the event files its processes held open when looked at
        self.used = Used()
        loop = asyncio.get_running_loop()
        self._ended: asyncio.Future[int] = loop.create_future()
        threading.Thread(target=self._reap, args=(loop,), name=f"reap-{self.pid}", daemon=True).start()

    def look(self) -> None:
        """Note its processes' high-water marks as they are now, and the event files they hold open."""
        try:
            root = psutil.Process(self.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        self.seen = max([self.seen, *(high_water(process.pid) or 0 for process in tree)])
        for process in tree:
            with suppress(psutil.Error):
                self.event_files.update(f.path for f in process.open_files() if EVENT_FILE in os.path.basename(f.path))

    def _reap(self, loop: asyncio.AbstractEventLoop) -> None:
        _, status, usage = os.wait4(self.pid, 0)
        largest = usage.ru_maxrss * KIB
        self.used = Used(usage.ru_utime + usage.ru_stime, largest if largest > self.inherited else (self.seen or None))
        try:
            loop.call_soon_threadsafe(self._ended.set_result, os.waitstatus_to_exitcode(status))
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    async def wait(self) -> int:
        """Its return code, once it has ended (any number of callers, each may be cancelled alone)."""
        return await asyncio.shield(self._ended)


def high_water(pid: int) -> int | None:
    """The process's largest resident set since it started its program, in bytes (Linux's VmHWM); None where it
    is gone or the system does not say."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
