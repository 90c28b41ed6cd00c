"""The contract every backend keeps, and the records it answers with. The job manager holds backends
only through this Protocol; a backend is named in `c.Distrain.backend_classes` and made by `from_config`."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import getpass
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, TypedDict, TypeVar, Union, cast

if TYPE_CHECKING:
    import ssl

    from ..config import Distrain
    from ..logs import LogLine


class ReplicaRecord(TypedDict):
    """One replica of a job's current run (times in seconds since the epoch)."""

    name: str  # <role>-<index>
    role: str
    idx: int
    phase: str  # policy.Phase
    exit_code: int | None
    reason: str
    address: str | None  # host:port its peers reach it at
    node: str | None  # the machine it runs on, once placed (on Kubernetes, its pod's node)
    pid: int | None  # local only
    restarts: int
    started: float | None
    finished: float | None


class EventRecord(TypedDict):
    time: float | None
    type: str  # Normal or Warning
    replica: str  # "" for the job's own
    reason: str
    message: str


class JobState(TypedDict):
    """What a job is and where it stands: the fields a list and a job's own view share."""

    name: str
    backend: str
    owner: str  # who submitted it ("" for a job made before jobs had owners)
    phase: str  # policy.Phase
    reason: str
    message: str
    exit_code: int | None
    run: int  # 1, then one more per restart
    created: float
    started: float | None
    finished: float | None
    expires: float | None  # when it is removed, once finished, for its policy.ttl_after_finished (spec.expires)


STATE_FIELDS = tuple(JobState.__annotations__)


class JobSummary(JobState):
    """A job as the list shows it: no spec, no events, its replicas counted by phase."""

    replica_phases: dict[str, int]  # phase: how many of the current run's replicas are in it


SUMMARY_FIELDS = tuple(JobSummary.__annotations__)


class JobFields(JobState):

    output_dir: str
    spec: dict
    replicas: list[ReplicaRecord]
    logs: list[str]  # the logs of the current run, for `replica=`: local setup, then each replica


class JobRecord(JobFields, total=False):
    """A job as every backend reports it (manager.public turns it into the API's JSON)."""

    events: list[EventRecord]  # the most recent, when asked for
    engine: str  # on Kubernetes, what runs the job: jobset or pods
    supervision: str  # on Kubernetes, what happens to the job while no Jupyter server runs ("" when nothing)
    # what the current run ran on, as far as it is known: python, requirements and packages (locally
    # supervisor.environment, on Kubernetes cluster_install.py's report); on Kubernetes also the image and
    # its digests as the pods report them
    environment: dict


@dataclass(frozen=True)
class EventFiles:
    """A job's event files, each replica's in a directory named after it, that this server shows with its own
    TensorBoard."""

    logdir: Path


@dataclass(frozen=True)
class ClusterTensorBoard:
    """A TensorBoard already running in a cluster: its URL (through the API server's service proxy from
    outside the cluster, its Service inside), with the headers and TLS settings a request needs."""

    url: str
    headers: dict = field(default_factory=dict)
    tls: ssl.SSLContext | None = None  # for https: None trusts the system's certificate authorities


TensorBoardTarget = Union[EventFiles, ClusterTensorBoard]


def summary(job: JobRecord) -> JobSummary:
    """The job as the list shows it."""
    return cast(JobSummary, {**{key: job[key] for key in STATE_FIELDS},  # type: ignore[literal-required]
                             "replica_phases": dict(Counter(r["phase"] for r in job["replicas"]))})


def current_owner() -> str:
    """Who submits and sees jobs: JupyterHub's user (its single-user servers, and their terminals and kernels,
    have $JUPYTERHUB_USER), else the operating-system user."""
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


def sees(viewer: str, owner: str, see_all: bool) -> bool:
    """Whether `viewer` sees a job (or a stored secret) of `owner`: their own, one made before there were
    owners (""), or with `see_all` (an admin's server) every one."""
    return see_all or owner in ("", viewer)
SomeBackend = TypeVar("SomeBackend", bound="Backend")


class Backend(Protocol):
    """Runs jobs somewhere. Every method raises DistrainError (or a subclass) for what it refuses. A backend
    acts for one owner (config.owner): it records them on the jobs it makes, and a job of another owner is
    JobNotFound to every method but `exists`, unless config.see_all_owners."""

    name: str
    # host directories a spec may mount unless the admin names them (c.Distrain.allowed_host_paths); None: any
    default_host_paths: tuple[str, ...] | None

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

    def submit(self, spec: dict, snapshot: bytes | None = None) -> JobRecord:
        """Start a job from a validated spec with its code pinned (and the bundle of its code.snapshot);
        JobConflict if the name is taken."""

    def exists(self, name: str) -> bool:
        """Whether this backend holds a job of that name, whoever owns it (the name is taken)."""

    def get(self, name: str, events: int = 20) -> JobRecord:
        """The job, with its `events` most recent events; JobNotFound if there is none."""

    def list(self) -> list[JobSummary]:
        """Every job of this backend, as the list shows it (see `summary`)."""

    def stop(self, name: str) -> JobRecord:
        """Stop every replica (a grace period, then kill) and return the job once it is finished."""

    def restart(self, name: str, spec: dict | None = None, snapshot: bytes | None = None) -> JobRecord:
        """Begin the job's next run, from its spec or an edited one of the same name (with the bundle of its
        code.snapshot, if it has one: the stored one, or a new one)."""

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
        """CPU, memory and GPU use per replica (None where unknown)."""

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
