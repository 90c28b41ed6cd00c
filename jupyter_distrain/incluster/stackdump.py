"""The stacks of Python processes, dumped by py-spy all at once: `python -c <this file> PY_SPY ROOT` prints, as JSON,
[{pid, command, threads, error}] for the Python processes below process ROOT (parents before their children), each
thread {name, id (the OS's), active, gil, frames (outermost first: function, file, line, native)}.

A Kubernetes replica's stacks are taken with this program, run through pods/exec in the replica's container (ROOT
1: logtee, the container's first process, whose descendants are the replica's command; the container's own temporary
directory holds the dumps' locks). The local backend imports `dumps` (it finds a replica's processes itself, on any
system), with its locks in the storage root. Standard library only: it runs in the job's image."""

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

DUMP_SECONDS = 20  # the most one process's dump may take (py-spy pauses it meanwhile)
LOCK_SECONDS = 2 * DUMP_SECONDS  # the longest a dump waits for another's end, then it goes on unlocked
LOCK_POLL_SECONDS = 0.05


def dump(py_spy, pid, lock_dir):
    """The threads of Python process `pid`: native frames where py-spy can unwind them, else Python's only; raises
    RuntimeError with py-spy's reason. A failed dump is tried once more (a running process may change what py-spy
    reads while it reads it); one that took too long is not."""
    failed = ""
    with one_dump_at_a_time(pid, lock_dir):
        for native in (["--native"], []):
            for _ in range(2):
                try:
                    done = subprocess.run([py_spy, "dump", "--json", "--pid", str(pid), *native], capture_output=True,
                                          text=True, timeout=DUMP_SECONDS)
                except subprocess.TimeoutExpired:
                    failed = f"no stack within {DUMP_SECONDS} s"
                    break
                if done.returncode == 0:
                    return [thread(raw) for raw in json.loads(done.stdout)]
                failed = (done.stderr.strip().splitlines() or [f"py-spy exited with code {done.returncode}"])[-1]
    raise RuntimeError(failed.removeprefix("Error: "))


@contextmanager
def one_dump_at_a_time(pid, lock_dir):
    """Two py-spy dumps of one process at once fail as often as not: a dump waits for another's end (a user's and
    the hang's, the monitor's and a server's), on a lock file of the process in `lock_dir` (a directory only its
    user may write to), removed after. It waits LOCK_SECONDS at most; where no lock can be had, it goes on unlocked."""
    path, deadline = os.path.join(lock_dir, f"{pid}.lock"), time.monotonic() + LOCK_SECONDS
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError:  # no lock directory
            yield
            return
        if locked_before(fd, deadline):
            try:
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    break  # else the holder removed it as this one waited: lock the one there is now
            except FileNotFoundError:
                pass
        elif time.monotonic() >= deadline:
            os.close(fd)
            yield
            return
        os.close(fd)
    try:
        yield
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
        os.close(fd)


def locked_before(fd, deadline):
    """Whether `fd`'s lock was had before `deadline`."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(LOCK_POLL_SECONDS)


def thread(raw):
    frames = [{"function": f["name"], "file": f["filename"], "line": f["line"], "native": f["module"] is not None}
              for f in reversed(raw["frames"]) if not f["name"].startswith("0x")]  # an address it could not name
    first_python = next((i for i, f in enumerate(frames) if not f["native"]), 0)
    return {"name": raw["thread_name"] or "", "id": raw["os_thread_id"], "active": raw["active"],
            "gil": raw["owns_gil"], "frames": frames[first_python:]}  # not the interpreter's own start


def dump_or_error(py_spy, pid, lock_dir):
    try:
        return {"threads": dump(py_spy, pid, lock_dir), "error": ""}
    except RuntimeError as e:
        return {"threads": [], "error": str(e)}


def dumps(py_spy, pids, lock_dir):
    """{pid: {threads, error}} of processes `pids`, dumped concurrently (their locks in `lock_dir`)."""
    with ThreadPoolExecutor(max(len(pids), 1)) as pool:
        return dict(zip(pids, pool.map(lambda pid: dump_or_error(py_spy, pid, lock_dir), pids)))


def python_processes(root):
    """The processes below `root` that run Python, parents before their children, with their command lines."""
    children = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                parent = int(stat.read().rpartition(b")")[2].split()[1])  # after the command's name, which has any
        except (ValueError, OSError):  # not a process, or one that ended
            continue
        children.setdefault(parent, []).append(int(entry))
    found, below = [], sorted(children.get(root, []))
    while below:
        pid = below.pop(0)
        below[:0] = sorted(children.get(pid, []))  # depth first: a launcher, then the processes it started
        try:
            if "python" in os.path.basename(os.readlink(f"/proc/{pid}/exe")):
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    found.append((pid, cmdline.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")))
        except OSError:
            pass
    return found


def main():
    py_spy, root = sys.argv[1], int(sys.argv[2])
    found = python_processes(root)
    dumped = dumps(py_spy, [pid for pid, _ in found], tempfile.gettempdir())  # the container's own
    json.dump([{"pid": pid, "command": command, **dumped[pid]} for pid, command in found], sys.stdout)


if __name__ == "__main__":
    main()
