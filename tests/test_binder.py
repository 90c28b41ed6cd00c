"""What Binder does, replayed as far as this machine allows: a fresh virtual environment with what a
repo2docker image carries (JupyterLab, a kernel), binder/requirements.txt (both installed by uv, which
resolves them as pip would, from its cache), binder/postBuild; then the demo notebook executed headlessly
against the real JupyterLab it would open in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import nbformat
import pytest
from conftest import REPO, JupyterServer, assert_nothing_left, own_outputs

DEMO = REPO / "examples" / "demo.ipynb"


@pytest.mark.lane("node")  # its 3.5 minutes beside the real node's tests, which mostly wait on pods
@pytest.mark.timeout(600)  # it installs JupyterLab and TensorFlow in a fresh environment, as Binder does
def test_the_binder_demo_trains_a_distributed_tensorflow_job(tmp_path):
    env_dir = tmp_path / "binder-env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    env = {**os.environ, "PATH": f"{env_dir / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(env_dir),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}

    def run(*command: str) -> None:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    install = [str(Path(sys.executable).with_name("uv")), "pip", "install", "--quiet", "--compile-bytecode",
               "--python", str(python)]
    run(*install, "jupyterlab>=4.2,<5", "ipykernel", "nbclient")
    run(*install, "-r", "binder/requirements.txt")
    run("bash", "binder/postBuild")

    lab = JupyterServer(tmp_path, app="lab", root_dir=REPO, python=python, env=env)
    try:
        executed = tmp_path / "demo.ipynb"
        run(str(python), "-c", "import sys, nbclient, nbformat\n"
            "notebook = nbformat.read(sys.argv[1], as_version=4)\n"
            "nbclient.NotebookClient(notebook, timeout=600, resources={'metadata': {'path': sys.argv[2]}}).execute()\n"
            "nbformat.write(notebook, sys.argv[3])", str(DEMO), str(DEMO.parent), str(executed))
    finally:
        lab.stop()
    cells = [cell for cell in nbformat.read(executed, as_version=4).cells if cell.cell_type == "code"]
    assert not [o for cell in cells for o in cell.outputs if o.output_type == "error"]

    def output(start: str) -> str:
        cell = next(cell for cell in cells if cell.source.startswith(start))
        return "".join(o.get("text", "") + json.dumps(o.get("data", {})) for o in cell.outputs)

    assert "tf-demo" in output("%%distrain")
    logs = output("%distrain logs tf-demo -f")
    assert "[chief-0]" in logs and "[worker-1]" in logs, logs
    assert "<b>Succeeded</b>" in output("%distrain status tf-demo")
    assert "/distrain/tensorboard/tf-demo/all/" in output("%distrain tensorboard tf-demo")
    assert "kind: JobSet" in output("!distrain render")
    logdir = own_outputs(lab.root) / "tf-demo" / "training_logs"
    events = list(logdir.glob("*/**/events.out.tfevents.*"))
    assert {path.relative_to(logdir).parts[0] for path in events} >= \
        {"chief-0"}, events
    assert_nothing_left(lab.root)
