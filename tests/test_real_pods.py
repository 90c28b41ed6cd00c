"""Jobs on a real node (the `real_cluster` fixture): pods are containers run by containerd and a kubelet, in a
network namespace of the test's own, with images built here (tests/controlplane/images.py)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from datetime import datetime
from pathlib import Path

import conftest
import githost
import webhooks
import pytest
import requests
import yaml
from conftest import CLI, EXAMPLES, JupyterServer, git, make_checkout, remove_janitor, write_wheel
from controlplane import realnode
from controlplane.cluster import ADMIN, HOST_IP, NAMESPACE, RESTRICTED, local_queue
from controlplane.images import PADDLE_IMAGE, PRODUCT_IMAGE, PYTHON_IMAGE, PYTORCH_IMAGE, TENSORFLOW_IMAGE
from kubernetes import client
from test_logs import BURNS, LAUNCHED
from test_progress import PACED
from test_stacks import LATE_TO_ALL_REDUCE, innermost

from jupyter_distrain import storage
from jupyter_distrain.backends.kubernetes import naming, render
from jupyter_distrain.backends.kubernetes.podspec import VOLUME_LOGS
from jupyter_distrain.config import Distrain
from jupyter_distrain.owners import current_owner

# the cluster (its images built once per machine) starts untimed; each test has the suite's 300 s
pytestmark = [pytest.mark.real_pods, pytest.mark.timeout(300, func_only=True)]


def wait(condition, what: str, timeout: float = 120, shown=None):
    """conftest.wait, asking less often: most conditions run a command."""
    return conftest.wait(condition, what, timeout, shown, every=0.5)


class ANY_OF:
    def __init__(self, *values: str):
        self.values = values

    def __eq__(self, other: object) -> bool:
        return other in self.values

    def __repr__(self) -> str:
        return f"any of {self.values}"


def none_left(admin) -> bool:
    """Whether no pod is left, nor any of their containers (as the runtime says) or mounts."""
    return not admin.list_namespaced_pod(NAMESPACE).items and not running_containers() and not realnode.pod_mounts()


def running_containers() -> list[str]:
    """The tasks containerd runs for the node's pods (their sandboxes included), as the runtime says."""
    tasks = realnode.ctr("tasks", "list").stdout.splitlines()[1:]
    return [line.split()[0] for line in tasks if line.split()[-1] == "RUNNING"]


def outputs(real_cluster) -> Path:
    """This user's directory of the cluster's output volume, as the node holds it."""
    return real_cluster.dir / "volumes" / "distrain-outputs" / storage.OWNERS / storage.owner_dir(current_owner())


def as_kept(admin, real_cluster, job: str) -> str:
    """What the cluster holds of a job's lines, to say where lines went missing: each pod's pods/log, and the log
    files its replicas wrote to the output volume."""
    pods = admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}={job},{naming.ROLE}").items
    logs = [f"pods/log of {pod.metadata.name} ({pod.status.phase}):\n"
            f"{admin.read_namespaced_pod_log(pod.metadata.name, NAMESPACE)}" for pod in pods]
    files = [f"{path.name} on the volume:\n{path.read_text()}" for path in
             sorted((outputs(real_cluster) / job / VOLUME_LOGS).rglob("*.log"))]
    return "\n".join(logs + files)


@pytest.fixture
def admin(real_cluster):
    with real_cluster.client(ADMIN) as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def cli(real_cluster, tmp_path) -> CLI:
    """The `distrain` CLI on the real node's cluster, configured as a server's terminal is, and run in the node's
    network namespace: a user's machine on the cluster's network, which reaches its git host."""
    config = tmp_path / "jupyter-config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {
        "backend": "kubernetes", "namespace": NAMESPACE, "kubeconfig": str(real_cluster.kubeconfig(RESTRICTED)),
        "default_images": {"python": PYTHON_IMAGE, "tensorflow": TENSORFLOW_IMAGE, "pytorch": PYTORCH_IMAGE,
                           "paddle": PADDLE_IMAGE},
        "git_image": PYTHON_IMAGE,
        "controller_image": PRODUCT_IMAGE}}))
    cli = CLI(tmp_path / "home", tmp_path, prefix=tuple(realnode.IN_NETNS))
    cli.env.update(JUPYTER_CONFIG_DIR=str(config), DISTRAIN_BACKEND="kubernetes")
    return cli


def configure(cli: CLI, **settings) -> None:
    """Sets `settings` in the Distrain configuration `cli` runs with (as an administrator would)."""
    path = Path(cli.env["JUPYTER_CONFIG_DIR"]) / "jupyter_server_config.json"
    config = json.loads(path.read_text())
    config["Distrain"].update(settings)
    path.write_text(json.dumps(config))


GIT_PORT = 8080  # the git host's, at the node's address


