"""The scalars a job logs to TensorBoard event files (loss, accuracy...), anywhere under its output directory, its
runs named as its board names them (records.EventFiles), read as the files grow: each file from where the last read
stopped, so a long run costs only its new records, and each series keeps at most MAX_POINTS points (beyond, every
other one is dropped: the series keeps its shape). Directories are listed again only once they change (their time
of modification), so a poll of a large output directory (checkpoints) costs a stat per directory, and no file but
an event file is opened. Symbolic links are not followed (they may lead to another owner's files, or around the
tree again and again), and one read walks at most MAX_WALKED directories, for WALK_SECONDS at most. A restarted
job's replicas write to the same directories: points written before the current run started are its earlier runs'.

Event files are TFRecord files of `Event` protos. They are read here with the protos TensorBoard ships,
without its loaders, which would import TensorFlow into the Jupyter server.
"""

from __future__ import annotations

import json
import math
import os
import struct
import threading
import time
import urllib.parse
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from .errors import Unavailable
from .incluster.tensorboard import MAX_WALKED, View, is_event_file, listing
from .records import ClusterTensorBoard, EventFiles

RECORD_HEADER = struct.Struct("<QI")  # a record's length and its checksum; the data and the data's checksum follow
CHECKSUM_SIZE = 4
MAX_POINTS = 1000
MAX_FILES = 512  # event files followed at once; the least recently read is forgotten (read again if asked)
RATE_SECONDS = 60.0  # a run's step rate is over its last points written within this long
MAX_DIRECTORIES = 16384  # directories whose listing is remembered; the least recently asked is forgotten
WALK_SECONDS = 5.0  # the longest one read of a job's files walks its directories: past it, the rest is not shown
SETTLED_NS = 2_000_000_000  # a listing is remembered once its directory has not changed for this long (a change
                            # within the same tick of the clock as the listing would leave the time as it was)


Point = tuple[float, int, float]  # wall time, step, value


@dataclass
class Series:
    """The points of one tag in one run: every `stride`-th once it has had MAX_POINTS, and the last."""

    points: list[Point] = field(default_factory=list)
    stride: int = 1
    seen: int = 0
    last: Point | None = None

    def add(self, point: Point) -> None:
        if self.seen % self.stride == 0:
            self.points.append(point)
            if len(self.points) > MAX_POINTS:
                self.points, self.stride = self.points[::2], self.stride * 2
        self.seen, self.last = self.seen + 1, point

    def shown(self) -> list[Point]:
        if self.last is None or self.points[-1] == self.last:
            return self.points
        return [*self.points, self.last]


class EventFile:
    """One event file's scalars, read up to `offset`: a record still being written waits for the next read."""

    def __init__(self, path: Path):
        self.path, self.offset, self.broken = path, 0, False
        self.series: dict[str, Series] = {}

    def read(self) -> None:
        if self.broken:
            return
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            while len(header := f.read(RECORD_HEADER.size)) == RECORD_HEADER.size:
                length, length_checksum = RECORD_HEADER.unpack(header)
                if masked_crc32c(header[:8]) != length_checksum:
                    self.broken = True  # not an event file after all: nothing more is read from it
                    return
                data = f.read(length + CHECKSUM_SIZE)
                if len(data) < length + CHECKSUM_SIZE:
                    break
                try:
                    event = event_pb2.Event.FromString(data[:length])
                except DecodeError:
                    self.broken = True
                    return
                self.offset += RECORD_HEADER.size + length + CHECKSUM_SIZE
                for value in event.summary.value:
                    number = scalar(value)
                    if number is not None:
                        self.series.setdefault(value.tag, Series()).add((event.wall_time, event.step, number))


