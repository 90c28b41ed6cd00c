"""A real Kubernetes control plane on loopback, for tests: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok simulating the nodes and the pods' lives, and the
in-cluster training engines JobSet and Kubeflow's Training Operator (TFJob, PyTorchJob, PaddleJob):
their CRDs, controllers and admission webhooks, served on loopback with this control plane's certificate.

Built by build.sh from pinned Go modules. Pods never run a container: kwok moves them from
Pending to Running once scheduled, and to Succeeded or Failed when a test sets the annotation
EXIT_CODE on them (REASON names the termination, e.g. OOMKilled; MESSAGE is its termination message). A
pod's logs are the lines a test writes with `write_log`, served through the real pods/log API. A TensorBoard pod (component
label `tensorboard`) gets this machine's own address, HOST_IP, as its pod IP: a test that runs the
pod's command here serves it, and the API server's service proxy reaches it. So does a log reader pod
(component `log-reader`) or an output purger (`purger`), whose command the control plane itself runs
here while the pod lives, as a kubelet would, with /output being its volume's directory on this machine
(a hostPath, or the hostPath of the PersistentVolume bound to its claim). A sweep's controller pod
(component `sweeper`) is run here likewise, and so is the janitor's (component `janitor`), each with a
token of its service account (the TokenRequest API, bound to the pod) in its kubeconfig. When any of
these processes exits, its pod ends with its exit code.

With `real_node`, a real node (realnode.py) replaces kwok: pods run as containers, and the whole cluster runs
in that node's network namespace, its API server relayed to this machine's loopback at the same port; a
metrics-server serves it the metrics API (metrics.k8s.io) from the kubelet's figures.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import closing, contextmanager, suppress
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import psutil
import yaml

from . import images, realnode

HERE = Path(__file__).resolve().parent
BIN = HERE / "bin"
EXIT_CODE = "test.distrain.jupyter.org/exit-code"
REASON = "test.distrain.jupyter.org/reason"
MESSAGE = "test.distrain.jupyter.org/message"
ADMIN, RESTRICTED, NODE = "admin", "distrain-jupyter", "node"
NAMESPACE = "training"
COMPONENT = "app.kubernetes.io/component"
PLAIN_RUN_HERE = ("log-reader", "purger")  # components whose pods' commands the control plane runs here
CONTROLLERS = ("sweeper", "janitor")  # likewise, with a token of the pod's service account
RUN_HERE = PLAIN_RUN_HERE + CONTROLLERS


def kubelet_expanded(text: str, env: dict[str, str]) -> str:
    """`text` (a container's command, args or env value) as a kubelet hands it to the container: each $(VAR) of
    `env` replaced by its value, $$ by $; any other $(VAR) stays as it is."""
    return re.sub(r"\$(\$|\(([^)]*)\))", lambda m: "$" if m[1] == "$" else env.get(m[2], m[0]), text)


@contextmanager
def local_queue(api, name: str, cpus: int, namespace: str = NAMESPACE, cluster_queue: str = "") -> Iterator[str]:
    """Kueue's LocalQueue `name` in `namespace` (a client's ApiClient), on a ClusterQueue of its own (`cluster_queue`,
    else `name`) with `cpus` CPUs of quota in the ResourceFlavor `default` (made if missing); removed after."""
    from kubernetes import client

    group, version = "kueue.x-k8s.io", "v1beta1"
    shared, custom = cluster_queue or name, client.CustomObjectsApi(api)

    def made(plural: str, kind: str, name: str, spec: dict, namespace: str = "") -> bool:
        body = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": name}, "spec": spec}
        try:
            if namespace:
                custom.create_namespaced_custom_object(group, version, namespace, plural, body)
            else:
                custom.create_cluster_custom_object(group, version, plural, body)
        except client.ApiException as e:
            if e.status != 409 or plural != "resourceflavors":
                raise
            return False  # another queue's
        return True

    flavor = made("resourceflavors", "ResourceFlavor", "default", {})
    made("clusterqueues", "ClusterQueue", shared, {"namespaceSelector": {}, "resourceGroups": [
        {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [
            {"name": "cpu", "nominalQuota": cpus}]}]}]})
    made("localqueues", "LocalQueue", name, {"clusterQueue": shared}, namespace)
    try:
        yield name
    finally:
        custom.delete_namespaced_custom_object(group, version, namespace, "localqueues", name)
        custom.delete_cluster_custom_object(group, version, "clusterqueues", shared)
        if flavor:
            custom.delete_cluster_custom_object(group, version, "resourceflavors", "default")


def host_ip() -> str:
    """An IPv4 address of this machine that is not loopback (the API server refuses to proxy to loopback)."""
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    raise RuntimeError("this machine has no IPv4 address besides loopback")


HOST_IP = host_ip()

# A container's image as "pulled": its repository (the reference without its tag) and, standing in for the
# registry's digest, the sha256 of the reference (image_id below).
IMAGE_ID = """imageID: {{ printf "%s@sha256:%s" (regexReplaceAll ":[^:/]*$" .image "") (sha256sum .image) | Quote }}"""


def image_id(image: str) -> str:
    """The imageID the control plane reports for a container of `image`."""
    return f"{re.sub(r':[^:/]*$', '', image)}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


# Pod stages: scheduled -> Running; annotated EXIT_CODE -> Succeeded (0) or Failed; past its
# activeDeadlineSeconds -> Failed (DeadlineExceeded); deleted -> gone.
POD_RUNNING = textwrap.dedent("""
    apiVersion: kwok.x-k8s.io/v1alpha1
    kind: Stage
    metadata: {name: NAME}
    spec:
      resourceRef: {apiGroup: v1, kind: Pod}
      selector:
        matchExpressions:
        - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
        - {key: .spec.nodeName, operator: Exists}
        - {key: .status.phase, operator: In, values: [Pending]}
        - COMPONENT_EXPRESSION
      next:
        statusTemplate: |
          {{ $now := Now }}
          conditions:
          - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
          - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
          - {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
          initContainerStatuses:
          {{ range .spec.initContainers }}
          - name: {{ .name | Quote }}
            image: {{ .image | Quote }}
            ready: true
            restartCount: 0
            state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}
          {{ end }}
          containerStatuses:
          {{ range .spec.containers }}
          - name: {{ .name | Quote }}
            image: {{ .image | Quote }}
            IMAGE_ID
            ready: true
            started: true
            restartCount: 0
            state: {running: {startedAt: {{ $now | Quote }}}}
          {{ end }}
          hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
          podIP: POD_IP
          phase: Running
          startTime: {{ $now | Quote }}