@pytest.fixture(scope="module")
def git_host(real_cluster, tmp_path_factory):
    """A git host in the node's network namespace, at the node's address, as a cluster's own git server would be:
    pods clone from it, and the CLI (in the namespace too) pins commits and takes snapshots against it. Yields its
    root directory (bare repositories, and files it serves as they are) and its URL."""
    root = tmp_path_factory.mktemp("git-host")
    url = f"http://{realnode.NODE_IP}:{GIT_PORT}"
    host = subprocess.Popen([*realnode.IN_NETNS, sys.executable, githost.__file__, str(root), realnode.NODE_IP,
                             str(GIT_PORT)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait(lambda: subprocess.run([*realnode.IN_NETNS, "curl", "-so", "/dev/null", url]).returncode == 0,
             "the git host answers", 30)
        yield root, url
    finally:
        host.kill()
        host.wait()


HOOK_PORT = 8081  # a webhook receiver's, at the node's address


@pytest.fixture
def hook(real_cluster, tmp_path):
    """A webhook's receiver in the node's network namespace, at the node's address, where pods post to it: its URL,
    and a function answering the bodies of the POSTs it has had."""
    kept = tmp_path / "posts.jsonl"
    kept.touch()
    url = f"http://{realnode.NODE_IP}:{HOOK_PORT}/hook"
    receiver = subprocess.Popen([*realnode.IN_NETNS, sys.executable, webhooks.__file__, realnode.NODE_IP,
                                 str(HOOK_PORT), str(kept)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait(lambda: subprocess.run([*realnode.IN_NETNS, "curl", "-so", "/dev/null", url]).returncode == 0,
             "the receiver answers", 30)
        yield url, lambda: [json.loads(line) for line in kept.read_text().splitlines()]
    finally:
        receiver.kill()
        receiver.wait()


def publish(directory, git_host) -> str:
    """`directory` committed as the one commit of branch main of a repository on the git host; its URL."""
    root, url = git_host
    git(directory, "init", "--quiet", "--initial-branch=main")
    git(directory, "add", ".")
    git(directory, "commit", "--quiet", "-m", "published")
    git(directory, "clone", "--quiet", "--bare", ".", str(root / f"{directory.name}.git"))
    return f"{url}/{directory.name}.git"


def submit(cli: CLI, spec: dict, check: bool = True) -> subprocess.CompletedProcess:
    path = cli.cwd / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return cli("submit", "-f", str(path), check=check)


def python(program: str) -> str:
    """A command running `program` with the image's Python (the jobs here have no code of their own)."""
    return f"python -c 'import base64; exec(base64.b64decode(\"{base64.b64encode(program.encode()).decode()}\"))'"


def test_a_pod_reaches_the_cluster_and_nothing_outside_it(real_cluster, admin):
    """A pod resolves the cluster's names and no others, reaches the API server at the `kubernetes` Service, and
    reaches no address outside the node's network namespace (this machine's own included), whose only route is
    the pods' subnet and whose only links are its loopback, the bridge and the pods' ends."""
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
print(reach("kubernetes.default.svc.cluster.local", 443))
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
        assert lines[1] == "connected"
        # refused by the node's namespace, which routes nowhere else (past the kernel's rate of ICMP answers,
        # the packet is dropped unanswered)
        refused = ANY_OF("[Errno 101] Network is unreachable", "timed out")
        outside = ("192.0.2.1", "8.8.8.8", HOST_IP)
        assert [line.split(" ", 1) for line in lines[2:]] == [[host, refused] for host in outside]
        routes = realnode.in_netns("ip", "-o", "route", text=True).stdout.splitlines()
        assert [route.split()[0] for route in routes] == [realnode.POD_SUBNET]
        links = realnode.in_netns("ip", "-o", "link", text=True).stdout.splitlines()
        assert {link.split(": ")[1].split("@")[0] for link in links} - {"lo", realnode.BRIDGE} == \
            {link.split(": ")[1].split("@")[0] for link in links if "master cni0" in link}  # the pods' ends only
    finally:
        admin.delete_namespaced_pod("isolation", NAMESPACE, grace_period_seconds=0)
        wait(lambda: none_left(admin), "nothing of the probe left")


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
    Deleted with its output kept, its run's CPU seconds and peak memory, as each pod's tee measured them, are in the
    usage ledger. Made again under its name, the job starts with none of the old lines, and its replica's CPU seconds
    and peak memory are those its process measured of itself (within 2%, with the product's own step before it).
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
        copy = outputs(real_cluster) / "hello" / ".distrain" / "logs" / uid / "1" / "worker-1.log"
        assert "worker-1 heard worker-0" in copy.read_text()  # the pod's own copy, on the volume
        [image] = job["provenance"]["image_digests"]  # imported here: no registry's digest
        assert image.startswith(f"{PYTHON_IMAGE} (a local image, sha256:") and "@" not in image

        cli("delete", "hello")  # its output kept, its run's usage in the ledger: CPU measured by each pod's tee
        [run] = [row for row in cli.json("usage")["runs"] if row["job"] == "hello"]
        assert run["cpu_measured"] and run["cpu_seconds"] > 0 and run["peak_memory"] > 0, run
        submit(cli, {**spec, "replicas": {"worker": {}}, "command": python(BURNS)})
        second = cli.wait("hello", timeout=240)
        assert second["phase"] == "Succeeded"
        [line] = cli("logs", "hello").stdout.splitlines()  # none of the old lines: the process's own account
        own_cpu, own_peak = map(float, line.removeprefix("[worker-0] ").split())
        used = second["replicas"][0]["usage"]
        # the container ran the product's check of its requirements (0.2 s) before the command: its CPU counts too
        assert own_cpu <= used["cpu_seconds"] <= 1.02 * own_cpu + 0.5 and own_peak <= used["peak_memory"] <= \
            1.02 * own_peak, (used, line)
    finally:
        cli("delete", "hello")
    wait(lambda: none_left(admin), "nothing of the job left")


# the chief fails its job's first run (exit 3, its exception's traceback on stderr); every other replica, and the
# chief of a later run, runs on until told to stop
FAIL_ONCE = """
import os, signal, sys, time, traceback
me = os.environ["DISTRAIN_REPLICA"]
print(me, "has", os.environ["TEAM"], "and", os.environ.get("SHARD", "no shard"), flush=True)
open("scratch.txt", "w").write(me)  # next to the code: named as the pod ends
os.makedirs("/tmp/boards", exist_ok=True)  # an event file where its TensorBoard does not look: named too
open(f"/tmp/boards/events.out.tfevents.0.{me}", "w").close()
signal.signal(signal.SIGTERM, lambda *_: (print(me, "told to stop", flush=True), sys.exit(0)))
failed = os.path.join(os.environ["DISTRAIN_OUTPUT_DIR"], "failed-once")
if me == "chief-0" and not os.path.exists(failed):
    time.sleep(3)
    open(failed, "w").close()
    try:
        raise ValueError("bad learning rate")
    except ValueError:
        traceback.print_exc()
    sys.exit(3)
time.sleep(600)
"""


@pytest.mark.parametrize("engine", ["jobset", "kubeflow"])
def test_a_failing_chief_stops_every_container_and_stop_restart_delete_leave_none(admin, cli, engine):
    """The chief exits 3: the job Fails with exit code 3 and the exception the chief printed (its container's
    termination message, written by the log tee) and the runtime runs none of its containers. Restarted, it runs
    again (run 2); stopped, nothing of it runs; deleted, no pod is left."""
    cli.env["DISTRAIN_KUBERNETES_ENGINE"] = engine
    spec = {"name": f"chief-{engine}", "framework": "tensorflow", "env": {"TEAM": "{{ job }}'s team"},
            "replicas": {"chief": {}, "worker": {"count": 2, "env": {"SHARD": "shard {{ index }}"}}},
            "command": python(FAIL_ONCE)}
    name = spec["name"]
    submit(cli, spec)
    try:
        job = cli.wait(name, timeout=240)
        assert (job["phase"], job["exit_code"], job["engine"]) == ("Failed", 3, engine), job
        assert job["message"] == "replica chief-0 exited with code 3: ValueError: bad learning rate", job
        wait(lambda: not running_containers(), "no container of the failed job runs")
        cli("restart", name)
        wait(lambda: (j := cli.json("get", name))["run"] == 2 and j["replica_phases"].get("Running") == 3,
             "the restarted job runs")
        assert len(running_containers()) >= 3
        wait(lambda: cli("logs", name).stdout.count(" has ") == 3, "each replica's process runs (its first line)", 60)
        cli("stop", name)
        assert cli.json("get", name)["phase"] == "Stopped"
        wait(lambda: not running_containers(), "no container of the stopped job runs")
        said = set(cli("logs", name).stdout.splitlines())  # each replica's process was told, and said so
        assert {f"[{replica}] {replica} told to stop" for replica in ("chief-0", "worker-0", "worker-1")} <= said, \
            cli("get", name).stdout  # its events say why not
        assert {f"[chief-0] chief-0 has {name}'s team and no shard",  # the job's env, and its role's
                f"[worker-1] worker-1 has {name}'s team and shard 1",
                "[worker-1] distrain: 1 file written next to the code, discarded with the pod: scratch.txt (8 bytes); "
                "write what you keep under $DISTRAIN_OUTPUT_DIR",
                "[worker-1] distrain: TensorBoard event files written outside the job's output directory, where its "
                "TensorBoard and metrics do not look, discarded with the pod: in /tmp/boards; write them under "
                "$DISTRAIN_LOG_DIR"} <= said
    finally:
        cli("delete", name)
    wait(lambda: none_left(admin), "nothing of the job left")


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
    wait(lambda: none_left(admin), "nothing of the job left")


def test_a_job_runs_the_commit_it_clones_from_the_git_host_with_the_users_changes(git_host, cli, admin, tmp_path):
    """The pods' fetch-code clones the pinned commit from the git host over smart HTTP and applies the snapshot of
    the checkout's changes (a commit not pushed, an edit, a deletion, a new file): the job runs exactly that tree,
    as it does on this machine (test_snapshot.py)."""
    root, url = git_host
    work = make_checkout(tmp_path / "checkout", root / "mine.git", f"{url}/mine.git")
    cli("submit", "-f", str(work / "distrain.yaml"), "--include-changes", cwd=work)
    try:
        job = cli.wait("mine", timeout=240)
        shown = [line.removeprefix("[worker-0] ") for line in cli("logs", "mine").stdout.splitlines()]
        assert job["phase"] == "Succeeded", shown
        assert shown == [".gitignore: secret.txt", "added.py: print('new')", "distrain.yaml: code:",
                         "train.py: print('edited')", "unpushed.py: print('committed, not pushed')"]
        assert job["spec"]["code"]["snapshot"]["files"] == ["A added.py", "D old.py", "M train.py"]
    finally:
        cli("delete", "mine")
    wait(lambda: none_left(admin), "nothing of the job left")


@pytest.mark.parametrize("engine", ["kubeflow"])  # on JobSet: test_hub.py's first test, from the panel, through the hub
def test_tensorflow_trains_across_pods_with_its_requirements_and_its_tensorboard(
        git_host, real_cluster, cli, admin, tmp_path, engine):
    """examples/tf-ps (chief, ps, 2 workers), cloned from the git host with a requirements.txt that names a wheel
    the host serves, trains to Succeeded on real pods: the engine stops the ps and the workers once the chief is
    done; pip installs the wheel in each pod and provenance names it beside the image; the job's TensorBoard pod
    serves the chief's scalars through a Jupyter server; the logs come from pods/log, and from the volume once
    the pods are gone, also to two readers at once."""
    root, url = git_host
    cli.env["DISTRAIN_KUBERNETES_ENGINE"] = engine
    code = shutil.copytree(EXAMPLES / "tf-ps", tmp_path / f"tf-ps-{engine}")
    wheel = write_wheel(root, "greeting", "WORDS = 'hello'\n")
    with open(code / "requirements.txt", "a") as requirements:
        requirements.write(f"--no-index\ngreeting @ {url}/{wheel.name}\n")
    spec = {**yaml.safe_load((code / "distrain.yaml").read_text()), "name": code.name,
            "code": {"git": publish(code, git_host), "ref": "main"}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    cli("submit", "-f", str(tmp_path / "job.yaml"), "-p", "steps=100")
    server = JupyterServer(tmp_path, env={**os.environ, "JUPYTER_CONFIG_DIR": cli.env["JUPYTER_CONFIG_DIR"]})
    name, api = code.name, f"{server.url}/distrain/api"
    try:
        job = cli.wait(name, timeout=300)
        logs = cli("logs", name).stdout
        assert (job["phase"], job["engine"]) == ("Succeeded", engine), logs
        assert {r["name"]: r["phase"] for r in job["replicas"]} == {
            "chief-0": "Succeeded", "ps-0": "Stopped", "worker-0": "Stopped", "worker-1": "Stopped"}
        assert "[chief-0] step 100/100 loss" in logs and "[ps-0] ps 0 serving at grpc://" in logs, \
            f"{logs}\n{cli('get', name).stdout}\n{as_kept(admin, real_cluster, name)}"
        provenance = cli.json("get", name)["provenance"]  # the replicas' reports, read with their logs
        assert provenance["requirements"] == ["greeting==1.0"], provenance
        [image] = provenance["image_digests"]
        assert image.startswith(f"{TENSORFLOW_IMAGE} (a local image, sha256:")

        scalars = wait(lambda: (r := requests.get(f"{api}/jobs/{name}/scalars", headers=server.headers)).ok
                       and r.json()["runs"], "the job's TensorBoard pod serves its scalars", 120)
        board = f"{naming.COMPONENT}=tensorboard,{naming.JOB}={name}"
        [pod] = admin.list_namespaced_pod(NAMESPACE, label_selector=board).items
        assert pod.spec.containers[0].image == PRODUCT_IMAGE  # which has TensorBoard
        assert [step for step, _ in scalars["chief-0"]] == [50, 100], scalars

        replicas = f"{naming.JOB}={name},{naming.ROLE}"
        admin.delete_collection_namespaced_pod(NAMESPACE, label_selector=replicas, grace_period_seconds=0)
        wait(lambda: not admin.list_namespaced_pod(NAMESPACE, label_selector=replicas).items, "the pods gone")
        assert cli("logs", name).stdout == logs
        readers = [CLI(tmp_path / f"reader-{i}", tmp_path, prefix=cli.prefix) for i in range(2)]
        for reader in readers:  # two users' machines with no copies of their own, reading at once from the
            reader.env = {**cli.env, "DISTRAIN_HOME": str(reader.root)}  # volume, each through its own reader pod
        with ThreadPoolExecutor(2) as pool:
            assert list(pool.map(lambda reader: reader("logs", name).stdout, readers)) == [logs, logs]
    finally:
        server.stop()
        cli("delete", name)
    wait(lambda: none_left(admin), "nothing of the job left")


@pytest.mark.parametrize("engine", ["jobset", "kubeflow"])
def test_pytorch_trains_across_pods_under_torchrun(git_host, real_cluster, cli, admin, tmp_path, engine):
    """examples/pytorch-torchrun (master, 2 workers) from the git host: torchrun in each pod takes the node count
    and rank from the PET_* variables the product sets and meets the others at the master's rendezvous; DDP
    (gloo) trains the three ranks to Succeeded, followed live from the pods by `submit --follow`, and the master
    saves its result to the output volume."""
    cli.env["DISTRAIN_KUBERNETES_ENGINE"] = engine
    code = shutil.copytree(EXAMPLES / "pytorch-ddp", tmp_path / f"torch-{engine}")
    spec = {**yaml.safe_load((EXAMPLES / "pytorch-torchrun" / "distrain.yaml").read_text()), "name": code.name,
            "code": {"git": publish(code, git_host), "ref": "main"}}
    # the image's torchrun (Debian's 1.13) misreads its default 0 for these on Python 3.11 and stops; with 2,
    # stdout goes out as it is and stderr through a file and back, prefixed
    spec["command"] = spec["command"].replace("torchrun ", "torchrun --redirects=2 --tee=2 ", 1)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    name = code.name
    try:
        followed = cli("submit", "-f", str(tmp_path / "job.yaml"), "-p", "epochs=2", "--follow", check=False,
                       timeout=280)
        assert followed.returncode == 0, followed.stdout + followed.stderr + cli("logs", name).stdout
        joined = set(re.findall(r"rank \d/\d joined", followed.stdout))
        home = Path(cli.env["DISTRAIN_HOME"])
        copies = sorted(str(f.relative_to(home)) for f in home.rglob("*") if f.is_file())  # .complete: all copied?
        warnings = [(e["reason"], e["message"]) for e in cli.json("get", name)["events"] if e["type"] == "Warning"]
        assert {f"rank {rank}/3 joined" for rank in range(3)} <= joined, \
            f"{followed.stdout}{followed.stderr}\nread afterwards:\n{cli('logs', name).stdout}\n" \
            f"{as_kept(admin, real_cluster, name)}\nthe CLI's copies: {copies}\nthe job's warnings: {warnings}"
        assert "[master-0] done epoch 2 loss" in followed.stdout
        job = cli.json("get", name)
        assert (job["phase"], job["engine"]) == ("Succeeded", engine), job
        [image] = job["provenance"]["image_digests"]
        assert image.startswith(f"{PYTORCH_IMAGE} (a local image, sha256:")
        result = json.loads((outputs(real_cluster) / name / "result.json").read_text())
        assert result["epoch"] == 2
    finally:
        cli("delete", name)
    wait(lambda: none_left(admin), "nothing of the job left")


def test_through_torchrun_in_a_pod_the_failed_jobs_message_is_its_failing_workers_exception(cli, admin):
    """torchrun (the image's) starts two processes in the master's pod; the second raises. torchrun stops the other
    and raises ChildFailedError: the job's message is the worker's exception, found in the container's termination
    message the log tee wrote."""
    name = "launched"
    script = "/tmp/launched.py"
    written = python(f"open({script!r}, 'w').write({LAUNCHED!r})")
    submit(cli, {"name": name, "framework": "pytorch", "replicas": {"master": {}},
                 "command": f"{written} && torchrun --redirects=2 --tee=2 --standalone --nproc_per_node 2 {script}"})
    try:
        job = cli.wait(name, timeout=180)
        assert (job["phase"], job["message"]) == (
            "Failed", "replica master-0 exited with code 1: ValueError: the learning rate 10 diverged"), \
            f"{job}\n{cli('logs', name).stdout}"
    finally:
        cli("delete", name)
    wait(lambda: none_left(admin), "nothing of the job left")


def test_paddle_parameter_servers_train_across_pods_on_a_paddlejob(git_host, cli, admin, tmp_path):
    """examples/paddle-ps (2 pservers, 2 trainers) from the git host, on the Training Operator's PaddleJob: the
    pservers serve at the addresses the product gives them, each trainer reads its shard and the job succeeds
    once both have trained (the engine ends it with its pservers, which trainer 0 stops last: the trainers may be
    stopped as they exit); the image has what requirements.txt asks for, so the pods install nothing."""
    cli.env["DISTRAIN_KUBERNETES_ENGINE"] = "kubeflow"
    code = shutil.copytree(EXAMPLES / "paddle-ps", tmp_path / "paddle-ps")
    spec = {**yaml.safe_load((code / "distrain.yaml").read_text()),
            "code": {"git": publish(code, git_host), "ref": "main"}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    cli("submit", "-f", str(tmp_path / "job.yaml"), "-p", "passes=3")
    try:
        job = cli.wait("paddle-ps", timeout=400)
        logs = cli("logs", "paddle-ps").stdout
        assert (job["phase"], job["engine"]) == ("Succeeded", "kubeflow"), \
            f"{logs}\n{job['reason']}: {job['message']}\n{json.dumps(job['replicas'], indent=1)}"
        assert {r["name"]: r["phase"] for r in job["replicas"] if r["name"].startswith("worker")} == \
            {"worker-0": ANY_OF("Succeeded", "Stopped"), "worker-1": ANY_OF("Succeeded", "Stopped")}
        assert "[worker-0] done passes 3 loss" in logs
        assert "[ps-0] pserver 0 serving at " in logs and "[ps-1] pserver 1 serving at " in logs
        assert "[worker-0] trainer 0 reads part-00000.txt, part-00002.txt, part-00004.txt, part-00006.txt" in logs
        assert "[worker-1] trainer 1 reads part-00001.txt, part-00003.txt, part-00005.txt, part-00007.txt" in logs
        assert cli.json("get", "paddle-ps")["provenance"]["requirements"] == []  # all in the image already
    finally:
        cli("delete", "paddle-ps")
    wait(lambda: none_left(admin), "nothing of the job left")


# what a replica is, as its own process sees it, and what it may write
WHOAMI = """
import os, greeting
with open(os.path.join(os.environ["DISTRAIN_OUTPUT_DIR"], "written.txt"), "w") as output:
    output.write("by the replica")
capabilities = open("/proc/self/status").read().split("CapEff:")[1].split()[0]
print("uid", os.getuid(), "gid", os.getgid(), "capabilities", capabilities, "home", os.environ["HOME"],
      greeting.WORDS, flush=True)
"""


def test_restricted_pods_run_as_their_user_and_write_their_output(git_host, real_cluster, cli, admin, tmp_path):
    """With pod_security "restricted", in a namespace that enforces it: the code is cloned, its requirements
    installed (for the user, in the workspace) and the command run as the configured non-root user with no
    capabilities, and the replica writes its /output on a volume its administrator opened to that user."""
    root, url = git_host
    code = tmp_path / "whoami"
    code.mkdir()
    (code / "train.py").write_text(WHOAMI)
    wheel = write_wheel(root, "greeting", "WORDS = 'hello'\n")
    (code / "requirements.txt").write_text(f"--no-index\ngreeting @ {url}/{wheel.name}\n")
    volume = real_cluster.dir / "volumes" / "datasets"
    volume.chmod(0o777)  # the kubelet makes each job's directory (its subPath) with the volume's mode
    configure(cli, pod_security="restricted", run_as_user=1234, output_claim="datasets")
    enforce = "pod-security.kubernetes.io/enforce"
    admin.patch_namespace(NAMESPACE, {"metadata": {"labels": {enforce: "restricted"}}})
    try:
        submit(cli, {"name": "whoami", "code": {"git": publish(code, git_host), "ref": "main"},
                     "command": "python train.py"})
        job = cli.wait("whoami", timeout=240)
        logs = cli("logs", "whoami").stdout
        assert job["phase"] == "Succeeded", logs
        assert "[worker-0] Defaulting to user installation because normal site-packages is not writeable" in logs
        said = "uid 1234 gid 1234 capabilities 0000000000000000 home /workspace hello"
        assert logs.splitlines()[-1] == f"[worker-0] {said}"
        assert cli.json("get", "whoami")["provenance"]["requirements"] == ["greeting==1.0"]
        written = volume / storage.OWNERS / storage.owner_dir(current_owner()) / "whoami" / "written.txt"
        assert written.read_text() == "by the replica" and written.stat().st_uid == 1234
    finally:
        admin.patch_namespace(NAMESPACE, {"metadata": {"labels": {enforce: "baseline"}}})
        cli("delete", "whoami")
    wait(lambda: none_left(admin), "nothing of the job left")


def test_stacks_are_dumped_in_each_pod_as_its_own_user(git_host, real_cluster, cli, admin, tmp_path):
    """test_stacks.py's PyTorch job, its third replica late to the all-reduce, in pods under pod_security
    "restricted" (a non-root user, no capability): `distrain stacks` dumps each replica's container through
    pods/exec, with the user's role, as that user, with the py-spy the pod's init container copied from the
    product's image. Replicas 0 and 1 are in the all-reduce, 2 in its own function: it differs. Quiet for its
    hang_after, the job's monitor (a pod of the product's image) warns, keeps the stacks and fails it as Hung."""
    code = tmp_path / "late"
    code.mkdir()
    (code / "train.py").write_text(LATE_TO_ALL_REDUCE)
    (real_cluster.dir / "volumes" / "datasets").chmod(0o777)
    configure(cli, pod_security="restricted", run_as_user=1234, output_claim="datasets")
    enforce = "pod-security.kubernetes.io/enforce"
    admin.patch_namespace(NAMESPACE, {"metadata": {"labels": {enforce: "restricted"}}})
    try:
        submit(cli, {"name": "late", "framework": "pytorch", "code": {"git": publish(code, git_host), "ref": "main"},
                     "command": "python train.py", "replicas": {"worker": {"count": 3}},
                     "policy": {"hang_after": "45s", "on_hang": "fail"}})

        answers = []

        def stacks_once_waiting():
            answers[:] = [asked := cli("stacks", "late", "-o", "json", check=False)]
            if asked.returncode:  # not running yet
                return None
            found = json.loads(asked.stdout)
            rows = {r["name"]: r for r in found["replicas"]}
            if set(rows) != {"worker-0", "worker-1", "worker-2"}:  # one is not running yet
                return None
            ready = all(r["frames"] for r in rows.values()) and all(
                "all_reduce" in innermost(rows[n]["frames"]) for n in ("worker-0", "worker-1"))
            return found if ready and "slow_down" in innermost(rows["worker-2"]["frames"]) else None

        found = wait(stacks_once_waiting, "replicas 0 and 1 in the all-reduce, 2 in slow_down", 180,
                     lambda: f"{answers[0].stdout}{answers[0].stderr}{cli('logs', 'late').stdout}")
        assert found["differs"] == ["worker-2"] and found["shared"] >= 1, found
        assert all([p["command"] for p in r["processes"]] == ["python train.py"] for r in found["replicas"]), found
        print(f"stacks of 3 pods taken in {found['seconds']:.2f} s")
        [pod] = admin.list_namespaced_pod(NAMESPACE,
                                          label_selector=f"{naming.JOB}=late,{naming.REPLICA}=worker-2").items
        [tools] = [c for c in pod.spec.init_containers if c.name == "stack-tools"]
        assert (tools.image, pod.spec.security_context.run_as_user) == (PRODUCT_IMAGE, 1234)
        assert pod.spec.containers[0].security_context.capabilities.drop == ["ALL"]

        one = cli.json("stacks", "late", "--replica", "worker-2")
        assert [r["name"] for r in one["replicas"]] == ["worker-2"] and innermost(one["replicas"][0]["frames"]) == \
            "slow_down"
        failed = cli.wait("late", timeout=150)
        message = "no replica wrote a log line or a TensorBoard step for 45s; their stacks then are kept (distrain " \
                  "stacks late --kept)"
        assert (failed["phase"], failed["reason"], failed["message"]) == ("Failed", "Hung", message), failed
        assert ("NoProgress", message) in [(e["reason"], e["message"]) for e in failed["events"]]
        kept = cli.json("stacks", "late", "--kept")
        assert (kept["reason"], kept["differs"]) == ("NoProgress", ["worker-2"]), kept
        [monitor] = admin.list_namespaced_pod(
            NAMESPACE, label_selector=f"{naming.JOB}=late,app.kubernetes.io/component=monitor").items
        assert monitor.spec.containers[0].image == PRODUCT_IMAGE
        wait(lambda: "no replica of job 'late' is running" in cli("stacks", "late", check=False).stderr,
             "stacks refused once the job ended")
    finally:
        admin.patch_namespace(NAMESPACE, {"metadata": {"labels": {enforce: "baseline"}}})
        cli("delete", "late")
    wait(lambda: none_left(admin), "nothing of the job left")


def test_the_runs_monitor_names_a_straggler(real_cluster, cli, admin, hook):
    """test_progress.py's paced job on pods (the product's image, which has TensorBoard's writer): workers 0 and 1
    write a step every 0.25 s, worker 2 every second; the run's monitor, a pod reading their event files on the
    output volume, names worker 2 in a Straggler warning, with no Jupyter server running, and posts it and the
    job's end to its owner's webhook (reading it from the job's Secret, through its environment), each once. Its
    service account may read no Secret and make no pod (roles.monitor)."""
    url, posts = hook
    configure(cli, webhook_allow_private=True)  # the receiver's address is the node's, a private one
    cli("webhook", "set", input=url + "\n")
    submit(cli, {"name": "paced", "image": PRODUCT_IMAGE, "command": python(PACED),
                 "replicas": {"worker": {"count": 3}}})
    try:
        job = cli.wait("paced", until=lambda j: any(e["reason"] == "Straggler" for e in j["events"]), timeout=240)
        warned = [e for e in job["events"] if e["reason"] == "Straggler"]
        assert [(e["type"], e["replica"]) for e in warned] == [("Warning", "worker-2")], warned
        assert re.fullmatch(r"[\d.]+ steps/s, under 0.7x the other replicas' median \([\d.]+\) for 60 s",
                            warned[0]["message"]), warned
        wait(lambda: posts(), "the Straggler posted", 30)
        with real_cluster.acting_as(naming.MONITOR) as api:
            core = client.CoreV1Api(api)
            for refused in (lambda: core.list_namespaced_secret(NAMESPACE),
                            lambda: core.read_namespaced_secret(naming.notify_name("paced"), NAMESPACE),
                            lambda: core.create_namespaced_pod(NAMESPACE, {"metadata": {"name": "x"}, "spec": {
                                "containers": [{"name": "x", "image": PYTHON_IMAGE}]}})):
                with pytest.raises(client.ApiException) as caught:
                    refused()
                assert caught.value.status == 403
        cli("stop", "paced")
        wait(lambda: len(posts()) == 2, "the end posted", 60)
        time.sleep(3)
        told = [(p["event"], p["phase"], p["replica"], p["message"]) for p in posts()]
        assert told == [("Straggler", "Running", "worker-2", warned[0]["message"]),
                        ("ended", "Stopped", None, "stopped by request")], told
    finally:
        cli("delete", "paced")
    wait(lambda: none_left(admin), "nothing of the job left")


def test_a_sweep_runs_its_controller_in_the_products_image_and_its_trials_as_pods(cli, admin, hook):
    """A 2x2 grid, two trials at a time: the sweep's controller, a pod of the product's own image reaching the API
    server at the kubernetes Service as any in-cluster client does, launches the four trials, which run as pods,
    and ends the sweep once they have succeeded; it posts that end to the admin's webhook, once."""
    url, posts = hook
    configure(cli, notify_url=url, webhook_allow_private=True)
    submit(cli, {"name": "grid", "framework": "python", "command": "python -c \"print('a={{ a }} b={{ b }}')\"",
                 "sweep": {"parameters": {"a": {"values": [1, 2]}, "b": {"values": [1, 2]}}, "parallelism": 2}})
    try:
        sweep = cli.wait("grid", timeout=300)
        trials = {job["name"]: job["phase"] for job in cli.json("list") if job["name"] != "grid"}
        assert (sweep["phase"], trials) == ("Succeeded", {f"grid-{n}": "Succeeded" for n in range(1, 5)}), sweep
        said = {cli("logs", name).stdout for name in trials}
        assert said == {f"[worker-0] a={a} b={b}\n" for a in (1, 2) for b in (1, 2)}
        [controller] = admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.COMPONENT}=sweeper").items
        assert (controller.spec.containers[0].image, controller.status.phase) == (PRODUCT_IMAGE, "Succeeded")
        wait(lambda: posts(), "the sweep's end posted", 30)
        time.sleep(3)
        assert [(p["job"], p["kind"], p["event"], p["phase"]) for p in posts()] == [
            ("grid", "sweep", "ended", "Succeeded")]
    finally:
        cli("delete", "grid")
    wait(lambda: none_left(admin), "nothing of the sweep left")


def test_the_janitors_pod_deletes_a_job_past_its_time(cli, admin):
    """The namespace's janitor, made with the first job that has a time to be kept, runs controllers/janitor.py in a
    pod of the product's image with a service account of its own: it deletes the job whose time is over."""
    configure(cli, janitor_schedule="0 0 1 1 *")  # its scheduled runs (every 10 min by default) never race this one
    submit(cli, {"name": "brief", "framework": "python", "command": "true", "policy": {"ttl_after_finished": "1s"}})
    batch = client.BatchV1Api(admin.api_client)
    try:
        wait(lambda: (expires := cli.json("get", "brief")["expires"]) and datetime.fromisoformat(expires).timestamp()
             < time.time(), "the job's time is over", 240)
        cron = batch.read_namespaced_cron_job(naming.JANITOR, NAMESPACE)
        batch.create_namespaced_job(NAMESPACE, client.V1Job(  # what the CronJob controller does on its schedule
            metadata=client.V1ObjectMeta(name="janitor-now", labels=cron.spec.job_template.metadata.labels),
            spec=cron.spec.job_template.spec))
        wait(lambda: batch.read_namespaced_job_status("janitor-now", NAMESPACE).status.succeeded, "the janitor ran")
        [pod] = admin.list_namespaced_pod(NAMESPACE, label_selector="job-name=janitor-now").items
        assert pod.spec.containers[0].image == PRODUCT_IMAGE
        assert f"deleted brief of {current_owner()}" in admin.read_namespaced_pod_log(pod.metadata.name, NAMESPACE)
        assert "brief" not in [job["name"] for job in cli.json("list")]
    finally:
        cli("delete", "brief", check=False)
        with suppress(client.ApiException):  # made, if the test came that far
            batch.delete_namespaced_job("janitor-now", NAMESPACE, propagation_policy="Background")
        remove_janitor(admin)
    wait(lambda: none_left(admin), "nothing of the job or the janitor's run left")


@pytest.fixture
def kueue_queue(real_cluster):
    """Kueue's LocalQueue `team` in the namespace, on a ClusterQueue whose quota (1 CPU) fits one job of two
    300m replicas at a time."""
    with real_cluster.client(ADMIN) as api, local_queue(api, "team", 1) as name:
        yield name


def test_kueue_holds_a_job_over_quota_and_runs_it_once_admitted(cli, admin, kueue_queue):
    """With room in its queue's quota for one job, a second waits Queued with Kueue's reason and has no pod;
    once the first has run, Kueue admits it and its pods run to Succeeded."""
    def spec(name: str, seconds: int) -> dict:
        return {"name": name, "framework": "python", "queue": kueue_queue, "policy": {"success": "all-workers"},
                "replicas": {"worker": {"count": 2, "resources": {"cpu": 0.3}}},
                "command": f"python -c 'import time; time.sleep({seconds})'"}

    submit(cli, spec("first", 60))  # running still while the second is submitted and queued, on a busy machine
    try:
        cli.wait("first", phases=("Running",), timeout=120)
        submit(cli, spec("second", 0))
        job = cli.wait("second", until=lambda j: j["phase"] == "Queued" and j["reason"] != "Queued", timeout=60)
        assert job["reason"] == "Pending" and "insufficient unused quota for cpu" in job["message"], job
        assert not admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}=second,{naming.ROLE}").items
        assert cli.wait("first", timeout=120)["phase"] == "Succeeded"
        assert cli.wait("second", timeout=180)["phase"] == "Succeeded"
    finally:
        cli("delete", "first", check=False)
        cli("delete", "second", check=False)
    wait(lambda: none_left(admin), "nothing of the jobs left")


def test_a_colleagues_links_token_and_reads_reach_nothing_of_another_owners(real_cluster, cli, admin, tmp_path):
    """Two owners on the output claim (JobSet), bob hostile: a link his job makes in its output to alice's is
    refused as an output or data path, and where he may mount his output as data, the link resolves inside his
    own pod's mount; his purge (the owner's directory alone mounted) removes his output and nothing of hers; his
    pods carry no service account token; a log reader's port, which any pod reaches, answers only its secret."""
    alice, bob = cli, CLI(tmp_path / "bob-home", tmp_path, prefix=tuple(realnode.IN_NETNS))
    bob.env.update(JUPYTER_CONFIG_DIR=cli.env["JUPYTER_CONFIG_DIR"], DISTRAIN_BACKEND="kubernetes")
    alice.env["JUPYTERHUB_USER"], bob.env["JUPYTERHUB_USER"] = "alice", "bob"
    claim = real_cluster.dir / "volumes" / "distrain-outputs" / storage.OWNERS
    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    reader = "reader-probe"
    try:
        submit(alice, {"name": "a-secret", "command": "echo alice-only > $DISTRAIN_OUTPUT_DIR/secret.txt"})
        submit(bob, {"name": "b-plant", "command": f"ln -s ../../alice/a-secret $DISTRAIN_OUTPUT_DIR/link && "
                                                   f"test ! -e {token} && echo no token"})
        assert alice.wait("a-secret")["phase"] == bob.wait("b-plant")["phase"] == "Succeeded"
        assert bob("logs", "b-plant").stdout == "[worker-0] no token\n"
        assert (claim / "bob" / "b-plant" / "link").is_symlink()

        for field, path in (("output", "b-plant/link"), ("data", "owners/bob/b-plant/link")):
            spec = {"name": "b-read", "command": "true", field: {"volume": "distrain-outputs", "path": path}}
            (tmp_path / "b-read.yaml").write_text(yaml.safe_dump(spec))
            refused = bob("submit", "-f", str(tmp_path / "b-read.yaml"), check=False)
            assert refused.returncode == 1 and f"{field}.path: " in refused.stderr, refused.stderr
        submit(bob, {"name": "b-look", "data": {"volume": "distrain-outputs", "path": "owners/bob/b-plant"},
                     "command": "cat $DISTRAIN_INPUT_DIR/link/secret.txt || echo not there"})
        assert bob.wait("b-look")["phase"] == "Succeeded"
        assert bob("logs", "b-look").stdout.splitlines()[-1] == "[worker-0] not there"

        bob("delete", "b-plant", "--purge-output")
        assert not (claim / "bob" / "b-plant").exists()
        assert (claim / "alice" / "a-secret" / "secret.txt").read_text() == "alice-only\n"

        root = admin.read_namespaced_config_map("b-look", NAMESPACE)
        pod = render.log_reader(json.loads(root.data["spec.json"]), Distrain(namespace=NAMESPACE,
                                controller_image=PRODUCT_IMAGE), admin.api_client.sanitize_for_serialization(root),
                                "s3cret")
        pod["metadata"]["name"] = reader
        admin.create_namespaced_pod(NAMESPACE, pod)
        address = wait(lambda: (found := admin.read_namespaced_pod(reader, NAMESPACE)).status.phase == "Running"
                       and found.status.pod_ip, "the log reader runs")
        url = f"http://{address}:{render.LOG_READER_PORT}/1"

        def status(*headers: str) -> str:  # from the pods' network, as another pod would ask
            return realnode.in_netns("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", *headers, url,
                                     text=True, check=False).stdout  # 000 (and curl's error) until it listens
        wait(lambda: status() != "000", "the log reader serves")
        assert status() == status("-H", "X-Distrain-Reader-Secret: guess") == "403"
        assert status("-H", "X-Distrain-Reader-Secret: s3cret") == "200"
    finally:
        with suppress(client.ApiException):
            admin.delete_namespaced_pod(reader, NAMESPACE, grace_period_seconds=0)
        for who, job in ((alice, "a-secret"), (bob, "b-plant"), (bob, "b-look")):
            who("delete", job, check=False)
        for owner in ("alice", "bob"):
            shutil.rmtree(claim / owner, ignore_errors=True)
    wait(lambda: none_left(admin), "nothing of the jobs left")


HOLDS = """kept = bytearray(300 * 2**20)  # resident once written
for i in range(0, len(kept), 4096):
    kept[i] = 1
while True:  # a core's worth, until stopped
    pass
"""


def test_while_a_job_runs_top_shows_what_its_pod_uses_from_the_clusters_metrics_api(cli):
    """The cluster's metrics-server samples the running replica's pod: `distrain top` shows its CPU (a busy loop's)
    and its memory (the 300 MiB its process holds, and what the container's other processes and the kernel's page
    cache of it hold) once sampled, and before that says why it shows none."""
    submit(cli, {"name": "busy", "framework": "python", "replicas": {"worker": {}}, "command": python(HOLDS)})
    try:
        cli.wait("busy", until=lambda job: job["phase"] == "Running", timeout=240)
        first = cli("top", "busy").stdout
        assert "worker-0" in first and ("Not known: the cluster's metrics API has not sampled its pod yet" in first
                                        or "Not known" not in first), first

        def sampled() -> list[str] | None:
            row = next(line.split() for line in cli("top", "busy").stdout.splitlines() if line.startswith("worker-0"))
            return row if row[2] != "-" else None

        _, phase, cpu, memory, *_ = wait(sampled, "the metrics API sampled the pod", 120)
        print("distrain top, once sampled:", phase, cpu, memory)
        assert phase == "Running" and float(cpu) > 10, (cpu, memory)
        assert memory.endswith("MiB") and 300 <= float(memory.removesuffix("MiB")) < 450, memory
    finally:
        cli("delete", "busy")


def test_a_replica_holds_its_gpu_for_its_pods_lifetime_and_a_budget_refuses_a_job_beyond_it(admin, cli):
    """The node advertises two GPUs (an extended resource in its status, as a device plugin's would be; its
    containers see no device): a replica of one runs, its GPU-hours one GPU for its pod's lifetime (the replica's
    start to its end), its cost at the admin's price, in its view and, once deleted, in the ledger. A job of both for
    its deadline of an hour is beyond the month's budget of one GPU-hour: refused with the numbers, nothing made."""
    node, gpu = admin.list_node().items[0].metadata.name, "nvidia.com/gpu"
    admin.patch_node_status(node, {"status": {"capacity": {gpu: "2"}, "allocatable": {gpu: "2"}}})
    configure(cli, prices={"gpu_hour": {"*": 3.0}, "currency": "EUR"}, budgets={"*": 1}, budget_action="refuse")
    held = {"name": "held", "framework": "python", "replicas": {"worker": {"resources": {"gpus": 1}}},
            "command": python("import time; time.sleep(6)"), "policy": {"deadline_seconds": 600}}
    try:
        submit(cli, held)
        job = cli.wait("held", timeout=240)
        assert job["phase"] == "Succeeded", job
        used = job["replicas"][0]["usage"]
        assert used["wall_seconds"] >= 6 and used["gpu_hours"] == pytest.approx(used["wall_seconds"] / 3600, abs=1e-6)
        assert job["usage"]["cost"] == pytest.approx(3.0 * used["gpu_hours"], abs=1e-4)
        refused = submit(cli, {**held, "name": "greedy", "replicas": {"worker": {"resources": {"gpus": 2}}},
                               "policy": {"deadline_seconds": 3600}}, check=False)
        assert refused.returncode != 0 and ("the job may use 2.00 GPU-hours (2 GPUs for its deadline of 1 h), more "
                                            "than is left") in refused.stderr, refused.stderr
        assert [j["name"] for j in cli.json("list")] == ["held"]
        cli("delete", "held")
        [run] = [row for row in cli.json("usage")["runs"] if row["job"] == "held"]
        assert (run["gpu_hours"], run["cost"]) == (used["gpu_hours"], pytest.approx(3.0 * used["gpu_hours"], abs=1e-4))
    finally:
        cli("delete", "held", check=False)
        admin.patch_node_status(node, {"status": {"capacity": {gpu: None}, "allocatable": {gpu: None}}})
    wait(lambda: none_left(admin), "nothing of the job left")