def scalar(value: summary_pb2.Summary.Value) -> float | None:
    """A summary value's number if it is a scalar: a simple_value (TF1, PyTorch), or a one-number tensor of
    the scalars plugin (tf.summary.scalar, Keras, tensorboard.summary.Writer)."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return value.simple_value
    if kind != "tensor" or value.metadata.plugin_data.plugin_name != "scalars":
        return None
    tensor = value.tensor
    if tensor.float_val or tensor.double_val:
        return (tensor.float_val or tensor.double_val)[0]
    formats = {types_pb2.DT_FLOAT: "<f", types_pb2.DT_DOUBLE: "<d", types_pb2.DT_HALF: "<e"}
    code = formats.get(tensor.dtype)
    if code is None or len(tensor.tensor_content) != struct.calcsize(code):
        return None
    return struct.unpack(code, tensor.tensor_content)[0]


class Scalars:
    """The event files of the jobs asked about, each read incrementally; safe to call from several threads."""

    def __init__(self) -> None:
        self.files: OrderedDict[Path, EventFile] = OrderedDict()
        self.directories: OrderedDict[str, Listed] = OrderedDict()
        self.lock = threading.RLock()

    def of(self, files: EventFiles | Path, tag: str | None = None, since: float | None = None,
           until: float | None = None) -> dict:
        """The scalars of a job's event files (a directory: every one under it, a run per directory holding
        some, named by its path there: worker-0, worker-0/train): every tag, and the points of `tag`
        (chosen_tag) in each run, split at `since` and `until` (see answer)."""
        view = (files if isinstance(files, EventFiles) else EventFiles(Path(files))).view()
        runs: dict[str, dict[str, list[Point]]] = {}
        with self.lock:
            for run, path in sorted(self.event_files(view)):
                file = self.files.pop(path, None) or EventFile(path)
                self.files[path] = file  # the most recently read last
                try:
                    file.read()
                except OSError:  # gone since it was listed
                    continue
                found = runs.setdefault(run, {})
                for name, series in file.series.items():
                    found.setdefault(name, []).extend(series.shown())
            while len(self.files) > MAX_FILES:
                self.files.popitem(last=False)
        tags = sorted({name for run in runs.values() for name in run})
        chosen = chosen_tag(tags, tag)
        return answer(tags, chosen, {name: run[chosen] for name, run in runs.items() if chosen in run}, since, until)

    def event_files(self, view: View) -> list[tuple[str, Path]]:
        """Every event file the view shows, with its run: the view's merged directories (its top, the way to
        the logdir) listed now, every directory below them as remembered until it changes."""
        with self.lock:
            return self._event_files(view)

    def _event_files(self, view: View) -> list[tuple[str, Path]]:
        found: list[tuple[str, Path]] = []

        def merged(run: str, listed: tuple[dict, dict, dict]) -> None:
            merged_, directories, files = listed
            found.extend((run, Path(path)) for path in files.values())
            for name, path in directories.items():
                tree(child(run, name), path)
            for name, sources in merged_.items():
                merged(child(run, name), listing(sources))

        def tree(run: str, path: str) -> None:
            if len(walked) >= MAX_WALKED or time.monotonic() > deadline:
                return
            listed = self.listed(path)
            if listed is None or listed.identity in walked:  # gone, or reached before (a bind mount)
                return
            walked.add(listed.identity)
            found.extend((run, Path(path, name)) for name in listed.files)
            for name in listed.directories:
                tree(child(run, name), os.path.join(path, name))

        walked: set[tuple[int, int]] = set()
        deadline = time.monotonic() + WALK_SECONDS
        merged(".", view.top())
        while len(self.directories) > MAX_DIRECTORIES:
            self.directories.popitem(last=False)
        return found

    def listed(self, path: str) -> Listed | None:
        """The directory's subdirectories and event files: as listed before if it has not changed since."""
        try:
            status = os.stat(path)
        except OSError:
            self.directories.pop(path, None)
            return None
        known = self.directories.pop(path, None)
        if known is None or known.modified != status.st_mtime_ns:
            directories, files = [], []
            try:
                for entry in os.scandir(path):
                    try:  # a link is neither: it may lead out of the job's files, or around them again
                        if entry.is_dir(follow_symlinks=False):
                            directories.append(entry.name)
                        elif is_event_file(entry.name) and entry.is_file(follow_symlinks=False):
                            files.append(entry.name)
                    except OSError:
                        continue
            except OSError:
                return None
            known = Listed(status.st_mtime_ns, (status.st_dev, status.st_ino), directories, files)
            if time.time_ns() - status.st_mtime_ns < SETTLED_NS:
                return known  # changed a moment ago: listed again next time
        self.directories[path] = known  # the most recently asked last
        return known


