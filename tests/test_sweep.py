"""Sweeps: trials are ordinary jobs, launched at most `parallelism` at a time, ranked by what their event files
say; every trial is checked before any is launched; stopping a sweep stops its trials; the best is fine-tuned
from its checkpoint. Real jobs of the PyTorch example through a real Jupyter server's REST API, and the CLI."""

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import test_server
from conftest import CLI, EXAMPLES, assert_nothing_left, processes_of
from webhooks import Receiver, allow_private
from stored import sweep_in
from jupyter_distrain import spec as spec_, sweep
from jupyter_distrain.backends.local.store import Store
from jupyter_distrain.config import Distrain
from jupyter_distrain.errors import SpecError
from jupyter_distrain.manager import JobManager
from test_server import wait_phase

pytestmark = pytest.mark.lane("node")  # its minute beside the real node's tests (conftest.lane_of)

pytest_plugins = ["pytest_jupyter.jupyter_server"]
api = test_server.api  # the REST API of a real Jupyter server, as its tests call it

FINISHED = ("Succeeded", "Failed", "Stopped", "Lost")


def pytorch_sweep(name, **sweep_fields):
    return {"name": name, "framework": "pytorch", "code": {"path": str(EXAMPLES / "pytorch-ddp")},
            "command": "python train.py --epochs {{ epochs }} --learning_rate {{ learning_rate }} "
                       "--batch_size {{ batch_size }}",
            "hyperparameters": {"epochs": 3}, "replicas": {"master": {"count": 1}},
            "tensorboard": {"enabled": True, "logdir": "training_logs"},
            "sweep": {"parameters": {"learning_rate": {"values": [0.01, 0.05]}, "batch_size": {"values": [32, 128]}},
                      **sweep_fields}}


def checked(raw):
    return sweep.trials(spec_.validate(raw))


def test_grid_points_come_in_order_and_random_ones_again_with_their_seed():
    grid = pytorch_sweep("grid")["sweep"]
    assert sweep.points(spec_.validate(pytorch_sweep("grid"))["sweep"]) == [
        {"learning_rate": 0.01, "batch_size": 32}, {"learning_rate": 0.01, "batch_size": 128},
        {"learning_rate": 0.05, "batch_size": 32}, {"learning_rate": 0.05, "batch_size": 128}]
    assert [t["name"] for t in checked({**pytorch_sweep("grid"), "sweep": {**grid, "trials": 3}})] == \
        ["grid-1", "grid-2", "grid-3"]
    ranges = {"method": "random", "trials": 50, "seed": 7, "parameters": {
        "learning_rate": {"min": 1e-4, "max": 1e-1, "scale": "log"},
        "batch_size": {"min": 16, "max": 256, "integer": True}}}
    trials = checked({**pytorch_sweep("rand"), "sweep": ranges})
    drawn = [t["hyperparameters"] for t in trials]
    assert drawn == [t["hyperparameters"] for t in checked({**pytorch_sweep("rand"), "sweep": ranges})]
    assert all(1e-4 <= d["learning_rate"] <= 1e-1 and 16 <= d["batch_size"] <= 256 for d in drawn)
    assert all(isinstance(d["batch_size"], int) for d in drawn) and len({d["batch_size"] for d in drawn}) > 10
    assert sum(d["learning_rate"] < 1e-2 for d in drawn) > 20  # log scale: two of three decades below 0.01
    assert drawn != [t["hyperparameters"] for t in checked({**pytorch_sweep("rand"), "sweep": {**ranges, "seed": 8}})]
    assert all(t["trial_of"] == "rand" and "sweep" not in t and t["hyperparameters"]["epochs"] == 3 for t in trials)
    assert len(checked({**pytorch_sweep("rand"), "sweep": {**ranges, "trials": 3.0}})) == 3  # JSON's integer 3
    assert len(checked({**pytorch_sweep("grid"), "sweep": {**grid, "trials": 2.0}})) == 2
    widest = {"method": "random", "trials": 20, "parameters": {"learning_rate": {"min": -1.7e308, "max": 1.7e308},
                                                             "batch_size": {"values": [32]}}}
    drawn = [t["hyperparameters"]["learning_rate"] for t in checked({**pytorch_sweep("wide"), "sweep": widest})]
    assert all(-1.7e308 <= value <= 1.7e308 for value in drawn) and len(set(drawn)) == 20


