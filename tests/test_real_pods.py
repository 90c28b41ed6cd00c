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


@pytest.fixture
def cli(real_cluster, tmp_path) -> CLI:
    """The `distrain` CLI on the real node's cluster, configured as a server's terminal is."""
    config = tmp_path / "jupyter-config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {
        "backend": "kubernetes", "namespace": NAMESPACE, "kubeconfig": str(real_cluster.kubeconfig(RESTRICTED)),
        "default_images": {"python": PYTHON_IMAGE, "tensorflow": PYTHON_IMAGE}}}))
    cli = CLI(tmp_path / "home", tmp_path)
    cli.env.update(JUPYTER_CONFIG_DIR=str(config), DISTRAIN_BACKEND="kubernetes")
    return cli


def submit(cli: CLI, spec: dict) -> None:
    path = cli.cwd / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    cli("submit", "-f", str(path))


def python(program: str) -> str:
    """A command running `program` with the image's Python (the jobs here have no code of their own)."""
    return f"python -c 'import base64; exec(base64.b64decode(\"{base64.b64encode(program.encode()).decode()}\"))'"


def test_a_pod_reaches_the_cluster_and_nothing_outside_it(real_cluster, admin):
    """A pod resolves the cluster's names and no others, and reaches no address outside the node's network
    namespace (this machine's own included), whose only route is the pods' subnet and whose only links are
    its loopback, the bridge and the pods' ends."""
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
        refused = ANY_OF("[Errno 101] Network is unreachable", "timed out")
        assert [line.split(" ", 1) for line in lines[1:]] == [[host, refused] for host in ("192.0.2.1", "8.8.8.8", HOST_IP)]
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


def test_a_job_runs_its_replicas_as_containers_and_leaves_none(real_cluster, admin, cli):
    """Submitted with the CLI as a user would, on the JobSet engine: two replicas reach each other by their
    cluster names, log to pods/log and to the output volume, and Succeed; their image shows as a local one.
    Deleted with its output kept and made again under its name, the job starts with none of the old lines.
    Deleted, it leaves no container running."""
    spec = {"name": "hello", "framework": "python", "replicas": {"worker": {"count": 2}},
            "policy": {"success": "all-workers"}, "command": python(GREET)}
    submit(cli, spec)
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
        submit(cli, {**spec, "replicas": {"worker": {}}, "command": "python -c 'print(\"the second hello\")'"})
        assert cli.wait("hello", timeout=240)["phase"] == "Succeeded"
        assert cli("logs", "hello").stdout.splitlines() == ["[worker-0] the second hello"]
    finally:
        cli("delete", "hello")
    wait(lambda: not admin.list_namespaced_pod(NAMESPACE).items and not running_containers(),
         "the job's containers gone")


# the chief fails its job's first run (exit 3); every other replica, and the chief of a later run, runs on
FAIL_ONCE = """
import os, sys, time
failed = os.path.join(os.environ["DISTRAIN_OUTPUT_DIR"], "failed-once")
if os.environ["DISTRAIN_REPLICA"] == "chief-0" and not os.path.exists(failed):
    time.sleep(3)
    open(failed, "w").close()
    sys.exit(3)
time.sleep(600)
"""


@pytest.mark.parametrize("engine", ["jobset", "kubeflow"])
def test_a_failing_chief_stops_every_container_and_stop_restart_delete_leave_none(admin, cli, engine):
    """The chief exits 3: the job Fails with exit code 3 and the runtime runs none of its containers. Restarted,
    it runs again (run 2); stopped, nothing of it runs; deleted, no pod is left."""
    cli.env["DISTRAIN_KUBERNETES_ENGINE"] = engine
    spec = {"name": f"chief-{engine}", "framework": "tensorflow", "replicas": {"chief": {}, "worker": {"count": 2}},
            "command": python(FAIL_ONCE)}
    name = spec["name"]
    submit(cli, spec)
    try:
        job = cli.wait(name, timeout=240)
        assert (job["phase"], job["exit_code"], job["engine"]) == ("Failed", 3, engine), job
        wait(lambda: not running_containers(), "no container of the failed job runs")
        cli("restart", name)
        wait(lambda: (j := cli.json("get", name))["run"] == 2 and j["replica_phases"].get("Running") == 3,
             "the restarted job runs")
        assert len(running_containers()) >= 3
        cli("stop", name)
        assert cli.json("get", name)["phase"] == "Stopped"
        wait(lambda: not running_containers(), "no container of the stopped job runs")
    finally:
        cli("delete", name)
    wait(lambda: not admin.list_namespaced_pod(NAMESPACE).items, "the job's pods gone")


def test_a_replica_over_its_memory_is_oom_killed_by_the_kernel_and_restarted_as_asked(admin, cli):
    """A worker allocating past its memory limit is killed by the kernel (the cgroup's OOM killer): reported
    OOMKilled, restarted once as its policy asks (a signal's exit code), then the job Fails with 137."""
    spec = {"name": "greedy", "framework": "python",
            "replicas": {"worker": {"resources": {"memory": "64Mi"}}},
            "policy": {"restart": "exit-code", "max_restarts": 1},
            "command": python("import time\nhoard = bytearray(256 * 2 ** 20)\ntime.sleep(60)")}
    submit(cli, spec)
    try:
        job = cli.wait("greedy", timeout=240)
        [worker] = job["replicas"]
        assert (job["phase"], job["exit_code"], worker["reason"], worker["restarts"]) == \
            ("Failed", 137, "OOMKilled", 1), job
    finally:
        cli("delete", "greedy")
    wait(lambda: not admin.list_namespaced_pod(NAMESPACE).items and not running_containers(),
         "the job's containers gone")
