"""Shared by the benchmarks: a real `jupyter server` with the extension, the tests' Kubernetes control plane, and
small statistics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import websocket

from jupyter_distrain.backends.local.processes import free_ports

TOKEN = "bench-token"
FINISHED = ("Succeeded", "Failed", "Stopped")
HEADERS = {"Authorization": f"token {TOKEN}"}
TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))  # its control plane (controlplane.cluster), which the Kubernetes benchmarks run


class Server:
    def __init__(self, *args: str):
        self.tmp = tempfile.TemporaryDirectory(prefix="distrain-bench-")
        self.root = Path(self.tmp.name) / "home"
        self.code = Path(self.tmp.name) / "code"
        self.code.mkdir()
        port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{port}"
        self.api = f"{self.url}/distrain/api"
        self.process = subprocess.Popen(
            [str(Path(sys.executable).with_name("jupyter")), "server", "--no-browser", f"--port={port}",
             f"--IdentityProvider.token={TOKEN}", "--ServerApp.allow_root=True", f"--Distrain.root={self.root}",
             f"--ServerApp.root_dir={self.tmp.name}", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.request("GET", "version")
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        raise RuntimeError("jupyter server did not start")

    def request(self, method: str, path: str, body: dict | None = None):
        text = self.request_text(path, method, body)
        return json.loads(text) if text else None

    def request_text(self, path: str, method: str = "GET", body: dict | None = None) -> str:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        request = urllib.request.Request(f"{self.api}/{path}", data=data, method=method, headers=HEADERS)
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.read().decode()

    def submit(self, name: str, command: str, **spec) -> dict:
        return self.request("POST", "jobs", {"name": name, "code": {"path": str(self.code)}, "command": command,
                                             **spec})

    def wait(self, name: str, phases=FINISHED) -> dict:
        """The job once it is in one of `phases`; its end comes with the end of its log stream, sent as soon as
        it is recorded (other phases are asked for every 0.2 s)."""
        if set(phases) <= set(FINISHED):
            self.stream_end(name)
        while (job := self.request("GET", f"jobs/{name}"))["phase"] not in phases:
            time.sleep(0.2)
        return job

    def stream_end(self, name: str) -> dict:
        """The last message of the job's log stream: its end (or an error), once every line was sent."""
        stream = websocket.create_connection(f"ws{self.api[4:]}/jobs/{name}/logs/stream",
                                             header=[f"{k}: {v}" for k, v in HEADERS.items()])
        try:
            while (message := json.loads(stream.recv()))["type"] == "lines":
                pass
            return message
        finally:
            stream.close()

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(60)
        self.tmp.cleanup()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def python() -> str:
    return os.environ.get("PYTHON", sys.executable)


def table(rows: list[tuple]) -> str:
    """A Markdown table of (measurement, value, baseline value, baseline, ratio, goal) rows."""
    lines = ["| measurement | distrain | baseline | same run | ratio | goal |", "|---|---:|---|---:|---:|---|"]
    lines += [f"| {what} | {value:.4g} | {baseline} | {base:.4g} | {ratio:.2f} | {goal} |"
              for what, value, base, baseline, ratio, goal in rows]
    return "\n".join(lines)


@contextmanager
def control_plane(*namespaces: str, engines: bool = False, output_claim: bool = False,
                  audit_everyone: bool = False, real_node: bool = False) -> Iterator:
    """The tests' control plane (tests/controlplane: a real API server, kwok's nodes or with `real_node` a real node
    whose pods are containers; with `engines`, JobSet, the Training Operator and Kueue) with the jobs' namespace and
    `namespaces`, and with `output_claim` the claim the jobs write their output to by default, in a temporary
    directory (plane.dir) it leaves with. `audit_everyone`: its audit log (plane.audit_log) holds every request."""
    from controlplane.cluster import NAMESPACE, ControlPlane

    with tempfile.TemporaryDirectory(prefix="distrain-bench-") as tmp:
        plane = ControlPlane(Path(tmp), engines=engines, audit_everyone=audit_everyone, real_node=real_node)
        plane.start()
        try:
            plane.create(*({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                           for name in (NAMESPACE, *namespaces)))
            if output_claim:
                (plane.dir / "outputs").mkdir()
                plane.create(
                    {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "distrain-outputs"},
                     "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                              "hostPath": {"path": str(plane.dir / "outputs")},
                              "claimRef": {"namespace": NAMESPACE, "name": "distrain-outputs"}}},
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": "distrain-outputs", "namespace": NAMESPACE},
                     "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}},
                              "volumeName": "distrain-outputs", "storageClassName": ""}})
            yield plane
        finally:
            plane.stop()
