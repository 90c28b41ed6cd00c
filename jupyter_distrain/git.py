"""Every git the product runs goes through here: `run` (or, for a caller that runs the command itself,
`command`) adds the options and environment that keep a repository's own configuration from running programs
or asking for passwords, and `run` gives it a timeout and turns each failure into one clear error."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from .errors import DistrainError

TIMEOUT_SECONDS = 60
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
# A git run in a repository (`directory`) reaches no remote, so it also turns off what asks for passwords,
# which the repository's configuration may name too, and every filter, diff and merge driver it names
# (drivers_off). One that reaches a remote (ls-remote, clone) keeps the user's own credential helpers.
NO_PROMPTS = ("-c", "core.askPass=", "-c", "credential.helper=")
# Variables pointing git at another repository than the directory it runs in.
ELSEWHERE = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
                       "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE"})
# Drivers a repository's configuration may define under names of its choosing (a clean filter runs to hash a
# changed file, in `status`, `add` and even `write-tree`): each one named is emptied, which turns it off.
DRIVER_PROGRAMS = re.compile(r"(filter\..+\.(clean|smudge|process)|diff\..+\.(command|textconv)|merge\..+\.driver)")


class GitFailed(DistrainError):
    """A git command that failed, could not start or did not finish in time: `detail` is git's last line of
    error output, or why."""

    def __init__(self, what: str, detail: str, timed_out: bool = False):
        super().__init__(f"{what}: {detail}")
        self.detail = detail
        self.timed_out = timed_out


def run(*args: str, directory: Path | None = None, credentials: dict | None = None,
        env: dict[str, str] | None = None, timeout: float = TIMEOUT_SECONDS) -> str:
    """The output of `git ARGS`, run in `directory` if given, with `credentials` (a stored secret: username,
    password, host) if given and `env` added to its environment; raises GitFailed."""
    argv, base = command(*args, directory=directory, credentials=credentials)
    return _execute(argv, {**base, **(env or {})}, f"git {args[0]}", timeout)


def command(*args: str, directory: Path | None = None,
            credentials: dict | None = None) -> tuple[list[str], dict[str, str]]:
    """The argv and environment `run` runs, for a caller that runs git itself (a job's supervisor, which
    streams its output to the job's setup log)."""
    env = {**{k: v for k, v in os.environ.items() if k not in ELSEWHERE}, "GIT_TERMINAL_PROMPT": "0",
           "GIT_OPTIONAL_LOCKS": "0"}
    argv = ["git", *NO_CONFIGURED_PROGRAMS]
    if directory is not None:
        argv += [*NO_PROMPTS, *drivers_off(str(directory), env)]
    if credentials:
        argv += ["-c", "credential.helper=", "-c", f"credential.helper={CREDENTIAL_HELPER}"]
        env.update({f"DISTRAIN_GIT_{key.upper()}": credentials[key] for key in ("username", "password", "host")})
    if directory is not None:
        argv += ["-C", str(directory)]
    return argv + list(args), env


def drivers_off(directory: str, env: dict[str, str]) -> list[str]:
    """`-c` options turning off every filter, diff and merge driver the configuration at `directory` names
    (reading configuration runs nothing)."""
    argv = ["git", *NO_CONFIGURED_PROGRAMS, *NO_PROMPTS, "-C", directory, "config", "--list", "--name-only"]
    try:
        names = _execute(argv, env, "git config", timeout=20).splitlines()
    except GitFailed:
        names = []
    return [option for name in sorted(set(filter(DRIVER_PROGRAMS.fullmatch, names))) for option in ("-c", f"{name}=")]


def _execute(argv: list[str], env: dict[str, str], what: str, timeout: float) -> str:
    try:
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GitFailed(what, f"no answer within {timeout:g} s", timed_out=True) from None
    except OSError as e:
        raise GitFailed(what, f"cannot run git: {e.strerror or e}") from None
    if result.returncode:
        raise GitFailed(what, (result.stderr.strip().splitlines() or [f"{what} failed"])[-1])
    return result.stdout
