"""A run's setup, before its replicas start: its code in the workspace (a git commit, with a snapshot's changes
on top, or a copied directory) and the Python environment of its requirements.txt (venvs.py), each step's
output in the run's setup log."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Callable

from ... import git, reasons, snapshot
from ...logs import LogWriter
from . import processes, venvs

CODE_NOT_COPIED = shutil.ignore_patterns(".git", ".ipynb_checkpoints", "__pycache__")


class SetupFailed(Exception):
    pass


def written_since(workspace: Path, since: float) -> list[tuple[str, int]]:
    """The files the job wrote in its workspace since `since` (a time.time()): their paths relative to it and
    their sizes, largest first. Not its hidden entries (the checkout's .git, the job's Python environment) nor
    Python's caches, as the log tee leaves them out in a pod."""
    written = []
    for directory, subdirectories, names in os.walk(workspace):
        top = Path(directory) == workspace
        subdirectories[:] = [d for d in subdirectories if d != "__pycache__" and not (top and d.startswith("."))]
        for name in names if not top else [n for n in names if not n.startswith(".")]:
            path = Path(directory, name)
            try:
                status = path.lstat()
            except OSError:  # gone meanwhile
                continue
            if status.st_mtime >= since:
                written.append((path.relative_to(workspace).as_posix(), status.st_size))
    return sorted(written, key=lambda file: (-file[1], file[0]))


def discarded_message(written: list[tuple[str, int]]) -> str:
    """What the job's event says of the files it wrote next to its code, which go with its working copy."""
    shown = ", ".join(f"{path} ({size:,} bytes)" for path, size in written[:5])
    more = f" and {len(written) - 5} more" if len(written) > 5 else ""
    return (f"{len(written)} file{'s' * (len(written) > 1)} written next to the code, discarded with its working "
            f"copy: {shown}{more}; write what you keep under $DISTRAIN_OUTPUT_DIR")


def outside_output(paths: set[str], kept: list[Path]) -> list[str]:
    """Of `paths`, those in none of the `kept` directories (once resolved), in order."""
    roots = [directory.resolve() for directory in kept]
    return sorted(p for p in paths if not any(Path(p).resolve().is_relative_to(root) for root in roots))


def outside_message(paths: list[str]) -> str:
    """What the job's event says of the event files its replicas wrote outside its output directory."""
    directories = sorted({str(Path(path).parent) for path in paths})
    more = f" and {len(directories) - 3} more" if len(directories) > 3 else ""
    return (f"TensorBoard event files written outside the job's output directory, where its TensorBoard and metrics "
            f"do not look: in {', '.join(directories[:3])}{more}; write them under $DISTRAIN_LOG_DIR, or keep the "
            "output there (--output-to, the spec's output)")


