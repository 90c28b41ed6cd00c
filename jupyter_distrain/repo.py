"""The git state around a notebook, and the code a job started from it runs (the panel and the magics ask)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from . import git as git_
from . import spec
from .errors import DistrainError, NotFound, SpecError

JOB_FILES = ("distrain.yaml", "requirements.txt")
MAX_FILE_BYTES = 64 * 1024
# The whole tree but Jupyter's own notebook checkpoints, anywhere in it: they are no one's work.
WORK_PATHSPEC = (":(top)", ":(top,exclude,glob)**/.ipynb_checkpoints/**")
# What code writing TensorBoard event files where its job says names: the variable, or the command's placeholder.
EVENT_FILES = r"DISTRAIN_LOG_DIR|[{][{][[:space:]]*logdir[[:space:]]*[}][}]"


def inspect(root_dir: Path, path: str) -> dict:
    """Git state and job files for `path` (a notebook or directory, relative to the server root)."""
    root = root_dir.resolve()
    try:
        target = (root / path.lstrip("/")).resolve()
        found = target.exists()
    except OSError as e:  # a name too long, say
        raise DistrainError(f"path {path[:80]!r}: {e.strerror}") from None
    if not target.is_relative_to(root):
        raise DistrainError(f"path {path[:80]!r} is outside the server's root directory")
    if not found:
        raise NotFound(f"no such file or directory: {path[:80]!r}")
    directory = target if target.is_dir() else target.parent
    try:
        info = git_state(directory, root)
        outside = None
    except OutsideRoot as e:
        info, outside = None, str(e)
    searched = [directory] + ([Path(info["root"])] if info and Path(info["root"]) != directory else [])
    proposed = proposed_code(directory, info)
    return {
        "path": path,
        "directory": str(directory),
        "git": info,
        "files": {name: job_file(searched, name, root) for name in JOB_FILES},
        "code": proposed["code"],
        "notes": [outside] if outside else proposed["notes"],
        "writes_event_files": writes_event_files(Path(info["root"]) if info else directory, info is not None),
    }


def writes_event_files(directory: Path, in_git: bool) -> bool:
    """Whether the code in `directory` names where a job writes its event files (EVENT_FILES): a repository's
    tracked files, or a directory's files two levels down."""
    where = () if in_git else ("--no-index", "--max-depth=2")
    return _git(directory, "grep", *where, "--quiet", "-I", "-E", EVENT_FILES) is not None


def same_code(code: dict | None, other: dict) -> bool:
    """Whether two specs' code is the same repository or directory, whatever commit or ref each runs."""
    return code is not None and _place(code) == _place(other)


def _place(code: dict) -> str | None:
    """Where a spec's code is: its repository's URL (without credentials, a trailing / or .git), or its directory."""
    if "git" in code:
        return strip_credentials(code["git"]).rstrip("/").removesuffix(".git")
    return code.get("path")


class OutsideRoot(Exception):
    pass


def proposed_code(directory: Path, git: dict | None) -> dict:
    """The code a job started from `directory` (a notebook's) runs, and what to know about it: the one
    rule the panel's form and the magics both follow. In a repository, its `origin` remote (else its
    first, else the repository itself) at the checked-out branch, pinned to the checked-out commit;
    outside one, the directory."""
    if git is None:
        return {"code": {"path": str(directory)},
                "notes": [f"{directory} is not in a git repository: the job runs its files as they are when it "
                          "starts, and cannot be repeated at a pinned commit."]}
    remotes = {r["name"]: r["url"] for r in git["remotes"]}
    remote = "origin" if "origin" in remotes else next(iter(remotes), None)
    commit, short = git["commit"], (git["commit"] or "HEAD")[:7]
    code = {"git": remotes[remote] if remote else git["root"], "ref": git["branch"] or commit or "HEAD",
            **({"commit": commit} if commit else {})}
    notes = []
    if git["dirty"] or git["untracked"]:
        changes = " and ".join(filter(None, ("changed files" if git["dirty"] else "",
                                             f"{git['untracked']} untracked file{'s' * (git['untracked'] > 1)}" if git["untracked"] else "")))
        notes.append(f"Uncommitted work ({changes}) is not part of the job: it runs commit {short} as committed. "
                     "Commit first to train those changes, or include them in the job (--include-changes).")
    if remote and not git["upstream"]:
        notes.append(f"Branch {git['branch'] or '(detached)'} has no upstream on {remote}: the replicas clone "
                     f"{remotes[remote]}, which may not have commit {short}. Push it first.")
    elif remote and git["ahead"]:
        verb = "commits are" if git["ahead"] > 1 else "commit is"
        notes.append(f"{git['ahead']} {verb} not pushed to {git['upstream']}: the replicas clone "
                     f"{remotes[remote]}, which does not have commit {short} yet. Push first, or include your changes in "
                     "the job (--include-changes).")
    if not remote:
        notes.append(f"The repository has no remote: the job clones it from {git['root']}, which only a backend "
                     "on this machine can read.")
    if git["subdirectory"] != ".":
        notes.append(f"The command runs at the repository's top, {git['root']}, not in {git['subdirectory']}/.")
    return {"code": code, "notes": notes}


