"""How far a running job is and when it will be done, read from what its code prints as it is (no change to it):
the progress lines of Keras (`Epoch 3/10`, then its bar's `15/63`), tqdm (`45%|████ | 45/100 [...]`), PyTorch
Lightning (Rich's bar, `Epoch 2/9 ━━━╺━━ 45/100`, or tqdm's after `Epoch 2:`, epochs counted from 0) and Paddle
(`Epoch 1/10`, `step 10/938 - loss`) in each replica's log. A total the lines do not say (the epochs of Lightning's
tqdm bar, the steps of tqdm's `45it [...]` and Keras's `45/Unknown`) is the job's hyperparameter of that name (or
the one its spec's `progress` names). A replica whose lines say no total, in a job whose hyperparameters name its
steps (`max_steps`...), shows the last step its event files reached instead. Each log is read from where its last
read stopped, so a long run costs only its new lines (a flood, only its end). The fraction done never goes back
within a run (an evaluation's bar after training does not undo it). The time it ends is, once an epoch was seen
whole after the first, the epochs' pace carried on to the last (what each pays at its start is in it), else its pace
since its first line that said a step: the time before that line (imports, data loading, the first step's tracing)
is left out.
"""

from __future__ import annotations

import functools
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .errors import DistrainError
from .records import JobRecord, Progress, metrics_window

if TYPE_CHECKING:
    from .contract import Backend

ESCAPE = rb"(?:\x1b\[[0-9;?]*[A-Za-z])*"  # colours and the like, around a line's numbers
PROGRESS_LINE = re.compile(
    rb"^(?P<stamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})Z[ !][ \t\x08]*" + ESCAPE + rb"(?:"
    rb"Epoch (?P<epoch>\d+)/(?P<epochs>\d+)[ \t]*$"  # Keras, Paddle: an epoch begins
    rb"| *(?:step )?(?P<step>\d+)/(?P<steps>\d+)" + ESCAPE + rb" +" + ESCAPE + rb"(?:\xe2\x94\x81|\[|- )"  # a bar
    rb"|(?:.*?Epoch (?P<epoch0>\d+):)?[^\n|]*?\d+%\|[^\n|]*\| *(?P<done>\d+)/(?P<total>\d+) "  # tqdm, Lightning
    rb"|Epoch (?P<epoch_of>\d+)(?:/(?P<last_epoch>\d+)|/-\d+)? +" + ESCAPE  # Lightning's Rich bar: epochs from 0
    + rb"(?:\xe2\x94\x81|\xe2\x95[\xb8\xba])[^\n]*? (?P<drawn>\d+)/(?P<to_draw>\d+) "
    rb"|(?:[^\n|]*?: | *)(?P<counted>\d+)(?:it \[|/Unknown)"  # steps counted without a total: tqdm's, Keras's
    rb")", re.MULTILINE)
# the hyperparameters that say how many epochs (a Lightning tqdm bar's) and steps (its event files') a job runs,
# unless its spec's progress names others
TOTALS = {"epochs": ("epochs", "max_epochs", "num_epochs", "n_epochs"),
          "steps": ("max_steps", "steps", "num_steps", "train_steps", "total_steps")}
MAX_UNREAD = 1024 * 1024  # bytes of a log read at most at once: past them, only the newest lines
MAX_LOGS = 4096  # logs followed at once; the least recently read is forgotten (read again whole if asked)


