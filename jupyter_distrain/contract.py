"""The contract every backend keeps. The job manager holds backends only through this Protocol; a backend is
named in `c.Distrain.backend_classes` and made by `from_config` (see open_backend)."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, TypeVar

from .errors import FieldError
from .records import JobRecord, JobSummary, TensorBoardTarget

if TYPE_CHECKING:
    from .config import Distrain
    from .logs import LogLine
    from .policy import Event


SomeBackend = TypeVar("SomeBackend", bound="Backend")


class Backend(Protocol):
    """Runs jobs somewhere. Every method raises DistrainError (or a subclass) for what it refuses. A backend
    acts for one owner (config.owner): it records them on the jobs it makes, and a job of another owner is
    JobNotFound to every method but `exists`, unless config.see_all_owners."""

    name: str
    # host directories a spec may mount unless the admin names them (c.Distrain.allowed_host_paths); None: any
    default_host_paths: tuple[str, ...] | None

    @property
    def ledger(self) -> Ledger:
        """The runs each job's life ended (usage.py), kept after the job is deleted."""

    @classmethod
    def from_config(cls: type[SomeBackend], config: Distrain) -> SomeBackend:
        """The backend, with its settings from `config`."""

    def start(self, log: logging.Logger) -> None:
        """Keep this process's view current (watches, reconcilers) while a long-lived process (the Jupyter
        server) uses the backend; a command that makes one call never starts it."""

    def close(self) -> None:
        """Stop what `start` started; the jobs go on."""

    # jobs
    def check(self, spec: dict) -> None:
        """Refuse, before anything is created, a validated spec this backend cannot run (SpecError)."""

    def submit(self, spec: dict, snapshot: bytes | None = None, hooks: dict | None = None) -> JobRecord:
        """Start a job from a validated spec with its code pinned (and the bundle of its code.snapshot);
        JobConflict if the name is taken. `hooks`: the webhooks its events are posted to (notify.hooks), by
        what decides them, whether or not this process lives."""

    def exists(self, name: str) -> bool:
        """Whether this backend holds a job of that name, whoever owns it (the name is taken)."""

    def get(self, name: str, events: int = 20) -> JobRecord:
        """The job, with its `events` most recent events; JobNotFound if there is none."""

    def list(self) -> list[JobSummary]:
        """Every job of this backend, as the list shows it (see `summary`)."""

    def record(self, name: str, event: Event) -> None:
        """Record an event of the job's (one that no run decides: a budget's warning)."""

    def stop(self, name: str) -> JobRecord:
        """Stop every replica (a grace period, then kill) and return the job once it is finished."""

    def restart(self, name: str, spec: dict | None = None, snapshot: bytes | None = None,
                hooks: dict | None = None) -> JobRecord:
        """Begin the job's next run, from its spec or an edited one of the same name (with the bundle of its
        code.snapshot, if it has one: the stored one, or a new one), its events posted to `hooks`."""

    def earlier_run(self, name: str, run: int) -> dict | None:
        """The job's run `run` as the restart that ended it kept it (records.run_record); None if none was kept."""

    def snapshot(self, name: str) -> bytes | None:
        """The bundle of the job's code.snapshot, as stored with it; None if it has none."""

    def delete(self, name: str, purge_output: bool = False) -> None:
        """Stop the job and forget it, logs included; its output stays unless `purge_output`."""

    # logs and observation
    def log_dir(self, name: str, run: int | None = None) -> Path:
        """The directory of a run's log files (default: the current run), which live streams watch."""

    def log_files(self, name: str, replica: str | None = None, run: int | None = None) -> dict[str, Path]:
        """A run's log files by log name (those of JobRecord.logs for the current run), or only `replica`'s;
        ReplicaNotFound or RunNotFound for what the job does not have."""

    def logs(self, name: str, replica: str | None = None, tail: int | None = None, since: str | None = None,
             follow: bool = False, finished: Callable[[], bool] | None = None,
             run: int | None = None) -> Iterator[LogLine]:
        """A run's lines in time order; to follow, until `finished()` (default: the run ended)."""

    def metrics(self, name: str) -> builtins.list[dict]:
        """CPU, memory and GPU use per replica (None where unknown; for a running replica, `unknown` says why)."""

    def stacks(self, name: str, replica: str | None = None, kept: bool = False) -> dict:
        """Where the running replicas (or only `replica`) are now: stacks.take's answer; NotRunning if none
        runs. `kept`: those kept with the current run when it hung instead (NotFound if none were)."""

    def waiting(self, name: str) -> dict:
        """Why the job waits, if it does: waits.record's answer (its sentence, and the numbers behind it)."""

    def outlook(self, spec: dict) -> builtins.list[FieldError]:
        """What would keep a job of this checked spec waiting were it submitted now (warnings, not refusals)."""

    def cluster(self) -> dict:
        """What jobs can use: volumes, CPUs, memory, GPUs (capacity and available)."""

    def tensorboard(self, spec: dict, replica: str | None = None) -> TensorBoardTarget:
        """Where the TensorBoard of a job (or one replica's) is to be found."""

    # git credentials: written, listed by name, deleted; never read back by a request
    def credentials(self, secret: str) -> dict:
        """The username, password and host of a stored secret (for pinning a private repository's ref); the
        host is "" for a secret stored before secrets were bound to one."""

    def set_credentials(self, secret: str, username: str, password: str, host: str) -> None:
        """Store (or replace) a secret for the git server at `host`."""

    def credential_names(self) -> builtins.list[str]:
        """The stored secrets' names."""

    def delete_credentials(self, secret: str) -> None:
        """Delete a secret."""


class Ledger(Protocol):
    """The usage of every run a restart or a delete ended (usage.ledger_row), every owner's, kept where the
    backend keeps its jobs."""

    def add(self, row: dict) -> None:
        """Keep the run (once: its usage.row_key names it)."""

    def since(self, moment: float) -> builtins.list[dict]:
        """The runs kept that count since `moment` (usage.counted_since): every owner's."""