@pytest.mark.parametrize("change, path, words", [
    ({"parameters": {"learning_rate": {"min": 0.1, "max": 1}}}, "sweep.parameters.learning_rate", "a grid takes values"),
    ({"method": "random"}, "sweep.trials", "is required for method random"),
    ({"method": "random", "trials": 2, "parameters": {"learning_rate": {"min": 1, "max": 1}}},
     "sweep.parameters.learning_rate.max", "greater than min"),
    ({"method": "random", "trials": 2, "parameters": {"learning_rate": {"min": 0, "max": 1, "scale": "log"}}},
     "sweep.parameters.learning_rate.min", "greater than 0 for scale log"),
    ({"method": "random", "trials": 2, "parameters": {"learning_rate": {"min": -1.7e308, "max": 1.7e308,
                                                                        "integer": True}}},
     "sweep.parameters.learning_rate", "whole numbers are drawn between -9007199254740991 and 9007199254740991"),
    ({"parameters": {"a": {"values": list(range(40))}, "b": {"values": list(range(40))}}}, "sweep.parameters",
     "the grid has 6400 points; at most 1000"),
])
def test_what_the_schema_cannot_say_of_a_sweep_names_its_field(change, path, words):
    raw = pytorch_sweep("bad")
    raw["sweep"] = {**raw["sweep"], **change,
                    "parameters": {**raw["sweep"]["parameters"], **change.get("parameters", {})}}
    with pytest.raises(SpecError) as caught:
        checked(raw)
    assert [(e.path, words in e.message) for e in caught.value.errors] == [(path, True)]


def test_the_median_rule_stops_only_a_trial_clearly_worse_than_the_others():
    good, fine = [[s, 1.0 / (s + 1)] for s in range(10)], [[s, 1.2 / (s + 1)] for s in range(10)]
    bad = [[s, 5.0 / (s + 1)] for s in range(6)]
    assert "worse than the median" in sweep.clearly_worse(bad, [good, fine], 3, "minimize")
    assert sweep.clearly_worse(bad, [good, fine], 6, "minimize") is None  # not that far yet
    assert sweep.clearly_worse(bad, [good], 3, "minimize") is None  # one other trial is no median
    assert sweep.clearly_worse(fine[:6], [good, bad], 3, "minimize") is None  # better than the median
    assert sweep.clearly_worse(good[:6], [fine, bad], 3, "maximize") is not None
    ahead = [[s, 5.0 / (s + 1)] for s in range(10)]  # judged where the others are, not only once they pass it
    assert "at step 7," in sweep.clearly_worse(ahead, [good[:8], fine[:8]], 3, "minimize")
    assert sweep.clearly_worse(ahead, [good[:3], fine[:8]], 3, "minimize") is None  # two others not that far
    rows = [{"name": n, "value": v} for n, v in (("a", 0.5), ("b", None), ("c", 0.1), ("d", 0.9))]
    assert [r["name"] for r in sweep.ranked(rows, "minimize")] == ["c", "a", "d", "b"]
    assert [r["name"] for r in sweep.ranked(rows, "maximize")] == ["d", "a", "c", "b"]
    long = [[s, float(s)] for s in range(1001)]
    assert len(sweep.thinned(long)) == 200 and sweep.thinned(long)[-1] == [1000, 1000.0]


async def test_every_trial_is_checked_before_any_is_launched(api, root):
    raw = pytorch_sweep("bad")
    raw["sweep"]["parameters"]["batch_size"]["values"] = [32, [128], "64\n"]
    code, error = await api("POST", "jobs", raw)
    assert code == 400, error
    assert [(e["path"], e["message"].split(" (in trial ")[1]) for e in error["errors"]] == [
        ("hyperparameters.batch_size", "bad-2: learning_rate=0.01, batch_size=[128])"),
        ("hyperparameters.batch_size", "bad-3: learning_rate=0.01, batch_size='64\\n')")]
    assert (await api("GET", "jobs"))[1] == [] and not processes_of(root)

    assert (await api("POST", "jobs", {"name": "taken-3", "command": "true"}))[0] == 201
    code, error = await api("POST", "jobs", pytorch_sweep("taken"))
    assert code == 400 and error["errors"] == [{"path": "name", "message": "its trials would be named taken-3, as "
                                                "jobs that exist are; choose another name"}]
    code, verdict = await api("POST", "check", pytorch_sweep("fresh"))
    assert code == 200 and verdict["errors"] == [] and verdict["spec"]["sweep"]["parallelism"] == 1
    assert [j["name"] for j in (await api("GET", "jobs"))[1]] == ["taken-3"]


