"""The scalars a job's replicas log to their TensorBoard event files (loss, accuracy...), read as the files grow:
each file from where the last read stopped, so a long run costs only its new records, and each series keeps
at most MAX_POINTS points (beyond, every other one is dropped: the series keeps its shape). A restarted job's
replicas write to the same directories: points written before the current run started are its earlier runs'.

Event files are TFRecord files of `Event` protos. They are read here with the protos TensorBoard ships,
without its loaders, which would import TensorFlow into the Jupyter server.
"""

from __future__ import annotations

import json
import struct
import threading
import urllib.parse
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from .records import ClusterTensorBoard
from .errors import Unavailable

RECORD_HEADER = struct.Struct("<QI")  # a record's length and its checksum; the data and the data's checksum follow
CHECKSUM_SIZE = 4
MAX_POINTS = 1000
MAX_FILES = 512  # event files followed at once; the least recently read is forgotten (read again if asked)
EVENT_FILES = "events.out.tfevents.*"


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
        self.lock = threading.Lock()

    def of(self, logdir: Path, tag: str | None = None, since: float | None = None) -> dict:
        """The scalars under `logdir` (a run per directory holding event files, named by its path: worker-0,
        worker-0/train): every tag, and the points of `tag` (chosen_tag) in each run, split at `since` (see
        answer)."""
        runs: dict[str, dict[str, list[Point]]] = {}
        with self.lock:
            for path in sorted(logdir.rglob(EVENT_FILES)) if logdir.is_dir() else []:
                if not path.is_file():
                    continue
                file = self.files.pop(path, None) or EventFile(path)
                self.files[path] = file  # the most recently read last
                file.read()
                run = runs.setdefault(path.parent.relative_to(logdir).as_posix(), {})
                for name, series in file.series.items():
                    run.setdefault(name, []).extend(series.shown())
            while len(self.files) > MAX_FILES:
                self.files.popitem(last=False)
        tags = sorted({name for run in runs.values() for name in run})
        chosen = chosen_tag(tags, tag)
        return answer(tags, chosen, {name: run[chosen] for name, run in runs.items() if chosen in run}, since)


def answer(tags: list[str], tag: str | None, points: dict[str, list[Point]], since: float | None) -> dict:
    """The tags, the tag shown, and its [step, value] points per run: in `runs` those written since the job's
    current run started (`since`, None: all of them), in `earlier` those written before, a list per earlier
    run of the job (a new one wherever the step does not advance: a replica that started again)."""
    runs: dict[str, list[list[float]]] = {}
    earlier: dict[str, list[list[list[float]]]] = {}
    for run, found in points.items():
        found = sorted(found, key=lambda point: point[0])  # several files of a directory: in the order written
        before = [(step, value) for wall, step, value in found if since is not None and wall < since]
        current = [[step, value] for wall, step, value in found if since is None or wall >= since]
        if current:
            runs[run] = current
        for i, (step, value) in enumerate(before):
            if i == 0 or step <= before[i - 1][0]:
                earlier.setdefault(run, []).append([])
            earlier[run][-1].append([step, value])
    return {"tags": tags, "tag": tag, "runs": runs, "earlier": earlier}


def chosen_tag(tags: list[str], tag: str | None) -> str | None:
    """`tag`, or by default the loss: the shortest tag naming a loss that is not a validation's (loss, then
    epoch_loss...), else any naming a loss, else the first."""
    if tag is not None:
        return tag
    losses = sorted((t for t in tags if "loss" in t.lower()), key=lambda t: (t.lower().startswith("val"), len(t), t))
    return next(iter(losses), tags[0] if tags else None)


def from_tensorboard(board: ClusterTensorBoard, tag: str | None = None, since: float | None = None) -> dict:
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
                  since)
