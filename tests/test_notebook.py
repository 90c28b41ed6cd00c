"""The magics and the Python client, in a real kernel started by a real Jupyter server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid

import pytest
import requests
import websocket
from conftest import EXAMPLES, JupyterServer, assert_nothing_left, wait
from webhooks import Receiver


class Kernel:
    """The kernel of a notebook session (train.ipynb, at the server's root), driven over the server's
    websocket as JupyterLab does."""

    def __init__(self, server):
        self.server = server
        session = {"path": "train.ipynb", "type": "notebook", "name": "train.ipynb", "kernel": {"name": "python3"}}
        self.id = requests.post(f"{server.url}/api/sessions", headers=server.headers, json=session).json()["kernel"]["id"]
        self.ws = websocket.create_connection(f"{server.url.replace('http', 'ws', 1)}/api/kernels/{self.id}/channels",
                                              header=[f"Authorization: {server.headers['Authorization']}"], timeout=180)

    def run(self, code: str) -> str:
        """Execute a cell; its stdout, stderr, results (text, HTML when there is some, [widget] for a
        widget) and errors. What it wrote on stderr alone is kept in `stderr`."""
        msg_id = uuid.uuid4().hex
        self.stderr = ""
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test", "session": "test",
                       "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        out = []
        while True:
            message = json.loads(self.ws.recv())
            if message["parent_header"].get("msg_id") != msg_id or message["channel"] != "iopub":
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                out.append(content["text"])
                self.stderr += content["text"] if content["name"] == "stderr" else ""
            elif kind in ("execute_result", "display_data"):
                data = content["data"]
                widget = "application/vnd.jupyter.widget-view+json" in data
                out.append("[widget]" if widget else data.get("text/html") or data.get("text/plain", ""))
            elif kind == "error":
                out.append(f"{content['ename']}: {content['evalue']}\n" + "\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out)

    def widget_updates(self, until, timeout: float = 120) -> list[dict]:
        """The widget state updates the kernel sends while no cell runs, until `until(updates)`."""
        states, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            data = message["content"].get("data", {})
            if message["msg_type"] == "comm_msg" and data.get("method") == "update":
                states.append(data["state"])
                if until(states):
                    return states
        raise AssertionError(f"no such widget update in {timeout} s: {states[-5:]}")

    def restart(self) -> None:
        requests.post(f"{self.server.url}/api/kernels/{self.id}/restart", headers=self.server.headers).raise_for_status()

    def close(self) -> None:
        self.ws.close()
        requests.delete(f"{self.server.url}/api/kernels/{self.id}", headers=self.server.headers)


@pytest.fixture
def jupyter_server(tmp_path):
    """conftest's, its webhooks allowed to reach a receiver on loopback."""
    server = JupyterServer(tmp_path, "--Distrain.webhook_allow_private=True")
    yield server
    server.stop()


@pytest.fixture
def kernel(jupyter_server):
    shutil.copytree(EXAMPLES / "python", jupyter_server.root_dir, dirs_exist_ok=True)  # the notebook's directory
    kernel = Kernel(jupyter_server)
    yield kernel
    kernel.close()


def wait_phase(server, name: str, phases=("Succeeded", "Failed", "Stopped"), timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while (job := server.rest("GET", f"jobs/{name}").json())["phase"] not in phases:
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    return job


def test_magics_launch_follow_and_stop_the_servers_jobs(jupyter_server, kernel):
    assert kernel.run("%load_ext jupyter_distrain") == ""

    submitted = kernel.run("%distrain submit --name fit -p epochs=3 -- python train.py --epochs {{ epochs }}")
    assert "<b>fit</b> (local)" in submitted, submitted
    job = jupyter_server.rest("GET", "jobs/fit").json()  # the server's job
    assert job["spec"]["code"] == {"path": str(jupyter_server.root_dir)}  # the notebook's own directory
    followed = kernel.run("%distrain logs fit -f")  # returns when the job ends
    assert "[worker-0] epoch 3/3 loss" in followed and "[worker-0] done epoch 3" in followed, followed
    assert wait_phase(jupyter_server, "fit", timeout=5)["phase"] == "Succeeded"
    assert "<b>Succeeded</b>" in kernel.run("%distrain status fit")
    assert "worker-0" in kernel.run("%distrain logs fit --tail 1")

    long = kernel.run("%%distrain\nname: long\ncommand: python train.py --epochs 100000\n")
    assert "<b>long</b>" in long, long
    wait_phase(jupyter_server, "long", phases=("Running",), timeout=60)
    where = wait(lambda: out if "train.py:" in (out := kernel.run("%distrain stacks long")) else None,
                 "its stack shows train.py (once its Python has started)")
    assert where.startswith("1 replica, stacks taken at ") and "worker-0\n  pid " in where, where
    assert kernel.run("%distrain why long") == "job long is Running: it waits for nothing\n"
    receiver = Receiver()  # the webhook: set through the client (the magic asks for it without echo), tested, deleted
    assert kernel.run("%distrain webhook") == "none\n"
    assert kernel.run("%distrain webhook test").startswith("UsageError: no webhook is set")
    assert kernel.run(f"from jupyter_distrain import Client\nClient().set_webhook({receiver.url()!r})") == ""
    assert kernel.run("%distrain webhook").startswith("http://127.0.0.1:")
    assert kernel.run("%distrain webhook test") == "delivered\n" and receiver.posts[0][1]["event"] == "test"
    assert kernel.run("%distrain webhook delete") == "none\n"
    receiver.close()
    stopped = kernel.run("%distrain stop long")
    assert "<b>long</b> (local) <b>Stopped</b>" in stopped and "<b>Stopped</b>: Stopped" not in stopped, stopped
    compared = kernel.run("%distrain diff fit long")
    assert "Spec: 2 of" in compared and "hyperparameters.epochs: 3 -> (none)" in compared, compared
    assert 'command: "python train.py --epochs {{ epochs }}" -> "python train.py --epochs 100000"' in compared
    assert "Code: the code of a job run from a directory is not kept" in compared, compared

    frame = kernel.run("%distrain tensorboard fit --replica worker-0")
    assert 'src="/distrain/tensorboard/fit/worker-0/"' in frame, frame

    # errors are one clear line, not a traceback
    unknown = kernel.run("%distrain status nope")
    assert unknown.startswith("UsageError: no job named 'nope'") and "Traceback" not in unknown
    invalid = kernel.run("%%distrain\nname: Bad_Name\ncommand: python train.py\n")
    assert invalid.startswith("UsageError: invalid job spec: name:"), invalid
    assert kernel.run("%distrain submit --workers two -- x").startswith("UsageError: Invalid value for '--workers'")
    assert kernel.run("%distrain logs").startswith("UsageError: Missing argument 'NAME'")

    # the jobs are the server's: a restarted kernel sees them, and so does the REST API
    kernel.restart()
    listed = kernel.run("%load_ext jupyter_distrain\n%distrain list")
    assert "<b>fit</b>" in listed and "<b>long</b>" in listed and "0/1 replicas running" in listed, listed
    assert {j["name"] for j in jupyter_server.rest("GET", "jobs").json()} == {"fit", "long"}
    assert kernel.run("%distrain delete fit\n%distrain delete long") == "job fit deleted\njob long deleted\n"
    kernel.close()  # the kernel inherits DISTRAIN_HOME, as the jobs' processes do
    assert_nothing_left(jupyter_server.root)


def test_magics_help_and_unknown_commands_read_as_the_clis(kernel):
    kernel.run("%load_ext jupyter_distrain")
    helped = kernel.run("%distrain --help")
    assert helped.startswith("Usage: %distrain [OPTIONS] COMMAND [ARGS]...\n"), helped
    commands = helped.split("Commands:\n")[1]
    assert [line.split()[0] for line in commands.splitlines()] == \
        ["delete", "diff", "finetune", "list", "logs", "stacks", "status", "stop", "submit", "sweep", "tensorboard",
         "usage", "webhook", "why"], \
        helped
    assert kernel.run("%distrain") == helped  # and nothing else is displayed

    logs_help = kernel.run("%distrain logs --help")
    assert logs_help.startswith("Usage: %distrain logs [OPTIONS] NAME\n"), logs_help
    assert all(option in logs_help for option in ("-f, --follow", "--replica", "--tail", "--run")), logs_help

    unknown = kernel.run("%distrain send x")
    assert unknown == "UsageError: No such command 'send'.\nTry '%distrain --help' for help.\n", unknown
    assert kernel.run("%distrain log x").startswith("UsageError: No such command 'log'. Did you mean 'logs'?")
    assert kernel.run("%%distrain --help\nname: x\n").startswith("Usage: %%distrain [OPTIONS]\n")


def test_magics_note_uncommitted_work_once_the_job_is_accepted(jupyter_server, kernel):
    git = ["git", "-C", str(jupyter_server.root_dir), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for command in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "train"]):
        subprocess.run([*git, *command], check=True)
    (jupyter_server.root_dir / ".ipynb_checkpoints").mkdir()  # Jupyter's: not work to warn about
    (jupyter_server.root_dir / ".ipynb_checkpoints" / "train-checkpoint.ipynb").write_text("{}")
    kernel.run("%load_ext jupyter_distrain")
    checked = kernel.run("%%distrain --dry-run\nname: clean\ncommand: python train.py\n")
    no_remote = f"note: The repository has no remote: the job clones it from {jupyter_server.root_dir}, "
    assert checked.startswith(no_remote) and "Uncommitted" not in checked and "'name': 'clean'" in checked, checked

    (jupyter_server.root_dir / "train.py").write_text("print('uncommitted')\n")
    invalid = kernel.run("%distrain submit --name Bad_Name -- python train.py")
    assert invalid.startswith("UsageError: invalid job spec: name:") and "note" not in invalid, invalid
    commit = subprocess.run([*git, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    note = (f"note: Uncommitted work (changed files) is not part of the job: it runs commit {commit} as committed. "
            "Commit first to train those changes, or include them in the job (--include-changes).\n" + no_remote)
    checked = kernel.run("%%distrain --dry-run\nname: checked\ncommand: python train.py\n")
    assert checked.startswith(note) and "'name': 'checked'" in checked and kernel.stderr == "", checked
    submitted = kernel.run("%distrain submit --name noted -- python train.py --epochs 1")
    assert submitted.startswith(note) and "<b>noted</b> (local)" in submitted and kernel.stderr == "", submitted
    assert wait_phase(jupyter_server, "noted")["phase"] == "Succeeded"
    assert "uncommitted" not in kernel.run("%distrain logs noted")  # the committed train.py ran
    assert kernel.run("%distrain delete noted") == "job noted deleted\n"
    included = kernel.run("%distrain submit --name included --include-changes -- python train.py")
    assert included.startswith(no_remote) and "<b>included</b> (local)" in included, included  # no longer noted
    assert wait_phase(jupyter_server, "included")["phase"] == "Succeeded"
    assert "[worker-0] uncommitted" in kernel.run("%distrain logs included")
    assert kernel.run("%distrain delete included") == "job included deleted\n"
    kernel.close()
    assert_nothing_left(jupyter_server.root)


def test_the_client_works_from_a_plain_script(jupyter_server, tmp_path):
    script = f"""
from jupyter_distrain import Client, DistrainError
client = Client({jupyter_server.url!r}, {jupyter_server.TOKEN!r})
try:  # the documented way to handle every refusal, spec errors included
    client.submit({{"name": "Not A Name", "command": "true"}})
except DistrainError as e:
    print("refused:", e)
job = client.submit({{"name": "scripted", "code": {{"path": "."}}, "command": "python train.py --epochs 2"}})
print(repr(job))
for line in client.logs("scripted", follow=True):
    print(line)
print(client.get("scripted")["phase"], [j["name"] for j in client.jobs()], client.jobs("nothing-named-so"))
client.delete("scripted")
"""
    shutil.copytree(EXAMPLES / "python", tmp_path / "code")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path / "code", capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines.pop(0).startswith("refused: invalid job spec: name: "), result.stdout
    assert lines[0].startswith("<Job scripted Pending on local") or lines[0].startswith("<Job scripted Running")
    assert any(line.startswith("[worker-0] epoch 2/2 loss") for line in lines), lines
    assert lines[-1] == "Succeeded ['scripted'] []"
    assert_nothing_left(jupyter_server.root)


def test_without_a_server_the_magics_say_what_is_wrong(tmp_path):
    empty = tmp_path / "runtime"
    empty.mkdir()
    env = {key: value for key, value in __import__("os").environ.items() if not key.startswith("JUPYTER_")}
    env["JUPYTER_RUNTIME_DIR"] = str(empty)
    result = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", "-c",
         "get_ipython().run_line_magic('load_ext', 'jupyter_distrain'); get_ipython().run_line_magic('distrain', 'list')"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    said = result.stdout + result.stderr
    assert f"UsageError: no running Jupyter server found for {tmp_path}" in said, said
    assert f"looked in {empty}" in said and "Client(url=" in said and "Traceback" not in said


def test_widgets_submit_and_follow_a_job_while_the_cell_is_idle(jupyter_server, kernel):
    kernel.run("from jupyter_distrain.widgets import JobForm, JobMonitor\nform = JobForm()")
    assert kernel.run("print(sorted(form.fields), [b.description for b in form.counts.children])") == (
        "['code', 'command', 'data', 'env', 'framework', 'gpus', 'hyperparameters', 'image', 'name', 'output', "
        "'tensorboard.enabled'] ['worker']\n")
    label = kernel.run("print(form.children[6].children[0].children[0].value)")  # the env row's, from the schema
    assert label.startswith("<b title='Environment variables of every replica") and "'>Environment</b>" in label
    assert kernel.run("form.fields['framework'].value = 'tensorflow'\n"
                      "print([b.description for b in form.counts.children])") == "['chief', 'ps', 'worker', 'evaluator']\n"
    # the server's answers land under their fields
    refused = kernel.run("form.fields['name'].value = 'Bad_Name'\nprint(form.errors['name'].value)")
    assert "Bad_Name" in refused and "lowercase" in refused, refused
    refused = kernel.run("form.fields['data'].value = 'relative/dir/../..'\nprint(form.errors['data'].value)")
    assert refused.startswith("<div") and "data.path: &quot;dir/../..&quot; is not allowed" in refused, refused
    kernel.run("form.fields['data'].value = ''\nform.fields['framework'].value = 'python'\n"
               "form.fields['name'].value = 'ticking'")
    ticks = ("python -u -c \"import os, time; [print('tick', i, os.environ['TICK'], flush=True) or time.sleep(0.5) "
             "for i in range(8)]\"")
    accepted = kernel.run(f"form.fields['command'].value = {ticks!r}\nprint(form.errors['name'].value, form.check())")
    assert accepted == " True\n", accepted
    refused = kernel.run("form.fields['env'].value = 'TICK: tock\\nDISTRAIN_JOB: mine'\nprint(form.errors['env'].value)")
    assert "env.DISTRAIN_JOB: DISTRAIN_JOB is set by distrain" in refused, refused
    assert kernel.run("form.fields['env'].value = 'TICK: tock'\nprint(form.check())") == "True\n"

    shown = kernel.run("job = form.submit()\nprint(job['phase'] in ('Pending', 'Running'), form.status.value)")
    assert shown == "[widget]True Submitted ticking.\n", shown
    # the monitor the form displayed keeps drawing the job while no cell runs
    values = lambda states: [str(state.get("value")) for state in states]  # noqa: E731
    updates = values(kernel.widget_updates(lambda states: any("<b>Succeeded</b>" in v for v in values(states))
                                           and any("tick 7 tock" in v for v in values(states))))
    tails = [v for v in updates if "[worker-0] tick 0" in v]
    assert len(tails) >= 2 and "tick 7" not in tails[0], "the log tail grew while the job ran"
    assert jupyter_server.rest("GET", "jobs/ticking").json()["phase"] == "Succeeded"

    # Stop, from a monitor of a long job
    jupyter_server.rest("POST", "jobs", json={
        "name": "long", "code": {"path": str(jupyter_server.root_dir)}, "command": "python train.py --epochs 100000"})
    wait_phase(jupyter_server, "long", phases=("Running",), timeout=60)
    # Stop, from a monitor of a long job; then Restart in its place
    assert kernel.run("monitor = JobMonitor('long')\nprint(monitor.stop()['phase'], monitor.stop_button.layout.display,"
                      " monitor.restart_button.layout.display)") == "Stopped none None\n"
    assert "<b>Stopped</b>: stopped by request" in kernel.run("print(monitor.header.value)")
    assert kernel.run("print(monitor.restart()['phase'] in ('Pending', 'Running'), monitor.stop_button.layout.display,"
                      " monitor.restart_button.layout.display)") == "True None none\n"

    # a failed job's monitor says why
    jupyter_server.rest("POST", "jobs", json={
        "name": "broken", "code": {"path": str(jupyter_server.root_dir)}, "command": "python -c 'exit(3)'"})
    wait_phase(jupyter_server, "broken")
    failed = kernel.run("print(JobMonitor('broken').header.value)")
    assert "<b>Failed</b>: ReplicaFailed: replica worker-0 exited with code 3" in failed, failed

    # a sweep's cell shows its trials
    kernel.run("%load_ext jupyter_distrain")
    swept = kernel.run("%%distrain\nname: grid\ncommand: sleep 600\nsweep: {parameters: {x: {values: [1]}}}\n")
    assert swept.endswith("[widget]") and "<table>" not in swept, swept  # not the sweep's (empty) replicas
    for name in ("ticking", "long", "broken", "grid"):
        assert jupyter_server.rest("DELETE", f"jobs/{name}").status_code == 204
    kernel.close()
    assert_nothing_left(jupyter_server.root)
