"""Jobs on a real node (the `real_cluster` fixture): pods are containers run by containerd and a kubelet, in a
network namespace of the test's own, with images built here (tests/controlplane/images.py)."""

from __future__ import annotations

import base64
import json
import time

import pytest
import yaml
from conftest import CLI
from controlplane import realnode
from controlplane.cluster import ADMIN, HOST_IP, NAMESPACE, RESTRICTED
from controlplane.images import PYTHON_IMAGE
from kubernetes import client

from jupyter_distrain import storage
from jupyter_distrain.backends.base import current_owner

pytestmark = pytest.mark.real_pods


def wait(condition, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting until {what}")


class ANY_OF:
    def __init__(self, *values: str):
        self.values = values

    def __eq__(self, other: object) -> bool:
        return other in self.values

    def __repr__(self) -> str:
        return f"any of {self.values}"


def running_containers() -> list[str]:
    """The tasks containerd runs for the node's pods (their sandboxes included), as the runtime says."""
    tasks = realnode.ctr("tasks", "list").stdout.splitlines()[1:]
    return [line.split()[0] for line in tasks if line.split()[-1] == "RUNNING"]


@pytest.fixture
def admin(real_cluster):
    with real_cluster.client(ADMIN) as api:
        yield client.CoreV1Api(api)


def test_a_pod_reaches_the_cluster_and_nothing_outside_it(real_cluster, admin):
    probe = f"""
import socket

def resolve(name):
    try:
        return socket.gethostbyname(name)
    except OSError:
        return "unresolved"

def reach(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "connected"
    except OSError as e:
        return str(e)

print(resolve("kubernetes.default.svc.cluster.local"), resolve("example.com"), resolve("deb.debian.org"))
for host in ("192.0.2.1", "8.8.8.8", "{HOST_IP}"):
    print(host, reach(host, 53))
"""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "isolation", "namespace": NAMESPACE},
           "spec": {"restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": PYTHON_IMAGE, "command": ["python", "-c", probe]}]}}
    admin.create_namespaced_pod(NAMESPACE, pod)
    try:
        wait(lambda: admin.read_namespaced_pod("isolation", NAMESPACE).status.phase in ("Succeeded", "Failed"),
             "the probe ended")
        lines = admin.read_namespaced_pod_log("isolation", NAMESPACE).splitlines()
        assert lines[0].split() == ["10.0.0.1", "unresolved", "unresolved"]  # the cluster's names only
        # refused by the node's namespace, which routes nowhere else (past the kernel's rate of ICMP answers,
        # the packet is dropped unanswered)
        assert [line.split(" ", 1) for line in lines[1:]] == [
            [host, ANY_OF("[Errno 101] Network is unreachable", "timed out")] for host in ("192.0.2.1", "8.8.8.8", HOST_IP)]
        routes = realnode.in_netns("ip", "-o", "route", text=True).stdout.splitlines()
        assert [route.split()[0] for route in routes] == [realnode.POD_SUBNET]
        links = realnode.in_netns("ip", "-o", "link", text=True).stdout.splitlines()
        assert {link.split(": ")[1].split("@")[0] for link in links} - {"lo", realnode.BRIDGE} == \
            {link.split(": ")[1].split("@")[0] for link in links if "master cni0" in link}  # the pods' ends only
    finally:
        admin.delete_namespaced_pod("isolation", NAMESPACE, grace_period_seconds=0)
        wait(lambda: not admin.list_namespaced_pod(NAMESPACE).items and not running_containers(),
             "the probe's containers gone")


# each replica serves its name at its address and asks the other's, by the cluster names the product gives
GREET = """
import json, os, socket, threading, time
me, index = os.environ["DISTRAIN_REPLICA"], int(os.environ["DISTRAIN_INDEX"])
workers = json.loads(os.environ["DISTRAIN_CLUSTER"])["worker"]
server = socket.create_server(("", int(workers[index].rsplit(":", 1)[1])))
threading.Thread(target=lambda: [c.sendall(me.encode()) for c in iter(lambda: server.accept()[0], None)],
                 daemon=True).start()
host, port = workers[1 - index].rsplit(":", 1)
for _ in range(240):
    try:
        print(me, "heard", socket.create_connection((host, int(port)), timeout=2).recv(64).decode(), flush=True)
        break
    except OSError:
        time.sleep(0.5)
time.sleep(5)  # while the other asks
"""


def test_a_job_runs_its_replicas_as_containers_and_leaves_none(real_cluster, admin, tmp_path):
    """Submitted with the CLI as a user would, on the JobSet engine: two replicas reach each other by their
    cluster names, log to pods/log and to the output volume, and Succeed; their image shows as a local one.
    Deleted with its output kept and made again under its name, the job starts with none of the old lines.
    Deleted, it leaves no container running."""
    config = tmp_path / "jupyter-config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {
        "backend": "kubernetes", "namespace": NAMESPACE, "kubeconfig": str(real_cluster.kubeconfig(RESTRICTED)),
        "default_images": {"python": PYTHON_IMAGE}}}))
    cli = CLI(tmp_path / "home", tmp_path)
    cli.env.update(JUPYTER_CONFIG_DIR=str(config), DISTRAIN_BACKEND="kubernetes")
    program = base64.b64encode(GREET.encode()).decode()
    spec = {"name": "hello", "framework": "python", "replicas": {"worker": {"count": 2}},
            "policy": {"success": "all-workers"},
            "command": f"python -c 'import base64; exec(base64.b64decode(\"{program}\"))'"}
    (tmp_path / "distrain.yaml").write_text(yaml.safe_dump(spec))
    cli("submit", "-f", str(tmp_path / "distrain.yaml"))
    try:
        job = cli.wait("hello", timeout=240)
        assert (job["phase"], job["engine"]) == ("Succeeded", "jobset"), job
        logs = cli("logs", "hello").stdout
        assert "[worker-0] worker-0 heard worker-1" in logs and "[worker-1] worker-1 heard worker-0" in logs
        uid = admin.read_namespaced_config_map("hello", NAMESPACE).metadata.uid
        copy = (real_cluster.dir / "volumes" / "distrain-outputs" / storage.OWNERS / storage.owner_dir(current_owner())
                / "hello" / ".distrain" / "logs" / uid / "1" / "worker-1.log")
        assert "worker-1 heard worker-0" in copy.read_text()  # the pod's own copy, on the volume
        [image] = job["provenance"]["image_digests"]  # imported here: no registry's digest
        assert image.startswith(f"{PYTHON_IMAGE} (a local image, sha256:") and "@" not in image

        cli("delete", "hello")  # its output kept
        again = {**spec, "replicas": {"worker": {}}, "command": "python -c 'print(\"the second hello\")'"}
        (tmp_path / "distrain.yaml").write_text(yaml.safe_dump(again))
        cli("submit", "-f", str(tmp_path / "distrain.yaml"))
        assert cli.wait("hello", timeout=240)["phase"] == "Succeeded"
        assert cli("logs", "hello").stdout.splitlines() == ["[worker-0] the second hello"]
    finally:
        cli("delete", "hello")
    wait(lambda: not admin.list_namespaced_pod(NAMESPACE).items and not running_containers(),
         "the job's containers gone")
