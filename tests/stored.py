"""Finished jobs recorded directly in the local backend's store, as it records them (and their logs, as its
supervisor writes them), for lists of thousands and logs of millions of lines without running any: the panel's
tests at scale and bench/."""

from __future__ import annotations

import time
from pathlib import Path

from jupyter_distrain.backends.local.store import Store
from jupyter_distrain.logs import timestamp
from jupyter_distrain.spec import validate
from jupyter_distrain.sweep import trial_specs


def jobs_in(root: Path, count: int, workers: int = 4, trial_of: str | None = None, prefix: str = "job") -> list[str]:
    """`count` Succeeded jobs of a chief and `workers` workers in the store of the server whose root is `root`
    (with `trial_of`, trials of that sweep), named `prefix`-0000...; their names."""
    template = validate({"name": "template", "framework": "tensorflow", "command": "python train.py",
                         "replicas": {"chief": {"count": 1}, **({"worker": {"count": workers}} if workers else {})}})
    replicas = [("chief", 0)] + [("worker", w) for w in range(workers)]
    store = Store(root / "jobs.sqlite")
    store.db.execute("PRAGMA synchronous=OFF")  # made for a test: no disk flush per job
    now, names = time.time(), [f"{prefix}-{i:04d}" for i in range(count)]
    for name in names:
        spec = {**template, "name": name, **({"trial_of": trial_of} if trial_of else {})}
        store.insert_job(name, "local", spec, str(root / "outputs" / name), replicas, "")
        store.update_job(name, phase="Succeeded", started=now, finished=now, exit_code=0)
        for role, index in replicas:
            store.update_replica(name, f"{role}-{index}", phase="Succeeded", exit_code=0, started=now, finished=now)
    store.close()
    return names


def sweep_in(root: Path, trials: int, name: str = "sweep", points: int = 0) -> list[str]:
    """A Succeeded sweep named `name` of `trials` Succeeded trials (of one replica, its grid over `lr`) in the
    store of the server whose root is `root`, each with `points` steps of `loss` in its event files; its trials'
    names, in launch order."""
    spec = validate({"name": name, "command": "python train.py --lr {{ lr }}",
                     "sweep": {"parameters": {"lr": {"values": [round(0.001 * (i + 1), 3) for i in range(trials)]}}}})
    store = Store(root / "jobs.sqlite")
    store.db.execute("PRAGMA synchronous=OFF")
    now = time.time()
    store.insert_job(name, "local", spec, str(root / "outputs" / name), [], "")
    store.update_job(name, phase="Succeeded", started=now, finished=now, exit_code=0)
    names = []
    for number, (trial, _) in enumerate(trial_specs(spec), 1):
        names.append(trial["name"])
        output = root / "outputs" / trial["name"]
        store.insert_job(trial["name"], "local", validate(trial), str(output), [("worker", 0)], "")
        store.update_job(trial["name"], phase="Succeeded", started=now, finished=now, exit_code=0)
        store.update_replica(trial["name"], "worker-0", phase="Succeeded", exit_code=0, started=now, finished=now)
        if points:
            losses = [1 / (number + step) for step in range(points)]  # the last trial the best
            losses_in(output / trial["tensorboard"]["logdir"] / "worker-0", now, losses)
    store.close()
    return names


def losses_in(logdir: Path, began: float, losses: list[float]) -> None:
    """An event file in `logdir` of `loss` at steps 0, 1, ... as a training's writer records it."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    logdir.mkdir(parents=True)
    with (logdir / f"events.out.tfevents.{int(began)}.stored").open("wb") as file:
        writer = RecordWriter(file)
        writer.write(event_pb2.Event(wall_time=began, file_version="brain.Event:2").SerializeToString())
        for step, loss in enumerate(losses):
            value = summary_pb2.Summary.Value(tag="loss", simple_value=loss)
            writer.write(event_pb2.Event(wall_time=began + step, step=step, summary=summary_pb2.Summary(value=[value]))
                         .SerializeToString())


def logs_in(root: Path, replicas: int, lines: int, name: str = "big") -> tuple[str, list[str]]:
    """A Succeeded job of a chief and `replicas - 1` workers whose run's logs hold `lines` lines each,
    "<replica> step <i> loss <x>", the i-th a microsecond after the one before in every replica's log; its name
    and its replicas' names."""
    [job] = jobs_in(root, 1, workers=replicas - 1, prefix=name)
    names = ["chief-0"] + [f"worker-{w}" for w in range(replicas - 1)]
    directory = root / "jobs" / job / "logs" / "1"
    directory.mkdir(parents=True)
    began = time.time() - lines / 1e6
    stamps = [timestamp(began + i / 1e6).encode() for i in range(lines)]
    for replica in names:
        tag = replica.encode()
        (directory / f"{replica}.log").write_bytes(b"".join(
            b"%s %s step %d loss %.6f\n" % (stamps[i], tag, i, 1 / (i + 1)) for i in range(lines)))
    return job, names