@dataclass
class LogProgress:
    """One replica log's progress, as far as it was read."""

    offset: int = 0
    hints: dict[str, int | None] = field(default_factory=dict)  # the totals its job's hyperparameters say (total_of)
    epoch: int | None = None
    epochs: int | None = None
    step: int | None = None
    steps: int | None = None
    updated: float = 0.0
    first: tuple[float, float] | None = None  # (time, fraction done) of its first line that said a step
    latest: tuple[float, float] | None = None  # ...and of its line that said the most
    second_epoch: tuple[int, float] | None = None  # (epoch, when it began) of the second seen begin
    epoch_began: tuple[int, float] | None = None  # ...and of the epoch under way

    def read(self, path: Path, spec: Callable[[], dict]) -> None:
        """Take the whole lines written since the last read, or of a flood since then only its last MAX_UNREAD
        bytes (a progress bar's line is drawn again and again)."""
        try:
            with open(path, "rb") as log:
                size = os.fstat(log.fileno()).st_size
                if size < self.offset:  # a new file of the same name
                    self.__init__()  # type: ignore[misc]
                if size - self.offset > MAX_UNREAD:
                    log.seek(size - MAX_UNREAD)
                    log.readline()  # the rest of a line begun before
                    self.offset = log.tell()
                log.seek(self.offset)
                data = log.read(size - self.offset)
        except OSError:  # gone meanwhile
            return
        end = data.rfind(b"\n") + 1
        for line in PROGRESS_LINE.finditer(data, 0, end):
            self.take(line, spec)
        self.offset += end

    def take(self, line: re.Match, spec: Callable[[], dict]) -> None:
        number = lambda group: int(line[group]) if line[group] is not None else None  # noqa: E731
        if line["epochs"]:
            self.epoch, self.epochs, self.step, self.steps = number("epoch"), number("epochs"), None, None
        elif line["steps"] or line["total"] or line["to_draw"]:
            self.step = number("step") or number("done") or number("drawn")
            self.steps = number("steps") or number("total") or number("to_draw")
            lightning = line["epoch0"] or line["epoch_of"]  # Lightning's epochs count from 0
            if line["last_epoch"]:  # ...and its Rich bar says the last
                self.epoch, self.epochs = int(lightning) + 1, int(line["last_epoch"]) + 1
            elif lightning:  # its tqdm bar does not say how many
                self.epoch, self.epochs = int(lightning) + 1, self.hint(spec, "epochs")
        elif line["counted"]:  # the job's steps hyperparameter says how many, unless they are an epoch's
            self.step, self.steps = int(line["counted"]), None if self.epochs else self.hint(spec, "steps")
        self.updated = when = datetime.fromisoformat(line["stamp"].decode()).replace(tzinfo=timezone.utc).timestamp()
        if self.epoch is not None and (self.epoch_began is None or self.epoch_began[0] != self.epoch):
            if self.epoch_began is not None and self.second_epoch is None:
                self.second_epoch = (self.epoch, when)
            self.epoch_began = (self.epoch, when)
        if not self.epochs and self.epoch is not None:  # an epoch without a total: only its steps are known
            return
        done = self.fraction_done()
        if done is None or (self.latest is not None and done <= self.latest[1]):
            return
        self.latest = (when, done)
        if self.first is None and self.step is not None:  # not an epoch's first line: warming up follows it
            self.first = self.latest

    def hint(self, spec: Callable[[], dict], total: str) -> int | None:
        """How many epochs or steps (`total`) the job's hyperparameters say (total_of), `spec()` asked once a log."""
        if total not in self.hints:
            self.hints[total] = total_of(spec(), total)
        return self.hints[total]

    def fraction_done(self) -> float | None:
        in_epoch = self.step / self.steps if self.step is not None and self.steps else 0.0
        if self.epochs:
            return min(1.0, ((self.epoch or 1) - 1 + in_epoch) / self.epochs)
        return min(1.0, in_epoch) if self.steps else None

    def ends(self) -> float | None:
        """When it will be done, at the pace of the epochs since the first seen whole (the first seen may have paid
        for warming up; what each pays at its start or end, an evaluation, is in the pace), or, before two epochs were
        seen whole, at the pace since the first line that said a step (what ran before it is left out: the imports,
        the data's loading, the first step's tracing); None before a line says more."""
        if self.latest is None:
            return None
        now, done = self.latest
        if done >= 1.0:
            return now
        if self.epochs and self.second_epoch and self.epoch_began and self.epoch_began[0] > self.second_epoch[0]:
            (second, began), (epoch, begun) = self.second_epoch, self.epoch_began
            return begun + (begun - began) / (epoch - second) * (self.epochs - epoch + 1)
        if self.first is None:
            return None
        then, before = self.first
        return now + (1.0 - done) * (now - then) / (done - before) if done > before and now > then else None

    def shown(self, replica: str) -> Progress:
        return Progress(fraction=self.latest[1] if self.latest else None, ends=self.ends(), epoch=self.epoch,
                        epochs=self.epochs, step=self.step, steps=self.steps, updated=self.updated, replica=replica)


