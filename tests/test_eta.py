"""Progress and when a job will be done, from what its code prints as it is: real Keras and Lightning training, a
tqdm loop on the local backend, their progress read by `distrain get` and `list` as they run, the ends foretold
measured against the real ends."""

import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
from conftest import assert_nothing_left, write_spec
from jupyter_distrain.eta import ProgressReader, total_of
from jupyter_distrain.logs import LogWriter

pytestmark = pytest.mark.lane("node")  # its 70 s beside the real node's tests (conftest.lane_of)

KERAS = """import sys, time
import numpy as np
import keras
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)  # a steady pace beside the test's own polls, on 2 CPUs

x = np.random.default_rng(0).random((19200, 32)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(64).repeat().prefetch(2)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
board = keras.callbacks.TensorBoard(sys.argv[2])  # outside the job's output: its TensorBoard does not see it
model.fit(data, epochs=int(sys.argv[1]), steps_per_epoch=1200, callbacks=[board])  # one dataset: a steady pace
print("trained", time.time())
"""

TQDM = """import time
from tqdm import tqdm

for step in tqdm(range(200)):
    time.sleep(0.12)
print("trained", time.time())
"""

LIGHTNING = """import sys, time
import lightning
import torch

torch.set_num_threads(1)


class Sum(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _):
        time.sleep(0.02)  # a steady pace, set mostly by the sleep
        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def validation_step(self, batch, _):
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


x = torch.rand(4000, 8)
data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
trainer = lightning.Trainer(max_epochs=int(sys.argv[1]), logger=False, enable_checkpointing=False)
trainer.fit(Sum(), torch.utils.data.DataLoader(data, batch_size=16), torch.utils.data.DataLoader(data, batch_size=400))
print("trained", time.time())
"""

EVENTS = """import os, sys, time
from torch.utils.tensorboard import SummaryWriter

board = SummaryWriter(os.environ["DISTRAIN_LOG_DIR"], flush_secs=1)  # by default every 2 minutes
for step in range(int(sys.argv[1])):
    time.sleep(0.05)
    board.add_scalar("loss", 1 / (step + 1), step + 1)
"""

LIGHTNING_LIKE = """import sys, time
from tqdm import tqdm

for epoch in range(3):
    for step in tqdm(range(20), desc=f"Epoch {epoch}", file=sys.stdout):
        time.sleep(0.05)
"""


def ends_foretold(cli, names: list[str]) -> tuple[dict[str, list[tuple[float, float, float]]], dict[str, set]]:
    """Of each job, (when asked, the fraction done, the end foretold) from `distrain list` (one process a look: a
    loaded machine starts each slowly) while they run, and the totals (epochs, steps) they said."""
    seen: dict[str, list] = {name: [] for name in names}
    totals: dict[str, set] = {name: set() for name in names}
    while True:
        jobs = {job["name"]: job for job in cli.json("list") if job["name"] in names}
        for name, job in jobs.items():
            if (progress := job.get("progress")) and progress["ends"]:
                seen[name].append((time.time(), progress["fraction"], datetime_of(progress["ends"])))
                totals[name].add((progress["epochs"], progress["steps"]))
        if all(job["phase"] not in ("Pending", "Running") for job in jobs.values()):
            break
        time.sleep(0.5)
    for name, job in jobs.items():
        assert job["phase"] == "Succeeded", cli("logs", name).stdout
    return seen, totals


