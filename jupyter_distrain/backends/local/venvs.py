"""The Python environment of a local job whose code has a requirements.txt: the job's packages first, then
the server's (its framework included), so a job may pin another version of a package than the server has.

Jobs with the same requirements share one environment, built once under <root>/envs/ and reused as is, when
what they install is the package index's alone: every line a name, versions and markers. Any other line (local
files: `./pkg.whl`, `-e .`, `-r other.txt`; `name @ URL-or-path`; options such as `-f DIR` or `--index-url`,
anywhere on a line; `${VARIABLES}`) gets an environment of its own in the job's workspace: what it names can
differ between two jobs' code or change.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import importlib.metadata
import os
import platform
import re
import shutil
import site
import sys
import venv
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

READY = ".distrain-ready"  # written once the environment's requirements are installed
# a requirement the index alone answers: a name, [extras], versions, ; markers (no @, no $VARIABLE, and no option:
# no word starting with -, wherever it stands, which pip reads as an option such as --index-url)
FROM_THE_INDEX = re.compile(r"(?!.*(?<!\S)-)[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[\w.,\s-]*\])?\s*([<>=!~][^;@$]*)?"
                            r"(;[^@$]*)?")
LOCK_POLL_SECONDS = 0.2


def requirements(workspace: Path) -> str | None:
    """The workspace's requirements.txt, if it asks for anything."""
    path = workspace / "requirements.txt"
    text = path.read_text() if path.is_file() else ""
    return text if lines(text) else None


def lines(text: str) -> list[str]:
    """The requirements' lines, without comments or blank ones."""
    return [line for line in (re.sub(r"(^|\s)#.*", "", line).strip() for line in text.splitlines()) if line]


def location(root: Path, workspace: Path, text: str) -> Path:
    """Where the environment for these requirements is: shared, unless anything but the index says what they
    install (FROM_THE_INDEX)."""
    if not all(FROM_THE_INDEX.fullmatch(line) for line in lines(text)):
        return workspace / ".distrain-venv"
    key = hashlib.sha256(f"{sys.executable}\n{sys.version}\n{text}".encode()).hexdigest()[:16]
    return root / "envs" / key


def is_ready(env_dir: Path) -> bool:
    return (env_dir / READY).exists()


def site_packages(env_dir: Path) -> Path:
    return env_dir / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def variables(env_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` with the environment active; PYTHONPATH also gives its packages to the server's console scripts
    (torchrun), whose interpreter is the server's."""
    path = [str(site_packages(env_dir)), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "VIRTUAL_ENV": str(env_dir), "PATH": f"{env_dir / 'bin'}:{env.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(path)}


def installed(paths: list[str]) -> list[str]:
    """`name==version` of each package importable from `paths`: the first one of each name, as import finds it."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=paths):
        name, version = name_and_version(dist)
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), f"{name}=={version}")
    return sorted(found.values(), key=str.lower)


def name_and_version(dist: importlib.metadata.Distribution) -> tuple[str, str]:
    """A distribution's Name and Version from its metadata's headers alone: parsing it whole (its long
    description) took ten times as long, and a job's end waits for the list."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    fields = dict(line.split(": ", 1) for line in text.split("\n\n", 1)[0].splitlines() if ": " in line)
    return fields.get("Name", ""), fields.get("Version", "")


def describe(env_dir: Path | None) -> dict:
    """What the job's Python is: its version, the packages installed for its requirements.txt (None without
    one) and every package it can import, as `name==version`."""
    own = [str(site_packages(env_dir))] if env_dir else []
    return {"python": platform.python_version(), "requirements": installed(own) if env_dir else None,
            "packages": installed(own + [path for path in sys.path if path])}


def create(env_dir: Path) -> None:
    """An empty environment that also sees this interpreter's packages, after its own."""
    shutil.rmtree(env_dir, ignore_errors=True)  # what a build cut short left
    venv.create(env_dir, with_pip=False, symlinks=True)
    own = site_packages(env_dir)
    server = [path for path in site.getsitepackages() if os.path.isdir(path)]
    # an `import` line of a .pth file runs at start-up: addsitedir also reads the server's own .pth files
    (own / "_distrain_server.pth").write_text(f"import site; list(map(site.addsitedir, {server!r}))\n")


def mark_ready(env_dir: Path) -> None:
    (env_dir / READY).touch()


@asynccontextmanager
async def building(env_dir: Path) -> AsyncIterator[None]:
    """Hold the environment's lock (one job builds it, the others wait, then reuse it); an environment not
    ready when the lock is let go (its install failed or was stopped) is removed."""
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(env_dir.parent / f"{env_dir.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:  # polled, so a stop cancels the wait
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(LOCK_POLL_SECONDS)
        try:
            yield
        finally:
            if not is_ready(env_dir):
                shutil.rmtree(env_dir, ignore_errors=True)
    finally:
        os.close(fd)