def total_of(spec: dict, total: str) -> int | None:
    """How many epochs (or steps: `total`) the job's hyperparameters say it runs: the one its spec's progress names,
    else the first of TOTALS there."""
    values, named = spec.get("hyperparameters") or {}, spec.get("progress", {}).get(total)
    for name in (named,) if named else TOTALS[total]:
        if isinstance(values.get(name), int) and not isinstance(values[name], bool) and values[name] > 0:
            return values[name]
    return None


def stepped(scalars: dict, totals: dict[str, int]) -> dict[str, Progress]:
    """Each replica's progress from the last step its event files reached (its run, named after it: its
    DISTRAIN_LOG_DIR; `scalars` as Scalars.of answers, the job's loss by default) of the steps its job's
    hyperparameters say (`totals`, by replica); its end at its steps' rate."""
    found = {}
    for replica, steps in totals.items():
        if not (points := scalars["runs"].get(replica)):
            continue
        step, written, rate = int(points[-1][0]), scalars["written"][replica], scalars["rates"].get(replica)
        ends = written if step >= steps else written + (steps - step) / rate if rate else None
        found[replica] = Progress(fraction=min(1.0, step / steps), ends=ends, epoch=None, epochs=None, step=step,
                                  steps=steps, updated=written, replica=replica)
    return found


class ProgressReader:
    """The progress of the replicas of running jobs, their logs followed as they grow (at most MAX_LOGS)."""

    def __init__(self) -> None:
        self.logs: OrderedDict[Path, LogProgress] = OrderedDict()

    def of(self, files: dict[str, Path], spec: Callable[[], dict]) -> dict[str, Progress]:
        """Each replica's progress, of those whose log (in `files`) has a progress line; `spec()`, the job's spec,
        is asked only where a line needs a total its hyperparameters name."""
        found = {}
        for replica, path in files.items():
            log = self.logs.pop(path, None) or LogProgress()
            log.read(path, spec)
            self.logs[path] = log
            if len(self.logs) > MAX_LOGS:
                self.logs.popitem(last=False)
            if log.updated:
                found[replica] = log.shown(replica)
        return found

    def of_job(self, backend: Backend, name: str, job: Callable[[], JobRecord],
               scalars_of: Callable[..., dict]) -> dict[str, Progress]:
        """Each replica's progress in the job's current run (`of` its log files), or where its lines say no total
        and the job's hyperparameters name its steps, from its event files (`scalars_of`, JobManager's: stepped);
        none for a job just gone. `job()`, the job, is asked only where the lines need it."""
        record = functools.cache(job)
        spec = lambda: record()["spec"]  # noqa: E731
        try:
            files = backend.log_files(name)
            found = self.of(files, spec)
            steps = {replica: total for replica, path in files.items() if path in self.logs
                     and (replica not in found or found[replica]["fraction"] is None)
                     and (total := self.logs[path].hint(spec, "steps"))}
            if steps:
                found.update(stepped(scalars_of(backend.tensorboard(spec()), None, *metrics_window(record())), steps))
            return found
        except DistrainError:
            return {}


def furthest_behind(replicas: dict[str, Progress]) -> Progress | None:
    """A job's progress: its replica furthest behind (of those whose total is known, else any), None if none says."""
    if not replicas:
        return None
    known = [p for p in replicas.values() if p["fraction"] is not None] or list(replicas.values())
    return min(known, key=lambda p: (p["fraction"] or 0.0, -(p["ends"] or 0.0)))


def said(progress: dict | None, now: datetime | None = None) -> str:
    """A progress as the API shows it (jobjson.progress_json) in words: "31% (epoch 4/10, step 45/63), 14 min
    left"; "" where no line said anything (src/format.ts's progressText is the panel's)."""
    if not progress:
        return ""
    counted = ", ".join(f"{unit} {progress[unit]}" + (f"/{progress[total]}" if progress[total] else "")
                        for unit, total in (("epoch", "epochs"), ("step", "steps")) if progress[unit] is not None)
    if progress["fraction"] is None:
        return f"{counted} (total unknown)"
    words = f"{progress['fraction']:.0%}" + (f" ({counted})" if counted else "")
    if progress["fraction"] < 1 and progress["ends"]:
        left = (datetime.fromisoformat(progress["ends"]) - (now or datetime.now(timezone.utc))).total_seconds()
        words += f", {duration(max(left, 0))} left"
    return words


def duration(seconds: float) -> str:
    """Seconds as a person reads a time left: 40 s, 14 min, 2 h 5 min."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
