"""The shipped examples, run for real through the CLI: TensorFlow, PyTorch and plain Python."""

import glob
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES, assert_nothing_left, copy_example
from jupyter_distrain.scalars import Scalars


@pytest.mark.lane("node")  # its 40 s beside the real node's tests (conftest.lane_of)
def test_tensorflow_parameter_server_training_and_resume(cli, tmp_path):
    code = copy_example("tf-ps", tmp_path)
    cli("submit", "-f", str(code / "distrain.yaml"), "-p", "steps=100")
    job = cli.wait("tf-ps", timeout=300)
    logs = cli("logs", "tf-ps").stdout
    assert job["phase"] == "Succeeded", logs
    assert {r["name"]: r["phase"] for r in job["replicas"]} == {
        "chief-0": "Succeeded", "ps-0": "Stopped", "worker-0": "Stopped", "worker-1": "Stopped"}
    assert "[chief-0] step 100/100 loss" in logs
    assert "[ps-0] ps 0 serving at grpc://" in logs and "[worker-1] worker 1 serving at grpc://" in logs
    output = Path(job["output_dir"])
    assert json.loads((output / "result.json").read_text())["step"] == 100
    assert glob.glob(str(output / "checkpoints" / "ckpt-100.index"))
    assert glob.glob(str(output / "training_logs" / "chief-0" / "events.out.tfevents.*"))
    assert_nothing_left(cli.root, timeout=0)

    # fine-tune: a new job continues from the first one's checkpoints
    cli("submit", "-f", str(code / "distrain.yaml"), "--name", "tf-ps-more", "--resume-from", "job:tf-ps",
        "-p", "steps=50")
    job = cli.wait("tf-ps-more", timeout=300)
    logs = cli("logs", "tf-ps-more", "--replica", "chief-0").stdout
    assert job["phase"] == "Succeeded", logs
    assert "resumed from step 100" in logs and "step 150/150" in logs
    assert json.loads((Path(job["output_dir"]) / "result.json").read_text())["step"] == 150


def test_tensorflow_chief_failure(cli, tmp_path):
    code = copy_example("tf-ps", tmp_path)
    result = cli("submit", "-f", str(code / "distrain.yaml"), "--follow", "--",
                 "python train.py --fail_with 3", check=False)
    assert result.returncode == 3
    job = cli.json("get", "tf-ps")
    assert (job["phase"], job["exit_code"], job["reason"]) == ("Failed", 3, "ReplicaFailed")
    assert "[chief-0] failing on purpose with code 3" in result.stdout
    assert_nothing_left(cli.root, timeout=0)


