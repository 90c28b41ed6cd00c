"""JupyterHub on the real node, as the zero-to-jupyterhub chart deploys it from the docs' values
(docs/jupyterhub.md, `chart_values`): the hub with KubeSpawner putting each user's server in a pod of its namespace (or
of the user's own), configurable-http-proxy in front (npm's, from node_modules), the idle culler as a hub
service, and a fixed password for the tests' users. The hub runs on this machine in the node's network namespace,
where it reaches the servers' pods and they its API; its proxy is relayed to this machine's loopback at the same
port, where a browser reaches it, as the API server's is. The hub's own credential is a service account's token,
with the rights the chart gives its hub (cluster-wide, for the users' namespaces)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import requests
import yaml
from kubernetes import client
from kubernetes.stream import stream

from . import realnode
from .cluster import ADMIN, free_port

REPO = Path(__file__).resolve().parent.parent.parent
HUB_PAGE = REPO / "docs" / "jupyterhub.md"  # the chart's values an admin pastes, and the per-user settings
NAMESPACE = "hub"  # the hub's, where the users' servers run unless each user has a namespace of their own
USERS, HUB_ADMIN = ("alice", "bob"), "ada"
PASSWORD = "distrain-test"
API_PORT = 8091  # the hub's API, at the node's address: the servers' pods reach it there
SERVER = "component=singleuser-server"  # KubeSpawner's label of the users' servers' pods
HOME = "/home/jovyan"  # a user's home in the server's pod: an emptyDir (the chart's `storage.type: none`, a home)
# what the chart's hub may do (its Role), cluster-wide, and make the users' namespaces
HUB_RULES = [
    {"apiGroups": [""], "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
     "verbs": ["get", "watch", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "create"]},
]
# the culler's role, as the chart gives it
CULLER_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers"]
TESTS_SCOPES = ["admin:users", "admin:servers", "tokens", "access:servers"]  # the tests' own service's


def chart_values(per_user: bool = False) -> dict:
    """The chart's values on the docs' "On JupyterHub" page (HUB_PAGE), what an admin pastes: its first YAML block,
    and with `per_user` its second, the hub's settings for a namespace per user. The page's headings do not matter:
    its ```yaml blocks are read in order, wherever they stand, and must be exactly these two."""
    blocks = re.findall(r"^```yaml[^\S\n]*\n(.*?)^```", HUB_PAGE.read_text(), re.S | re.M)
    assert len(blocks) == 2, f"{HUB_PAGE}: {len(blocks)} ```yaml blocks, not the chart's values and per-user settings"
    values, per_user_settings = (yaml.safe_load(block) for block in blocks)
    if per_user:
        values["hub"].setdefault("config", {}).update(per_user_settings)
    return values


