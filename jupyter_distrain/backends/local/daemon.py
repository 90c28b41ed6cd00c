"""A local job's supervisor as processes, detached from whatever submitted the job.

    python -m jupyter_distrain.backends.local.daemon --root ROOT NAME
    python -m jupyter_distrain.backends.local.daemon --root ROOT --launcher   (a Jupyter server's, warm)

A supervisor is two processes. The launching process forks the outer one into its own session and exits
once it has recorded its pid, so the job outlives the CLI or the Jupyter server that submitted it. The outer
one forks the inner one, which runs the job, and passes SIGTERM (or SIGINT), which stops the job, on to it.
As a subreaper it adopts what a replica leaves orphaned (a double-forked daemon); when the inner one exits,
it kills whatever of the job is left (every replica, if the inner one was killed, recording the job's end
then) and exits last: the job's processes are gone once its recorded pid is.

A Jupyter server keeps a launcher ready, this module imported, which forks the launching process of each
job named on its input: the job's replicas start without waiting for an interpreter and its imports (~85 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import traceback
from pathlib import Path

import psutil

from ... import sweep
from ...notify import RunEvent
from . import processes
from .backend import LocalBackend
from .supervisor import Supervisor, SweepSupervisor


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("name", nargs="?")
    what.add_argument("--launcher", action="store_true", help="start the supervisor of each job named on stdin")
    what.add_argument("--tell", action="store_true", help="post the run's event on stdin to its webhooks")
    args = parser.parse_args(argv)
    if args.launcher:
        serve(Path(args.root))
    elif args.tell:
        tell(Path(args.root))
    else:
        launch(Path(args.root), args.name)


def tell(root: Path) -> None:
    """Post a run's event, {"hooks": ..., "event": RunEvent's fields}, read from stdin (Launcher.tell)."""
    told = json.load(sys.stdin)
    backend = LocalBackend(root, see_all=True)
    backend.notifier.tell(told["hooks"], RunEvent(**told["event"]))
    backend.notifier.wait()


def serve(root: Path) -> None:
    """The launcher: for each job named on stdin, fork a launching process and answer one line once it has
    exited: a JSON string, "" when the job's supervisor is recorded, else what it printed. Ends with stdin
    (its Jupyter server closed it, or exited)."""
    for line in sys.stdin:
        printed, printing = os.pipe()
        child = os.fork()
        if not child:
            os.close(printed)
            os.dup2(printing, 2)
            os.close(printing)
            code = 1
            try:
                launch(root, line.strip())
                code = 0  # the outer or inner supervisor, its job over
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(printing)
        with open(printed, "rb") as output:
            problem = output.read().decode(errors="replace").strip()
        code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
        print(json.dumps("" if not code else problem[-2000:] or f"exit code {code}"), flush=True)


def launch(root: Path, name: str) -> None:
    """Start the job's supervisor: this process exits once the outer one has recorded its pid (status 0), or
    failed to (1); the outer and the inner one return when the job is over."""
    # Blocked until the supervisor's handlers are installed, so an early stop is never lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, processes.TERMINATING)
    recorded, record = os.pipe()
    if os.fork():  # the launching process: done once the outer supervisor's pid is recorded
        os.close(record)
        os._exit(0 if os.read(recorded, 1) else 1)
    os.close(recorded)
    os.setsid()
    backend = LocalBackend(root, see_all=True)
    log = open(backend.job_dir(name) / "supervisor.log", "ab", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    identity = os.getpid(), processes.started_at(os.getpid())
    backend.store.update_job(name, supervisor_pid=identity[0], supervisor_started=identity[1])
    backend.store.close()  # no connection crosses a fork
    processes.become_subreaper()
    supervisor = os.fork()
    if not supervisor:
        os.close(record)
        backend = LocalBackend(root, see_all=True)
        kind = SweepSupervisor if sweep.is_sweep(backend.row(name)["spec"]) else Supervisor
        asyncio.run(kind(backend, name).run())
        return
    os.write(record, b"1")
    os.close(record)
    outlive(backend, name, supervisor, identity)


def outlive(backend: LocalBackend, name: str, supervisor: int, identity: tuple[int, float | None]) -> None:
    """The outer supervisor, `identity` as recorded: pass stop signals on to the inner one and reap the orphans
    this subreaper adopts until the inner one exits; then kill every process left, and record the job's end if
    the inner one did not (it was killed)."""
    for sig in processes.TERMINATING:
        signal.signal(sig, lambda sig, _: os.kill(supervisor, sig))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, processes.TERMINATING)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == supervisor:
            break
    for sig in processes.TERMINATING:
        signal.signal(sig, signal.SIG_IGN)
    for process in psutil.Process().children(recursive=True):
        try:
            process.kill()
        except psutil.Error:
            pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    if status:
        backend.end_vanished(name, identity)


if __name__ == "__main__":
    main()
