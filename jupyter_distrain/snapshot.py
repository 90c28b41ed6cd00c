"""A snapshot of a git work tree as its user sees it, to run as a job's code: the checked-out commit, every
uncommitted change (edits, deletions, new files git does not ignore), and the commits the job's repository
URL may lack (not pushed yet), as one git bundle that travels with the job.

The user's repository is only read: the snapshot's objects are written in a scratch repository that borrows
the user's objects. A job clones its repository URL as usual, fetches the snapshot's commit from the bundle
and checks it out (`apply`), so its work tree is the user's, byte for byte.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import git as git_
from .errors import FieldError, SpecError

REF = "refs/distrain/snapshot"
IDENTITY = {"GIT_AUTHOR_NAME": "jupyter-distrain", "GIT_AUTHOR_EMAIL": "snapshot@jupyter-distrain",
            "GIT_COMMITTER_NAME": "jupyter-distrain", "GIT_COMMITTER_EMAIL": "snapshot@jupyter-distrain"}
FIELD = "code.changes_from"
TIMEOUT_SECONDS = 120
SECRET_SUFFIX = "-snapshot"  # of the Secret holding a Kubernetes job's bundle: no credentials' name ends so


@dataclass(frozen=True)
class Snapshot:
    bundle: bytes
    info: dict  # the spec's code.snapshot: commit, base, sha256, size, files, checkout


def pin(spec: dict) -> tuple[dict, bytes | None]:
    """A resolved spec whose code.changes_from names a checkout, with its snapshot taken: code.snapshot and
    code.commit in place of changes_from, and the bundle. Any other spec as it is, without one."""
    source = spec.get("code", {})
    if "changes_from" not in source:
        return spec, None
    taken = take(Path(source["changes_from"]), source["git"])
    pinned = {key: value for key, value in source.items() if key != "changes_from"}
    return {**spec, "code": {**pinned, "commit": taken.info["base"], "snapshot": taken.info}}, taken.bundle


def too_large(spec: dict, limit: int, holder: str) -> FieldError | None:
    """Why the spec's snapshot is refused for its size (None if it is not): over the `limit` `holder` (says)."""
    size = spec.get("code", {}).get("snapshot", {}).get("size", 0)
    if size <= limit:
        return None
    return FieldError(FIELD, f"the snapshot of your changes is {_size(size)}, over the {_size(limit)} {holder}; "
                             "commit and push large files, or have git ignore them (.gitignore)")


def take(work_tree: Path, url: str) -> Snapshot:
    """The snapshot of the repository checked out at `work_tree`, for a job cloning `url`."""
    top = _run(work_tree, "rev-parse", "--show-toplevel").strip()
    if not top:
        raise SpecError([FieldError(FIELD, f"{work_tree} is not in a git work tree")])
    repo = Path(top)
    base = _run(repo, "rev-parse", "--verify", "HEAD^{commit}").strip()
    objects = Path(_run(repo, "rev-parse", "--path-format=absolute", "--git-path", "objects").strip())
    with tempfile.TemporaryDirectory(prefix="distrain-snapshot.") as scratch_dir:
        scratch = Path(scratch_dir)
        _run(scratch, "init", "--quiet", "--bare", "repo")
        (scratch / "repo" / "objects" / "info" / "alternates").write_text(f"{objects}\n")
        # the work tree's state as a tree: an index of our own, new objects in the scratch repository
        own = {"GIT_INDEX_FILE": str(scratch / "index"), "GIT_OBJECT_DIRECTORY": str(scratch / "repo" / "objects"),
               "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(objects)}
        _run(repo, "read-tree", base, env=own)
        _run(repo, "add", "--all", ".", env=own)
        tree = _run(repo, "write-tree", env=own).strip()
        commit = _run(repo, "commit-tree", tree, "-p", base, "-m", f"uncommitted changes on {base[:12]}",
                      env={**own, **IDENTITY}).strip()
        files = _run(repo, "diff-tree", "-r", "--name-status", "--no-renames", base, commit, env=own).splitlines()
        _run(scratch / "repo", "update-ref", REF, commit)
        known = _known_commits(repo, url)
        _run(scratch / "repo", "bundle", "create", "--quiet", str(scratch / "snapshot.bundle"), REF,
             *(f"^{sha}" for sha in known))
        bundle = (scratch / "snapshot.bundle").read_bytes()
    info = {"commit": commit, "base": base, "sha256": hashlib.sha256(bundle).hexdigest(), "size": len(bundle),
            "files": [line.replace("\t", " ", 1) for line in files], "checkout": str(repo)}
    return Snapshot(bundle, info)


def steps(bundle: str, commit: str) -> list[list[str]]:
    """The git arguments that check the snapshot out in a clone of the job's repository (its work tree the
    current directory, or `-C` it)."""
    return [["fetch", "--quiet", bundle, REF], ["checkout", "--quiet", "--detach", commit]]


def apply(bundle: Path, workspace: Path, commit: str) -> list[tuple[list[str], dict[str, str]]]:
    """The git commands (argv, environment) that check the snapshot out in `workspace`."""
    return [git_.command(*step, directory=workspace) for step in steps(str(bundle), commit)]


def _known_commits(repo: Path, url: str) -> list[str]:
    """Commits a clone of `url` has for sure: what the repository last saw of the remote with that URL (all
    its refs when `url` is the repository itself). Nothing known: the bundle carries the whole history."""
    if Path(url).resolve() in (repo, repo / ".git"):
        refs = ["refs/heads", "refs/tags"]
    else:
        remotes = _run(repo, "remote").split()
        refs = [f"refs/remotes/{r}" for r in remotes if _run(repo, "remote", "get-url", r).strip() == url]
    return _run(repo, "for-each-ref", "--format=%(objectname)", *refs).split() if refs else []


def _run(directory: Path, *args: str, env: dict | None = None) -> str:
    try:
        return git_.run(*args, directory=directory, env=env, timeout=TIMEOUT_SECONDS)
    except git_.GitFailed as e:
        if e.timed_out:
            raise SpecError([FieldError(FIELD, f"git took over {TIMEOUT_SECONDS} s in {directory}")]) from None
        if "--show-toplevel" in args:
            return ""
        raise SpecError([FieldError(FIELD, f"cannot take a snapshot of {directory}: {e.detail}")]) from None


def _size(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB" if count >= 1 << 20 else f"{count / 1024:.0f} KiB"