def final_loss(job):
    return json.loads((Path(job["output_dir"]) / "result.json").read_text())["loss"]


async def hparams(jp_fetch, sweep, query, **body):
    """What the HParams dashboard of the sweep's TensorBoard answers `query`."""
    response = await jp_fetch("distrain", "tensorboard", sweep, "all", "data", "plugin", "hparams", query,
                              method="POST", body=json.dumps({"experimentName": "", **body}),
                              headers={"Content-Type": "application/json", "X-XSRF-Protected": "1"})
    return json.loads(response.body)


def follow(held: dict | None, answer: dict) -> dict:
    """The table a view following a sweep's (`trials?since=`) holds after `answer`, as the panel's followTrials
    makes it, and the trials it was `sent`."""
    known = {} if answer["complete"] else {trial["name"]: trial for trial in held["trials"]}
    known.update((trial["name"], trial) for trial in answer["trials"])
    return {**answer, "trials": [known[name] for name in answer["order"]], "sent": answer["trials"]}


def test_a_sweeps_table_reads_again_only_the_trials_not_finished_in_the_same_run(tmp_path, monkeypatch):
    """A sweep's view asks for its table every few seconds: a finished trial's metric is read once, then again
    only for a new run of it."""
    trials = sweep_in(tmp_path, 30, "lr", points=5)
    manager = JobManager.from_config(Distrain(root=str(tmp_path)))
    table = manager.trials("lr")
    assert [row["name"] for row in table["trials"]] == trials[::-1] and table["trials"][0]["points"][-1] == \
        [4, pytest.approx(1 / 34)]  # ranked by their last loss: the last trial's lowest
    backend, read = manager.backends["local"], []
    get = backend.get
    monkeypatch.setattr(backend, "get", lambda name, *args, **kwargs: read.append(name) or get(name, *args, **kwargs))
    assert manager.trials("lr") == table and read == ["lr"]
    store = Store(tmp_path / "jobs.sqlite")
    store.update_job(trials[0], run=2, started=time.time(), finished=time.time())  # restarted, and done
    store.close()
    read.clear()
    assert manager.trials("lr")["trials"][0]["name"] == trials[-1] and read == ["lr", trials[0]]