def datetime_of(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def trained_at(cli, name: str) -> float:
    line = next(line for line in cli("logs", name).stdout.splitlines() if " trained " in line)
    return float(line.split()[-1])


def test_keras_tqdm_and_lightning_progress_and_their_ends_with_no_change_to_the_code(cli, tmp_path):
    """Keras `fit` (10 epochs), a tqdm loop and a Lightning trainer (5 epochs, its Rich bar saying so) run side by
    side as they are: their progress shows in `get` and `list` as they run, and once 10% done, each end foretold
    (looked at by `list`) is within 15% of the job's time from the real end (the training's: the line printed after
    it) for the loop and the trainer, whose paces their sleeps set. Keras's
    pace on this machine's 2 CPUs, shared with the test's looks (and in `make test` with the real node's lane),
    drifts by a fifth from run to run, and `fit` may return long after its last step (a pass of Python's garbage
    collector, up to 20 s here, which no line foretells): its worst error is printed, not bounded (bench/eta.py
    measures it on an idle machine). For both, an end is foretold at 5 looks at least between 10% and 90% done.
    Keras's TensorBoard callback writes outside the job's output directory: a warning names where."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "keras_fit.py").write_text(KERAS)
    (code / "loop.py").write_text(TQDM)
    (code / "lightning_fit.py").write_text(LIGHTNING)
    boards = tmp_path / "boards"
    cli("submit", "--name", "keras-fit", "--code", str(code), "-p", "epochs=10", "--", "python", "keras_fit.py",
        "{{ epochs }}", str(boards))
    cli("submit", "--name", "loop", "--code", str(code), "--", "python", "loop.py")
    cli("submit", "--name", "lightning-fit", "--code", str(code), "--", "python", "lightning_fit.py", "5")
    listed = cli.wait("loop", until=lambda job: (job.get("progress") or {}).get("ends"), timeout=120)
    assert listed["progress"]["steps"] == 200 and listed["progress"]["epoch"] is None
    assert listed["replicas"][0]["progress"] == listed["progress"]  # a single replica's is the job's
    assert "% (step " in cli("list", "loop").stdout
    jobs = ("keras-fit", "loop", "lightning-fit")
    foretold, totals = ends_foretold(cli, list(jobs))
    assert totals["lightning-fit"] == {(5, 250)}  # from its bar alone
    started = {name: datetime_of(cli.json("get", name)["started"]) for name in jobs}
    errors, over_left = {}, {}
    for name, seen in foretold.items():
        end = trained_at(cli, name)
        steady = [(asked, ends) for asked, done, ends in seen if 0.1 <= done <= 0.9]
        assert len(steady) >= 5, (name, seen)
        errors[name] = max(abs(ends - end) for _, ends in steady) / (end - started[name])
        over_left[name] = sorted(abs(ends - end) / (end - asked) for asked, ends in steady)
        print(name, "ends foretold (s before the end, fraction, error s):",
              [(round(end - asked, 1), round(done, 2), round(ends - end, 2)) for asked, done, ends in seen])
    print("the worst error of an end foretold over the job's time:", errors, "; over the time left then, median "
          "and worst:", {name: (statistics.median(e), e[-1]) for name, e in over_left.items()})
    assert errors["loop"] <= 0.15 and errors["lightning-fit"] <= 0.15, errors
    warned = [e["message"] for e in cli.json("get", "keras-fit")["events"] if e["reason"] == "EventFilesOutside"]
    assert warned == [f"TensorBoard event files written outside the job's output directory, where its TensorBoard "
                      f"and metrics do not look: in {boards / 'train'}; write them under $DISTRAIN_LOG_DIR, or keep "
                      "the output there (--output-to, the spec's output)"], warned
    assert not [e for e in cli.json("get", "loop")["events"] if e["reason"] == "EventFilesOutside"]
    assert_nothing_left(cli.root, timeout=0)


def test_a_lightning_bar_counts_epochs_from_its_hyperparameter(tmp_path):
    """Lightning's bar ("Epoch 2:  45%|...| 9/20") does not say how many epochs: the job's `epochs` does; without
    it, the fraction is unknown, not guessed. A bar redrawn in place (carriage returns) is read as last drawn."""
    (tmp_path / "bar.py").write_text(LIGHTNING_LIKE)
    log = tmp_path / "worker-0.log"
    writer = LogWriter(log)
    run = subprocess.run([sys.executable, str(tmp_path / "bar.py")], capture_output=True, check=True)
    writer.feed(run.stdout)
    writer.close()
    assert "\r" not in log.read_text()
    [known] = ProgressReader().of({"worker-0": log}, lambda: {"hyperparameters": {"epochs": 3}}).values()
    assert (known["epoch"], known["epochs"], known["step"], known["steps"], known["fraction"]) == (3, 3, 20, 20, 1.0)
    [unknown] = ProgressReader().of({"worker-0": log}, lambda: {"hyperparameters": {"lr": 0.1}}).values()
    assert (unknown["epoch"], unknown["epochs"], unknown["fraction"]) == (3, None, None)


def test_the_pace_leaves_out_what_ran_before_the_first_step(tmp_path):
    """Keras prints an epoch's first line, then warms up (the first step's tracing), then draws its bar (its count
    padded: `  1/100`): the end is foretold at the pace since the bar's first line, not since the epoch's; once a
    second epoch was seen whole, at the epochs' pace."""
    bar = "\x1b[1m{:>3}/100\x1b[0m \x1b[32m\u2501\u2501\x1b[0m\x1b[37m\u2501\x1b[0m"
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()
    lines = [(0, "Epoch 1/4"), (30, bar.format(1)), (40, bar.format(100))]  # 30 s warming up, then 10 s an epoch
    log, reader = tmp_path / "worker-0.log", ProgressReader()

    def foretold(*more: tuple[float, str]) -> dict:
        lines.extend(more)
        log.write_text("".join(f"{datetime.fromtimestamp(t0 + t, timezone.utc):%Y-%m-%dT%H:%M:%S.%f}Z {text}\n"
                               for t, text in lines))
        [progress] = reader.of({"worker-0": log}, dict).values()
        return progress

    progress = foretold()
    assert (progress["epoch"], progress["step"], progress["fraction"]) == (1, 100, 0.25)
    assert progress["ends"] == t0 + 40 + 0.75 * 10 / (0.25 - 0.01 / 4)  # 10 s an epoch: about 30 s left
    progress = foretold((40, "Epoch 2/4"), (52, bar.format(100)), (52, "Epoch 3/4"), (53, bar.format(10)))
    assert progress["ends"] == t0 + 52 + 12 * 2  # the second epoch took 12 s: two more such


