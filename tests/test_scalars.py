"""Scalars from TensorBoard event files as training writes them: read as the files grow, both ways scalars are
written, a run per directory, a record half written left for the next read, long series thinned; every event file
under a job's output directory, the replicas' runs by their names, in the scalars and in the view a board reads."""

import io
import os
import shutil
import time
from pathlib import Path

from conftest import write_scalars
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary import Writer
from tensorboard.summary.writer.record_writer import RecordWriter

from jupyter_distrain import progress, scalars
from jupyter_distrain.incluster import tensorboard as board
from jupyter_distrain.records import EventFiles


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
    found.pop("rates")  # of points written microseconds apart: see test_each_runs_pace_is_its_steps_per_second
    written = found.pop("written")  # when each run wrote its last point
    assert written.keys() == {"worker-0/train", "worker-1"} and max(written.values()) <= time.time()
    assert found == {"tags": ["accuracy", "epoch_loss"], "tag": "epoch_loss",
                     "runs": {"worker-0/train": [[0, 0.75], [1, 0.5], [2, 0.25]], "worker-1": [[0, 0.5], [1, 0.375]]},
                     "earlier": {}}
    accuracy = scalars.Scalars().of(tmp_path, "accuracy")
    assert list(accuracy["runs"]) == ["worker-0/train"]
    assert accuracy["runs"]["worker-0/train"] == [[0, 0.25], [1, 0.5], [2, 0.75]]
    assert scalars.Scalars().of(tmp_path / "nothing") == {"tags": [], "tag": None, "runs": {}, "earlier": {},
                                                          "rates": {}, "written": {}}


def test_a_diverging_loss_is_answered_as_null_where_it_is_not_a_number(tmp_path):
    """A NaN or an infinity (a loss that diverged) is null in the answer, which strict JSON then carries (it refuses
    NaN: a job whose loss diverged answered 500), and the CLI and the widgets say so; the chart draws the rest."""
    from jupyter_distrain.server.base import strict_json
    from jupyter_distrain.terminal import last_values
    from jupyter_distrain.widgets import chart_html

    write_scalars(tmp_path / "worker-0", "loss", [0.5, float("nan"), float("inf")])
    found = scalars.Scalars().of(tmp_path)
    assert found["runs"] == {"worker-0": [[0, 0.5], [1, None], [2, None]]}
    assert '"worker-0": [[0, 0.5], [1, null], [2, null]]' in strict_json(found)
    assert last_values(found) == "loss: worker-0 not a number (step 2)"
    assert "worker-0: not a number at step 2" in chart_html(found) and "points='0.0,70.0 0.0,70.0'" in chart_html(found)


def test_each_runs_pace_is_its_steps_per_second_over_its_last_minute(tmp_path):
    """A run that slowed down is judged by its last minute; one point, or points of one moment, make no pace;
    an earlier run's points count for nothing."""
    for run, points in {"worker-0": [(step, 1000.0 + step) for step in range(100)],  # 1 step/s
                        "worker-1": [(step, 1000.0 + step) for step in range(50)]  # 1 step/s, then 1 per 4 s
                        + [(50 + step, 1049.0 + 4 * step) for step in range(1, 21)],
                        "worker-2": [(0, 1000.0)], "worker-3": [(0, 1090.0), (1, 1090.0)],
                        "worker-4": [(0, 900.0), (50, 910.0)]}.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "events.out.tfevents.1.host").write_bytes(
            b"".join(record(step, "loss", 1.0, wall) for step, wall in points))
    rates = scalars.Scalars().of(tmp_path, since=950.0)["rates"]
    assert rates == {"worker-0": 1.0, "worker-1": 0.25}


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


