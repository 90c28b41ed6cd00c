"""Where a job's replicas are now, as every backend answers it: the threads of every Python process of each replica,
dumped all at once by the backend (backends/local/processstacks.py, backends/kubernetes/podstacks.py), and
compared: the frames every replica's training process shares (folded in a view), and the replicas whose innermost
place differs from the others'."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import NotFound, NotRunning, ReplicaNotFound
from .records import iso

def requested(job: Mapping[str, Any], replica: str | None, kept: bool, kept_stacks: Callable[[], dict | None],
              running: Callable[[list[str]], dict[str, Any]], take: Callable[[dict[str, Any]], dict]) -> dict:
    """A stacks request, as every backend answers it: `replica`'s (None: every replica's) stacks kept when the
    current run hung (`kept_stacks()`), or `take(running(names))`, the replicas of `names` that run (name -> how to
    reach them)."""
    names = [r["name"] for r in job["replicas"]]
    if replica is not None and replica not in names:
        raise ReplicaNotFound(job["name"], replica, names)
    if kept:
        if (found := kept_stacks()) is None:
            raise NotFound(f"job {job['name']!r} has no stacks kept: they are kept when it hangs (policy.hang_after)")
        return {**found, "replicas": [r for r in found["replicas"] if replica in (None, r["name"])]}
    if not (found := running([replica] if replica else names)):
        raise NotRunning((f"replica {replica} of job {job['name']!r} is not running" if replica else
                          f"no replica of job {job['name']!r} is running") + ": stacks are taken of running replicas")
    return take(found)


def compared(found: dict[str, list[dict] | str], taken: float) -> dict:
    """Replicas' stacks (name -> their Python processes as incluster/stackdump.py gives them, or why none were
    dumped), dumped from `taken` until now: {taken (ISO 8601), seconds, replicas: [{name, processes: [{pid,
    command, threads, error}], frames, error}], shared, differs}. A replica's `frames` are its training process's
    main thread's (its last Python process's, the one a launcher like torchrun starts): the replicas are compared
    on them (`compare`)."""
    seconds = round(time.time() - taken, 3)
    rows: list[dict] = []
    for name, processes in found.items():
        if isinstance(processes, str):
            rows.append({"name": name, "processes": [], "frames": [], "error": processes})
            continue
        main = next((t for p in reversed(processes) for t in p["threads"] if t["id"] == p["pid"]), None)
        error = "" if main else "; ".join(p["error"] for p in processes if p["error"]) or "no Python process runs"
        rows.append({"name": name, "processes": processes, "frames": main["frames"] if main else [], "error": error})
    return {"taken": iso(taken), "seconds": seconds, "replicas": rows, **compare(rows)}


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
