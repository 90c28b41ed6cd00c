"""Scalars from TensorBoard event files as training writes them: read as the files grow, both ways scalars are
written, a run per directory, a record half written left for the next read, long series thinned."""

import io
import time

from conftest import write_scalars
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary import Writer
from tensorboard.summary.writer.record_writer import RecordWriter

from jupyter_distrain import scalars


def frame(data: bytes) -> bytes:
    """`data` as a record of an event file."""
    framed = io.BytesIO()
    RecordWriter(framed).write(data)
    return framed.getvalue()


def record(step: int, tag: str, value: float, wall_time: float | None = None) -> bytes:
    """One event of a scalar as it lies in an event file."""
    return frame(event_pb2.Event(step=step, wall_time=wall_time or time.time(), summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])).SerializeToString())


def test_runs_tags_and_both_kinds_of_scalar(tmp_path):
    """tensorboard.summary.Writer (tensors of the scalars plugin, as tf.summary and Keras write them) and
    simple values (as PyTorch writes them); a histogram is no scalar; the default tag is the loss. Values are
    float32, exact here."""
    tensors = Writer(str(tmp_path / "worker-0" / "train"))
    for step, value in enumerate([0.75, 0.5, 0.25]):
        tensors.add_scalar("epoch_loss", value, step)
        tensors.add_scalar("accuracy", 1 - value, step)
    tensors.close()
    write_scalars(tmp_path / "worker-1", "epoch_loss", [0.5, 0.375])
    histogram = event_pb2.Event(step=0, summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag="weights", histo=summary_pb2.HistogramProto(min=0, max=1, num=2))]))
    (tmp_path / "worker-1" / "events.out.tfevents.1.histogram").write_bytes(frame(histogram.SerializeToString()))

    found = scalars.Scalars().of(tmp_path)
    assert found == {"tags": ["accuracy", "epoch_loss"], "tag": "epoch_loss",
                     "runs": {"worker-0/train": [[0, 0.75], [1, 0.5], [2, 0.25]], "worker-1": [[0, 0.5], [1, 0.375]]},
                     "earlier": {}}
    accuracy = scalars.Scalars().of(tmp_path, "accuracy")
    assert list(accuracy["runs"]) == ["worker-0/train"]
    assert accuracy["runs"]["worker-0/train"] == [[0, 0.25], [1, 0.5], [2, 0.75]]
    assert scalars.Scalars().of(tmp_path / "nothing") == {"tags": [], "tag": None, "runs": {}, "earlier": {}}


def test_a_restarted_jobs_earlier_runs_are_apart_from_its_current_one(tmp_path):
    """Each run of a job writes a new event file in the same directory; a replica that fails and starts again
    within a run also writes again from its first step. Only points written since the current run started are
    the run's: the others are earlier runs', a list per run, in the order written."""
    run = tmp_path / "worker-0"
    run.mkdir()
    started = 1000.0
    for number, (first, steps) in enumerate([(100.0, [0, 1, 2]), (200.0, [0, 1]), (300.0, [1, 2]),
                                             (started, [0, 1])]):
        events = b"".join(record(step, "loss", number + step / 4, first + step) for step in steps)
        (run / f"events.out.tfevents.{int(first)}.host").write_bytes(events)

    found = scalars.Scalars().of(tmp_path, since=started)
    assert found["runs"] == {"worker-0": [[0, 3.0], [1, 3.25]]}
    assert found["earlier"] == {"worker-0": [[[0, 0.0], [1, 0.25], [2, 0.5]], [[0, 1.0], [1, 1.25]],
                                             [[1, 2.25], [2, 2.5]]]}
    assert scalars.Scalars().of(tmp_path)["runs"]["worker-0"][3:5] == [[0, 1.0], [1, 1.25]]  # no start known: all


def test_the_default_tag_is_the_training_loss():
    assert scalars.chosen_tag(["alive", "epoch_loss", "loss", "val_loss"], None) == "loss"
    assert scalars.chosen_tag(["alive", "epoch_loss", "val_loss"], None) == "epoch_loss"
    assert scalars.chosen_tag(["accuracy", "train/loss", "val/loss", "val_loss"], None) == "train/loss"
    assert scalars.chosen_tag(["alive", "val_loss"], None) == "val_loss"
    assert scalars.chosen_tag(["alive", "loss"], "alive") == "alive"
    assert scalars.chosen_tag([], None) is None


def test_a_growing_file_is_read_from_where_the_last_read_stopped(tmp_path):
    """Each read starts at the first record not read yet; a record half written waits for the next read."""
    run = tmp_path / "worker-0"
    run.mkdir()
    path = run / "events.out.tfevents.1.host"
    path.write_bytes(record(0, "loss", 3.0) + record(1, "loss", 2.0))
    reader = scalars.Scalars()
    assert reader.of(tmp_path)["runs"] == {"worker-0": [[0, 3.0], [1, 2.0]]}
    offset = reader.files[path].offset
    assert offset == path.stat().st_size

    third = record(2, "loss", 1.0)
    with open(path, "ab") as f:
        f.write(third[:10])  # the writer is in the middle of a record
    assert reader.of(tmp_path)["runs"] == {"worker-0": [[0, 3.0], [1, 2.0]]}
    assert reader.files[path].offset == offset
    with open(path, "ab") as f:
        f.write(third[10:])
    assert reader.of(tmp_path)["runs"] == {"worker-0": [[0, 3.0], [1, 2.0], [2, 1.0]]}
    assert reader.files[path].offset == path.stat().st_size

    (run / "events.out.tfevents.2.host").write_bytes(b"not an event file at all, but long enough to try")
    assert reader.of(tmp_path)["runs"] == {"worker-0": [[0, 3.0], [1, 2.0], [2, 1.0]]}


def test_a_long_series_is_thinned_and_keeps_its_last_point(tmp_path):
    write_scalars(tmp_path / "worker-0", "loss", [float(step) for step in range(2501)])
    points = scalars.Scalars().of(tmp_path)["runs"]["worker-0"]
    assert len(points) <= scalars.MAX_POINTS + 1
    assert points[0] == [0, 0.0] and points[-1] == [2500, 2500.0]
    steps = [step for step, _ in points]
    assert steps == sorted(steps) and len(set(b - a for a, b in zip(steps, steps[1:-1]))) == 1  # evenly