""").replace("IMAGE_ID", IMAGE_ID)


def running_stage(name: str, component: str, pod_ip: str) -> str:
    """Scheduled -> Running for the pods whose component label matches `component` (an operator and
    values of a selector expression), with `pod_ip` (a template or an address) as their pod IP."""
    label = f'.metadata.labels["{COMPONENT}"]'
    return (POD_RUNNING.replace("NAME", name).replace("COMPONENT_EXPRESSION", f"{{key: '{label}', {component}}}")
            .replace("POD_IP", pod_ip))


POD_ENDED = textwrap.dedent("""
    apiVersion: kwok.x-k8s.io/v1alpha1
    kind: Stage
    metadata: {name: <name>}
    spec:
      resourceRef: {apiGroup: v1, kind: Pod}
      selector:
        matchExpressions:
        - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
        - {key: .status.phase, operator: In, values: [Running]}
        - <match>
      delay: <delay>
      next:
        statusTemplate: |
          {{ $now := Now }}<lets>
          containerStatuses:
          {{ range .spec.containers }}
          - name: {{ .name | Quote }}
            image: {{ .image | Quote }}
            IMAGE_ID
            ready: false
            started: false
            restartCount: 0
            state: {terminated: {exitCode: <code>, reason: <reason>, message: <message>, finishedAt: {{ $now | Quote }}}}
          {{ end }}
          <status>
""").replace("IMAGE_ID", IMAGE_ID)


def ended_stage(name: str, match: str, code: str, reason: str, status: list[str], lets: str = "",
                delay: str = "{durationMilliseconds: 0}", message: str = '""') -> str:
    """Running -> ended, after `delay`, for the pods a selector expression `match` picks: every container
    terminated with `code`, `reason` and `message` (template expressions, which `lets` may define), and the
    pod's own `status` lines."""
    indent = POD_ENDED[:POD_ENDED.index("<status>")].rpartition("\n")[2]  # the status lines' own
    return (POD_ENDED.replace("<name>", name).replace("<match>", match).replace("<delay>", delay)
            .replace("<lets>", lets).replace("<code>", code).replace("<reason>", reason).replace("<message>", message)
            .replace("<status>", ("\n" + indent).join(status)))


POD_STAGES = "---\n".join([
    running_stage("pod-running", "operator: DoesNotExist",
                  "{{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}"),
    running_stage("on-this-host", f"operator: In, values: [{', '.join(('tensorboard', *RUN_HERE))}]", f'"{HOST_IP}"'),
    ended_stage("pod-exit", "{key: '.metadata.annotations[\"EXIT_CODE\"]', operator: Exists}",
                "{{ $code }}", "{{ $reason | Quote }}", [
                    "conditions:",
                    '- {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}',
                    '- {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}',
                    'phase: {{ ternary "Succeeded" "Failed" (eq $code "0") }}'],
                lets='{{ $code := index .metadata.annotations "EXIT_CODE" }}'
                     '{{ $reason := or (index .metadata.annotations "REASON") (ternary "Completed" "Error" (eq $code "0")) }}'
                     '{{ $message := or (index .metadata.annotations "MESSAGE") "" }}',
                message="{{ $message | Quote }}",
                ).replace("EXIT_CODE", EXIT_CODE).replace("REASON", REASON).replace("MESSAGE", MESSAGE),
    # as the kubelet: the pod's deadline counts from its start (unless its process ended first)
    ended_stage("pod-deadline", "{key: .spec.activeDeadlineSeconds, operator: Exists}\n"
                f"    - {{key: '.metadata.annotations[\"{EXIT_CODE}\"]', operator: DoesNotExist}}", "137", "Error", [
        "phase: Failed", "reason: DeadlineExceeded",
        "message: Pod was active on the node longer than the specified deadline"],
        delay="{durationMilliseconds: 0, durationFrom: {expressionFrom: '(.spec.activeDeadlineSeconds | tostring) + \"s\"'}}"),
    textwrap.dedent("""
    apiVersion: kwok.x-k8s.io/v1alpha1
    kind: Stage
    metadata: {name: pod-delete}
    spec:
      resourceRef: {apiGroup: v1, kind: Pod}
      selector:
        matchExpressions:
        - {key: .metadata.deletionTimestamp, operator: Exists}
      next:
        delete: true
    """),
])