def test_tensorflow_multi_worker_mirrored_with_an_evaluator(cli, tmp_path):
    """Keras fit under MultiWorkerMirroredStrategy on three workers (worker 0 the chief), its Keras from the
    job's requirements.txt; the evaluator evaluates each checkpoint, the last included, and the job succeeds
    once it has."""
    code = copy_example("tf-multiworker", tmp_path)
    result = cli("submit", "-f", str(code / "distrain.yaml"), "-p", "epochs=3", "--follow", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert {f"[worker-{i}] worker {i} of 3 in sync" for i in range(3)} <= set(result.stdout.splitlines())
    assert "[evaluator-0] evaluated epoch 3: loss" in result.stdout
    job = cli.json("get", "tf-multiworker")
    assert (job["phase"], job["message"]) == ("Succeeded", "all workers and evaluator-0 succeeded")
    assert {r["phase"] for r in job["replicas"]} == {"Succeeded"}
    output = Path(job["output_dir"])
    trained = json.loads((output / "result.json").read_text())
    assert trained["epochs"] == 3 and trained["loss"] < trained["first_loss"] / 4
    assert json.loads((output / "evaluation.json").read_text())["epoch"] == 3
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == [f"epoch-{i}.weights.h5" for i in (1, 2, 3)]
    for replica in ("worker-0", "evaluator-0"):
        assert glob.glob(str(output / "training_logs" / replica / "**" / "events.out.tfevents.*"), recursive=True)
    assert not glob.glob(str(output / "training_logs" / "worker-1" / "**" / "events.out.tfevents.*"), recursive=True)
    assert_nothing_left(cli.root, timeout=0)


@pytest.mark.lane("node")  # its 45 s beside the real node's tests (conftest.lane_of)
def test_paddle_parameter_servers(cli, tmp_path):
    """PaddlePaddle fleet's parameter servers (its Paddle from the job's requirements.txt): 2 pservers, 2
    trainers, each reading its shard files; the loss goes down, the model and TensorBoard scalars are
    written, and the pservers end with the training."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    code = copy_example("paddle-ps", tmp_path)
    result = cli("submit", "-f", str(code / "distrain.yaml"), "-p", "passes=3", "--follow", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    job = cli.json("get", "paddle-ps")
    assert {r["name"]: r["phase"] for r in job["replicas"]} == dict.fromkeys(
        ["ps-0", "ps-1", "worker-0", "worker-1"], "Succeeded")
    for i, addresses in enumerate(job["replicas"][:2]):
        assert f"[ps-{i}] pserver {i} serving at {addresses['address']}" in result.stdout
    assert "[worker-0] trainer 0 reads part-00000.txt, part-00002.txt, part-00004.txt, part-00006.txt" in result.stdout
    assert "[worker-1] trainer 1 reads part-00001.txt, part-00003.txt, part-00005.txt, part-00007.txt" in result.stdout
    output = Path(job["output_dir"])
    trained = json.loads((output / "result.json").read_text())
    assert trained["passes"] == 3 and trained["loss"] < trained["initial_loss"] / 4
    assert {p.name for p in (output / "model").rglob("*")} >= {"w", "b"}
    for trainer in ("worker-0", "worker-1"):
        events = EventAccumulator(str(output / "training_logs" / trainer))
        events.Reload()
        assert [event.step for event in events.Tensors("loss")] == [1, 2, 3]
    assert_nothing_left(cli.root, timeout=0)


# A parameter-server program as Paddle's own documentation writes them for its launcher (paddle.distributed.launch
# --server_num 2 --worker_num 2): the cluster from PaddleCloudRoleMaker's variables, no barrier, no wait for the
# servers, no stop of them; a linear model on random data.
PADDLE_AS_DOCUMENTED = """
import numpy as np
import paddle
import paddle.distributed.fleet as fleet

paddle.enable_static()
fleet.init()
x = paddle.static.data(name="x", shape=[None, 4], dtype="float32")
y = paddle.static.data(name="y", shape=[None, 1], dtype="float32")
loss = paddle.mean(paddle.nn.functional.square_error_cost(paddle.static.nn.fc(x, 1), y))
strategy = fleet.DistributedStrategy()
strategy.a_sync = True
fleet.distributed_optimizer(paddle.optimizer.SGD(0.05), strategy).minimize(loss)
if fleet.is_server():
    fleet.init_server()
    fleet.run_server()
else:
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    fleet.init_worker()
    rng = np.random.default_rng(fleet.worker_index())
    losses = []
    for step in range(200):
        xs = rng.normal(size=(32, 4)).astype("float32")
        ys = (xs @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32") + 1).astype("float32")
        losses.append(float(exe.run(feed={"x": xs, "y": ys}, fetch_list=[loss])[0]))
    print(f"trainer {fleet.worker_index()} ran {len(losses)} steps, last loss {losses[-1]:.3f}")
    fleet.stop_worker()
"""


@pytest.mark.lane("node")  # its 1.5 minutes beside the real node's tests (conftest.lane_of)
def test_a_paddle_program_written_for_paddles_launcher_trains_five_runs_in_a_row(cli, tmp_path):
    """Started as Paddle's launcher starts parameter servers (gloo off), the trainers after the servers listen:
    5 runs of 2 pservers and 2 trainers, each Succeeded, every trainer through its steps (started with the
    launcher, a trainer of Paddle 3.0 may push its first weights before a pserver serves). The env turns off
    Paddle 3's PIR programs, which its parameter servers cannot run. (That its updates train the model is
    test_paddle_parameter_servers'.)"""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(PADDLE_AS_DOCUMENTED)
    shutil.copy(EXAMPLES / "paddle-ps" / "requirements.txt", code)  # the example's Paddle
    cli("submit", "--name", "paddle-doc", "--framework", "paddle", "--ps", "2", "--workers", "2", "--code", str(code),
        "--success-policy", "all-workers", "--env", "FLAGS_enable_pir_api=0", "--", "python", "train.py")
    for run in range(1, 6):
        if run > 1:
            cli("restart", "paddle-doc")
        job = cli.wait("paddle-doc", until=lambda job: job["run"] == run and job["phase"] in ("Succeeded", "Failed"),
                       timeout=300)
        logs = cli("logs", "paddle-doc", "--run", str(run)).stdout
        assert job["phase"] == "Succeeded", logs
        for trainer in (0, 1):
            assert re.search(rf"\[worker-{trainer}\] trainer {trainer} ran 200 steps, last loss \d", logs), logs
        assert "[worker-1] waiting for the parameter servers at 127.0.0.1:" in logs
    assert_nothing_left(cli.root, timeout=0)


def test_pytorch_ddp(cli, tmp_path):
    """Every rank imports torch.utils.tensorboard where TensorFlow is installed too (as `make run` installs them)
    before torch loads Triton (its first optimizer), and the master writes its loss to TensorBoard."""
    code = copy_example("pytorch-ddp", tmp_path)
    result = cli("submit", "-f", str(code / "distrain.yaml"), "-p", "epochs=3", "--follow")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[worker-1] rank 2/3 joined" in result.stdout
    assert "[master-0] done epoch 3 loss" in result.stdout
    job = cli.json("get", "pytorch-ddp")
    assert job["phase"] == "Succeeded"
    output = Path(job["output_dir"])
    done = json.loads((output / "result.json").read_text())
    assert (output / "model.pt").exists() and done["epoch"] == 3
    losses = Scalars().of(output / "training_logs")  # the event files master-0 wrote, read without TensorFlow
    assert losses["tag"] == "loss" and [step for step, _ in losses["runs"]["master-0"]] == [1, 2, 3]
    assert losses["runs"]["master-0"][-1][1] == pytest.approx(done["loss"])
    assert_nothing_left(cli.root, timeout=0)


@pytest.mark.lane("node")  # its 30 s beside the real node's tests (conftest.lane_of)
def test_pytorch_torchrun(cli, tmp_path):
    """The DDP example under torchrun: a c10d rendezvous across three replicas, then one replica of two
    processes started by torchrun --standalone."""
    copy_example("pytorch-ddp", tmp_path)
    code = copy_example("pytorch-torchrun", tmp_path)
    result = cli("submit", "-f", str(code / "distrain.yaml"), "-p", "epochs=2", "--follow")
    assert result.returncode == 0, result.stdout + result.stderr
    assert {f"rank {rank}/3 joined" for rank in range(3)} <= set(re.findall(r"rank \d/\d joined", result.stdout))
    assert "[master-0] done epoch 2 loss" in result.stdout
    job = cli.json("get", "pytorch-torchrun")
    phases = {r["name"]: r["phase"] for r in job["replicas"]}
    assert phases["master-0"] == "Succeeded" and {phases["worker-0"], phases["worker-1"]} <= {"Succeeded", "Stopped"}
    assert json.loads((Path(job["output_dir"]) / "result.json").read_text())["epoch"] == 2

    result = cli("submit", "-f", str(code / "standalone.yaml"), "-p", "epochs=2", "--follow")
    assert result.returncode == 0, result.stdout + result.stderr
    # both processes write to the replica's one output, so their lines may interleave
    assert set(re.findall(r"rank \d/2 joined", result.stdout)) == {"rank 0/2 joined", "rank 1/2 joined"}
    job = cli.json("get", "pytorch-standalone")
    assert json.loads((Path(job["output_dir"]) / "result.json").read_text())["epoch"] == 2
    assert_nothing_left(cli.root, timeout=0)


def test_plain_python(cli, tmp_path):
    code = copy_example("python", tmp_path)
    result = cli("submit", "-f", str(code / "distrain.yaml"), "--follow")
    assert result.returncode == 0
    assert "[worker-0] done epoch 20 loss" in result.stdout
    job = cli.json("get", "python")
    result = json.loads((Path(job["output_dir"]) / "result.json").read_text())
    assert abs(result["a"] - 3) < 0.1 and abs(result["b"] - 0.5) < 0.1
