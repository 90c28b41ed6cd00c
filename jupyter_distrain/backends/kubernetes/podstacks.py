"""A running job's stacks on Kubernetes: incluster/stackdump.py run through pods/exec in every replica's container,
all at once, with the py-spy that the pod's `stack-tools` init container copied from this product's image
(podspec.TOOLS). The dump runs as the container's user, within the container: a process of the same user may read
the training process's memory under the default Pod Security profiles (baseline and restricted: no capability),
where the kernel's Yama allows it as replica_site/sitecustomize.py declares."""

from __future__ import annotations

import base64
import builtins  # `list` is also a method name below
import gzip
import json
import time
from concurrent.futures import ThreadPoolExecutor

import yaml
from kubernetes import client
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL

from ... import stacks
from ...errors import NotSupported
from ...incluster import source
from ...incluster.stackdump import DUMP_SECONDS
from .objects import NamespaceObjects
from .observe import JobObserver
from .podspec import TOOLS, TOOLS_DIR
from .state import current_run, newest

STACKDUMP = source("stackdump")
KEPT = "stacks.json.gz"  # in the job's ConfigMap (binaryData): the stacks kept when its current run hung
EXEC_SECONDS = 2 * DUMP_SECONDS + 15  # a process's dump, native and then Python's only, and the exec's own start


class ReplicaStacks:
    def __init__(self, objects: NamespaceObjects, observer: JobObserver):
        self.objects, self.observer = objects, observer

    def stacks(self, name: str, replica: str | None = None, kept: bool = False) -> dict:
        job = self.observer.get(name, events=0)

        def running(names: builtins.list[str]) -> dict[str, client.V1Pod]:
            if not self.objects.settings.controller_image:
                raise NotSupported("stacks on Kubernetes use py-spy from this product's image, which the pods get "
                                   "from c.Distrain.controller_image; it is not set")
            return {r: p for r, p in newest(self.objects.job_pods(name)).items()
                    if r in names and p.status.phase == "Running" and not p.metadata.deletion_timestamp}
        return stacks.requested(job, replica, kept, lambda: self._kept(name), running, self._take)

    def keep_stacks(self, name: str, taken: dict) -> None:
        """Keep stacks (with why they were taken) in the job's ConfigMap, the current run's, in place of any kept
        before: the cluster holds them, whoever took them."""
        run = current_run(self.objects.job_root_fresh(name))
        packed = base64.b64encode(gzip.compress(json.dumps({**taken, "run": run}).encode())).decode()
        self.objects.call(lambda: self.objects.core.patch_namespaced_config_map(
            name, self.objects.ns, {"binaryData": {KEPT: packed}}), f"keep the stacks of {name}")

    def _kept(self, name: str) -> dict | None:
        root = self.objects.job_root(name)
        packed = (root.binary_data or {}).get(KEPT)
        found = json.loads(gzip.decompress(base64.b64decode(packed))) if packed else None
        return found if found and found.pop("run") == current_run(root) else None

    def _take(self, pods: dict[str, client.V1Pod]) -> dict:
        taken = time.time()
        with ThreadPoolExecutor(len(pods)) as pool:
            found = dict(zip(pods, pool.map(self._dump, pods.values())))
        return stacks.compared(found, taken)

    def _dump(self, pod: client.V1Pod) -> builtins.list[dict] | str:
        """The Python processes of the pod's replica, or why they could not be dumped."""
        if not any(v.name == TOOLS for v in pod.spec.volumes or []):
            return "its pod was made without the stack tools (c.Distrain.controller_image was not set)"
        # a client of its own: the exec's websocket replaces the client's transport while the call is made
        with client.ApiClient(self.objects.api.configuration) as api:
            try:
                answer = stream(client.CoreV1Api(api).connect_get_namespaced_pod_exec, pod.metadata.name,
                                self.objects.ns, container=pod.spec.containers[0].name, stdout=True, stderr=True,
                                stdin=False, tty=False, _preload_content=False,
                                command=["python", "-c", STACKDUMP, f"{TOOLS_DIR}/py-spy", "1"])
            except client.ApiException as e:
                return f"pods/exec refused: {e.reason or e.status}"
            try:
                answer.run_forever(timeout=EXEC_SECONDS)
                if answer.is_open():
                    return f"no stacks within {EXEC_SECONDS} s"
                out, err = answer.read_stdout(), answer.read_stderr()
                status = yaml.safe_load(answer.read_channel(ERROR_CHANNEL)) or {}
            finally:
                answer.close()
        return dumped(out, err, status)


def dumped(out: str, err: str, status: dict) -> builtins.list[dict] | str:
    """What a stack dump in a pod answered (stdout, stderr, the exec's status): its processes, or why not."""
    if status.get("status") == "Success" and out:
        try:
            return json.loads(out)
        except ValueError:
            return f"the stack dump printed what is not JSON: {out.strip()[:200]!r}"
    return (err.strip().splitlines() or [status.get("message") or "the stack dump printed nothing"])[-1]
