"""A Kubernetes job's logs (tests/controlplane): lines that outlive their pod on the output volume, the
provenance a replica's Python reports, the websocket that streams them."""

from __future__ import annotations

import json
import logging
import os
import platform
import shlex
import shutil
import subprocess
import threading
import venv
from pathlib import Path

import pytest
import requests
from conftest import wait, write_wheel
from controlplane.cluster import EXIT_CODE, MESSAGE, NAMESPACE, RESTRICTED
from kube_support import COMMIT, ENGINES, chief_spec, end, own_outputs, pod_name, pods_of, settings, wait_job

from jupyter_distrain.backends.kubernetes import KubeBackend, naming
from jupyter_distrain.jobjson import provenance

pytestmark = pytest.mark.usefixtures("fresh_logs")


def play_kubelet(control_plane, admin, pod_name_: str, cwd: Path, env: dict | None = None,
                 termination: Path | None = None) -> subprocess.Popen:
    """Run the pod's main container's command here (ControlPlane.run_here, with `env`); what it prints becomes
    the pod's pods/log, as a container runtime would keep it, and `termination` (made empty here) is its
    termination message file. The process reads its stdin."""
    pod = admin.read_namespaced_pod(pod_name_, NAMESPACE)
    if termination:
        termination.write_bytes(b"")
        main = pod.spec.containers[0]
        main.command = [str(termination) if part == main.termination_message_path else part for part in main.command]
    process = control_plane.run_here(admin, pod, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env or {})

    def runtime():
        for line in process.stdout:
            control_plane.write_log(pod_name_, line.decode(errors="replace").rstrip("\n"))

    threading.Thread(target=runtime, daemon=True).start()
    return process


def workspace(tmp_path: Path) -> Path:
    """The replica's working directory, its own (the log tee names what the command writes there)."""
    directory = tmp_path / "workspace"
    directory.mkdir()
    return directory


@pytest.mark.parametrize("engine", ["jobset", "kubeflow"])
def test_lines_outlive_their_pod_on_the_output_volume(control_plane, admin, tmp_path, engine):
    """A replica's command runs under the log tee, which stamps each line and writes it to pods/log and to the
    output volume alike. A server copies the first lines from pods/log and goes away; the replica writes more,
    ends, and its pod is deleted, pods/log with it. A new server, and a CLI with no copies of its own, read
    the rest from the volume through a reader pod: every line once, in order, with the tee's own times."""
    spec = chief_spec("outlived", "cat")
    first = KubeBackend(settings(tmp_path / "home", engine=engine), control_plane.client(RESTRICTED))
    first.start(logging.getLogger("first"))
    first.submit(spec)
    observer = KubeBackend(settings(tmp_path / "observer", engine=engine), control_plane.client(RESTRICTED))
    process = None
    try:
        chief = pod_name(admin, "outlived", "chief-0")
        wait(lambda: admin.read_namespaced_pod(chief, NAMESPACE).status.phase == "Running", "the chief runs")
        process = play_kubelet(control_plane, admin, chief, workspace(tmp_path))
        process.stdin.write(b"epoch 1\nepoch 2\n")
        process.stdin.flush()
        texts = lambda backend: [line.text for line in backend.logs("outlived", replica="chief-0")]  # noqa: E731
        wait(lambda: texts(first) == ["epoch 1", "epoch 2"], "the server copies the chief's first lines")
        first.close()

        process.stdin.write(b"epoch 3\n\xff done\n")  # not even UTF-8
        process.stdin.close()
        assert process.wait(30) == 0
        end(admin, "outlived", "chief-0", 0)
        wait_job(observer, "outlived", lambda j: j["phase"] == "Succeeded", "the cluster ends the job")
        admin.delete_namespaced_pod(chief, NAMESPACE, grace_period_seconds=0)
        wait(lambda: not pods_of(admin, "outlived"), "the chief's pod is gone, its pods/log with it")

        uid = admin.read_namespaced_config_map("outlived", NAMESPACE).metadata.uid
        volume = own_outputs(control_plane) / "outlived" / ".distrain" / "logs" / uid / "1"
        written = [tuple(line.decode(errors="replace").split(" ", 1)) for line in
                   (volume / "chief-0.log").read_bytes().splitlines()]
        (_, report), *written = written  # first what the replica's Python has, which the server keeps apart
        assert report.startswith("distrain-provenance ")
        assert [text for _, text in written] == ["epoch 1", "epoch 2", "epoch 3", "\ufffd done"]
        second = KubeBackend(settings(tmp_path / "home", engine=engine), control_plane.client(RESTRICTED))
        second.start(logging.getLogger("second"))
        try:
            wait(lambda: [(line.time, line.text) for line in second.logs("outlived", replica="chief-0")] == written,
                 "the new server reads the lines the chief wrote while no server ran", 60)
            wait(lambda: (second.log_dir("outlived") / ".complete").exists(), "the run's logs are marked complete")
            cli = KubeBackend(settings(tmp_path / "cli", engine=engine), control_plane.client(RESTRICTED))
            assert [(line.time, line.text) for line in cli.logs("outlived")] == written
            readers = f"{naming.COMPONENT}=log-reader"
            wait(lambda: not admin.list_namespaced_pod(NAMESPACE, label_selector=readers).items, "no reader is left")
        finally:
            second.close()
    finally:  # nothing of it left for the next engine's run, whatever failed
        first.close()
        if process and process.poll() is None:
            process.kill()
        observer.delete("outlived")
        shutil.rmtree(own_outputs(control_plane) / "outlived", ignore_errors=True)


