import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from contextlib import suppress
from pathlib import Path
from typing import Callable

import psutil
import pytest
import requests
import yaml

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
pytest_plugins = ["kube_support"]  # the Kubernetes tests' fixtures: admin, engine, backend, kube_server, fresh_logs

# A lane the Makefile runs in the background starts with SIGINT ignored, and every process it starts would inherit
# that: the hub's culler then ignores the hub's interrupt, and the hub waits out its stop timeouts. Handled here,
# SIGINT is back to its default in what the tests start.
signal.signal(signal.SIGINT, signal.default_int_handler)


LANES = ("node", "rest")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lane", choices=LANES, help="run this lane's tests alone (lane_of); make test runs each "
                                                   "lane in a pytest process of its own, side by side")


def lane_of(item: pytest.Item) -> str:
    """The pytest process make test runs a test in: the real node's (marked real_pods), mostly waiting on pods, or
    the rest's, with every test of the kwok control plane (one such cluster at a time: its Kueue serves on a fixed
    port). A long test on the local backend marked `lane("node")` runs beside the real node's, to even the two.
    (A third process, for the kwok tests, was no faster: with two the CPUs are busy four fifths of the time.)"""
    if item.get_closest_marker("real_pods"):
        return "node"
    if "control_plane" in item.fixturenames:
        return "rest"
    marked = item.get_closest_marker("lane")
    lane = marked.args[0] if marked else "rest"
    if lane not in LANES:
        raise pytest.UsageError(f"{item.nodeid}: lane {lane!r} is none of {', '.join(LANES)}")
    return lane


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --lane, that lane's tests alone. Tests marked `last` run at the end of their process, when the
    others' tests, which share the machine's CPUs, have mostly ended: the 1,000 trials' sweep, bound by the API
    server's CPU, took 15 minutes beside them and 7 alone."""
    if lane := config.getoption("lane"):
        kept, others = [], []
        for item in items:
            (kept if lane_of(item) == lane else others).append(item)
        config.hook.pytest_deselected(items=others)
        items[:] = kept
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)


def distrain_command() -> list[str]:
    script = Path(sys.executable).with_name("distrain")
    return [str(script)] if script.exists() else [sys.executable, "-m", "jupyter_distrain.cli"]


class CLI:
    """Runs the real `distrain` command in a fresh process, against one storage root."""

    def __init__(self, root: Path, cwd: Path, prefix: tuple[str, ...] = ()):
        """`prefix`: what the command runs under (realnode.IN_NETNS, say)."""
        self.root = root
        self.cwd = cwd
        self.prefix = prefix
        self.env = {**os.environ, "DISTRAIN_HOME": str(root), "NO_COLOR": "1"}

    def __call__(self, *args: str, check: bool = True, timeout: float = 300, cwd: Path | None = None,
                 input: str | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run([*self.prefix, *distrain_command(), *args], cwd=cwd or self.cwd, env=self.env, text=True,
                                capture_output=True, timeout=timeout, input=input)
        if check and result.returncode:
            raise AssertionError(f"distrain {' '.join(args)} exited {result.returncode}:\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def json(self, *args: str):
        return json.loads(self(*args, "-o", "json").stdout)

    def wait(self, name: str, phases=("Succeeded", "Failed", "Stopped"), timeout: float = 240,
             until: Callable[[dict], bool] | None = None) -> dict:
        """The job once it is in one of `phases` (or `until` says so)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.json("get", name)
            if until(job) if until else job["phase"] in phases:
                return job
            time.sleep(0.3)
        raise AssertionError(f"job {name} still {job['phase']} after {timeout} s: {job}")

    def wait_replica(self, name: str, replica: str, phase: str = "Running", timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.json("get", name)
            found = next(r for r in job["replicas"] if r["name"] == replica)
            if found["phase"] == phase:
                return job
            time.sleep(0.2)
        raise AssertionError(f"{name}/{replica} never reached {phase}: {job}")


def wait(condition, what: str, timeout: float = 30, shown=None, every: float = 0.1):
    """`condition`'s first true result; past `timeout`, an AssertionError naming `what` (and with `shown`,
    what it shows then), asking every `every` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(every)
    raise AssertionError(f"timed out waiting until {what}" + (f": {shown()}" if shown else ""))


def processes_of(root: Path) -> list[psutil.Process]:
    """Every process started for jobs under `root` (supervisors and replicas inherit DISTRAIN_HOME), but the
    launcher of a Jupyter server still running (JupyterServer.stop checks that it goes with its server)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get("DISTRAIN_HOME") == str(root) \
                    and running(process) and not serving(process):
                found.append(process)
        except psutil.Error:
            continue
    return found


def running(process: psutil.Process) -> bool:
    """Whether `process` has not ended: not a zombie, nor ending (its memory, its command line, gone already)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE and bool(process.cmdline())
    except psutil.Error:
        return False


def kill(processes: list[psutil.Process]) -> None:
    """Kill what a test left running; one that ends meanwhile is fine."""
    for process in processes:
        with suppress(psutil.NoSuchProcess):
            process.kill()


def serving(process: psutil.Process) -> bool:
    """Whether the process is a launcher (LocalBackend.start) whose server runs."""
    server = process.parent()
    return is_launcher(process) and server is not None and server.pid != 1


def is_launcher(process: psutil.Process) -> bool:
    """Whether the process is a Jupyter server's launcher (LocalBackend.start); not once it has exited (an
    exited child its parent has not reaped yet, a zombie, has no command line)."""
    try:
        return "--launcher" in process.cmdline()
    except psutil.Error:
        return False


def at_once(hammer, count: int, seconds: float) -> None:
    """Calls hammer(seed, until) from `count` threads at once, each until the same deadline."""
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=hammer, args=(seed, until)) for seed in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def write_scalars(directory: Path, tag: str, values: list[float]) -> None:
    """An event file of scalars, as a training replica writes it."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(directory))
    for step, value in enumerate(values):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=summary))
    writer.close()


SUPERVISOR_EXIT_SECONDS = 10  # a supervisor exits last, right after it recorded its job's end


def own_outputs(root: Path) -> Path:
    """The default outputs directory of this user's local jobs under the storage root `root`."""
    from jupyter_distrain import storage
    from jupyter_distrain.owners import current_owner

    return root / "outputs" / storage.OWNERS / storage.owner_dir(current_owner())


