"""Who owns what on a shared volume: the one layout and the one set of rules for every backend.

Each owner's jobs write their outputs in that owner's own directory of a volume (on the local backend the
default outputs directory is one such volume too):

    <volume>/owners/<owner>/<output.path, else the job's name>/

so a job's output never lands in, resumes from or purges another owner's. A job may read a volume's other
directories (shared data) and its owner's own outputs; another owner's only where the admin allows it
(c.Distrain.read_others_outputs). Jobs made before jobs had owners (owner "") keep the earlier layout,
<volume>/<output.path, else the job's name>/. Paths here are relative to a volume's root, as tuples of parts.
"""

from __future__ import annotations

import string
from pathlib import PurePosixPath

OWNERS = "owners"
PLAIN = frozenset(string.ascii_letters + string.digits + "-_.")


def owner_dir(owner: str) -> str:
    """The owner's directory name: the name itself where it is plain, else with every other character
    percent-escaped, so that no two owners share one and none is '.' or '..'."""
    escaped = "".join(c if c in PLAIN else "".join(f"%{b:02X}" for b in c.encode()) for c in owner)
    return escaped.replace(".", "%2E") if escaped in (".", "..") else escaped


def area(owner: str) -> tuple[str, ...]:
    """The owner's directory in every volume (none for owner "", before jobs had owners)."""
    return (OWNERS, owner_dir(owner)) if owner else ()


def output_parts(spec: dict, owner: str) -> tuple[str, ...]:
    """Where in its volume the job writes its output: in its owner's directory, at output.path (when the
    output is a volume) or else at the job's name."""
    path = spec["output"].get("path", spec["name"]) if "volume" in spec.get("output", {}) else spec["name"]
    return (*area(owner), *PurePosixPath(path).parts)


def output_path(spec: dict, owner: str) -> str:
    """output_parts as a path relative to the volume's root (a subPath)."""
    return "/".join(output_parts(spec, owner))


def source_field(field: str, source: dict) -> str:
    """The field of a spec's `field` (data, output) that names the directory `source` is: its host_path, its
    volume's path, or its volume."""
    return f"{field}.host_path" if "host_path" in source else f"{field}.path" if source.get("path") else \
        f"{field}.volume"


def purgeable(parts: tuple[str, ...], owner: str) -> bool:
    """Whether a job of `owner` may delete the directory at `parts` as its output: one inside the owner's
    own directory, never that directory itself, another owner's, or a whole volume."""
    own = area(owner)
    if own:
        return parts[:len(own)] == own and len(parts) > len(own)
    return bool(parts) and parts[0] != OWNERS


def output_path_problem(spec: dict) -> str | None:
    """Why the spec's output.path may not be (None: it may): it must be one directory name. A job writes, and so
    makes links, only inside its own output directory; one inside another job's could be reached through such a
    link, which a pod's mount follows, anywhere in the volume."""
    path = spec.get("output", {}).get("path")
    if path is None or len(PurePosixPath(path).parts) == 1:  # the schema allows no leading / and no ..
        return None
    return f"{path!r} is not one directory name: an output is never inside another's (see docs/owners.md)"


def reading_problem(parts: tuple[str, ...], owner: str, others_allowed: bool, holds_others: bool) -> str | None:
    """Why a job of `owner` may not read the directory at `parts` of a volume (None: it may): it is inside an
    output directory (whose links a pod's mount would follow: output_path_problem), another owner's outputs, or
    holds them (the volume's root or its owners/ directory, where `holds_others`)."""
    if parts[:1] == (OWNERS,) and len(parts) > 3:
        return f"is inside the output directory {'/'.join(parts[:3])}: name that directory, and the rest in the " \
               "command (a link a job made in its output could lead a pod's mount anywhere in the volume)"
    if others_allowed:
        return None
    if parts[:1] == (OWNERS,) and len(parts) >= 2 and parts[:2] != area(owner):
        return "is another owner's output directory"
    if len(parts) <= 1 and parts[:1] in ((), (OWNERS,)) and holds_others:
        return f"holds other owners' outputs (in {OWNERS}/): name a directory of the volume, or your own outputs " \
               f"({'/'.join(area(owner)) or OWNERS}/...)"
    return None
