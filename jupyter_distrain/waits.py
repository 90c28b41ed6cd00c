"""Why a job waits, said the same way by every backend: one plain sentence, and the numbers behind it (each
replica the scheduler cannot place against the most a node has free; the job's place in its queue)."""

from __future__ import annotations

from .policy import Phase
from .records import JobRecord

RESOURCE_NAMES = {"cpu": "cpu", "memory": "memory", "nvidia.com/gpu": "gpus"}  # as the job spec names them


def number(resource: str, value: float) -> str:
    """`value` of a resource (a job spec's name for it) alone: 2, 1.5, 16 GiB."""
    return f"{value / 2**30:.3g} GiB" if resource == "memory" else f"{value:g}"


def amount(resource: str, value: float) -> str:
    """`value` of a resource as people say it: 2 GPUs, 1.5 CPUs, 16 GiB of memory."""
    if resource == "memory":
        return f"{number(resource, value)} of memory"
    unit = "GPU" if resource == "gpus" else "CPU"
    return f"{number(resource, value)} {unit}{'' if value == 1 else 's'}"


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def record(job: JobRecord, sentence: str = "", replicas: list | None = None, queue: dict | None = None) -> dict:
    return {"name": job["name"], "phase": job["phase"], "waiting": bool(sentence), "sentence": sentence,
            "replicas": replicas or [], "queue": queue}


def not_waiting(job: JobRecord) -> dict:
    return record(job)


def short(seen: dict) -> list[dict]:
    """The resources a replica asks for more of than any node it may use has free."""
    return [row for row in seen["resources"] if row["requested"] > row["largest_free"]]


def room(seen: dict) -> str:
    """What a replica asks for against the most free on one node: 'it asks for 2 GPUs; the most free on a node is
    0 GPUs (gpu-0)'; with no node able to hold that much at all, says so."""
    rows = short(seen) or seen["resources"]
    asked = names([amount(r["resource"], r["requested"]) for r in rows])
    free = names([amount(r["resource"], r["largest_free"]) + (f" ({r['node']})" if r["node"] else "") for r in rows])
    never = [amount(r["resource"], r["largest_allocatable"]) for r in rows if r["requested"] > r["largest_allocatable"]]
    if not seen["nodes"]:
        return f"it asks for {asked}; the cluster has no node it may use"
    said = f"it asks for {asked}; the most free on a node is {free}"
    return said + (f", and no node has more than {names(never)} at all" if never else "")


def pending(job: JobRecord, replicas: list[dict]) -> dict:
    """A Pending job's record: the replicas the scheduler cannot place (each with `against_nodes`' numbers and the
    scheduler's message) grouped by what they lack; else the job's own message."""
    if not replicas:
        return record(job, job["message"] or job["reason"] or "its replicas are starting")
    groups: dict[str, list[str]] = {}
    for replica in replicas:
        placeable = replica["nodes_with_room"] and not short(replica)  # then taints, affinities...: the scheduler's
        said = f"the scheduler says: {replica['message']}" if placeable else room(replica)
        groups.setdefault(said, []).append(replica["name"])
    parts = [f"{names(group)} {'waits' if len(group) == 1 else 'wait'} for a node with room: {said}"
             for said, group in groups.items()]
    return record(job, "; ".join(parts).rstrip(".") + ".", replicas)


def queued(job: JobRecord, place: dict | None) -> dict:
    """A Queued job's record: Kueue's reason, and its place in the queue where Kueue's visibility API says."""
    queue = job["spec"]["queue"]
    reason = job["message"] if job["reason"] != Phase.QUEUED else ""
    said = f"Kueue holds it in queue {queue}"
    if place is not None:
        said += f", {ordinal(place['position'] + 1)} in line" + (f" behind {ahead(place)}" if place["ahead"] else "")
    return record(job, (said + (f": {reason}" if reason else "")).rstrip(".") + ".", queue=place)


def no_room_now(role: str, seen: dict) -> str:
    return f"no node has room for a {role} now: {room(seen)}. It would wait (Pending) until one has"


def would_queue(queue: str, place: dict) -> str:
    return f"{place['ahead']} workload{'s' if place['ahead'] > 1 else ''} wait in queue {queue} ({ahead(place)}): " \
           "it would queue behind them"


def ahead(place: dict) -> str:
    """The jobs ahead in the queue that the caller may see, and how many of others: "second, third and 1 of
    others'"."""
    hidden = place["ahead"] - len(place["ahead_seen"])
    return names([*place["ahead_seen"], *([f"{hidden} of others'"] if hidden else [])])


def text(found: dict) -> str:
    """A record as the CLI and the magics print it: the sentence, then the numbers."""
    if not found["waiting"]:
        return f"job {found['name']} is {found['phase']}: it waits for nothing"
    lines = [found["sentence"]]
    rows = [(r["name"], row["resource"], number(row["resource"], row["requested"]),
             number(row["resource"], row["largest_free"]), row["node"] or "-",
             number(row["resource"], row["largest_allocatable"]))
            for r in found["replicas"] for row in r["resources"]]
    if rows:
        header = ("REPLICA", "RESOURCE", "ASKS", "MOST FREE", "ON NODE", "LARGEST NODE")
        widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
        lines += ["", *("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in (header, *rows))]
    if (place := found["queue"]) is not None:
        lines += ["", f"Queue {place['queue']}: position {place['position'] + 1}, {place['ahead']} ahead"
                      + (f" (in its ClusterQueue: position {place['position_in_cluster_queue'] + 1})"
                         if place["position_in_cluster_queue"] is not None else "")]
    return "\n".join(lines)