def assert_nothing_left(root: Path, timeout: float = 10) -> None:
    """No process, listening port or workspace of any job under `root` remains: none after `timeout` seconds
    (0: none of a job reported finished runs), but for the supervisors, which may take a few more to exit."""
    def patience(process: psutil.Process) -> float:
        try:
            supervisor = "jupyter_distrain.backends.local.daemon" in process.cmdline()
        except psutil.Error:
            return float("inf")  # gone meanwhile
        return max(timeout, SUPERVISOR_EXIT_SECONDS) if supervisor else timeout

    began = time.monotonic()
    while left := processes_of(root):
        elapsed = time.monotonic() - began
        if late := [p for p in left if elapsed >= patience(p) and running(p)]:  # as it is now
            raise AssertionError([" ".join(p.cmdline()) for p in late])
        time.sleep(0.1)
    assert not list(root.glob("jobs/*/workspace")), "a workspace outlived its job"


class JupyterServer:
    """A real `jupyter server` (or `jupyter lab`) process with this extension, a token, its own storage root;
    `public`: its own address is c.Distrain.public_url (where the links webhooks carry lead)."""

    TOKEN = "secret-token"

    def __init__(self, tmp_path: Path, *args: str, app: str = "server", root_dir: Path | None = None,
                 python: Path = Path(sys.executable), env: dict | None = None, public: bool = False):
        from jupyter_distrain.backends.local.processes import free_ports

        self.root = tmp_path / "distrain-home"
        self.root_dir = root_dir or tmp_path / "notebooks"
        self.root_dir.mkdir(exist_ok=True)
        self.url = f"http://127.0.0.1:{free_ports(1)[0]}"
        self.log = open(tmp_path / "jupyter-server.log", "wb")
        self.process = subprocess.Popen(
            [str(python.with_name("jupyter")), app, "--no-browser",
             f"--port={self.url.rsplit(':', 1)[1]}", f"--IdentityProvider.token={self.TOKEN}",
             "--ServerApp.allow_root=True", f"--ServerApp.root_dir={self.root_dir}", f"--Distrain.root={self.root}",
             *(self.lab_state(tmp_path) if app == "lab" else ()), *args,
             *([f"--Distrain.public_url={self.url}/"] if public else [])],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
        )
        self.headers = {"Authorization": f"token {self.TOKEN}"}
        deadline = time.monotonic() + 60
        while not self.answers():
            assert self.process.poll() is None and time.monotonic() < deadline, "jupyter server did not start"
            time.sleep(0.2)

    @staticmethod
    def lab_state(tmp_path: Path) -> list[str]:
        """JupyterLab's settings and workspaces of this test only, not the user's; no news pop-up."""
        news = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        news.parent.mkdir(parents=True, exist_ok=True)
        news.write_text(json.dumps({"fetchNews": "false"}))
        return [f"--LabApp.user_settings_dir={tmp_path / 'lab-settings'}",
                f"--LabApp.workspaces_dir={tmp_path / 'lab-workspaces'}"]

    def answers(self) -> bool:
        import urllib.error
        import urllib.request

        try:
            urllib.request.urlopen(f"{self.url}/api/status?token={self.TOKEN}", timeout=2)
            return True
        except (urllib.error.URLError, ConnectionError):
            return False

    def rest(self, method: str, route: str, **options) -> requests.Response:
        """A request to this server's REST API, `route` under distrain/api/ (e.g. "jobs/fit/stop"), with its
        token; `options` as requests.request takes them (json=, params=, data=, timeout=: 120 s unless given)."""
        options.setdefault("timeout", 120)
        headers = {**self.headers, **options.pop("headers", {})}
        return requests.request(method, f"{self.url}/distrain/api/{route}", headers=headers, **options)

    def launchers(self) -> list[psutil.Process]:
        """The server's launcher (LocalBackend.start)."""
        return [p for p in psutil.Process(self.process.pid).children() if is_launcher(p)]

    def stop(self) -> None:
        """Stop the server; its launcher goes with it."""
        launchers = self.launchers() if self.process.poll() is None else []
        self.process.terminate()
        self.process.wait(60)
        self.log.close()
        assert not psutil.wait_procs(launchers, timeout=10)[1], "the launcher outlived its server"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The storage root of the in-process Jupyter server (pytest-jupyter) of a test."""
    return tmp_path / "distrain-home"


@pytest.fixture
def distrain_config(root: Path) -> dict:
    return {"root": str(root)}


@pytest.fixture
def jp_server_config(distrain_config: dict) -> dict:
    """For tests that load pytest-jupyter: the extension enabled, with its own storage root."""
    return {"ServerApp": {"jpserver_extensions": {"jupyter_distrain": True}, "allow_root": True},
            "Distrain": distrain_config}


@pytest.fixture
def jupyter_server(tmp_path: Path):
    server = JupyterServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def cli(tmp_path: Path):
    root = tmp_path / "distrain-home"
    work = tmp_path / "work"
    work.mkdir()
    runner = CLI(root, work)
    yield runner
    try:
        for job in runner.json("list"):
            runner("stop", job["name"], check=False)
        assert_nothing_left(root)
    finally:
        kill(processes_of(root))


def write_wheel(directory: Path, module: str, source: str, version: str = "1.0") -> Path:
    """A pure-Python wheel of one module, which pip installs from `directory` without an index."""
    wheel = directory / f"{module}-{version}-py3-none-any.whl"
    info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{module}.py", source)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: {version}\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return wheel


def write_spec(directory: Path, spec: dict, filename: str = "distrain.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(yaml.safe_dump(spec))
    return path


def copy_example(name: str, dest: Path) -> Path:
    target = dest / name
    shutil.copytree(EXAMPLES / name, target)
    return target


def furnish(plane, namespace: str = "", as_user: bool = True, capacity_pods: bool = True) -> None:
    """A namespace (default `training`) enforcing Pod Security "baseline", its volumes `distrain-outputs` and
    `datasets` (directories here: `volumes/<claim>`, in other namespaces `volumes/<namespace>-<claim>`), and the
    product's RBAC (`rbac`), bound to the restricted user (`as_user`) or, as an admin applies it, to its service
    account."""
    from controlplane.cluster import NAMESPACE, RESTRICTED

    namespace = namespace or NAMESPACE
    # every pod the tests make passes the Pod Security Standard "baseline", or is refused
    plane.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    for claim in ("distrain-outputs", "datasets"):
        volume = claim if namespace == NAMESPACE else f"{namespace}-{claim}"
        (plane.dir / "volumes" / volume).mkdir(parents=True, exist_ok=True)
        plane.create(
            {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
             "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                      "hostPath": {"path": str(plane.dir / "volumes" / volume)},
                      "claimRef": {"namespace": namespace, "name": claim}}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": namespace},
             "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}},
                      "volumeName": volume, "storageClassName": ""}},
        )
    plane.apply(*rbac(namespace, RESTRICTED if as_user else None, capacity_pods))


def rbac(namespace: str, user: str | None = None, capacity_pods: bool = True) -> list[dict]:
    """jupyter_distrain/rbac.yaml for `namespace`, its subjects `user` in place of the service account where given;
    without `capacity_pods`, its cluster-wide Role lists nodes alone (as docs/jupyterhub.md says to narrow it)."""
    documents = list(yaml.safe_load_all((REPO / "jupyter_distrain" / "rbac.yaml").read_text().replace(
        "NAMESPACE", namespace)))
    for doc in documents:
        for subject in doc.get("subjects", []) if user else []:  # the user stands in for the service account
            subject.clear()
            subject.update(kind="User", name=user, apiGroup="rbac.authorization.k8s.io")
        for rule in doc.get("rules", []) if doc["kind"] == "ClusterRole" and not capacity_pods else []:
            rule["resources"].remove("pods")
    return documents


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    """A real Kubernetes control plane (tests/controlplane), furnished (`furnish`), with kwok's nodes: a CPU
    node and two 2-GPU nodes. Nothing of it outlives the session."""
    from controlplane.cluster import ControlPlane

    plane = ControlPlane(tmp_path_factory.mktemp("kubernetes"))
    plane.start()
    try:
        furnish(plane)
        plane.add_node("cpu-0")
        plane.add_node("gpu-0", gpus=2)
        plane.add_node("gpu-1", gpus=2)
        plane.wait_nodes_ready(3)
        yield plane
    finally:
        processes = list(plane.processes.values())
        plane.stop()
        assert all(p.poll() is not None for p in processes)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory):
    """The control plane with a real node instead of kwok (tests/controlplane/realnode.py), furnished likewise:
    pods run as containers, in a network namespace of their own. Nothing of it outlives the session: no
    process, mount, cgroup or namespace."""
    from controlplane import realnode
    from controlplane.cluster import ControlPlane

    plane = ControlPlane(tmp_path_factory.mktemp("real-node"), real_node=True)
    plane.start()
    try:
        furnish(plane)
        yield plane
    finally:
        processes = list(plane.processes.values())
        plane.stop()
        assert all(p.poll() is not None for p in processes)
        assert realnode.traces() == []


def remove_janitor(admin) -> None:
    """Delete the namespace's janitor (render.janitor) and its identity, as a test that made it leaves the
    namespace; `admin` is a CoreV1Api with the admin's rights."""
    from controlplane.cluster import NAMESPACE
    from kubernetes import client

    from jupyter_distrain.backends.kubernetes import naming

    client.BatchV1Api(admin.api_client).delete_namespaced_cron_job(naming.JANITOR, NAMESPACE)
    rbac = client.RbacAuthorizationV1Api(admin.api_client)
    rbac.delete_namespaced_role_binding(naming.JANITOR, NAMESPACE)
    rbac.delete_namespaced_role(naming.JANITOR, NAMESPACE)
    admin.delete_namespaced_service_account(naming.JANITOR, NAMESPACE)