def test_every_event_file_under_the_output_directory_the_replicas_runs_by_their_names(tmp_path):
    """A job's event files anywhere under its output directory: Keras' callback writing in my_working_dir/log
    (as TensorFlow's parameter-server tutorial has it) beside the replicas' own directories in the logdir, which
    keep their names; the logdir's own top is the job's top. Its own logs (.distrain) are not looked at, nor is
    any file but an event file opened (a FIFO would block an open)."""
    output = tmp_path / "job"
    write_scalars(output / "training_logs" / "worker-0", "loss", [1.0, 0.5])
    write_scalars(output / "training_logs" / "chief-0", "loss", [2.0])
    write_scalars(output / "my_working_dir" / "log" / "train", "epoch_loss", [0.75])
    write_scalars(output / "training_logs", "loss", [9.0])  # the job's top: "."
    write_scalars(output / ".distrain" / "logs", "loss", [5.0])
    (output / "checkpoints").mkdir()
    os.mkfifo(output / "checkpoints" / "ckpt-1.data")
    os.mkfifo(output / "events.out.tfevents.fifo")

    files = EventFiles(output, "training_logs")
    found = scalars.Scalars().of(files)
    assert found["tags"] == ["epoch_loss", "loss"]
    assert found["runs"] == {".": [[0, 9.0]], "chief-0": [[0, 2.0]], "worker-0": [[0, 1.0], [1, 0.5]]}
    assert scalars.Scalars().of(files, "epoch_loss")["runs"] == {"my_working_dir/log/train": [[0, 0.75]]}
    # a logdir of several parts, or the output itself
    nested = EventFiles(output, "./my_working_dir//log/")
    assert sorted(scalars.Scalars().of(nested, "epoch_loss")["runs"]) == ["train"]
    assert sorted(scalars.Scalars().of(nested)["runs"]) == ["training_logs", "training_logs/chief-0",
                                                            "training_logs/worker-0"]
    assert sorted(scalars.Scalars().of(EventFiles(output, "."))["runs"]) == sorted(
        scalars.Scalars().of(output)["runs"]) == ["training_logs", "training_logs/chief-0", "training_logs/worker-0"]
    # where the replicas write, as the sweep's controller knows it
    assert EventFiles.around(output / "training_logs", "training_logs") == files
    assert EventFiles.around(output / "a" / "b", "a/b/") == EventFiles(output, "a/b/")
    assert EventFiles.around(output, ".") == EventFiles(output, ".")


def test_a_directory_is_listed_again_only_once_it_changed(tmp_path):
    """A poll stats the directories below the view's top and lists only those whose time of modification moved
    (once it is a moment old: a change within the same tick of the clock would not move it)."""
    output = tmp_path / "job"
    write_scalars(output / "training_logs" / "worker-0", "loss", [1.0])
    (output / "checkpoints" / "step-1").mkdir(parents=True)
    long_ago = time.time() - 60
    for directory in [output, *output.rglob("*")]:
        if directory.is_dir():
            os.utime(directory, (long_ago, long_ago))
    reader, files = scalars.Scalars(), EventFiles(output, "training_logs")
    assert reader.of(files)["runs"] == {"worker-0": [[0, 1.0]]}
    listed = str(output / "training_logs" / "worker-0")
    assert listed in reader.directories and str(output / "checkpoints" / "step-1") in reader.directories

    write_scalars(output / "training_logs" / "worker-0", "loss", [2.0])  # a new file: the directory changed
    assert reader.of(files)["runs"] == {"worker-0": [[0, 1.0], [0, 2.0]]}
    assert listed not in reader.directories  # changed a moment ago: listed again at the next poll
    os.utime(listed, (long_ago, long_ago))
    assert len(reader.of(files)["runs"]["worker-0"]) == 2 and listed in reader.directories
    write_scalars(output / "training_logs" / "worker-0", "loss", [3.0])
    os.utime(listed, (long_ago, long_ago))  # as if unchanged: the listing remembered stands
    assert len(reader.of(files)["runs"]["worker-0"]) == 2
    write_scalars(output / "later" / "log", "loss", [4.0])  # below the top: listed at every poll
    assert reader.of(files)["runs"]["later/log"] == [[0, 4.0]]


def test_links_in_a_jobs_output_are_not_followed(tmp_path, monkeypatch):
    """A job's output may hold links its code made: to another owner's output (whose scalars it must not show, in
    the reader or in its board's view, nor its files' times in the job's progress), and a deep tree of directory
    links (each level two links to the next: 2^depth paths). Each directory is listed once, links not followed."""
    mine, theirs = tmp_path / "bob" / "job", tmp_path / "alice" / "secret"
    write_scalars(mine / "training_logs" / "worker-0", "loss", [1.0])
    write_scalars(theirs, "secret_loss", [7.0])
    (mine / "peek").symlink_to(theirs, target_is_directory=True)
    (mine / "training_logs" / "worker-1").symlink_to(theirs, target_is_directory=True)
    (their_file,) = theirs.glob("events.*")
    (mine / "training_logs" / "events.out.tfevents.link").symlink_to(their_file)
    level = mine / "maze"
    for _ in range(40):
        (level / "next").mkdir(parents=True)
        for name in ("a", "b"):
            (level / name).symlink_to("next", target_is_directory=True)
        level = level / "next"
    listings = []
    listed = scalars.Scalars.listed
    monkeypatch.setattr(scalars.Scalars, "listed", lambda self, path: listings.append(path) or listed(self, path))

    files = EventFiles(mine, "training_logs")
    found = scalars.Scalars().of(files)
    assert (found["tags"], found["runs"]) == (["loss"], {"worker-0": [[0, 1.0]]})
    assert len(listings) == len(set(listings)) == 1 + 41, "worker-0 and maze's 41 real directories, each once"
    files.view().sync(str(tmp_path / "view"))
    assert sorted(path.name for path in (tmp_path / "view").iterdir()) == ["maze", "worker-0"]
    long_ago = time.time() - 3600
    for own in (mine / "training_logs" / "worker-0").glob("events.*"):
        os.utime(own, (long_ago, long_ago))
    assert progress.last_written(tmp_path / "no-logs", mine, since=0) == long_ago, "not their file's time (now)"