# What Kueue's own certificate management expects: its CA's name, its webhook Service, its Secret.
KUEUE_CA, KUEUE_SERVICE, KUEUE_SECRET = "kueue-ca", "kueue-webhook-service.kueue-system.svc", "kueue-webhook-server-cert"
# Kueue's visibility API (group, version), aggregated by the API server, and the port Kueue serves it on.
KUEUE_VISIBILITY, KUEUE_VISIBILITY_PORT = ("visibility.kueue.x-k8s.io", "v1beta1"), 8082
PROXY_CLIENT = "front-proxy-client"  # the API server's name towards the APIs it aggregates
METRICS_API = ("metrics.k8s.io", "v1beta1")  # the real node's metrics-server's, aggregated likewise
# Kueue's visibility API checks its callers with a pod's credentials, at the paths a pod has them, and keeps its
# certificate in /visibility: in a mount namespace of its own, these are directories of its own (an empty
# /visibility is all this machine keeps). Arguments: the token file, the CA file, then Kueue's command.
KUEUE_MOUNTS = """set -e
mkdir -p /visibility
mount -t tmpfs tmpfs /visibility
mount -t tmpfs tmpfs /run
mkdir -p /run/secrets/kubernetes.io/serviceaccount
cp "$1" /run/secrets/kubernetes.io/serviceaccount/token
cp "$2" /run/secrets/kubernetes.io/serviceaccount/ca.crt
shift 2
exec "$@"
"""
# The webhooks Kueue serves for what the tests run: its own kinds, JobSets and the Training Operator's jobs.
KUEUE_WEBHOOKS = ("kueue-x-k8s-io", "jobset", "kubeflow-org-v1-tfjob", "kubeflow-org-v1-pytorchjob",
                  "kubeflow-org-v1-paddlejob")


