"""Two jobs side by side, or two runs of one (GET jobs/compare, `distrain diff`, the panel's Compare): how each
ended, their specs field by field, their code as the diff of the two trees each ran (its commit, with its snapshot
of changes on top), the packages and the image each ran, and each metric's last values. A side is a job's current
run (NAME) or any of its runs (NAME@RUN: an earlier one as the restart that ended it kept it). The trees are read in
a scratch repository: objects from the snapshots' bundles and from the checkouts they were taken in, else fetched
from the code's git URL; nothing is written where the user's repositories are."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from . import git as git_
from . import snapshot
from .errors import DistrainError, FieldError, SpecError
from .jobjson import provenance
from .records import JobRecord, iso, metrics_window, value_said
from .usage import rounded, seconds_between

if TYPE_CHECKING:
    from .manager import JobManager

MAX_DIFF = 256 * 1024  # characters of the diff's text shown; beyond, it is cut and says so
MAX_TAGS = 20
UNCOMPARED = ("name", "code.snapshot")  # names always differ; the snapshot is compared as code
SIDES = ("a", "b")


def compare(manager: JobManager, a: str, b: str) -> dict:
    """Jobs (or runs) `a` and `b` side by side (openapi.yaml's Comparison)."""
    jobs = [run_of(manager, side, named) for side, named in zip(SIDES, (a, b))]
    ran = [provenance(job) for job in jobs]
    return {
        **{side: ended(job) for side, job in zip(SIDES, jobs)},
        "spec": side_by_side(jobs[0]["spec"], jobs[1]["spec"]),
        "code": code(manager, jobs[0], jobs[1]),
        "packages": packages(ran[0]["packages"], ran[1]["packages"]),
        "image": {side: {"image": r["image"], "digests": r["image_digests"]} for side, r in zip(SIDES, ran)},
        "metrics": metrics(manager, jobs),
    }


def run_of(manager: JobManager, side: str, named: str) -> JobRecord:
    """The job `named` as its current run is, or as its run RUN is or was for NAME@RUN; what the request's `side`
    names otherwise is an error naming it."""
    name, at, number = named.partition("@")
    if at and not number.isdigit():
        raise SpecError([FieldError(side, f"{named!r} is neither a job's name nor a run of one: NAME@RUN, RUN a "
                                          f"number (e.g. {name}@1)")], subject="request")
    return manager.run(name, int(number) if at else None)


def label(end: dict, other: dict) -> str:
    """A side's name as `diff` heads it: a run of it where the other side is a run of the same job."""
    return f"{end['name']}@{end['run']}" if end["name"] == other["name"] else end["name"]


def ended(job: Mapping[str, Any]) -> dict:
    """How the job's run went: its phase, why, and how long it ran (so far, while it runs)."""
    return {"name": job["name"], "run": job["run"], "phase": job["phase"], "reason": job["reason"],
            "exit_code": job["exit_code"], "started": iso(job["started"]), "finished": iso(job["finished"]),
            "seconds": rounded(seconds_between(job["started"], job["finished"]))}


def side_by_side(first: dict, second: dict) -> list[dict]:
    """Every field of either spec (a dotted path; a list is one value) with its value in each, None where a
    spec has none, and whether they differ."""
    left, right = dict(fields(first)), dict(fields(second))
    return [{"field": path, "a": left.get(path), "b": right.get(path), "differs": left.get(path) != right.get(path)}
            for path in [*left, *(path for path in right if path not in left)]]


def fields(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if path in UNCOMPARED:
        return
    if isinstance(value, dict):  # an empty one has no field: {} and none are alike
        for key, item in value.items():
            yield from fields(item, f"{path}.{key}" if path else key)
    else:
        yield path, value


def code(manager: JobManager, first: Mapping[str, Any], second: Mapping[str, Any]) -> dict:
    """The two trees' differences: each changed file's status (git's A, D, M) and the diff's text."""
    sources = [job["spec"].get("code", {}) for job in (first, second)]
    revisions = [(source.get("snapshot") or {}).get("commit") or source.get("commit") for source in sources]
    out: dict[str, Any] = {**{side: ran_code(source) for side, source in zip(SIDES, sources)},
                           "files": [], "diff": "", "truncated": False, "unknown": None}
    if None in revisions:
        if sources[0] != sources[1] or "path" in sources[0]:
            out["unknown"] = "the code of a job run from a directory is not kept: only its path is known"
        return out
    if revisions[0] == revisions[1]:
        return out
    try:
        files, diff = tree_diff(manager, (first, second), revisions)
    except DistrainError as e:  # git failed, or the credentials are not for the code's host
        out["unknown"] = f"the two trees could not be read: {e}"
        return out
    return {**out, "files": files, "diff": diff[:MAX_DIFF], "truncated": len(diff) > MAX_DIFF}


def ran_code(source: dict) -> dict:
    taken = source.get("snapshot")
    return {"git": source.get("git"), "commit": source.get("commit"), "path": source.get("path"),
            "snapshot": taken and {key: taken[key] for key in ("commit", "sha256", "files")}}


def tree_diff(manager: JobManager, jobs: tuple[Mapping[str, Any], ...],
              revisions: list[str]) -> tuple[list[dict], str]:
    with tempfile.TemporaryDirectory(prefix="distrain-compare.") as scratch:
        repo = Path(scratch) / "repo"
        git_.run("init", "--quiet", "--bare", str(repo))
        checkouts = {Path(job["spec"]["code"]["snapshot"]["checkout"]) for job in jobs
                     if "snapshot" in job["spec"]["code"]}
        borrowed = [objects for checkout in checkouts if (objects := objects_of(checkout))]
        (repo / "objects" / "info" / "alternates").write_text("".join(f"{path}\n" for path in borrowed))
        for job, revision in zip(jobs, revisions):
            if not has(repo, revision):
                fetch(manager, repo, job, Path(scratch) / "snapshot.bundle")
        status = git_.run("diff", "--name-status", "--no-renames", *revisions, directory=repo)
        diff = git_.run("diff", "--no-color", "--no-ext-diff", "--no-renames", *revisions, directory=repo)
    files = [{"status": line.split("\t", 1)[0], "path": line.split("\t", 1)[1]} for line in status.splitlines()]
    return files, diff


def objects_of(checkout: Path) -> str | None:
    """The object directory of the repository at `checkout`, if it is still there."""
    try:
        return git_.run("rev-parse", "--path-format=absolute", "--git-path", "objects", directory=checkout).strip()
    except git_.GitFailed:
        return None


def has(repo: Path, revision: str) -> bool:
    try:
        git_.run("cat-file", "-e", f"{revision}^{{commit}}", directory=repo)
        return True
    except git_.GitFailed:
        return False


def fetch(manager: JobManager, repo: Path, job: Mapping[str, Any], bundle_path: Path) -> None:
    """Bring the commit the job ran into `repo`: its snapshot's from the bundle stored with the job (whose base
    may first need the commit from the job's git URL), or the commit from there."""
    source = job["spec"]["code"]
    if "snapshot" in source and (bundle := manager.snapshot(job["name"])) is not None:
        bundle_path.write_bytes(bundle)
        try:
            git_.run("fetch", "--quiet", str(bundle_path), snapshot.REF, directory=repo)
            return
        except git_.GitFailed:
            pass  # its base is not here yet
    credentials = manager.credentials_for(job["spec"], manager.backend_of(job["name"]))
    git_.run("fetch", "--quiet", source["git"], source["commit"], directory=repo, credentials=credentials)
    if "snapshot" in source and bundle_path.exists():
        git_.run("fetch", "--quiet", str(bundle_path), snapshot.REF, directory=repo)


def packages(first: list[str] | None, second: list[str] | None) -> list[dict] | None:
    """The packages whose versions differ (`name==version` each, as provenance has them), None where a side
    has none of that name; None where either side's packages are not known."""
    if first is None or second is None:
        return None
    left, right = versions(first), versions(second)
    return [{"name": name, "a": left.get(name), "b": right.get(name)}
            for name in sorted(left.keys() | right.keys(), key=str.lower) if left.get(name) != right.get(name)]


def versions(listed: list[str]) -> dict[str, str]:
    return {name: version for name, _, version in (entry.partition("==") for entry in listed)}


def metrics(manager: JobManager, jobs: list) -> dict:
    """Each tag either job logged, with each side's last step and value per run ({} where it has none)."""
    try:
        boards = [manager.backend_of(job["name"]).tensorboard(job["spec"]) for job in jobs]
        logged = [manager.scalars_of(board, None, *metrics_window(job)) for board, job in zip(boards, jobs)]
        tags = sorted(set(logged[0]["tags"]) | set(logged[1]["tags"]))[:MAX_TAGS]
        return {"tags": [{"tag": tag, **{side: last_points(manager, board, job, found, tag)
                                         for side, board, job, found in zip(SIDES, boards, jobs, logged)}}
                         for tag in tags], "unknown": None}
    except DistrainError as e:
        return {"tags": [], "unknown": f"the metrics could not be read: {e}"}


def last_points(manager: JobManager, board: Any, job: Mapping[str, Any], logged: dict, tag: str) -> dict:
    """The last point of each run of `tag` in the job's run (`logged`: its default tag's answer)."""
    if tag not in logged["tags"]:
        return {}
    found = logged if logged["tag"] == tag else manager.scalars_of(board, tag, *metrics_window(job))
    return {run: {"step": points[-1][0], "value": points[-1][1]} for run, points in found["runs"].items() if points}


def text(comparison: dict) -> str:
    """The comparison as `distrain diff` prints it: the differences alone (every field is in -o json)."""
    a, b = comparison["a"], comparison["b"]
    lines = [f"{'':<12}{label(a, b):<32}{label(b, a)}", f"{'Phase':<12}{end_said(a):<32}{end_said(b)}",
             f"{'Ran':<12}{seconds_said(a['seconds']):<32}{seconds_said(b['seconds'])}", ""]
    differing = [row for row in comparison["spec"] if row["differs"]]
    lines.append(f"Spec: {len(differing)} of {len(comparison['spec'])} fields differ")
    lines += [f"  {row['field']}: {shown(row['a'])} -> {shown(row['b'])}" for row in differing]
    code = comparison["code"]
    lines.append(f"Code: {code['unknown'] or counted(code['files'], 'file')}")
    lines += [f"  {file['status']} {file['path']}" for file in code["files"]]
    if code["diff"]:
        lines += ["", code["diff"].rstrip("\n")] + (["[the diff is cut at 256 KiB]"] if code["truncated"] else [])
    found = comparison["packages"]
    lines.append("Packages: not known" if found is None else f"Packages: {counted(found, 'package')}")
    lines += [f"  {p['name']}: {p['a'] or 'none'} -> {p['b'] or 'none'}" for p in found or []]
    images = [(side["digests"] or [side["image"]]) if side["image"] else ["-"] for side in comparison["image"].values()]
    if images[0] != images[1]:
        lines.append(f"Image: {', '.join(images[0])} -> {', '.join(images[1])}")
    metrics = comparison["metrics"]
    lines.append(f"Metrics: {metrics['unknown']}" if metrics["unknown"] else "Metrics (last values):")
    lines += [f"  {row['tag']}: {points_said(row['a'])} | {points_said(row['b'])}" for row in metrics["tags"]]
    return "\n".join(lines)


def counted(differing: list, noun: str) -> str:
    return {0: "the same", 1: f"1 {noun} differs"}.get(len(differing), f"{len(differing)} {noun}s differ")


def end_said(end: dict) -> str:
    why = ", ".join(filter(None, (end["reason"], None if end["exit_code"] is None else f"exit {end['exit_code']}")))
    return f"{end['phase']} ({why})" if why else end["phase"]


def seconds_said(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


def shown(value: Any) -> str:
    return "(none)" if value is None else json.dumps(value)


def points_said(points: dict) -> str:
    return ", ".join(f"{run} {value_said(point['value'])} (step {point['step']:g})"
                     for run, point in points.items()) or "-"
