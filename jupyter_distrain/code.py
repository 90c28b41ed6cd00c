"""Getting a job's code: resolve a local path, or pin a git ref to a commit, before the job exists."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from . import git as git_
from .errors import FieldError, SpecError

SHA = re.compile(r"^[0-9a-f]{40}$")


def git_host(url: str) -> str:
    """The host (with its port, if any) that git names in its credential requests for `url`; "" for a path."""
    parts = urlsplit(url)
    return parts.netloc.rpartition("@")[2].lower() if parts.scheme in ("http", "https") else ""


def check_credentials_host(url: str, secret: str, credentials: dict) -> None:
    """A secret goes only to the host it was stored for."""
    host = git_host(url)
    if not credentials.get("host"):
        raise SpecError([FieldError("code.credentials", f"secret {secret!r} names no host (stored before secrets "
                                    "were bound to one): store it again with its host ('distrain secret set "
                                    f"{secret} --host HOST')")])
    if host != credentials["host"]:
        raise SpecError([FieldError("code.credentials", f"secret {secret!r} is for {credentials['host']}, not for "
                                    f"{host or 'a repository without a host'} (code.git): a secret is only sent to "
                                    "the host it was stored for")])


def is_bare_repository(path: Path) -> bool:
    """Whether `path` is a git repository without a work tree: a bare one, or a work tree's .git."""
    return _rev_parse(path, "--absolute-git-dir") == path.resolve()


def is_work_tree(path: Path) -> bool:
    """Whether `path` is the top of a git work tree."""
    return _rev_parse(path, "--show-toplevel") == path.resolve()


def _rev_parse(path: Path, option: str) -> Path | None:
    try:
        return Path(git_.run("rev-parse", option, directory=path).strip()).resolve()
    except git_.GitFailed:
        return None


def resolve(spec: dict, base_dir: Path, credentials: dict | None = None) -> dict:
    """The spec with its code made absolute and, for git, the ref pinned to a commit."""
    code = spec.get("code")
    if not code:
        return spec
    if "path" in code:
        path = (base_dir / code["path"]).resolve()
        if not path.is_dir():
            raise SpecError([FieldError("code.path", f"no such directory: {path}")])
        return {**spec, "code": {"path": str(path)}}
    url = code["git"]
    if not re.match(r"^(https?|file)://", url):
        url = str((base_dir / url).resolve())
    if "changes_from" in code:  # the commit is the checkout's, taken with its changes (snapshot.take)
        return {**spec, "code": {**code, "git": url, "changes_from": str((base_dir / code["changes_from"]).resolve())}}
    commit = code.get("commit") or (code["ref"] if SHA.match(code["ref"]) else _ls_remote(url, code["ref"], credentials))
    return {**spec, "code": {**code, "git": url, "commit": commit}}


def _ls_remote(url: str, ref: str, credentials: dict | None) -> str:
    try:
        listed = git_.run("ls-remote", "--", url, ref, credentials=credentials)
    except git_.GitFailed as e:
        reason = f"no answer from {url} within {git_.TIMEOUT_SECONDS} s" if e.timed_out else \
            f"cannot read the repository: {e.detail}"
        raise SpecError([FieldError("code.git", reason)]) from None
    refs = dict(line.split("\t")[::-1] for line in listed.splitlines())
    for candidate in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}"):
        if candidate in refs:
            return refs[candidate]
    raise SpecError([FieldError("code.ref", f"no branch or tag {ref!r} in {url}")])
