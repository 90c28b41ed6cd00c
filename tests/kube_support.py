"""What the Kubernetes backend's tests (test_kube_*.py) share, against a real control plane
(tests/controlplane): the settings and specs of their jobs, the helpers that read and end a job's replicas, and
the fixtures (conftest.py names this module in pytest_plugins; the modules whose tests need the control plane
ask for `fresh_logs` in their pytestmark).

Pods run no containers here (kwok simulates them): a test ends a replica by annotating its pod with
an exit code, and writes the lines its pods/log serves. Real training runs on the local backend."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from conftest import JupyterServer, wait
from controlplane.cluster import ADMIN, EXIT_CODE, NAMESPACE, REASON, RESTRICTED
from kubernetes import client

from jupyter_distrain import spec as spec_
from jupyter_distrain import storage
from jupyter_distrain.backends.kubernetes import KubeBackend, naming
from jupyter_distrain.backends.kubernetes.watch import Cache
from jupyter_distrain.config import Distrain

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SETTINGS = Distrain(namespace=NAMESPACE)


ENGINE_NAMES = ["jobset", "kubeflow", "pods"]
ENGINES = pytest.mark.parametrize("engine", ENGINE_NAMES)


# their own events of the job's end (the Training Operator's TFJobSucceeded may never come: it reports each exited
# pod again at every sync, and client-go drops an object's events past a burst of 25)
ENGINE_DONE = {"jobset": "AllJobsCompleted", "kubeflow": "ExitedWithCode", "pods": "Completed"}


def own_outputs(control_plane) -> Path:
    """Where this user's jobs keep their outputs on the test cluster's output volume (storage.py)."""
    return control_plane.dir / "volumes" / "distrain-outputs" / storage.OWNERS / storage.owner_dir(SETTINGS.owner)


def settings(root: Path, namespace: str = NAMESPACE, engine: str = "auto") -> Distrain:
    return Distrain(root=str(root), namespace=namespace, kubernetes_engine=engine)


def tf_spec(name: str, workers: int = 2, gpus: int = 0, **extra) -> dict:
    return spec_.validate({
        "name": name, "framework": "tensorflow", "command": "python train.py --steps {{ steps }}",
        "hyperparameters": {"steps": 100},
        "code": {"git": "https://example.com/team/models.git", "commit": COMMIT},
        "replicas": {"chief": {}, "ps": {}, "worker": {"count": workers, "resources": {"gpus": gpus}}},
        **extra,
    })


def chief_spec(name: str, command: str = "python train.py", **extra) -> dict:
    """A job of one replica, its chief."""
    return spec_.validate({"name": name, "framework": "tensorflow", "command": command,
                           "code": {"git": "https://example.com/team/models.git", "commit": COMMIT},
                           "replicas": {"chief": {}}, **extra})


@pytest.fixture
def admin(control_plane):
    with control_plane.client(ADMIN) as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def fresh_logs(control_plane):
    """The engines name pods alike: each test's pods start with empty logs. (The modules whose tests need the
    control plane ask for it in their pytestmark.)"""
    control_plane.clear_logs()


@pytest.fixture
def engine() -> str:
    """The engine of the `backend` fixture's jobs; tests of the lifecycle run on each (ENGINES)."""
    return "auto"


@pytest.fixture
def backend(control_plane, tmp_path, engine):
    """The backend as the Jupyter server runs it: the restricted user's token, a watch-fed controller."""
    api = control_plane.client(RESTRICTED)
    kube = KubeBackend(settings(tmp_path / "distrain-home", engine=engine), api)
    kube.start(logging.getLogger("test"))
    yield kube
    try:
        kube.close()
    finally:  # the next test starts from an empty namespace whatever happened
        with control_plane.client(ADMIN) as admin_api:
            core = client.CoreV1Api(admin_api)
            for cm in core.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items:
                core.delete_namespaced_config_map(cm.metadata.name, NAMESPACE, propagation_policy="Foreground")
            wait(lambda: not core.list_namespaced_pod(NAMESPACE).items
                 and not core.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items,
                 "the test's jobs and their pods deleted")
    api.close()


def wait_job(kube: KubeBackend, name: str, condition, what: str, timeout: float = 30) -> dict:
    last = {}

    def check():
        last["job"] = kube.get(name)
        return last["job"] if condition(last["job"]) else None

    return wait(check, what, timeout, shown=lambda: json.dumps(last.get("job"), default=str, indent=1))


def replica(job: dict, name: str) -> dict:
    return next(r for r in job["replicas"] if r["name"] == name)