def stop_process(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# requests of service accounts (pods'), as they end: who made each, from where, on what
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata", "userGroups": ["system:serviceaccounts"]}, {"level": "None"}]}
# every request, whoever made it (a benchmark's count of who asks the API server what)
AUDIT_EVERYONE = {**AUDIT_POLICY, "rules": [{"level": "Metadata"}]}


def received(event: dict) -> float:
    """When the API server received the request of an audit log's event (a time.time())."""
    return datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()


class ControlPlane:
    """Start with `start()`, stop with `stop()`; `kubeconfig(user)` gives a client's config file."""

    def __init__(self, workdir: Path, engines: bool = True, real_node: bool = False, audit_everyone: bool = False):
        """`engines=False`: a cluster without JobSet, the Training Operator or Kueue, as a user with namespace
        rights alone may have. `real_node`: a real node (realnode.py) instead of kwok, the whole cluster in its
        network namespace. `audit_everyone`: the audit log holds every request (else the pods' alone)."""
        self.dir = workdir
        self.engines = engines
        self.real_node = real_node
        self.audit_policy = AUDIT_EVERYONE if audit_everyone else AUDIT_POLICY
        self.prefix = realnode.IN_NETNS if real_node else []  # what each process runs under
        self.processes: dict[str, subprocess.Popen] = {}
        self.readers = threading.Thread(target=self._run_pods_here, daemon=True, name="pods-run-here")
        self.stopping = threading.Event()
        self.tokens = {ADMIN: os.urandom(16).hex(), RESTRICTED: os.urandom(16).hex(), NODE: os.urandom(16).hex()}
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"

    # setting up
    def start(self) -> None:
        subprocess.run([str(HERE / "build.sh")], check=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        self._certificates()
        try:
            if self.real_node:
                realnode.prepare()
            self._start_etcd()
            self._start_apiserver()
            for user in (ADMIN, RESTRICTED):
                self._write_kubeconfig(user)
            admin = str(self.kubeconfig(ADMIN))
            self._spawn("kube-controller-manager", "--kubeconfig", admin, "--leader-elect=false",
                        "--secure-port=0", "--controllers=*,-nodeipam", "--use-service-account-credentials=false",
                        "--service-account-private-key-file", str(self.dir / "sa.key"),
                        "--root-ca-file", str(self.dir / "ca.crt"), "--node-monitor-grace-period=60s",
                        # its garbage collector deletes a 1,000-trial sweep's objects at this rate (20 by default)
                        # and this many at once (20): with Kueue's rate, a 1,000-trial sweep's objects go in 76 s, not 230
                        "--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-gc-syncs=100")
            self._spawn("kube-scheduler", "--kubeconfig", admin, "--leader-elect=false", "--secure-port=0")
            if self.real_node:
                self._start_node()
            else:
                self._start_kwok()
                self.readers.start()
            if self.engines:
                self._start_jobset()
                self._start_kubeflow()
                self._start_kueue()
        except BaseException:
            self.stop()
            raise

    def _certificates(self) -> None:
        d = self.dir

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

        # a year, and the names Kueue's certificate rotator checks (see _start_kueue), so it keeps them
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                "-days", "365", "-subj", "/CN=distrain-test-ca", "-addext", f"subjectAltName=DNS:{KUEUE_CA}")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key", "-out", "serving.csr",
                "-subj", "/CN=127.0.0.1")
        (d / "san.ext").write_text(f"subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:{KUEUE_SERVICE},"  # pods' too:
                                   f"IP:{realnode.KUBERNETES_SERVICE},DNS:kubernetes.default.svc\n")
        openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "serving.crt", "-days", "365", "-extfile", "san.ext")
        openssl("rsa", "-in", "ca.key", "-traditional", "-out", "ca.pkcs1.key")  # the CA key's form Kueue reads
        # the API server's identity towards the APIs it aggregates (Kueue's visibility API), which trust its headers
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "proxy-client.key", "-out", "proxy-client.csr",
                "-subj", f"/CN={PROXY_CLIENT}")
        openssl("x509", "-req", "-in", "proxy-client.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "proxy-client.crt", "-days", "365")
        openssl("genrsa", "-out", "sa.key", "2048")
        (d / "tokens.csv").write_text(
            f'{self.tokens[ADMIN]},{ADMIN},uid-admin,"system:masters"\n'
            f"{self.tokens[RESTRICTED]},{RESTRICTED},uid-restricted\n"
            f'{self.tokens[NODE]},system:node:{realnode.NODE},uid-node,"system:nodes"\n'
        )

    def _spawn(self, name: str, *args: str, env: dict | None = None, program: str = "",
               here: bool = False) -> subprocess.Popen:
        """Start `program` (default: bin/`name`) in the cluster's network namespace (with `here`, this machine's)."""
        log = open(self.dir / "logs" / f"{name}.log", "wb")
        command = [program or str(BIN / name), *args]
        process = subprocess.Popen(command if here else [*self.prefix, *command], stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                   env={**os.environ, **(env or {})})
        log.close()
        self.processes[name] = process
        return process

    def _wait(self, name: str, ready, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        tail = lambda: (self.dir / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]  # noqa: E731
        while time.monotonic() < deadline:
            if self.processes[name].poll() is not None:
                raise RuntimeError(f"{name} exited with {self.processes[name].returncode}:\n{tail()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready after {timeout} s:\n{tail()}")

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd = f"http://127.0.0.1:{client}"
        self._spawn("etcd", "--data-dir", str(self.dir / "etcd"), "--name", "n0",
                    "--listen-client-urls", self.etcd, "--advertise-client-urls", self.etcd,
                    "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-cluster", f"n0=http://127.0.0.1:{peer}", "--unsafe-no-fsync",
                    "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}")
        self._wait("etcd", lambda: self._http_ok(f"{self.etcd}/health"))

    def _start_apiserver(self) -> None:
        d = self.dir
        # on a real node, in its namespace, pods reach it at the node's address (realnode.route_kubernetes_service)
        bind = "0.0.0.0" if self.real_node else "127.0.0.1"
        self._spawn("kube-apiserver", "--etcd-servers", self.etcd, f"--bind-address={bind}",
                    "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
                    "--tls-cert-file", str(d / "serving.crt"), "--tls-private-key-file", str(d / "serving.key"),
                    "--client-ca-file", str(d / "ca.crt"), "--token-auth-file", str(d / "tokens.csv"),
                    "--authorization-mode=Node,RBAC",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    "--service-account-key-file", str(d / "sa.key"),
                    "--service-account-signing-key-file", str(d / "sa.key"),
                    f"--service-cluster-ip-range={realnode.SERVICE_SUBNET}",
                    "--allow-privileged=true", "--kubelet-preferred-address-types=InternalIP",
                    "--requestheader-client-ca-file", str(d / "ca.crt"),
                    f"--requestheader-allowed-names={PROXY_CLIENT}",
                    "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
                    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                    "--proxy-client-cert-file", str(d / "proxy-client.crt"),
                    "--proxy-client-key-file", str(d / "proxy-client.key"),
                    "--cert-dir", str(d / "apiserver-certs"), *self._audit())
        if self.real_node:  # this machine's loopback to the namespace's, over a Unix socket
            relay = str(d / "apiserver.sock")
            self._spawn("relay-in", f"UNIX-LISTEN:{relay},fork", f"TCP:127.0.0.1:{self.port}", program="socat")
            self._spawn("relay-out", f"TCP-LISTEN:{self.port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{relay}",
                        program="socat", here=True)
        self._wait("kube-apiserver", lambda: self._http_ok(f"{self.url}/readyz", self.tokens[ADMIN], here=True))

    def _audit(self) -> list[str]:
        """The API server's audit log (`audit_log`, `audit_policy`): who made each pod's request (or each request)."""
        (self.dir / "audit-policy.yaml").write_text(yaml.safe_dump(self.audit_policy))
        return ["--audit-policy-file", str(self.dir / "audit-policy.yaml"), "--audit-log-path", str(self.audit_log)]

    @property
    def audit_log(self) -> Path:
        return self.dir / "audit.log"

    def audited(self, user: str, since: float = 0) -> list[dict]:
        """The audit log's events of requests `user` made (a service account's: AUDIT_POLICY), received since the
        time `since`."""
        with self.audit_log.open() as log:
            return [event for event in map(json.loads, log) if event["user"]["username"] == user
                    and received(event) >= since]

    def _http_ok(self, url: str, token: str | None = None, here: bool = False) -> bool:
        """Whether `url` answers in the cluster's network namespace (with `here`, this machine's)."""
        command = ["curl", "-sf", "-o", "/dev/null", "--max-time", "2", "--cacert", str(self.dir / "ca.crt"), url]
        if token:
            command += ["-H", f"Authorization: Bearer {token}"]
        return subprocess.run(command if here else [*self.prefix, *command], capture_output=True).returncode == 0

    def _write_kubeconfig(self, user: str, token: str | None = None, path: Path | None = None) -> None:
        """A kubeconfig for `user` (with their token, or `token`), at `path` (default: `kubeconfig(user)`)."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url,
                                                      "certificate-authority": str(self.dir / "ca.crt")}}],
            "users": [{"name": user, "user": {"token": token or self.tokens[user]}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user, "namespace": NAMESPACE}}],
        }
        (path or self.kubeconfig(user)).write_text(yaml.safe_dump(config))

    def kubeconfig(self, user: str = ADMIN) -> Path:
        return self.dir / f"{user}.kubeconfig"

    def _start_kwok(self) -> None:
        node_port = free_port()
        stages = [(BIN / "stages" / f).read_text() for f in sorted(os.listdir(BIN / "stages"))]
        (self.dir / "kwok.yaml").write_text("\n---\n".join([*stages, POD_STAGES]))
        self.create(yaml.safe_load((BIN / "kwok.x-k8s.io_logs.yaml").read_text()))
        self._wait("kube-apiserver", lambda: self._crd_established("logs.kwok.x-k8s.io"))
        self._spawn("kwok", "--kubeconfig", str(self.kubeconfig(ADMIN)), "--config", str(self.dir / "kwok.yaml"),
                    "--manage-all-nodes=true", "--node-ip=127.0.0.1", f"--node-port={node_port}",
                    f"--server-address=127.0.0.1:{node_port}", "--enable-crds=Logs",
                    "--tls-cert-file", str(self.dir / "serving.crt"),
                    "--tls-private-key-file", str(self.dir / "serving.key"), "--node-lease-duration-seconds=40")

    def _start_node(self) -> None:
        """containerd with the tests' images (realnode.furnish), the kubelet (Ready), and CoreDNS on the node's
        address."""
        self._spawn("containerd", "--config", str(realnode.RUN / "containerd.toml"), program="containerd")
        self._wait("containerd", realnode.SOCKET.exists)
        realnode.route_kubernetes_service(self.port)
        self._write_kubeconfig(NODE, path=self.dir / "node.kubeconfig")
        self._spawn("kubelet", "--config", str(realnode.RUN / "kubelet.yaml"),
                    "--kubeconfig", str(self.dir / "node.kubeconfig"), "--root-dir", str(realnode.RUN / "kubelet"),
                    "--cert-dir", str(realnode.RUN / "kubelet" / "pki"),
                    "--hostname-override", realnode.NODE, "--node-ip", realnode.NODE_IP)
        self.wait_nodes_ready(1, process="kubelet")
        (self.dir / "Corefile").write_text(realnode.COREFILE.format(kubeconfig=self.kubeconfig(ADMIN)))
        self._spawn("coredns", "-conf", str(self.dir / "Corefile"))
        self._start_metrics_server()

    def _start_metrics_server(self) -> None:
        """A metrics-server scraping the kubelet every 10 s, aggregated as the cluster's metrics API (metrics.k8s.io)
        at its loopback port, as Kueue's visibility API is: what `kubectl top` and a running job's metrics read."""
        port, admin = free_port(), str(self.kubeconfig(ADMIN))
        self._spawn("metrics-server", "--kubeconfig", admin, "--authentication-kubeconfig", admin,
                    "--authorization-kubeconfig", admin, "--bind-address=127.0.0.1", f"--secure-port={port}",
                    "--cert-dir", str(self.dir / "metrics-server"), "--kubelet-insecure-tls",
                    "--kubelet-preferred-address-types=InternalIP", "--metric-resolution=10s",
                    "--kubelet-request-timeout=5s")
        self._aggregate("metrics-server", METRICS_API, "metrics-server", "kube-system", port)

    def _aggregate(self, process: str, api: tuple[str, str], service: str, namespace: str, port: int) -> None:
        """Serve `api` (group, version) through the API server from `process`'s loopback `port`, as an APIService
        whose Service names this loopback (the API server resolves an ExternalName Service to its name and the
        APIService's port); once it answers there."""
        group, version = api
        self.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": namespace},
                     "spec": {"type": "ExternalName", "externalName": "localhost"}},
                    {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                     "metadata": {"name": f"{version}.{group}"},
                     "spec": {"group": group, "version": version, "groupPriorityMinimum": 100,
                              "versionPriority": 100, "insecureSkipTLSVerify": True,
                              "service": {"name": service, "namespace": namespace, "port": port}}})
        self._wait(process, lambda: self._http_ok(f"{self.url}/apis/{group}/{version}", self.tokens[ADMIN],
                                                  here=True))

    def _crd_established(self, name: str) -> bool:
        from kubernetes import client

        with self.client() as api:
            crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    def _start_jobset(self) -> None:
        """The JobSet CRD, its controller, and its webhooks (defaulting and validating JobSets, and the
        pods of JobSets) registered at the controller's loopback address."""
        self._install_crds("jobset.x-k8s.io_jobsets.yaml")
        port, certs = free_port(), self._serving_certificates("jobset")
        config = {"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
                  "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
                  "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
                  "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": "0"}}
        (self.dir / "jobset.yaml").write_text(yaml.safe_dump(config))
        self._spawn("jobset", "--config", str(self.dir / "jobset.yaml"),
                    env={"KUBECONFIG": str(self.kubeconfig(ADMIN))})
        self._register_webhooks("jobset", f"https://127.0.0.1:{port}", [
            ("mutating", "mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "jobsets",
             ["CREATE"], None),
            ("mutating", "mpod.kb.io", "/mutate--v1-pod", "", "pods", ["CREATE"], "jobset.sigs.k8s.io/jobset-name"),
            ("validating", "vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io",
             "jobsets", ["CREATE", "UPDATE"], None),
            ("validating", "vpod.kb.io", "/validate--v1-pod", "", "pods", ["CREATE"], "jobset.sigs.k8s.io/jobset-name"),
        ])
        probe = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                 "metadata": {"name": "probe", "namespace": "default"},
                 "spec": {"replicatedJobs": [{"name": "r", "template": {"spec": {"template": {"spec": {
                     "containers": [{"name": "c", "image": "busybox"}]}}}}}]}}
        self._wait("jobset", lambda: self._dry_run_accepted(probe))

    def _install_crds(self, *files: str) -> None:
        """Create the CRDs of these files in bin/crds, and wait until the API server serves each."""
        crds = [yaml.safe_load((BIN / "crds" / file).read_text()) for file in files]
        self.create(*crds)
        for crd in crds:
            self._wait("kube-apiserver", lambda: self._crd_established(crd["metadata"]["name"]))

    def _serving_certificates(self, name: str) -> Path:
        """A directory with this control plane's loopback serving certificate as tls.crt and tls.key."""
        certs = self.dir / f"{name}-certs"
        certs.mkdir()
        shutil.copy(self.dir / "serving.crt", certs / "tls.crt")
        shutil.copy(self.dir / "serving.key", certs / "tls.key")
        return certs

    def _start_kubeflow(self) -> None:
        """The Training Operator's CRDs, its controllers (kubeflow/main.go) and its validating webhooks."""
        kinds = ("tfjobs", "pytorchjobs", "paddlejobs")
        self._install_crds(*(f"kubeflow.org_{kind}.yaml" for kind in kinds))
        port = free_port()
        waiter = [f"--pytorch-init-container-image={images.NSLOOKUP_IMAGE}"] if self.real_node else []
        self._spawn("training-operator", "--cert-dir", str(self._serving_certificates("kubeflow")),
                    f"--webhook-port={port}", *waiter, env={"KUBECONFIG": str(self.kubeconfig(ADMIN))})
        self._register_webhooks("kubeflow", f"https://127.0.0.1:{port}", [
            ("validating", f"validator.{kind[:-1]}.training-operator.kubeflow.org",
             f"/validate-kubeflow-org-v1-{kind[:-1]}", "kubeflow.org", kind, ["CREATE", "UPDATE"], None)
            for kind in kinds])
        probe = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "probe", "namespace": "default"},
                 "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                     "containers": [{"name": "tensorflow", "image": "busybox"}]}}}}}}
        self._wait("training-operator", lambda: self._dry_run_accepted(probe))

    def _start_kueue(self) -> None:
        """Kueue's CRDs, its controller, and its webhooks for what the tests run, registered at the
        controller's loopback address. Kueue manages its certificate itself: it finds this control plane's
        CA and serving certificate (made to its names) in its Secret and its certificate directory, keeps
        them, and puts the CA into its webhook configurations."""
        from kubernetes import client

        self._install_crds(*(path.name for path in sorted((BIN / "crds").glob("kueue.x-k8s.io_*.yaml"))))
        read = {name: base64.b64encode((self.dir / file).read_bytes()).decode() for name, file in
                {"ca.crt": "ca.crt", "ca.key": "ca.pkcs1.key", "tls.crt": "serving.crt", "tls.key": "serving.key"}.items()}
        self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}},
                    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": KUEUE_SECRET, "namespace": "kueue-system"},
                     "data": read})
        port, certs = free_port(), self._serving_certificates("kueue")  # the Secret, as the kubelet mounts it
        config = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "namespace": "kueue-system",
                  "leaderElection": {"leaderElect": False},
                  # its requests' rate (50 a second by default): a deleted sweep's 1,000 Workloads let go at once
                  "clientConnection": {"qps": 500, "burst": 1000},
                  "internalCertManagement": {"enable": True, "webhookServiceName": KUEUE_SERVICE.split(".")[0],
                                             "webhookSecretName": KUEUE_SECRET},
                  "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
                  "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": "0"},
                  "integrations": {"frameworks": ["jobset.x-k8s.io/jobset", "kubeflow.org/tfjob",
                                                  "kubeflow.org/pytorchjob", "kubeflow.org/paddlejob"]}}
        (self.dir / "kueue.yaml").write_text(yaml.safe_dump(config))
        (self.dir / "admin.token").write_text(self.tokens[ADMIN])
        self._spawn("kueue", "--mount", "--propagation", "private", "sh", "-c", KUEUE_MOUNTS, "sh",
                    str(self.dir / "admin.token"), str(self.dir / "ca.crt"), str(BIN / "kueue"),
                    "--config", str(self.dir / "kueue.yaml"), program="unshare",
                    env={"KUBECONFIG": str(self.kubeconfig(ADMIN)), "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                         "KUBERNETES_SERVICE_PORT": str(self.port)})
        ca = base64.b64encode((self.dir / "ca.crt").read_bytes()).decode()
        with self.client() as api:
            admission = client.AdmissionregistrationV1Api(api)
            for manifest in yaml.safe_load_all((BIN / "kueue-webhooks.yaml").read_text()):
                hooks = [hook for hook in manifest["webhooks"]
                         if any(part in hook["clientConfig"]["service"]["path"] for part in KUEUE_WEBHOOKS)]
                for hook in hooks:
                    hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{hook['clientConfig']['service']['path']}",
                                            "caBundle": ca}
                kind = manifest["kind"].removesuffix("WebhookConfiguration").lower()
                body = {"metadata": {"name": f"kueue-{kind}-webhook-configuration"}, "webhooks": hooks}
                getattr(admission, f"create_{kind}_webhook_configuration")(body)
        probe = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "probe"}}
        self._wait("kueue", lambda: self._dry_run_accepted(probe))
        # its visibility API, aggregated as Kueue's own manifest does, at the port Kueue serves it on
        self._aggregate("kueue", KUEUE_VISIBILITY, "kueue-visibility-server", "kueue-system", KUEUE_VISIBILITY_PORT)

    def _register_webhooks(self, name: str, url: str, hooks: list[tuple]) -> None:
        """Admission webhooks at `url`: (mutating|validating, name, path, API group, resource, operations,
        a label the objects must have or None)."""
        from kubernetes import client

        ca = base64.b64encode((self.dir / "ca.crt").read_bytes()).decode()
        configs: dict[str, list[dict]] = {"mutating": [], "validating": []}
        for kind, hook, path, group, resource, operations, label in hooks:
            configs[kind].append({
                "name": hook, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                "clientConfig": {"url": url + path, "caBundle": ca},
                "rules": [{"apiGroups": [group], "apiVersions": ["*"], "operations": operations,
                           "resources": [resource]}],
                **({"objectSelector": {"matchExpressions": [{"key": label, "operator": "Exists"}]}} if label else {}),
            })
        with self.client() as api:
            admission = client.AdmissionregistrationV1Api(api)
            if configs["mutating"]:
                admission.create_mutating_webhook_configuration(
                    {"metadata": {"name": f"{name}-mutating"}, "webhooks": configs["mutating"]})
            admission.create_validating_webhook_configuration(
                {"metadata": {"name": f"{name}-validating"}, "webhooks": configs["validating"]})

    def _dry_run_accepted(self, obj: dict) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        group, _, version = obj["apiVersion"].rpartition("/")
        plural, namespace = obj["kind"].lower() + "s", obj["metadata"].get("namespace")
        with self.client() as api:
            custom = client.CustomObjectsApi(api)
            try:
                if namespace:
                    custom.create_namespaced_custom_object(group, version, namespace, plural, obj, dry_run="All")
                else:
                    custom.create_cluster_custom_object(group, version, plural, obj, dry_run="All")
                return True
            except ApiException:
                return False  # the webhook does not answer yet

    # what tests use
    def client(self, user: str = ADMIN):
        """A kubernetes ApiClient authenticated as `user`; close it after use."""
        from kubernetes import config

        return config.new_client_from_config(str(self.kubeconfig(user)))

    def acting_as(self, account: str):
        """An API client authenticated as the namespace's service account `account`, with a token of it the admin
        asks for (the TokenRequest API, as a pod of the account gets), so a request it may not make answers 403, as
        it would to a program in the cluster running as that account (controllers/); close it after use. (An
        Impersonate-User header would not do: the client's websocket calls, pods/exec, send none but
        Authorization.)"""
        from kubernetes import client

        with self.client(ADMIN) as api:
            token = client.CoreV1Api(api).create_namespaced_service_account_token(account, NAMESPACE, {
                "spec": {"audiences": [], "expirationSeconds": 3600}})
            configuration = copy.deepcopy(api.configuration)
        configuration.api_key, configuration.api_key_prefix = {"BearerToken": f"Bearer {token.status.token}"}, {}
        configuration.refresh_api_key_hook = None  # the admin's token, set again before each request
        return client.ApiClient(configuration)

    def create(self, *documents: dict) -> None:
        from kubernetes import client, utils

        with self.client() as api:
            for doc in documents:
                group, _, version = doc["apiVersion"].rpartition("/")
                if group == "kwok.x-k8s.io":
                    client.CustomObjectsApi(api).create_namespaced_custom_object(
                        group, version, doc["metadata"]["namespace"], doc["kind"].lower(), doc)
                else:
                    utils.create_from_dict(api, doc)

    def apply(self, *documents: dict) -> None:
        """Each of `documents` made, or brought to what it says: `kubectl apply --server-side`."""
        from kubernetes import dynamic

        with self.client() as api:
            resources = dynamic.DynamicClient(api).resources
            for doc in documents:
                resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).server_side_apply(
                    doc, namespace=doc["metadata"].get("namespace"), field_manager="tests", force_conflicts=True)

    def add_node(self, name: str, cpu: str = "8", memory: str = "32Gi", gpus: int = 0, labels: dict | None = None,
                 taints: list[dict] | None = None) -> None:
        capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        self.create({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {"type": "kwok", **(labels or {})},
                                 "annotations": {"kwok.x-k8s.io/node": "fake"}},
                    "spec": {"taints": taints or []},
                    "status": {"capacity": capacity, "allocatable": capacity}})

    def wait_nodes_ready(self, count: int, timeout: float = 60, process: str = "kwok") -> None:
        from kubernetes import client

        def ready() -> bool:
            with self.client() as api:
                nodes = client.CoreV1Api(api).list_node().items
            return sum(any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                       for n in nodes) >= count

        self._wait(process, ready, timeout)

    def write_log(self, pod: str, *lines: str) -> None:
        """Append lines to the file kwok serves as `pod`'s log (CRI log format), whatever its container's
        name (an engine's: main, or the Training Operator's tensorflow, pytorch, paddle)."""
        path = self.dir / "pod-logs" / f"{pod}.log"
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            path.touch()
            self.create({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                        "metadata": {"name": pod, "namespace": NAMESPACE},
                        "spec": {"logs": [{"containers": ["main", "tensorflow", "pytorch", "paddle"],
                                           "logsFile": str(path), "follow": True}]}})
        now = datetime.now(timezone.utc)
        with open(path, "a") as f:  # each line its own time, as a container runtime stamps them
            f.writelines(f"{(now + timedelta(microseconds=i)).strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z stdout F {line}\n"
                         for i, line in enumerate(lines))

    def clear_logs(self) -> None:
        """Empty every pod's log file, so a later pod of the same name starts with no lines."""
        for path in (self.dir / "pod-logs").glob("*.log"):
            path.write_text("")

    def _run_pods_here(self) -> None:
        """Run each RUN_HERE pod's command here from when it runs until it is deleted (log
        readers one at a time: they share HOST_IP's port; the servers make one at a time and wait until the last
        is gone); the pod ends with its process."""
        from kubernetes import client, watch
        from kubernetes.client.exceptions import ApiException

        running: dict[str, tuple[client.V1Pod, subprocess.Popen]] = {}
        with self.client(ADMIN) as api:
            core = client.CoreV1Api(api)
            version = None
            while not self.stopping.is_set():
                try:
                    for event in watch.Watch().stream(core.list_namespaced_pod, NAMESPACE, timeout_seconds=1,
                                                      label_selector=f"{COMPONENT} in ({','.join(RUN_HERE)})",
                                                      resource_version=version):
                        pod = event["object"]
                        version = pod.metadata.resource_version
                        uid = pod.metadata.uid
                        if event["type"] == "DELETED" or pod.metadata.deletion_timestamp:
                            if uid in running:
                                stop_process(running.pop(uid)[1])
                        elif pod.status.phase == "Running" and uid not in running:
                            with suppress(client.exceptions.NotFoundException):  # its service account went first
                                running[uid] = pod, self._start_here(core, pod)
                    for uid, (pod, process) in list(running.items()):
                        if process.poll() is not None:  # its pod ends as its process did
                            del running[uid]
                            with suppress(ApiException):
                                core.patch_namespaced_pod(pod.metadata.name, NAMESPACE, {"metadata": {
                                    "annotations": {EXIT_CODE: str(process.returncode)}}})
                except ApiException as e:
                    if e.status != 410:
                        raise
                    version = None
        for _, process in running.values():
            stop_process(process)

    def _start_here(self, core, pod) -> subprocess.Popen:
        """A log reader's or a purger's command, or a controller's (a sweep's, the janitor) with its service
        account's credentials."""
        if pod.metadata.labels[COMPONENT] in PLAIN_RUN_HERE:
            return self.run_here(core, pod, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        from kubernetes import client

        token = core.create_namespaced_service_account_token(pod.spec.service_account_name, NAMESPACE, {
            "spec": {"audiences": [], "expirationSeconds": 3600, "boundObjectRef": {
                "kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid}}})
        assert isinstance(token, client.AuthenticationV1TokenRequest)
        config = self.dir / f"{pod.metadata.name}.kubeconfig"
        self._write_kubeconfig(pod.spec.service_account_name, token.status.token, config)
        log = open(self.dir / "logs" / f"{pod.metadata.name}.log", "ab")
        with log:
            return self.run_here(core, pod, env={"KUBECONFIG": str(config)}, stdout=log, stderr=subprocess.STDOUT)

    def run_here(self, core, pod, **popen) -> subprocess.Popen:
        """Run the pod's first container's command on this machine, as a kubelet would: with the container's
        environment (its values, and its Secrets' keys), $(VAR) expanded in the values and the command
        (kubelet_expanded), `python` being this interpreter, /output being its volume's
        directory here (a hostPath, or the hostPath of the PersistentVolume bound to its claim), each ConfigMap it
        mounts a directory here of its files (the product's programs) and $TMPDIR one of its own, as a container's
        /tmp. `popen` goes to subprocess.Popen."""
        container = pod.spec.containers[0]
        own: dict[str, str] = {}
        for e in container.env or []:  # a value expanded with the variables before it
            if (value := self._env_value(core, pod, e)) is not None:
                own[e.name] = value if e.value_from else kubelet_expanded(value, own)
        mounted = {"/output": str(self._output_here(core, pod)), **self._config_maps_here(core, pod)}
        python, *args = [functools.reduce(lambda text, mount: text.replace(*mount), mounted.items(),
                                          kubelet_expanded(part, own)) for part in container.command]
        assert python == "python"
        scratch = self.dir / "tmp" / pod.metadata.name  # the container's own /tmp (the log tee looks through it)
        scratch.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # the image's
               "TMPDIR": str(scratch), **own, **popen.pop("env", {})}
        env.pop("KUBERNETES_SERVICE_HOST", None)  # this machine is no pod
        return subprocess.Popen([sys.executable, *args], env=env, **popen)

    @staticmethod
    def _env_value(core, pod, variable) -> str | None:
        """A variable's value, or from a Secret's key; None from other sources (the pod's fields), or from an
        optional Secret that is not there."""
        from kubernetes.client.exceptions import ApiException

        if variable.value_from is None or variable.value_from.secret_key_ref is None:
            return variable.value
        key = variable.value_from.secret_key_ref
        try:
            secret = core.read_namespaced_secret(key.name, pod.metadata.namespace)
        except ApiException as e:
            if e.status == 404 and key.optional:
                return None
            raise
        return base64.b64decode(secret.data[key.key]).decode()

    def _config_maps_here(self, core, pod) -> dict[str, str]:
        """The directories here of the ConfigMaps the pod's container mounts, by their mount path: each item of
        the volume's written where the kubelet would put it."""
        found = {}
        for mount in pod.spec.containers[0].volume_mounts or []:
            source = next(v for v in pod.spec.volumes if v.name == mount.name).config_map
            if source is None:
                continue
            data = core.read_namespaced_config_map(source.name, pod.metadata.namespace).data
            directory = self.dir / "config-maps" / source.name
            for key, path in [(i.key, i.path) for i in source.items or []] or [(key, key) for key in data]:
                (directory / path).parent.mkdir(parents=True, exist_ok=True)
                written = directory / f"{path}.{threading.get_ident()}"  # whole, for a process reading it meanwhile
                written.write_text(data[key])
                written.replace(directory / path)
            found[mount.mount_path] = str(directory)
        return found

    @staticmethod
    def _output_here(core, pod) -> Path | str:
        """The directory here of the pod's /output ("/output" if it mounts none)."""
        container = pod.spec.containers[0]
        mount = next((m for m in container.volume_mounts or [] if m.mount_path == "/output"), None)
        if mount is None:
            return "/output"
        volume = next(v for v in pod.spec.volumes if v.name == mount.name)
        if volume.host_path:
            directory = Path(volume.host_path.path)
        else:
            claim = core.read_namespaced_persistent_volume_claim(volume.persistent_volume_claim.claim_name,
                                                                pod.metadata.namespace)
            directory = Path(core.read_persistent_volume(claim.spec.volume_name).spec.host_path.path)
        return directory / (mount.sub_path or "")

    def stop(self) -> None:
        """Stop every process (kwok or the node first, etcd last), remove the real node, and remove the working
        directory."""
        self.stopping.set()
        if self.readers.is_alive():
            self.readers.join()
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        self.processes.clear()
        if self.real_node:
            realnode.clean()
        shutil.rmtree(self.dir, ignore_errors=True)
