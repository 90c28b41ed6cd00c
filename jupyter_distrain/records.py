"""The records every layer shares: a job, its replicas and events as every backend reports them, and where a
job's TensorBoard is to be found. jobjson turns them into the API's JSON."""

from __future__ import annotations

import time
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, TypedDict, Union, cast

from .incluster.tensorboard import View, logdir_parts
from .policy import FINISHED

if TYPE_CHECKING:
    import ssl

    from typing_extensions import NotRequired  # typing's from Python 3.11


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
    message: NotRequired[str]  # why it is in its phase, where the backend says (Kubernetes: its pod's)
    cpu_seconds: NotRequired[float | None]  # what its processes used in the run, once ended
    peak_memory: NotRequired[int | None]  # bytes: the largest resident set of its processes, once ended


class EventRecord(TypedDict):
    time: float | None
    type: str  # Normal or Warning
    replica: str  # "" for the job's own
    reason: str
    message: str


CONTROLS = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})  # control, format (bidi overrides), surrogate, line breaks


def iso(t: float | None, timespec: str = "seconds") -> str | None:
    """A time of the records (seconds since the epoch) as the API shows it: ISO 8601, UTC, to the second."""
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).isoformat(timespec=timespec)


def printable(text: str) -> str:
    """`text` with its control characters (newlines, escape sequences, bidi overrides...) escaped as repr escapes
    them (a newline as \\n): an event's message, which may carry a file name, prints on its own line."""
    if text.isprintable():
        return text
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in CONTROLS else c for c in text)


class Notice(TypedDict):
    reason: str  # reasons.NOTICES
    message: str
    replica: str  # the one it names, or ""
    time: float


def running_notice(phase: str, started: float | None, newest: Notice | None) -> Notice | None:
    """A job's notice: the newest of its NoProgress and Straggler warnings, while it runs, of its current run."""
    if newest is None or phase in FINISHED or started is None or newest["time"] < started:
        return None
    return newest


class Progress(TypedDict):
    """Where a replica (or a job: its replica furthest behind) stands, as its log says (eta.py)."""

    fraction: float | None  # done, 0-1; None: no line says the total
    ends: float | None  # when it will be done at its pace so far (seconds since the epoch); None: not known yet
    epoch: int | None  # the epoch under way (from 1) and how many there are, where the lines count them
    epochs: int | None
    step: int | None  # the step of the epoch (or of the run) and how many there are
    steps: int | None
    updated: float  # the time of the line it was last read from
    replica: str  # the one it is of (a job's: the replica furthest behind)


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
    notice: Notice | None  # running_notice: what its owner is told of while it runs


STATE_FIELDS = tuple(JobState.__annotations__)


class JobSummary(JobState):
    """A job as the list shows it: no spec, no events, its replicas counted by phase."""

    replica_phases: dict[str, int]  # phase: how many of the current run's replicas are in it
    trial_of: str | None  # the sweep the job is a trial of (its spec's trial_of)
    progress: NotRequired[Progress | None]  # while it runs (JobManager.list): its replica furthest behind


SUMMARY_FIELDS = tuple(key for key in JobSummary.__annotations__ if key != "progress")  # what backends list


class JobFields(JobState):

    output_dir: str
    spec: dict
    replicas: list[ReplicaRecord]
    logs: list[str]  # the logs of the current run, for `replica=`: local setup, then each replica


class JobRecord(JobFields, total=False):
    """A job as every backend reports it (jobjson.job_json turns it into the API's JSON)."""

    events: list[EventRecord]  # the most recent, when asked for
    engine: str  # on Kubernetes, what runs the job: jobset or pods
    supervision: str  # on Kubernetes, what happens to the job while no Jupyter server runs ("" when nothing)
    # what the current run ran on, as far as it is known: python, requirements and packages (locally
    # backends/local/venvs.describe, on Kubernetes incluster/install.py's report); on Kubernetes also the image and
    # its digests as the pods report them
    environment: dict
    progress: dict[str, Progress]  # while it runs (JobManager.get): each replica's whose log says
    cost: float | None  # what its current run cost so far at the admin's prices (JobManager.view)


# what is kept of each run a restart ends (backends' `earlier_run`): its spec, what it ran on, its end, its replicas
RUN_FIELDS = ("run", "spec", "environment", "phase", "reason", "message", "exit_code", "started", "finished",
              "replicas")


def run_record(job: JobRecord) -> dict:
    """The job's current run as it is kept once a restart ended it (RUN_FIELDS), and when (`replaced`: after its
    replicas' last write and before the next run's first, the end of its metrics; `finished` may be to the second)."""
    return {**{key: job.get(key) for key in RUN_FIELDS}, "replaced": time.time()}


def metrics_window(run: Mapping) -> tuple[float | None, float | None]:
    """When a run (JobManager.run's) wrote its metrics: from its start until the restart that replaced it (an
    earlier run's `replaced`), for the current run to now."""
    return run["started"], run.get("replaced")


@dataclass(frozen=True)
class EventFiles:
    """A job's event files, that this server reads and shows with its own TensorBoard: every one under the job's
    `output` directory, each directory of them a run named by its path there, but the replicas' (in `logdir`, the
    spec's tensorboard.logdir) by their names, worker-0...; a sweep's (`trials`), its trials', `<trial>/...`
    (incluster/tensorboard.py's View)."""

    output: Path
    logdir: str = "."
    trials: bool = False

    @classmethod
    def around(cls, logdir: Path, setting: str) -> EventFiles:
        """The event files of the job whose replicas write in `logdir`, its spec's tensorboard.logdir `setting`."""
        return cls(logdir.parents[len(logdir_parts(setting)) - 1] if logdir_parts(setting) else logdir, setting)

    def view(self) -> View:
        return View(self.output, self.logdir, self.trials)


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
                             "replica_phases": dict(Counter(r["phase"] for r in job["replicas"])),
                             "trial_of": job["spec"].get("trial_of")})


def value_said(value: float | None) -> str:
    """A scalar's value in four significant digits; "not a number" where it had none (a NaN or an infinity, which
    the scalars endpoint answers as null)."""
    return "not a number" if value is None else f"{value:.4g}"