def test_lightnings_rich_bar_says_its_last_epoch_else_the_hyperparameter_does(tmp_path):
    """Rich's bar, as drawn into a log (its cursor's moves before it): `Epoch 1/2` is the second of three epochs;
    with no last epoch (a trainer bounded by steps: `/-2`), the job's `epochs` says how many, else none is guessed."""
    bar = ("\x1b[2K\x1b[1A\x1b[2KEpoch {}  \x1b[35m\u2501\u2501\u2501\x1b[0m\x1b[90m\u257a\u2501\x1b[0m 30/40 "
           "\x1b[2m0:00:01\x1b[0m")
    log = tmp_path / "worker-0.log"

    def progress(epoch: str, hyperparameters: dict) -> tuple:
        log.write_text(f"2026-01-01T00:00:00.000000Z {bar.format(epoch)}\n")
        [read] = ProgressReader().of({"worker-0": log}, lambda: {"hyperparameters": hyperparameters}).values()
        return read["epoch"], read["epochs"], read["step"], read["steps"], read["fraction"]

    assert progress("1/2", {"epochs": 9}) == (2, 3, 30, 40, 1.75 / 3)
    assert progress("1/-2", {"epochs": 4}) == (2, 4, 30, 40, 1.75 / 4)
    assert progress("1/-2", {}) == (2, None, 30, 40, None)