SHOW = "for f in $(ls -A | sort); do [ -f $f ] && printf '%s: %s\\n' $f \"$(head -n 1 $f)\"; done"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          check=True, capture_output=True, text=True).stdout


def repository_state(repo: Path) -> tuple[str, str, str]:
    """What a snapshot must not change: the status, the objects and the refs."""
    return git(repo, "status", "--porcelain", "--ignored"), git(repo, "count-objects", "-v"), git(repo, "show-ref")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A clone of a 'remote' (tmp_path / "remote.git"): see `make_checkout`."""
    return make_checkout(tmp_path / "work", tmp_path / "remote.git")


def make_checkout(work: Path, remote: Path, url: str = "") -> Path:
    """A clone at `work` of a new bare repository `remote` (which jobs clone from `url`, default: its path) with a
    commit not pushed, an edited file, a deleted one, a new one and an ignored one; its distrain.yaml runs SHOW,
    which prints every file's first line."""
    git(work.parent, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    git(work.parent, "clone", "--quiet", str(remote), str(work))
    (work / "distrain.yaml").write_text(yaml.safe_dump(
        {"name": "mine", "code": {"git": url or str(remote), "ref": "main"}, "command": SHOW}))
    (work / "train.py").write_text("print('as pushed')\n")
    (work / "old.py").write_text("print('deleted since')\n")
    (work / ".gitignore").write_text("secret.txt\n")
    git(work, "add", ".")
    git(work, "commit", "--quiet", "-m", "pushed")
    git(work, "push", "--quiet", "origin", "HEAD:main")
    (work / "unpushed.py").write_text("print('committed, not pushed')\n")
    git(work, "add", "unpushed.py")
    git(work, "commit", "--quiet", "-m", "not pushed")
    (work / "train.py").write_text("print('edited')\n")
    (work / "old.py").unlink()
    (work / "added.py").write_bytes(b"print('new')\n\x00\xff binary tail\n")
    (work / "secret.txt").write_text("password\n")
    return work