def git_state(directory: Path, root: Path | None = None) -> dict | None:
    """Remotes (credentials stripped), branch, commit, and how the tree differs from them; None outside git.
    With `root` (the server's), a repository is looked for within it only, and one whose work tree or git
    directory lies outside it (core.worktree, a .git file naming another place) raises OutsideRoot."""
    ceiling = {"GIT_CEILING_DIRECTORIES": str(root.parent)} if root else {}
    top = _git(directory, "rev-parse", "--show-toplevel", env=ceiling)
    if top is None:
        return None
    git_dir = _git(directory, "rev-parse", "--absolute-git-dir", env=ceiling) or ""
    if root and not (Path(top).resolve().is_relative_to(root) and Path(git_dir).resolve().is_relative_to(root)):
        raise OutsideRoot(f"{directory} is in a git repository whose work tree ({top}) or git directory ({git_dir}) "
                          "lies outside the server's root, which the server does not read: the job runs the "
                          "directory's files as they are when it starts.")
    upstream = _git(directory, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}")
    counts = _git(directory, "rev-list", "--left-right", "--count", "@{upstream}...HEAD") if upstream else None
    behind, ahead = (int(n) for n in counts.split()) if counts else (None, None)
    status = _git(directory, "status", "--porcelain", "--ignore-submodules=all", "--",
                  *WORK_PATHSPEC) or ""
    changes = [line for line in status.splitlines() if line]
    remotes: dict[str, str] = {}
    for line in (_git(directory, "remote", "-v") or "").splitlines():
        name, url, *_ = line.split()
        remotes.setdefault(name, strip_credentials(url))
    branch = _git(directory, "symbolic-ref", "--quiet", "--short", "HEAD")
    return {
        "root": top,
        "subdirectory": os.path.relpath(directory, top),
        "remotes": [{"name": n, "url": u} for n, u in remotes.items()],
        "branch": branch,
        "commit": _git(directory, "rev-parse", "--verify", "--quiet", "HEAD"),
        "dirty": any(not line.startswith("??") for line in changes),
        "untracked": sum(line.startswith("??") for line in changes),
        "upstream": upstream,
        "ahead": ahead,
        "behind": behind,
    }


def strip_credentials(url: str) -> str:
    """https://user:token@host/repo.git -> https://host/repo.git; other forms carry no password."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL (an unclosed '['): shown without anything before an @
        return url.rpartition("@")[2]
    if parts.scheme in ("http", "https") and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def job_file(directories: list[Path], name: str, root: Path) -> dict | None:
    """The first `name` found in `directories`, with its text (and, for YAML, the parsed spec); a symbolic
    link to outside `root` (the server's) is not followed."""
    for directory in directories:
        path = directory / name
        if path.is_file() and path.resolve().is_relative_to(root):
            with open(path, "rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
            content = raw[:MAX_FILE_BYTES].decode(errors="replace")
            found = {"path": str(path), "content": content, "truncated": len(raw) > MAX_FILE_BYTES}
            if name.endswith(".yaml"):
                try:
                    found["spec"] = spec.load(content)
                except SpecError:
                    found["spec"] = None
            return found
    return None


def _git(directory: Path, *args: str, env: dict[str, str] | None = None) -> str | None:
    """Output of a read-only git command (with `env` added to its environment), or None when it fails."""
    try:
        return git_.run(*args, directory=directory, env=env, timeout=20).strip()
    except git_.GitFailed:
        return None