class RunSetup:
    """Prepares a run's workspace: `log` takes each step's output, `event(reason, message)` records each stage
    as an event of the job; a step that fails raises SetupFailed."""

    def __init__(self, workspace: Path, log: LogWriter, event: Callable[[str, str], None]):
        self.workspace = workspace
        self.log = log
        self.event = event

    def link(self, spec: dict, directories: dict[str, Path]) -> list[Path]:
        """The spec's data.link_as and output.link_as: links, in the workspace or beside it, to its `directories`
        (by field); the links made."""
        links = []
        for field, target in directories.items():
            link_as = spec.get(field, {}).get("link_as")
            if not link_as:
                continue
            link = Path(os.path.normpath(self.workspace / link_as))
            self.make_parents(link, f"{field}.link_as: {link_as}")
            if link.is_symlink():  # beside the workspace, an earlier run's
                link.unlink()
            elif link.exists():
                raise SetupFailed(f"{field}.link_as: {link_as} is there already (in the code, or distrain's); choose "
                                  "another path")
            target.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target, target_is_directory=True)
            links.append(link)
        return links

    def make_parents(self, link: Path, what: str) -> None:
        """The directories above `link` (in the workspace, or beside it: its job's directory), each made unless
        there; SetupFailed if one is a link (the code's may lead anywhere)."""
        base = self.workspace if link.is_relative_to(self.workspace) else self.workspace.parent
        directory = base
        for part in link.parent.relative_to(base).parts:
            directory /= part
            if directory.is_symlink():
                raise SetupFailed(f"{what} goes through {directory.relative_to(base)}, a link in the code: "
                                  "choose a path of directories")
            directory.mkdir(exist_ok=True)

    async def check_out(self, source: dict, credentials: Callable[[str], dict], bundle: Path) -> None:
        """The code the spec's `source` names in the workspace: a git commit, with the snapshot's changes (from
        `bundle`) on top if it has one, a copy of a directory, or none; `credentials(secret)` for a private
        repository."""
        if "git" in source:
            secret = credentials(source["credentials"]) if source.get("credentials") else None
            self.event(reasons.CLONING, f"cloning {source['git']} at {source['commit'][:12]}")
            argv, env = git.command("clone", "--quiet", "--no-checkout", "--", source["git"], str(self.workspace),
                                    credentials=secret)
            await self.step(argv, env, "git clone")
            if "snapshot" in source:  # the checkout's changes on top: its commits and work tree
                for argv, env in snapshot.apply(bundle, self.workspace, source["snapshot"]["commit"]):
                    await self.step(argv, env, "applying the snapshot of your changes")
            else:
                argv, env = git.command("checkout", "--quiet", "--detach", source["commit"], directory=self.workspace)
                await self.step(argv, env, "git checkout")
        elif "path" in source:
            await asyncio.to_thread(shutil.copytree, source["path"], self.workspace, symlinks=True,
                                    ignore=self.not_copied)
        else:
            self.workspace.mkdir(parents=True)

    def not_copied(self, directory: str, names: list[str]) -> set[str]:
        """What a copy of the code leaves out: git's and Jupyter's own files, and the directory holding the
        workspace itself, where the code's directory holds the jobs' storage (a copy would copy itself)."""
        workspace = os.path.realpath(self.workspace)
        return set(CODE_NOT_COPIED(directory, names)) | {
            name for name in names if workspace.startswith(os.path.realpath(os.path.join(directory, name)) + os.sep)}

    async def install_requirements(self, root: Path, env: dict[str, str]) -> tuple[Path | None, dict[str, str]]:
        """The job's own packages (venvs.py, under the storage `root`): installed, or reused from a job with the
        same requirements; their environment (None without requirements) and `env` with it active."""
        text = venvs.requirements(self.workspace)
        if text is None:
            return None, env
        env_dir = venvs.location(root, self.workspace, text)
        async with venvs.building(env_dir):
            if venvs.is_ready(env_dir):
                self.event(reasons.REUSING, f"reusing the environment of the same requirements.txt ({env_dir})")
            else:
                self.event(reasons.INSTALLING, "installing requirements.txt")
                await asyncio.to_thread(venvs.create, env_dir)
                argv = [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install",
                        "--disable-pip-version-check", "--no-input", "-r", str(self.workspace / "requirements.txt")]
                await self.step(argv, env, "pip install -r requirements.txt")
                venvs.mark_ready(env_dir)
        return env_dir, venvs.variables(env_dir, env)

    async def step(self, argv: list[str], env: dict, what: str) -> None:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=self.workspace if self.workspace.exists() else None, env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        lines: list[bytes] = []
        output = process.stdout
        assert output is not None  # a pipe

        async def copy() -> None:
            while chunk := await output.read(65536):
                self.log.feed(chunk)
                lines[:] = (lines + chunk.splitlines())[-5:]

        try:
            await asyncio.gather(copy(), process.wait())
        except asyncio.CancelledError:
            processes.signal_group(process.pid, signal.SIGKILL)
            await process.wait()
            raise
        if process.returncode:
            detail = b" | ".join(lines[-3:]).decode(errors="replace")
            raise SetupFailed(f"{what} failed (exit code {process.returncode}): {detail}")
