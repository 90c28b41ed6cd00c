"""Getting a job's code: resolve a local path, or pin a git ref to a commit, before the job exists."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from .errors import FieldError, SpecError

SHA = re.compile(r"^[0-9a-f]{40}$")
# Answers git's credential requests from the environment, so a password never appears in argv or a URL; only
# for the host the secret was stored for (git asks again for the host a redirect leads to).
CREDENTIAL_HELPER = (
    '!f() { test "$1" = get || return 0; while IFS= read -r line; do case "$line" in host=*) host="${line#host=}";;'
    ' esac; done; test "$(printf %s "$host" | tr A-Z a-z)" = "$DISTRAIN_GIT_HOST" &&'
    ' printf "username=%s\\npassword=%s\\n" "$DISTRAIN_GIT_USERNAME" "$DISTRAIN_GIT_PASSWORD"; }; f'
)


# A repository's own configuration may name programs for git to run; on a directory someone else can
# write, that is their code running as this user. Every git the product runs turns these off: the hooks,
# the file system monitor, ssh and signing programs (commit-tree signs with commit.gpgSign).
NO_CONFIGURED_PROGRAMS = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
                          "-c", "core.sshCommand=ssh", "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false")
# A git run in a repository (`-C DIRECTORY`) reaches no remote, so it also turns off what asks for passwords,
# which the repository's configuration may name too, and every filter, diff and merge driver it names
# (drivers_off). One that reaches a remote (ls-remote, clone) keeps the user's own credential helpers.
NO_PROMPTS = ("-c", "core.askPass=", "-c", "credential.helper=")


# Variables pointing git at another repository than the directory it runs in.
ELSEWHERE = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
                       "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE"})
# Drivers a repository's configuration may define under names of its choosing (a clean filter runs to hash a
# changed file, in `status`, `add` and even `write-tree`): each one named is emptied, which turns it off.
DRIVER_PROGRAMS = re.compile(r"(filter\..+\.(clean|smudge|process)|diff\..+\.(command|textconv)|merge\..+\.driver)")


def drivers_off(directory: str, env: dict[str, str]) -> list[str]:
    """`-c` options turning off every filter, diff and merge driver the configuration at `directory` names
    (reading configuration runs nothing)."""
    argv = ["git", *NO_CONFIGURED_PROGRAMS, *NO_PROMPTS, "-C", directory, "config", "--list", "--name-only"]
    try:
        names = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=20).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        names = []
    return [option for name in sorted(set(filter(DRIVER_PROGRAMS.fullmatch, names))) for option in ("-c", f"{name}=")]


def git(*args: str, credentials: dict | None = None) -> tuple[list[str], dict[str, str]]:
    """argv and environment for a non-interactive git command (`-C DIRECTORY ...` to run in a directory, whose
    configured programs are then off too), with credentials if given."""
    env = {**{k: v for k, v in os.environ.items() if k not in ELSEWHERE}, "GIT_TERMINAL_PROMPT": "0",
           "GIT_OPTIONAL_LOCKS": "0"}
    argv = ["git", *NO_CONFIGURED_PROGRAMS]
    if args[:1] == ("-C",):
        argv += [*NO_PROMPTS, *drivers_off(args[1], env)]
    if credentials:
        argv += ["-c", "credential.helper=", "-c", f"credential.helper={CREDENTIAL_HELPER}"]
        env.update({f"DISTRAIN_GIT_{key.upper()}": credentials[key] for key in ("username", "password", "host")})
    return argv + list(args), env


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
    argv, env = git("-C", str(path), "rev-parse", option)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    return Path(result.stdout.strip()).resolve() if result.returncode == 0 else None


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
    argv, env = git("ls-remote", "--", url, ref, credentials=credentials)
    try:
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise SpecError([FieldError("code.git", f"no answer from {url} within 60 s")]) from None
    if result.returncode:
        detail = (result.stderr.strip().splitlines() or ["git ls-remote failed"])[-1]
        raise SpecError([FieldError("code.git", f"cannot read the repository: {detail}")])
    refs = dict(line.split("\t")[::-1] for line in result.stdout.splitlines())
    for candidate in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}"):
        if candidate in refs:
            return refs[candidate]
    raise SpecError([FieldError("code.ref", f"no branch or tag {ref!r} in {url}")])