def pods_of(admin: client.CoreV1Api, job: str, replica_: str | None = None) -> list[client.V1Pod]:
    """The job's pods (or one replica's), oldest first."""
    pods = admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}={job},{naming.ROLE}").items
    return sorted([p for p in pods if replica_ in (None, naming.replica_of(p.metadata.labels))],
                  key=lambda p: p.metadata.creation_timestamp)


def pod_name(admin: client.CoreV1Api, job: str, replica_: str) -> str:
    """The replica's current pod (named by its Job on the JobSet engine, after the replica otherwise)."""
    return wait(lambda: [p.metadata.name for p in pods_of(admin, job, replica_)
                         if p.status.phase in ("Pending", "Running") and not p.metadata.deletion_timestamp],
                f"{job}'s {replica_} has a pod")[-1]


def end(admin: client.CoreV1Api, job: str, replica_: str, code: int, reason: str | None = None) -> None:
    """Make the replica's (simulated) container exit with `code`."""
    annotations = {EXIT_CODE: str(code), **({REASON: reason} if reason else {})}
    admin.patch_namespaced_pod(pod_name(admin, job, replica_), NAMESPACE, {"metadata": {"annotations": annotations}})


def running(admin: client.CoreV1Api, job: str) -> list[str]:
    """The replicas whose pods still run (or are pending)."""
    return sorted(naming.replica_of(p.metadata.labels) for p in pods_of(admin, job)
                  if p.status.phase in ("Pending", "Running"))


def dry_run_create(admin: client.CoreV1Api, objects: list[dict]) -> None:
    """A server-side dry run of each object: schema, names, quantities (and the engines' webhooks) all
    validated, nothing stored."""
    custom = client.CustomObjectsApi(admin.api_client)
    for obj in objects:
        if obj["apiVersion"] in (naming.JOBSET_API, naming.KUBEFLOW_API):
            group, version = obj["apiVersion"].split("/")
            custom.create_namespaced_custom_object(group, version, NAMESPACE, obj["kind"].lower() + "s", obj,
                                                   dry_run="All")
        else:
            rbac, batch = client.RbacAuthorizationV1Api(admin.api_client), client.BatchV1Api(admin.api_client)
            {"ConfigMap": admin.create_namespaced_config_map, "Service": admin.create_namespaced_service,
             "Pod": admin.create_namespaced_pod, "ServiceAccount": admin.create_namespaced_service_account,
             "Role": rbac.create_namespaced_role, "RoleBinding": rbac.create_namespaced_role_binding,
             "Job": batch.create_namespaced_job}[obj["kind"]](NAMESPACE, obj, dry_run="All")


def names(items) -> set[str]:
    return {i.metadata.name for i in items}


CONFIGURED_IMAGE = "registry.example.com/team/tensorflow:2.16"


@pytest.fixture
def kube_server(control_plane, tmp_path):
    """A real Jupyter server on the Kubernetes backend, with the restricted user's kubeconfig, an image and an
    output volume of its own: configured in a Jupyter config file, as an administrator would."""
    config_dir = tmp_path / "jupyter-config"
    config_dir.mkdir()
    (config_dir / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {
        "backend": "kubernetes", "namespace": NAMESPACE, "kubeconfig": str(control_plane.kubeconfig(RESTRICTED)),
        "default_images": {"tensorflow": CONFIGURED_IMAGE, "python": "python:3.11-slim"},
        "output_claim": "datasets"}}))
    server = JupyterServer(tmp_path, env={**os.environ, "JUPYTER_CONFIG_DIR": str(config_dir)})
    server.api = f"{server.url}/distrain/api"
    server.config_dir = config_dir
    yield server
    server.stop()
    with control_plane.client(ADMIN) as api:  # its jobs marked the claim as holding outputs: as furnished again
        client.CoreV1Api(api).patch_namespaced_persistent_volume_claim(
            "datasets", NAMESPACE, {"metadata": {"labels": {naming.HOLDS_OUTPUTS: None}}})


# the cache and the work queue
def configmap(name: str, version: str, status: str = "") -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, resource_version=version,
                                                           labels={**naming.MANAGED, naming.JOB: name}),
                              data={"status.json": status})


def cached(cache: Cache, name: str) -> str | None:
    """The resourceVersion of the cached job ConfigMap `name` (None: not cached); the lookups by name and by
    the job's label agree with it, and a job no longer cached leaves nothing in the index."""
    version = next((cm.metadata.resource_version for cm in cache.items("configmaps") if cm.metadata.name == name), None)
    assert [cm.metadata.resource_version for cm in cache.of_job("configmaps", name)] == [version] * (version is not None)
    assert (cache.get("configmaps", name) is None) == (version is None) == (name not in cache.index["configmaps"])
    return version