class Hub:
    """`start()`, `stop()`; `url` is the proxy's, on this machine's loopback."""

    def __init__(self, plane, workdir: Path, values: dict):
        self.plane, self.dir, self.values = plane, workdir, values
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = os.urandom(16).hex()  # the tests' service's
        self.processes: list[subprocess.Popen] = []
        self.admin = client.CoreV1Api(plane.client(ADMIN))  # closed by close()

    # the hub's configuration, from the chart's values
    def config(self) -> dict:
        single, hub, cull = self.values["singleuser"], self.values.get("hub", {}), self.values.get("cull", {})
        files = single.get("extraFiles", {})
        services = [{"name": "tests", "api_token": self.token}]
        roles = [{"name": "tests", "scopes": TESTS_SCOPES, "services": ["tests"]}]
        if cull.get("enabled"):
            services.append({"name": "idle-culler", "command": [
                sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={cull.get('timeout', 3600)}"]})
            roles.append({"name": "idle-culler", "scopes": CULLER_SCOPES, "services": ["idle-culler"]})
        image = single["image"]
        return {
            "JupyterHub": {
                "bind_url": self.url, "hub_bind_url": f"http://{realnode.NODE_IP}:{API_PORT}",
                "hub_connect_url": f"http://{realnode.NODE_IP}:{API_PORT}",
                "authenticator_class": "dummy", "spawner_class": "kubespawner.KubeSpawner",
                "db_url": f"sqlite:///{self.dir / 'jupyterhub.sqlite'}",
                "cookie_secret_file": str(self.dir / "cookie_secret"),
                "cleanup_servers": False,  # as the chart: servers outlive the hub's restarts
                "services": services, "load_roles": roles},
            "ConfigurableHTTPProxy": {"command": [str(REPO / "node_modules" / ".bin" / "configurable-http-proxy")]},
            "Authenticator": {"allowed_users": [*USERS, HUB_ADMIN], "admin_users": [HUB_ADMIN]},
            "DummyAuthenticator": {"password": PASSWORD},
            "KubeSpawner": {
                "namespace": NAMESPACE, "image": f"{image['name']}:{image['tag']}",
                "image_pull_policy": image.get("pullPolicy", "IfNotPresent"),
                "service_account": single.get("serviceAccountName"),
                "cmd": ["jupyterhub-singleuser"], "uid": 1000, "fs_gid": 100,  # the chart's defaults
                "volumes": [{"name": "files", "secret": {"secretName": "singleuser"}},
                            {"name": "home", "emptyDir": {}}],
                "volume_mounts": [*({"name": "files", "mountPath": file["mountPath"], "subPath": key}
                                    for key, file in files.items()),
                                  {"name": "home", "mountPath": HOME}],
                "environment": {"HOME": HOME}, "working_dir": HOME, "default_url": "/lab",
                "start_timeout": 300, "http_timeout": 180,
                **hub.get("config", {}).get("KubeSpawner", {})},
        }

    def files_secret(self, namespace: str) -> dict:
        """The Secret the chart makes of `singleuser.extraFiles`, each file's data as JSON (the docs' is a .json)."""
        files = self.values["singleuser"].get("extraFiles", {})
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "singleuser", "namespace": namespace},
                "stringData": {key: json.dumps(file["data"]) for key, file in files.items()}}

    def _credential(self) -> Path:
        """A kubeconfig with a token of the hub's service account (HUB_RULES, cluster-wide)."""
        rbac = client.RbacAuthorizationV1Api(self.admin.api_client)
        if not self.admin.list_namespaced_service_account(NAMESPACE, field_selector="metadata.name=hub").items:
            self.admin.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "hub"}})
            rbac.create_cluster_role({"metadata": {"name": "hub"}, "rules": HUB_RULES})
            rbac.create_cluster_role_binding({
                "metadata": {"name": "hub"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "hub"},
                "subjects": [{"kind": "ServiceAccount", "name": "hub", "namespace": NAMESPACE}]})
        token = self.admin.create_namespaced_service_account_token("hub", NAMESPACE, {
            "spec": {"audiences": [], "expirationSeconds": 3600 * 6}}).status.token
        path = self.dir / "hub.kubeconfig"
        self.plane._write_kubeconfig("hub", token=token, path=path)
        return path

    # running it
    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "jupyterhub_config.py").write_text(
            "import json\n"
            f"for section, traits in json.loads({json.dumps(self.config())!r}).items():\n"
            "    for name, value in traits.items():\n"
            "        setattr(getattr(c, section), name, value)\n"
            + "".join(f"# hub.extraConfig.{key}\n{code}\n"
                      for key, code in sorted(self.values.get("hub", {}).get("extraConfig", {}).items())))
        env = {**os.environ, "KUBECONFIG": str(self._credential()),
               "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        relay = str(self.dir / "proxy.sock")
        with open(self.dir / "hub.log", "ab") as log:
            self.processes = [
                subprocess.Popen([*realnode.IN_NETNS, str(Path(sys.executable).with_name("jupyterhub")), "-f",
                                  str(self.dir / "jupyterhub_config.py")], cwd=self.dir, env=env, stdout=log,
                                 stderr=log),
                subprocess.Popen([*realnode.IN_NETNS, "socat", f"UNIX-LISTEN:{relay},fork,unlink-early",
                                  f"TCP:127.0.0.1:{self.port}"], stderr=log),
                subprocess.Popen(["socat", f"TCP-LISTEN:{self.port},bind=127.0.0.1,fork,reuseaddr",
                                  f"UNIX-CONNECT:{relay}"], stderr=log)]
        deadline = time.monotonic() + 120
        while not self._answers():
            if time.monotonic() > deadline or self.processes[0].poll() is not None:
                raise RuntimeError(f"the hub did not start: {(self.dir / 'hub.log').read_text()[-3000:]}")
            time.sleep(0.5)

    def _answers(self) -> bool:
        try:
            return requests.get(f"{self.url}/hub/health", timeout=2).ok
        except requests.RequestException:
            return False

    def stop(self) -> list[str]:
        """Stop every user's server (the hub deletes their pods), then the hub, its proxy and its services and the
        relays; what of them is still running after (nothing, unless something leaked)."""
        if self.processes[0].poll() is not None:
            return []
        for user in self.api("GET", "users").json():
            if user["servers"]:
                self.stop_server(user["name"])
        hub = psutil.Process(self.processes[0].pid)
        children = hub.children(recursive=True)
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            process.wait(30)
        gone, alive = psutil.wait_procs(children, timeout=30)
        for process in alive:
            process.kill()
        return [" ".join(process.cmdline()) for process in alive]

    # the hub's REST API, as the tests' service
    def api(self, method: str, route: str, **body) -> requests.Response:
        answer = requests.request(method, f"{self.url}/hub/api/{route}", json=body or None, timeout=60,
                                  headers={"Authorization": f"token {self.token}"})
        answer.raise_for_status()
        return answer

    def user_token(self, user: str) -> str:
        """An API token of `user`'s (as they would make on the hub's token page)."""
        return self.api("POST", f"users/{user}/tokens", note="tests").json()["token"]

    def start_server(self, user: str, timeout: float = 300) -> None:
        """Start `user`'s server, unless it runs, and wait until it is ready."""
        ready = lambda: (self.api("GET", f"users/{user}").json()["servers"].get("") or {}).get("ready")  # noqa: E731
        if not ready():
            self.api("POST", f"users/{user}/server")
            self._wait(ready, f"{user}'s server ready", timeout)

    def stop_server(self, user: str, timeout: float = 120) -> None:
        self.api("DELETE", f"users/{user}/server")
        self._wait(lambda: not self.api("GET", f"users/{user}").json()["servers"], f"{user}'s server stopped",
                   timeout)
        self._wait(lambda: not self.server_pods(user), f"{user}'s server's pod gone", timeout)

    def server_pods(self, user: str = "") -> list:
        selector = SERVER + (f",hub.jupyter.org/username={user}" if user else "")
        return self.admin.list_pod_for_all_namespaces(label_selector=selector).items

    def in_server(self, user: str, command: str) -> str:
        """What `command` prints (stdout and stderr) run in `user`'s server's container, as in its terminal."""
        [pod] = self.server_pods(user)
        return stream(self.admin.connect_get_namespaced_pod_exec, pod.metadata.name, pod.metadata.namespace,
                      command=["sh", "-c", command], stderr=True, stdout=True, stdin=False, tty=False)

    def servers_state(self) -> str:
        """What the users' servers' pods are doing, and the hub's last lines: to say why one did not start."""
        said = []
        for pod in self.server_pods():
            name, namespace = pod.metadata.name, pod.metadata.namespace
            events = self.admin.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
            try:
                log = self.admin.read_namespaced_pod_log(name, namespace, tail_lines=40)
            except client.ApiException as e:
                log = f"(no log: {e.reason})"
            said.append(f"{namespace}/{name}: {pod.status.phase} {pod.status.container_statuses}\n"
                        + "".join(f"  {e.reason}: {e.message}\n" for e in events) + log)
        return "\n".join([*said, (self.dir / "hub.log").read_text()[-4000:]])

    def _wait(self, condition, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout} s for {what}:\n{self.servers_state()}")
            time.sleep(1)

    def close(self) -> None:
        self.admin.api_client.close()