@pytest.mark.parametrize("engine", ["jobset", "kubeflow"])
def test_a_replica_ended_before_its_log_was_read_has_its_lines_from_the_volume(control_plane, admin, tmp_path, engine):
    """Once the chief has succeeded the engine ends the replicas still running, and a pod can be gone before
    the server that watched the job from its start has read its log to the end. Here the worker's lines never
    reach pods/log at all, only the output volume: the server merges them from there before it marks the run's
    logs complete, and a CLI reading afterwards has them."""
    server = KubeBackend(settings(tmp_path / "home", engine=engine), control_plane.client(RESTRICTED))
    server.start(logging.getLogger("server"))
    worker = None
    try:
        server.submit(chief_spec("cut-off", "cat", replicas={"chief": {}, "worker": {"count": 1}}))
        wait(lambda: [p.status.phase for p in pods_of(admin, "cut-off")] == ["Running"] * 2, "both replicas run")
        pod = admin.read_namespaced_pod(pod_name(admin, "cut-off", "worker-0"), NAMESPACE)
        worker = control_plane.run_here(admin, pod, cwd=workspace(tmp_path), stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL)
        worker.stdin.write(b"worker-0 joined\n")
        worker.stdin.flush()
        uid = admin.read_namespaced_config_map("cut-off", NAMESPACE).metadata.uid
        volume = own_outputs(control_plane) / "cut-off" / ".distrain" / "logs" / uid / "1"
        log = volume / "worker-0.log"
        wait(lambda: log.exists() and b"worker-0 joined" in log.read_bytes(), "the tee writes to the volume",
             shown=lambda: (list(volume.parents[1].rglob("*")), worker.poll()))

        end(admin, "cut-off", "chief-0", 0)
        wait_job(server, "cut-off", lambda j: j["phase"] == "Succeeded", "the chief's success ends the job")
        wait(lambda: not pods_of(admin, "cut-off", "worker-0"), "the engine ends the worker")
        wait(lambda: server.copier.logs_complete("cut-off", 1), "the run's logs are marked complete", 60)
        assert [line.text for line in server.logs("cut-off", replica="worker-0")] == ["worker-0 joined"]
        cli = KubeBackend(settings(tmp_path / "cli", engine=engine), control_plane.client(RESTRICTED))
        assert [line.text for line in cli.logs("cut-off", replica="worker-0")] == ["worker-0 joined"]
    finally:
        if worker:
            worker.kill()
            worker.wait()
        server.delete("cut-off")
        server.close()
        shutil.rmtree(own_outputs(control_plane) / "cut-off", ignore_errors=True)


FAILING = """import sys
print("epoch 1", flush=True)
print("learning rate 10 is high", file=sys.stderr, flush=True)
raise ValueError("bad learning rate")
"""


@ENGINES
def test_a_failed_replicas_exception_is_the_jobs_message_and_its_stderr_lines_are_marked(
        control_plane, backend, admin, tmp_path, engine):
    """The log tee marks the lines the command writes to stderr, in pods/log as on the volume; when the command
    fails, its last lines of stderr are the container's termination message, and their exception line the job's
    message, as whoever reads the cluster says it (a CLI, no server)."""
    backend.submit(chief_spec("bad-lr", f"python -c {shlex.quote(FAILING)}"))
    chief = pod_name(admin, "bad-lr", "chief-0")
    wait(lambda: admin.read_namespaced_pod(chief, NAMESPACE).status.phase == "Running", "the chief runs")
    termination = tmp_path / "termination-log"
    process = play_kubelet(control_plane, admin, chief, workspace(tmp_path), termination=termination)
    process.stdin.close()
    assert process.wait(60) == 1
    lines = lambda: [(line.text, line.stderr) for line in backend.logs("bad-lr", replica="chief-0")]  # noqa: E731
    wait(lambda: ("ValueError: bad learning rate", True) in lines(), "the server copies the chief's log")
    assert lines()[:3] == [("epoch 1", False), ("learning rate 10 is high", True),
                           ("Traceback (most recent call last):", True)]
    assert all(stderr for _, stderr in lines()[1:])
    # the kubelet reports the container's end with its termination message
    admin.patch_namespaced_pod(chief, NAMESPACE, {"metadata": {"annotations": {
        EXIT_CODE: "1", MESSAGE: termination.read_text()}}})
    job = wait_job(backend, "bad-lr", lambda j: j["phase"] == "Failed", "the job fails")
    said = "replica chief-0 exited with code 1: ValueError: bad learning rate"
    cli = KubeBackend(settings(tmp_path / "cli", engine=engine), control_plane.client(RESTRICTED))
    assert job["message"] == cli.get("bad-lr")["message"] == said


