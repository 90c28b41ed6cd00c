"""Where a job's replicas are now: the threads of every Python process of each replica, dumped by py-spy (native
frames too, where it can unwind them) all at once, and compared: the frames every replica's training process shares
(folded in a view), and the replicas whose innermost place differs from the others'.

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
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from .errors import DistrainError, Unavailable
from .jobjson import iso

DUMP_SECONDS = 20  # the most one process's dump may take (py-spy pauses it meanwhile)
KEPT = "stacks.json"  # the stacks kept with a run's logs when it hung (policy.hang_after)


def py_spy() -> str:
    """The py-spy installed with this package (beside its interpreter), else the one on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise Unavailable("py-spy, which takes the stacks, is not installed: pip install py-spy")
    return found


def dump(pid: int) -> list[dict]:
    """The threads of Python process `pid`: name, id (the OS's), active, gil, frames (outermost first). Native
    frames where py-spy can unwind them, else Python's only; raises DistrainError with py-spy's reason."""
    failed = ""
    for native in (["--native"], []):
        try:
            done = subprocess.run([py_spy(), "dump", "--json", "--pid", str(pid), *native], capture_output=True,
                                  text=True, timeout=DUMP_SECONDS)
        except subprocess.TimeoutExpired:
            failed = f"no stack within {DUMP_SECONDS} s"
            continue
        if done.returncode == 0:
            return [_thread(raw) for raw in json.loads(done.stdout)]
        failed = (done.stderr.strip().splitlines() or [f"py-spy exited with code {done.returncode}"])[-1]
    raise DistrainError(failed.removeprefix("Error: "))


def _thread(raw: dict) -> dict:
    frames = [{"function": f["name"], "file": f["filename"], "line": f["line"], "native": f["module"] is not None}
              for f in reversed(raw["frames"]) if not f["name"].startswith("0x")]  # an address it could not name
    first_python = next((i for i, f in enumerate(frames) if not f["native"]), 0)
    return {"name": raw["thread_name"] or "", "id": raw["os_thread_id"], "active": raw["active"],
            "gil": raw["owns_gil"], "frames": frames[first_python:]}  # not the interpreter's own start


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


def take(replicas: dict[str, int]) -> dict:
    """The stacks of the replicas' processes (replica name -> its process id), all dumped at once, compared:
    {taken (ISO 8601), seconds (how long the dumps took), replicas: [{name, processes: [{pid, command, threads,
    error}], frames, error}], shared, differs}. A replica's `frames` are its training process's main thread's (its
    last Python process's, the one a launcher like torchrun starts): the replicas are compared on them (`compare`)."""
    trees = {name: python_processes(pid) for name, pid in replicas.items()}
    every = [p for tree in trees.values() for p in tree]
    taken = time.time()
    with ThreadPoolExecutor(max(len(every), 1)) as pool:
        dumps = dict(zip([p.pid for p in every], pool.map(_dump_or_error, [p.pid for p in every])))
    seconds = round(time.time() - taken, 3)
    rows = []
    for name, tree in trees.items():
        found = [{"pid": p.pid, "command": _command(p), **dumps[p.pid]} for p in tree]
        main = next((t for p in reversed(found) for t in p["threads"] if t["id"] == p["pid"]), None)
        error = "" if main else "; ".join(p["error"] for p in found if p["error"]) or "no Python process runs"
        rows.append({"name": name, "processes": found, "frames": main["frames"] if main else [], "error": error})
    return {"taken": iso(taken), "seconds": seconds, "replicas": rows, **compare(rows)}


def keep(log_dir: Path, taken: dict) -> None:
    """Keep stacks (take's, with why) with a run's logs, in place of any kept before."""
    partial = log_dir / f".{KEPT}.partial"
    partial.write_text(json.dumps(taken))
    os.replace(partial, log_dir / KEPT)


def kept(log_dir: Path, replica: str | None = None) -> dict | None:
    """The stacks kept with a run's logs (only `replica`'s), or None."""
    try:
        found = json.loads((log_dir / KEPT).read_text())
    except FileNotFoundError:
        return None
    if replica is not None:
        found["replicas"] = [r for r in found["replicas"] if r["name"] == replica]
    return found


def _dump_or_error(pid: int) -> dict:
    try:
        return {"threads": dump(pid), "error": ""}
    except DistrainError as e:
        return {"threads": [], "error": str(e)}


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def compare(replicas: list[dict]) -> dict:
    """`shared`: how many outermost frames every replica with a stack has in common (the same function, file and
    line); `differs`: the replicas whose innermost Python function is not the one most of them are in (none where
    no place holds more replicas than every other)."""
    stacks = {r["name"]: r["frames"] for r in replicas if r["frames"]}
    shared = 0
    if len(stacks) > 1:
        keys = [[(f["function"], f["file"], f["line"]) for f in frames] for frames in stacks.values()]
        while all(len(k) > shared for k in keys) and len({k[shared] for k in keys}) == 1:
            shared += 1
    places = {name: next(((f["function"], f["file"]) for f in reversed(frames) if not f["native"]), None)
              for name, frames in stacks.items()}
    counts = Counter(places.values()).most_common()
    common = counts[0][0] if counts and (len(counts) == 1 or counts[0][1] > counts[1][1]) else None
    differs = [name for name, place in places.items() if common is not None and place != common]
    return {"shared": shared, "differs": differs}


def text(stacks: dict) -> str:
    """The stacks as the CLI prints them: the frames every replica shares once, then each replica's own (a
    replica that differs marked), its other threads after."""
    count, shared = len(stacks["replicas"]), stacks["shared"]
    lines = [f"{stacks['reason']}: {stacks['message']}"] if stacks.get("reason") else []
    lines.append(f"{count} replica{'s' * (count != 1)}, stacks taken at {stacks['taken']} in {stacks['seconds']:.2f} s"
                 + (f"; differs: {', '.join(stacks['differs'])}" if stacks["differs"] else ""))
    if shared:
        first = next(r for r in stacks["replicas"] if r["frames"])
        lines += [f"shared by every replica ({shared} frame{'s' * (shared != 1)}, outermost first):",
                  *(f"  {_frame(f)}" for f in first["frames"][:shared])]
    for replica in stacks["replicas"]:
        lines.append(f"{replica['name']}" + ("  <- differs" if replica["name"] in stacks["differs"] else "")
                     + (f": {replica['error']}" if replica["error"] else ""))
        for process in replica["processes"]:
            lines.append(f"  pid {process['pid']}: {process['command']}" +
                         (f": {process['error']}" if process["error"] else ""))
            for thread in process["threads"]:
                frames = thread["frames"]
                skipped = shared if frames == replica["frames"] else 0  # the thread the replicas are compared on
                flags = [flag for flag, on in (("active", thread["active"]), ("holds the GIL", thread["gil"])) if on]
                named = thread["name"] or ("main" if thread["id"] == process["pid"] else str(thread["id"]))
                lines.append(f"    thread {named}" + (f" ({', '.join(flags)})" if flags else "")
                             + (f", after the {skipped} shared:" if skipped else ":"))
                lines += [f"      {_frame(f)}" for f in frames[skipped:]]
    return "\n".join(lines)


def _frame(frame: dict) -> str:
    if frame["native"]:  # a C++ template's name may run to thousands of characters: its two ends say enough
        name = frame["function"]
        return f"{name if len(name) <= 100 else name[:48] + '...' + name[-48:]} [{Path(frame['file']).name}]"
    return f"{frame['function']} ({frame['file']}:{frame['line']})"
