"""The shipped examples, run for real through the CLI: TensorFlow, PyTorch and plain Python."""

import glob
import json
from pathlib import Path

from conftest import assert_nothing_left, copy_example


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
    assert (job["phase"], job["exit_code"], job["reason"]) == ("Failed", 3, "chief-0 failed")
    assert "[chief-0] failing on purpose with code 3" in result.stdout
    assert_nothing_left(cli.root, timeout=0)


def test_pytorch_ddp(cli, tmp_path):
    code = copy_example("pytorch-ddp", tmp_path)
    result = cli("submit", "-f", str(code / "distrain.yaml"), "-p", "epochs=3", "--follow")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[worker-1] rank 2/3 joined" in result.stdout
    assert "[master-0] done epoch 3 loss" in result.stdout
    job = cli.json("get", "pytorch-ddp")
    assert job["phase"] == "Succeeded"
    output = Path(job["output_dir"])
    assert (output / "model.pt").exists() and json.loads((output / "result.json").read_text())["epoch"] == 3
    assert_nothing_left(cli.root, timeout=0)


def test_plain_python(cli, tmp_path):
    code = copy_example("python", tmp_path)
    result = cli("submit", "-f", str(code / "distrain.yaml"), "--follow")
    assert result.returncode == 0
    assert "[worker-0] done epoch 20 loss" in result.stdout
    job = cli.json("get", "python")
    result = json.loads((Path(job["output_dir"]) / "result.json").read_text())
    assert abs(result["a"] - 3) < 0.1 and abs(result["b"] - 0.5) < 0.1