def test_what_a_replicas_python_has_is_the_jobs_provenance(control_plane, admin, tmp_path):
    """A replica's command first installs requirements.txt and reports, in one line, what its Python has
    (incluster/install.py). Its image here is a fresh environment, and its requirements a wheel in the code. The
    server takes the report out of the log into the job's provenance; with the pod gone, a CLI reads the same
    report from the output volume."""
    workspace, image = tmp_path / "workspace", tmp_path / "image"
    workspace.mkdir()
    wheel = write_wheel(workspace, "distrain_probe", "VALUE = 42\n")
    (workspace / "requirements.txt").write_text(f"./{wheel.name}\n")
    venv.create(image, with_pip=True)
    spec = chief_spec("provenance", "python -c 'import distrain_probe; print(\"probe\", distrain_probe.VALUE)'")
    server = KubeBackend(settings(tmp_path / "home", engine="jobset"), control_plane.client(RESTRICTED))
    server.start(logging.getLogger("server"))
    try:
        server.submit(spec)
        chief = pod_name(admin, "provenance", "chief-0")
        wait(lambda: admin.read_namespaced_pod(chief, NAMESPACE).status.phase == "Running", "the chief runs")
        process = play_kubelet(control_plane, admin, chief, workspace,
                               env={"PATH": f"{image / 'bin'}{os.pathsep}{os.environ['PATH']}"})
        process.stdin.close()
        assert process.wait(120) == 0
        texts = lambda backend: [line.text for line in backend.logs("provenance", replica="chief-0")]  # noqa: E731
        wait(lambda: "probe 42" in texts(server), "the server copies the chief's log")
        assert any("Successfully installed distrain-probe-1.0" in text for text in texts(server))
        assert not [text for text in texts(server) if "distrain-provenance" in text]  # the report is no log line
        ran = provenance(server.get("provenance"))
        pip = subprocess.run([image / "bin" / "python", "-m", "pip", "--version"], capture_output=True, text=True)
        assert ran["python"] == platform.python_version() and ran["requirements"] == ["distrain-probe==1.0"]
        assert {"distrain-probe==1.0", f"pip=={pip.stdout.split()[1]}"} <= set(ran["packages"])
        assert not {p for p in ran["packages"] if p.startswith(("kubernetes==", "jupyter-distrain=="))}  # not ours

        end(admin, "provenance", "chief-0", 0)
        wait_job(server, "provenance", lambda j: j["phase"] == "Succeeded", "the job succeeds")
        admin.delete_namespaced_pod(chief, NAMESPACE, grace_period_seconds=0)
        wait(lambda: not pods_of(admin, "provenance"), "the chief's pod is gone, its pods/log with it")
        cli = KubeBackend(settings(tmp_path / "cli", engine="jobset"), control_plane.client(RESTRICTED))
        assert "probe 42" in texts(cli)
        assert {key: provenance(cli.get("provenance"))[key] for key in ("python", "requirements", "packages")} == {
            key: ran[key] for key in ("python", "requirements", "packages")}
    finally:
        server.delete("provenance")
        server.close()
        shutil.rmtree(own_outputs(control_plane) / "provenance", ignore_errors=True)


def test_the_websocket_streams_a_kubernetes_jobs_logs_until_it_ends(control_plane, kube_server, admin):
    import websocket

    api, headers = kube_server.api, kube_server.headers
    spec = {"name": "streamed", "framework": "python", "command": "python train.py",
            "code": {"git": "https://example.com/models.git", "ref": COMMIT}}
    assert requests.post(f"{api}/jobs", json=spec, headers=headers).status_code == 201
    job = wait(lambda: (j := requests.get(f"{api}/jobs/streamed", headers=headers).json())["phase"] == "Running" and j,
               "running")
    assert job["logs"] == ["worker-0"]  # no setup log in a cluster: the panel offers only these
    refused = requests.get(f"{api}/jobs/streamed/logs/stream?replica=setup", headers=headers)
    assert refused.status_code == 400 and refused.json() == {
        "message": "job 'streamed' has no replica 'setup'; replicas: worker-0"}
    stream = websocket.create_connection(f"{api.replace('http', 'ws', 1)}/jobs/streamed/logs/stream",
                                         header=[f"Authorization: {headers['Authorization']}"], timeout=60)
    try:
        worker = pod_name(admin, "streamed", "worker-0")
        control_plane.write_log(worker, "epoch 1", "epoch 2")
        received = ""
        while "epoch 2" not in received:
            message = json.loads(stream.recv())
            assert message["type"] == "lines", message
            received += message["data"]
        control_plane.write_log(worker, "done")
        end(admin, "streamed", "worker-0", 0)
        while (message := json.loads(stream.recv()))["type"] == "lines":
            received += message["data"]
        assert message == {"type": "end", "phase": "Succeeded", "run": 1}
        assert [line.split(" ", 1)[1] for line in received.splitlines()] == ["epoch 1", "epoch 2", "done"]
    finally:
        stream.close()
    assert requests.delete(f"{api}/jobs/streamed", headers=headers).status_code == 204