def test_a_boards_view_of_the_output_kept_current(tmp_path):
    """The view TensorBoard's --logdir is (View.sync): the logdir's contents and the rest of the output at the top,
    a name in both one directory of both, a directory of its own per directory and a link per event file; new
    directories join, removed ones go."""
    output, view = tmp_path / "job", tmp_path / "view"
    write_scalars(output / "training_logs" / "worker-0", "loss", [1.0])
    write_scalars(output / "training_logs", "loss", [0.5])
    write_scalars(output / "my_working_dir" / "log", "loss", [1.0])
    (output / ".distrain" / "logs").mkdir(parents=True)
    (output / "model.ckpt").write_text("weights")
    files = EventFiles(output, "training_logs")
    files.view().sync(str(view))

    def shown(directory=view) -> dict:
        return {path.name: (os.readlink(path) if path.is_symlink() else shown(path)) for path in directory.iterdir()}

    (top,) = (output / "training_logs").glob("events.out.tfevents.*")
    (first,) = (output / "training_logs" / "worker-0").glob("events.*")
    (keras,) = (output / "my_working_dir" / "log").glob("events.*")
    assert shown() == {"worker-0": {first.name: str(first)}, top.name: str(top),
                       "my_working_dir": {"log": {keras.name: str(keras)}}}
    write_scalars(output / "worker-0", "loss", [2.0])  # beside the logdir, named as a replica: one run of both
    shutil.rmtree(output / "my_working_dir")
    write_scalars(output / "somewhere" / "log", "loss", [1.0])
    files.view().sync(str(view))
    (replica,) = (output / "training_logs" / "worker-0").glob("events.*")
    (beside,) = (output / "worker-0").glob("events.*")
    (somewhere,) = (output / "somewhere" / "log").glob("events.*")
    assert shown() == {"worker-0": {replica.name: str(replica), beside.name: str(beside)}, top.name: str(top),
                       "somewhere": {"log": {somewhere.name: str(somewhere)}}}
    assert sorted(scalars.Scalars().of(files)["runs"]) == [".", "somewhere/log", "worker-0"]
    assert len(scalars.Scalars().of(files)["runs"]["worker-0"]) == 2


def test_a_sweeps_view_is_its_trials(tmp_path):
    """A sweep's board shows each trial's view as <trial>/...: its links (relative, as the controller makes
    them) lead to the trials' logdirs, their outputs above them."""
    owners, logdir = tmp_path / "owner", "logs/tb"
    for trial in ("hp-1", "hp-2"):
        write_scalars(owners / trial / logdir / "worker-0", "loss", [1.0])
        write_scalars(owners / trial / "somewhere" / "log", "loss", [2.0])
        board = owners / "hp" / logdir
        board.mkdir(parents=True, exist_ok=True)
        (board / trial).symlink_to(os.path.relpath(owners / trial / logdir, board), target_is_directory=True)
    files = EventFiles(owners / "hp", logdir, trials=True)
    assert sorted(scalars.Scalars().of(files)["runs"]) == ["hp-1/somewhere/log", "hp-1/worker-0",
                                                           "hp-2/somewhere/log", "hp-2/worker-0"]
    files.view().sync(str(tmp_path / "view"))
    (replica,) = (tmp_path / "view" / "hp-2" / "worker-0").iterdir()
    assert replica.resolve().parent == owners / "hp-2" / logdir / "worker-0"
    (beside,) = (tmp_path / "view" / "hp-2" / "somewhere" / "log").iterdir()
    assert beside.resolve().parent == owners / "hp-2" / "somewhere" / "log"
    assert sorted(path.name for path in (tmp_path / "view" / "hp-1").iterdir()) == ["logs", "somewhere", "worker-0"]


def test_a_cluster_boards_arguments(tmp_path):
    """The pod's board reads a view of the job's output, made in a directory of its own and kept current."""
    output = tmp_path / "output"
    write_scalars(output / "training_logs" / "chief-0", "loss", [1.0])
    argv = board.board_arguments(["-c", "--logdir", f"{output}/training_logs", "--distrain_output", str(output),
                                  "--bind_all", "--port", "6006"])
    view = Path(argv[2])
    assert argv == ["-c", "--logdir", str(view), "--bind_all", "--port", "6006"] and view != output
    assert [path.name for path in view.iterdir()] == ["chief-0"]
    write_scalars(output / "my_working_dir" / "log", "loss", [1.0])
    deadline = time.monotonic() + 10
    while not (view / "my_working_dir").exists():
        assert time.monotonic() < deadline, "the view takes in a new directory"
        time.sleep(0.1)
    shutil.rmtree(view)
