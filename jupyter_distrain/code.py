"""Getting a job's code: resolve a local path, or pin a git ref to a commit, before the job exists."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from . import git as git_
from .errors import FieldError, SpecError

SHA = re.compile(r"^[0-9a-f]{40}$")
COMPARE_TIMEOUT_SECONDS = 15  # a person waits on it: a restart's question, a clone's form


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


def unpinned(spec: dict) -> dict:
    """The spec with its git code's pinned commit dropped, and the snapshot of changes taken on that commit: once
    submitted, its ref is pinned again, to the commit the ref names then."""
    source = spec.get("code", {})
    if "git" not in source:
        return spec
    return {**spec, "code": {key: value for key, value in source.items() if key not in ("commit", "snapshot")}}


def ref_now(source: dict, credentials: dict | None = None) -> dict:
    """Where a job's git code (`source`, resolved: git, ref, commit) stands next to its ref now: `head`, the commit
    the ref names now (None where the repository does not answer: `unreachable` says why); `behind`, how many
    commits the ref has that the job's commit lacks, where a repository on this machine holds both (else None)."""
    ref, commit = source["ref"], source.get("commit")
    if SHA.match(ref):
        return {"head": ref, "behind": 0 if ref == commit else None, "unreachable": None}
    try:
        head = _ls_remote(source["git"], ref, credentials, COMPARE_TIMEOUT_SECONDS)
    except SpecError as e:
        return {"head": None, "behind": None, "unreachable": e.errors[0].message}
    return {"head": head, "behind": _behind(source["git"], commit, head), "unreachable": None}


def _behind(url: str, commit: str | None, head: str) -> int | None:
    """How many commits `head` has that `commit` lacks, counted in the repository at `url` if it is on this
    machine (a remote's history is not fetched for it)."""
    if commit == head:
        return 0
    local = Path(url.removeprefix("file://"))
    if commit is None or not local.is_absolute():
        return None
    try:
        return int(git_.run("rev-list", "--count", f"{commit}..{head}", directory=local,
                            timeout=COMPARE_TIMEOUT_SECONDS))
    except (git_.GitFailed, ValueError):
        return None


def _ls_remote(url: str, ref: str, credentials: dict | None, timeout: float = git_.TIMEOUT_SECONDS) -> str:
    try:
        listed = git_.run("ls-remote", "--", url, ref, credentials=credentials, timeout=timeout)
    except git_.GitFailed as e:
        reason = f"no answer from {url} within {timeout:g} s" if e.timed_out else \
            f"cannot read the repository: {e.detail}"
        raise SpecError([FieldError("code.git", reason)]) from None
    refs = dict(line.split("\t")[::-1] for line in listed.splitlines())
    for candidate in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}"):
        if candidate in refs:
            return refs[candidate]
    raise SpecError([FieldError("code.ref", f"no branch or tag {ref!r} in {url}")])
