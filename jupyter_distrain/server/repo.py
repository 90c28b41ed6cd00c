"""What the panel needs to prefill a job from the git repository around a notebook."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import yaml

from ..errors import DistrainError, NotFound

JOB_FILES = ("distrain.yaml", "requirements.txt")
MAX_FILE_BYTES = 64 * 1024
# The whole tree but Jupyter's own notebook checkpoints, anywhere in it: they are no one's work.
WORK_PATHSPEC = (":(top)", ":(top,exclude,glob)**/.ipynb_checkpoints/**")


def inspect(root_dir: Path, path: str) -> dict:
    """Git state and job files for `path` (a notebook or directory, relative to the server root)."""
    root = root_dir.resolve()
    target = (root / path.lstrip("/")).resolve()
    if not target.is_relative_to(root):
        raise DistrainError(f"path {path!r} is outside the server's root directory")
    if not target.exists():
        raise NotFound(f"no such file or directory: {path!r}")
    directory = target if target.is_dir() else target.parent
    info = git_state(directory)
    searched = [directory] + ([Path(info["root"])] if info and Path(info["root"]) != directory else [])
    return {
        "path": path,
        "directory": str(directory),
        "git": info,
        "files": {name: job_file(searched, name) for name in JOB_FILES},
    }


def git_state(directory: Path) -> dict | None:
    """Remotes (credentials stripped), branch, commit, and how the tree differs from them; None outside git."""
    top = _git(directory, "rev-parse", "--show-toplevel")
    if top is None:
        return None
    upstream = _git(directory, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}")
    counts = _git(directory, "rev-list", "--left-right", "--count", "@{upstream}...HEAD") if upstream else None
    behind, ahead = (int(n) for n in counts.split()) if counts else (None, None)
    status = _git(directory, "status", "--porcelain", "--", *WORK_PATHSPEC) or ""
    changes = [line for line in status.splitlines() if line]
    remotes = {}
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
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def job_file(directories: list[Path], name: str) -> dict | None:
    """The first `name` found in `directories`, with its text (and, for YAML, the parsed spec)."""
    for directory in directories:
        path = directory / name
        if path.is_file():
            with open(path, "rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
            found = {"path": str(path), "content": raw[:MAX_FILE_BYTES].decode(errors="replace"),
                     "truncated": len(raw) > MAX_FILE_BYTES}
            if name.endswith(".yaml"):
                try:
                    found["spec"] = yaml.safe_load(found["content"])
                except yaml.YAMLError:
                    found["spec"] = None
            return found
    return None


def _git(directory: Path, *args: str) -> str | None:
    """Output of a read-only git command, or None when it fails."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
    try:
        result = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True,
                                timeout=20, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None