def test_a_job_that_prints_nothing_shows_the_steps_of_its_event_files_of_the_steps_its_spec_names(cli, tmp_path):
    """A PyTorch loop writing its loss to event files under DISTRAIN_LOG_DIR, printing nothing, in a job whose
    hyperparameter `iterations` says how many steps it runs (its spec's progress names it: `max_steps` and the like
    need not be named): its progress is the last step its event files reached, of those, its
    end at their rate (a step's sleep is 50 ms, so what is left takes that long a step at least, and, on a loaded
    machine, not three times that); the same loop with no such hyperparameter has no progress to show."""
    (tmp_path / "events.py").write_text(EVENTS)
    cli("submit", "-f", str(write_spec(tmp_path, {
        "name": "stepped", "code": {"path": str(tmp_path)}, "command": "python events.py {{ iterations }}",
        "hyperparameters": {"iterations": 100_000, "max_steps": 7}, "progress": {"steps": "iterations"}})))
    cli("submit", "--name", "silent", "--code", str(tmp_path), "--", "python", "events.py", "100000")
    job = cli.wait("stepped", until=lambda job: (job.get("progress") or {}).get("step", 0) >= 40, timeout=120)
    progress = job["progress"]
    assert (progress["steps"], progress["epochs"], progress["replica"]) == (100_000, None, "worker-0")
    assert progress["fraction"] == progress["step"] / 100_000
    left = datetime_of(progress["ends"]) - datetime_of(progress["updated"])
    expected = 0.05 * (100_000 - progress["step"])
    assert 0.9 * expected <= left <= 3 * expected, (left, expected)
    assert "% (step " in cli("get", "stepped").stdout
    assert not cli.json("get", "silent").get("progress")
    for name in ("stepped", "silent"):
        cli("delete", name)
    assert_nothing_left(cli.root, timeout=10)


def test_steps_counted_without_a_total_are_of_the_steps_the_job_says(tmp_path):
    """A tqdm loop over an iterator with no length counts its steps without a total (`train: 45it [...]`), as
    Keras's bar of a dataset of unknown length does (`45/Unknown`): the job's steps hyperparameter is the total;
    without one, the steps are shown, the fraction unknown."""
    log = tmp_path / "worker-0.log"
    writer = LogWriter(log)
    loop = "import sys\nfrom tqdm import tqdm\nfor _ in tqdm(iter(range(30)), desc='train', file=sys.stdout): pass\n"
    writer.feed(subprocess.run([sys.executable, "-c", loop], capture_output=True, check=True).stdout)
    writer.close()
    [known] = ProgressReader().of({"worker-0": log}, lambda: {"hyperparameters": {"max_steps": 120}}).values()
    assert (known["step"], known["steps"], known["fraction"], known["epoch"]) == (30, 120, 0.25, None)
    [unknown] = ProgressReader().of({"worker-0": log}, dict).values()
    assert (unknown["step"], unknown["steps"], unknown["fraction"]) == (30, None, None)
    with log.open("a") as more:
        more.write("2030-01-01T00:00:00.000000Z \x1b[1m 60/Unknown\x1b[0m \x1b[32m15s\x1b[0m 4ms/step - loss: 0.1\n")
    [keras] = ProgressReader().of({"worker-0": log}, lambda: {"hyperparameters": {"steps": 120}}).values()
    assert (keras["step"], keras["fraction"]) == (60, 0.5)


def test_the_totals_are_the_hyperparameters_the_spec_names_else_the_first_of_the_usual_names():
    hyperparameters = {"max_epochs": 4, "epochs": 3, "steps": 900, "passes": 2, "iterations": True}
    assert (total_of({"hyperparameters": hyperparameters}, "epochs"), total_of({"hyperparameters": hyperparameters},
                                                                               "steps")) == (3, 900)
    named = {"hyperparameters": hyperparameters, "progress": {"epochs": "passes"}}
    assert (total_of(named, "epochs"), total_of(named, "steps")) == (2, 900)
    assert total_of({"hyperparameters": hyperparameters, "progress": {"steps": "iterations"}}, "steps") is None