async def test_a_sweep_runs_its_trials_two_at_a_time_ranks_them_and_fine_tunes_the_best(api, jp_fetch, root,
                                                                                       tmp_path):
    code, job = await api("POST", "jobs", pytorch_sweep("lr", parallelism=2))
    assert code == 201 and job["replicas"] == [] and job["logs"] == ["sweep"], job
    most, deadline, followed, sent = 0, time.monotonic() + 300, None, []
    while (job := (await api("GET", "jobs/lr"))[1])["phase"] not in FINISHED:
        assert time.monotonic() < deadline, job
        jobs = (await api("GET", "jobs"))[1]
        most = max(most, sum(j["name"].startswith("lr-") and j["phase"] not in FINISHED for j in jobs))
        since = followed["version"] if followed else ""
        followed = follow(followed, (await api("GET", "jobs/lr/trials", since=since))[1])
        sent.append(len(followed["sent"]))
        await asyncio.sleep(0.1)
    assert job["phase"] == "Succeeded" and job["message"] == "every trial has finished: 4 succeeded", job
    assert most == 2  # never more than the parallelism, and as many
    launched = [e["message"] for e in job["events"] if e["reason"] == "Launched"]
    assert launched == ["lr-1: learning_rate=0.01, batch_size=32", "lr-2: learning_rate=0.01, batch_size=128",
                        "lr-3: learning_rate=0.05, batch_size=32", "lr-4: learning_rate=0.05, batch_size=128"]

    code, table = await api("GET", "jobs/lr/trials")
    assert code == 200 and table["metric"] == {"tag": "loss", "goal": "minimize"}
    # a view following the table as it changed holds what is read whole, having been sent mostly nothing
    followed = follow(followed, (await api("GET", "jobs/lr/trials", since=followed["version"]))[1])
    assert {key: followed[key] for key in table} == table and sent[0] == 4 and sent.count(0) > len(sent) / 2, sent
    trials = {name: (await api("GET", f"jobs/{name}"))[1] for name in ("lr-1", "lr-2", "lr-3", "lr-4")}
    assert all(t["phase"] == "Succeeded" and t["spec"]["trial_of"] == "lr" for t in trials.values())
    by_loss = sorted(trials, key=lambda name: final_loss(trials[name]))  # what training itself saved
    assert [row["name"] for row in table["trials"]] == by_loss and table["best"] == by_loss[0]
    for row in table["trials"]:
        assert row["phase"] == "Succeeded" and row["step"] == 3 and len(row["points"]) == 3
        assert row["value"] == pytest.approx(final_loss(trials[row["name"]]), rel=1e-6)  # float32 in event files
        assert row["hyperparameters"] == {key: trials[row["name"]]["spec"]["hyperparameters"][key]
                                          for key in ("learning_rate", "batch_size")}
    text = CLI(root, tmp_path)("get", "lr").stdout
    assert f"{by_loss[0]} *  Succeeded" in text and "LEARNING_RATE  BATCH_SIZE  LOSS (min)  STEP" in text

    # one TensorBoard over every trial, their hyperparameters in its HParams dashboard
    runs = json.loads((await jp_fetch("distrain", "tensorboard", "lr", "all", "data", "runs",  # it starts: TensorFlow's
                                      request_timeout=120)).body)  # import, slow on a loaded machine
    assert {f"lr/{name}/master-0" for name in trials} <= set(runs), runs
    experiment = await hparams(jp_fetch, "lr", "experiment")
    assert {h["name"] for h in experiment["hparamInfos"]} == {"learning_rate", "batch_size"}, experiment
    assert {"group": "master-0", "tag": "loss"} in [m["name"] for m in experiment["metricInfos"]], experiment
    groups = await hparams(jp_fetch, "lr", "session_groups", startIndex=0, sliceSize=10, allowedStatuses=[
        "STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"], colParams=[])
    sessions = {session["name"]: (group["hparams"], session["metricValues"])
                for group in groups["sessionGroups"] for session in group["sessions"]}
    assert sessions.keys() == {f"lr/{name}" for name in trials}, groups
    for name, trial in trials.items():
        values, metrics = sessions[f"lr/{name}"]
        assert values == {key: trial["spec"]["hyperparameters"][key] for key in ("learning_rate", "batch_size")}
        loss = next(m["value"] for m in metrics if m["name"] == {"group": "master-0", "tag": "loss"})
        assert loss == pytest.approx(final_loss(trial), rel=1e-6)

    code, tuned = await api("POST", "jobs/lr/finetune", {"hyperparameters": {"epochs": 2}})
    assert code == 201 and tuned["name"] == "lr-best", tuned
    assert tuned["spec"]["resume_from"] == f"job:{by_loss[0]}" and "trial_of" not in tuned["spec"]
    assert tuned["spec"]["hyperparameters"] == {**trials[by_loss[0]]["spec"]["hyperparameters"], "epochs": 2}
    tuned = await wait_phase(api, "lr-best", timeout=300)
    assert tuned["phase"] == "Succeeded", tuned
    log = (await api("GET", "jobs/lr-best/logs"))[1]
    assert "resumed from epoch 3" in log and "done epoch 5" in log
    assert json.loads((Path(tuned["output_dir"]) / "result.json").read_text())["epoch"] == 5

    assert (await api("DELETE", "jobs/lr"))[0] == 204  # the sweep and its trials; the fine-tuned job stays
    assert [j["name"] for j in (await api("GET", "jobs"))[1]] == ["lr-best"]
    assert_nothing_left(root)