@dataclass
class Listed:
    modified: int  # the directory's time of modification when listed
    identity: tuple[int, int]
    directories: list[str]
    files: list[str]  # its event files


def child(run: str, name: str) -> str:
    return name if run == "." else f"{run}/{name}"


def answer(tags: list[str], tag: str | None, points: dict[str, list[Point]], since: float | None,
           until: float | None = None) -> dict:
    """The tags, the tag shown, and its [step, value] points per run: in `runs` those written since the job's
    run started (`since`, None: all of them), and before it ended (`until`: an earlier run's end; those of later
    runs are left out), in `earlier` those written before, a list per earlier run of the job (a new one wherever
    the step does not advance: a replica that started again); in `rates`, each run's steps per second (step_rate)
    in the run, in `written` when it wrote its last point in the run."""
    runs: dict[str, list[list[float | None]]] = {}
    earlier: dict[str, list[list[list[float | None]]]] = {}
    rates: dict[str, float] = {}
    written: dict[str, float] = {}
    for run, found in points.items():
        found = sorted((point for point in found if until is None or point[0] < until),  # in the order written
                       key=lambda point: point[0])  # (several files of a directory)
        before = [(step, finite(value)) for wall, step, value in found if since is not None and wall < since]
        current = [point for point in found if since is None or point[0] >= since]
        if current:
            runs[run] = [[step, finite(value)] for _, step, value in current]
            written[run] = current[-1][0]
        if (rate := step_rate(current)) is not None:
            rates[run] = rate
        for i, (step, value) in enumerate(before):
            if i == 0 or step <= before[i - 1][0]:
                earlier.setdefault(run, []).append([])
            earlier[run][-1].append([step, value])
    return {"tags": tags, "tag": tag, "runs": runs, "earlier": earlier, "rates": rates, "written": written}


def finite(value: float) -> float | None:
    """A value as JSON can carry it: a NaN or an infinity (a diverging loss) as None."""
    return value if math.isfinite(value) else None


def step_rate(points: list[Point]) -> float | None:
    """Steps per second over the points written in the last RATE_SECONDS of these (oldest first); None without
    two written at different times."""
    recent = [point for point in points if point[0] >= points[-1][0] - RATE_SECONDS] if points else []
    if len(recent) < 2 or recent[-1][0] <= recent[0][0]:
        return None
    return (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0])


def chosen_tag(tags: list[str], tag: str | None) -> str | None:
    """`tag`, or by default the loss: the shortest tag naming a loss that is not a validation's (loss, then
    epoch_loss...), else any naming a loss, else the first."""
    if tag is not None:
        return tag
    losses = sorted((t for t in tags if "loss" in t.lower()), key=lambda t: (t.lower().startswith("val"), len(t), t))
    return next(iter(losses), tags[0] if tags else None)


def from_tensorboard(board: ClusterTensorBoard, tag: str | None = None, since: float | None = None,
                     until: float | None = None) -> dict:
    """What `Scalars.of` answers, from a TensorBoard already running in a cluster (its scalars plugin's API),
    which reads the event files there as they grow."""
    def get(path: str, **query: str) -> object:
        url = f"{board.url}/data/plugin/scalars/{path}?{urllib.parse.urlencode(query)}"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=board.headers), timeout=30,
                                        context=board.tls) as answer:
                return json.load(answer)
        except (OSError, ValueError) as e:  # no answer, an error status, or not JSON
            raise Unavailable(f"the job's TensorBoard did not answer: {e}") from None

    by_run = cast(dict, get("tags"))  # {run: {tag: its description}}
    tags = sorted({name for run in by_run.values() for name in run})
    chosen = chosen_tag(tags, tag)
    points = {run: get("scalars", run=run, tag=cast(str, chosen)) for run, named in by_run.items() if chosen in named}
    return answer(tags, chosen, {run: [cast(Point, tuple(point)) for point in cast(list, found)] for run, found in points.items()},
                  since, until)