SLEEPER = {"name": "naps", "command": "sleep {{ seconds }}", "replicas": {"worker": {"count": 1}}}


def test_stopping_a_sweep_stops_its_running_trials_and_launches_no_more(cli):
    """...and its owner's webhook hears of the sweep's end, not of its trials'."""
    receiver = Receiver()
    allow_private(cli)
    cli("webhook", "set", input=receiver.url() + "\n")
    cli("sweep", "--name", "naps", "--vary", "seconds=300,301,302", "--parallelism", "2", "--", "sleep",
        "{{ seconds }}")
    cli.wait("naps", until=lambda job: job["message"] == "2 running, 1 waiting")
    assert [j["phase"] for j in cli.json("list") if j["name"] != "naps"] == ["Running", "Running"]
    assert cli("stop", "naps").stdout == "job naps stopped\n"
    table = cli.json("get", "naps")["trials"]["trials"]
    assert {row["name"]: row["phase"] for row in table} == {"naps-1": "Stopped", "naps-2": "Stopped", "naps-3": None}
    time.sleep(2)
    assert [j["name"] for j in cli.json("list")] == ["naps", "naps-1", "naps-2"]  # no third trial, ever
    [told] = receiver.wait("naps", 1)
    assert (told["kind"], told["event"], told["phase"]) == ("sweep", "ended", "Stopped")
    assert [b["job"] for _, b in receiver.posts] == ["naps"]
    receiver.close()
    assert_nothing_left(cli.root)
    cli("delete", "naps")
    assert cli.json("list") == []


def test_a_trials_hparams_session_is_written_without_loading_tensorflow(tmp_path):
    """A sweep's controller writes each trial's session; TensorBoard's own writer would load TensorFlow (500 MB of
    the controller's memory, where it is installed). The HParams dashboard reads them (test_a_sweep_...)."""
    found = subprocess.run([sys.executable, "-c", f"""
import sys, types
from pathlib import Path
from jupyter_distrain import sweep
sweep.write_session(Path({str(tmp_path)!r}), "lr-1", {{"lr": 0.1, "layers": [1, 2]}})
print("tensorflow" in sys.modules)
sys.modules["tensorboard.compat.notf"] = types.ModuleType("notf")  # read back with TensorBoard's stub
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
[path] = Path({str(tmp_path)!r}).glob("events.out.tfevents.*.hparams")
first, session = EventFileLoader(str(path)).Load()
print(first.file_version, session.summary.value[0].metadata.plugin_data.plugin_name)
"""], capture_output=True, text=True, check=True).stdout
    assert found == "False\nbrain.Event:2 hparams\n"


EMIT = """
import os, sys, time, types
sys.modules["tensorboard.compat.notf"] = types.ModuleType("notf")  # TensorBoard's own switch: no TensorFlow import
from tensorboard.summary import Writer

writer = Writer(os.environ["DISTRAIN_LOG_DIR"])
for step in range(60):
    writer.add_scalar("loss", float(sys.argv[1]) / (step + 1), step)
    writer.flush()
    time.sleep(0.25)
writer.close()
"""


def test_a_trial_clearly_worse_than_the_others_is_stopped_early(cli, tmp_path):
    code = tmp_path / "emit"
    code.mkdir()
    (code / "emit.py").write_text(EMIT)
    cli("sweep", "--name", "early", "--code", str(code), "--tensorboard", "--vary", "scale=1,1.2,9",
        "--parallelism", "3", "--early-stop-after", "5", "--", "python", "emit.py", "{{ scale }}")
    job = cli.wait("early")
    assert job["phase"] == "Succeeded", job
    stopped = [e["message"] for e in job["events"] if e["reason"] == "EarlyStopped"]
    assert len(stopped) == 1 and stopped[0].startswith("early-3: ") and "worse than the median" in stopped[0]
    rows = {row["name"]: row for row in job["trials"]["trials"]}
    assert [rows[f"early-{n}"]["phase"] for n in (1, 2, 3)] == ["Succeeded", "Succeeded", "Stopped"]
    assert 5 <= rows["early-3"]["step"] < 59 and rows["early-1"]["step"] == 59
    assert job["trials"]["best"] == "early-1"
