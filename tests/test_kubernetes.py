"""The Kubernetes backend against a real control plane (tests/controlplane): manifests accepted by the
API server, scheduling, status, the lifecycle policy on each engine (JobSet's controller, or the pods this
backend supervises), logs that outlive pods, garbage collection, RBAC.

Pods run no containers here (kwok simulates them): a test ends a replica by annotating its pod with
an exit code, and writes the lines its pods/log serves. Real training runs on the local backend."""

from __future__ import annotations

import base64
import filecmp
import getpass
import hashlib
import itertools
import json
import logging
import os
import platform
import re
import shutil
import socket
import subprocess
import threading
import time
import venv
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests
import yaml
from conftest import (
    CLI,
    JupyterServer,
    assert_nothing_left,
    at_once,
    distrain_command,
    remove_janitor,
    wait,
    write_scalars,
    write_spec,
    write_wheel,
)
from controlplane.cluster import ADMIN, BIN, EXIT_CODE, HOST_IP, NAMESPACE, REASON, RESTRICTED, image_id
from kubernetes import client

from jupyter_distrain import spec as spec_
from jupyter_distrain import storage
from jupyter_distrain.backends.kubernetes import KubeBackend, naming, podspec, render
from jupyter_distrain.backends.kubernetes import state as kube_state
from jupyter_distrain.backends.kubernetes.controller import NamespaceController
from jupyter_distrain.backends.kubernetes.state import event_time, new_status, newest
from jupyter_distrain.backends.kubernetes.watch import Cache, KubeError, WorkQueue, listers
from jupyter_distrain.config import Distrain
from jupyter_distrain.errors import RunNotFound, SpecError
from jupyter_distrain.jobjson import job_json, provenance
from jupyter_distrain.manager import JobManager

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SETTINGS = Distrain(namespace=NAMESPACE)


ENGINES = pytest.mark.parametrize("engine", ["jobset", "kubeflow", "pods"])
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


@pytest.fixture(autouse=True)
def fresh_logs(control_plane):
    """The engines name pods alike: each test's pods start with empty logs."""
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
    controller = NamespaceController(kube, logging.getLogger("test"))
    yield kube
    try:
        controller.stop()
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
            {"ConfigMap": admin.create_namespaced_config_map, "Service": admin.create_namespaced_service,
             "Pod": admin.create_namespaced_pod}[obj["kind"]](NAMESPACE, obj, dry_run="All")


def names(items) -> set[str]:
    return {i.metadata.name for i in items}


def test_manifests_are_accepted_by_the_api_server(control_plane, admin):
    spec = tf_spec("render-check", gpus=1, data={"volume": "datasets", "path": "mnist"},
                   code={"git": "https://example.com/private.git", "commit": COMMIT, "credentials": "git-login"})
    objects = render.render(spec, SETTINGS, "pods")
    assert [o["kind"] for o in objects] == ["ConfigMap"] + ["Service", "Pod"] * 4
    dry_run_create(admin, objects)
    assert not admin.list_namespaced_pod(NAMESPACE).items

    pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "render-check-worker-1")
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"chief": ["render-check-chief-0.training.svc:2222"], "ps": ["render-check-ps-0.training.svc:2222"],
                    "worker": ["render-check-worker-0.training.svc:2222", "render-check-worker-1.training.svc:2222"]},
        "task": {"type": "worker", "index": 1}, "environment": "cloud"}
    main = pod["spec"]["containers"][0]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert 'python train.py --steps "${DISTRAIN_HP_steps}"' in main["command"][-1] and env["DISTRAIN_HP_steps"] == "100"
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert mounts["/input"]["readOnly"] and mounts["/input"]["subPath"] == "mnist"
    assert mounts["/output"]["subPath"] == f"owners/{storage.owner_dir(SETTINGS.owner)}/render-check"
    fetch = pod["spec"]["initContainers"][0]
    assert COMMIT in fetch["command"][-1]
    assert {"secretKeyRef": {"name": "git-login", "key": "password"}} in [e.get("valueFrom") for e in fetch["env"]]


@ENGINES
def test_distributed_job_runs_and_succeeds_with_parameter_servers_cleaned_up(control_plane, backend, admin, engine):
    job = backend.submit(tf_spec("tf-ok"))
    assert (job["backend"], job["engine"]) == ("kubernetes", engine)
    assert bool(job["supervision"]) == (engine == "pods")
    assert [r["name"] for r in job["replicas"]] == ["chief-0", "ps-0", "worker-0", "worker-1"]
    chief = pod_name(admin, "tf-ok", "chief-0")
    control_plane.write_log(chief, "serving at tf-ok-chief-0:2222", "step 1 loss 2.0")
    job = wait_job(backend, "tf-ok", lambda j: j["phase"] == "Running", "the job runs")
    pods = pods_of(admin, "tf-ok")
    assert {p.spec.node_name for p in pods} <= {"cpu-0", "gpu-0", "gpu-1"} and all(p.spec.node_name for p in pods)
    nodes = {r["name"]: r["node"] for r in job_json(backend.get("tf-ok"))["replicas"]}  # as the job view shows them
    assert nodes == {naming.replica_of(p.metadata.labels): p.spec.node_name for p in pods}
    image = pods[0].spec.containers[0].image
    assert job["environment"] == {"image": image, "image_digests": [image_id(image)]}  # as the pods report it
    services = names(admin.list_namespaced_service(NAMESPACE).items)
    assert services >= ({"tf-ok"} if engine == "jobset" else {"tf-ok-chief-0", "tf-ok-worker-1"})

    wait(lambda: "step 1" in "".join(line.text for line in backend.logs("tf-ok", replica="chief-0")),
         "the chief's log is copied while it runs")
    control_plane.write_log(chief, "step 2 loss 1.0", "done")
    for name in ("worker-0", "worker-1", "chief-0"):
        end(admin, "tf-ok", name, 0)
    start = time.monotonic()
    wait(lambda: not running(admin, "tf-ok"), "the parameter server's pod is deleted")
    print(f"{engine}: chief's exit to the parameter server's pod deleted: {time.monotonic() - start:.2f} s")
    job = wait_job(backend, "tf-ok", lambda j: j["phase"] == "Succeeded", "the job succeeds")
    assert job["exit_code"] == 0 and job["reason"] == "Completed"
    assert replica(job, "chief-0")["phase"] == "Succeeded"
    assert (replica(job, "ps-0")["phase"], replica(job, "ps-0")["reason"]) == ("Stopped", "job succeeded")
    if engine == "pods":  # the supervisor cleans up; the JobSet keeps its finished pods until the job is deleted
        wait(lambda: not pods_of(admin, "tf-ok"), "every pod is deleted")
        assert not admin.list_namespaced_service(NAMESPACE, label_selector=f"{naming.JOB}=tf-ok").items
    # what ran is recorded with the job, its pods gone or not; reproducing it runs that image by its digest
    assert backend.get("tf-ok")["environment"]["image_digests"] == [image_id(image)]
    reproduced = JobManager({"kubernetes": backend}, backend.settings).clone("tf-ok", dry_run=True, reproduce=True)
    assert (reproduced["name"], reproduced["image"]) == ("tf-ok-2", image_id(image))
    lines = [line.text for line in backend.logs("tf-ok", replica="chief-0")]
    assert lines == ["serving at tf-ok-chief-0:2222", "step 1 loss 2.0", "step 2 loss 1.0", "done"]
    listed = lambda: {e["reason"] for e in backend.get("tf-ok", 100)["events"]}  # noqa: E731
    held = lambda: [(e.involved_object.name, e.reason, event_time(e))  # noqa: E731
                    for e in admin.list_namespaced_event(NAMESPACE).items]
    wait(lambda: {"Submitted", "Scheduled", ENGINE_DONE[engine]} <= listed(),
         "the job's events and the scheduler's are listed",
         shown=lambda: f"only {listed()} of {held()}; the job created at {backend.get('tf-ok', 0)['created']}")
    # the job of this name that an earlier variant ran left its events (Kubernetes keeps them an hour): not shown
    assert [e["reason"] for e in backend.get("tf-ok", 100)["events"]].count("Submitted") == 1


@ENGINES
def test_chief_failure_fails_the_job_with_its_exit_code_and_deletes_the_rest(control_plane, backend, admin):
    backend.submit(tf_spec("tf-fail"))
    wait_job(backend, "tf-fail", lambda j: j["phase"] == "Running", "the job runs")
    end(admin, "tf-fail", "chief-0", 3)
    job = wait_job(backend, "tf-fail", lambda j: j["phase"] == "Failed", "the job fails")
    assert job["exit_code"] == 3
    assert "chief-0" in job["reason"] and "code 3" in job["message"]
    assert replica(job, "chief-0")["exit_code"] == 3
    assert {replica(job, n)["phase"] for n in ("ps-0", "worker-0", "worker-1")} == {"Stopped"}
    wait(lambda: not running(admin, "tf-fail"), "the other replicas' pods are deleted")


@ENGINES
def test_a_signal_restarts_a_replica_with_restart_exit_code_and_exit_1_does_not(backend, admin):
    spec = tf_spec("tf-signal", policy={"restart": "exit-code", "max_restarts": 2})
    backend.submit(spec)
    wait_job(backend, "tf-signal", lambda j: j["phase"] == "Running", "the job runs")
    end(admin, "tf-signal", "worker-1", 143)  # SIGTERM, as a preempted pod gets
    # the job's phase follows its replicas' (on "pods", once the supervisor has recorded it)
    wait_job(backend, "tf-signal", lambda j: replica(j, "worker-1")["restarts"] == 1
             and replica(j, "worker-1")["phase"] == "Running" and j["phase"] == "Running",
             "the killed worker, and so the job, runs again")
    end(admin, "tf-signal", "worker-1", 1)
    job = wait_job(backend, "tf-signal", lambda j: j["phase"] == "Failed", "exit code 1 fails the job")
    assert (job["exit_code"], replica(job, "worker-1")["restarts"]) == (1, 1)
    wait(lambda: not running(admin, "tf-signal"), "every other replica stops")


@ENGINES
def test_the_deadline_fails_the_job(backend, admin):
    backend.submit(tf_spec("tf-late", policy={"deadline_seconds": 2}))
    job = wait_job(backend, "tf-late", lambda j: j["phase"] == "Failed", "the deadline fails the job", 60)
    assert (job["reason"], job["message"]) == ("DeadlineExceeded", "the job ran longer than 2 s")
    wait(lambda: not running(admin, "tf-late"), "every replica stops")


@ENGINES
def test_oom_killed_replica_shows_its_reason(backend, admin):
    backend.submit(spec_.validate({"name": "oom", "framework": "tensorflow", "command": "python eat.py",
                                   "replicas": {"worker": {}},
                                   "code": {"git": "https://example.com/a.git", "commit": COMMIT}}))
    wait_job(backend, "oom", lambda j: j["phase"] == "Running", "the job runs")
    end(admin, "oom", "worker-0", 137, reason="OOMKilled")
    job = wait_job(backend, "oom", lambda j: j["phase"] == "Failed", "the job fails")
    assert replica(job, "worker-0")["reason"] == "OOMKilled" and job["exit_code"] == 137


def test_impossible_gpu_request_is_refused_before_anything_is_created(backend, admin):
    with pytest.raises(SpecError) as refused:
        backend.submit(tf_spec("too-big", gpus=3))
    assert [e.path for e in refused.value.errors] == ["replicas.worker.resources.gpus"]
    assert "3 GPUs per worker requested; the largest node has 2" in str(refused.value)
    assert not backend.exists("too-big")
    with pytest.raises(SpecError) as refused:
        backend.submit(tf_spec("a" * 45))
    assert str(refused.value) == ("invalid job spec: name: at most 44 characters for this job on JobSet: its pods' "
                                  "names (<name>-<replica>-0-0-<5 characters>) must fit in 63")
    assert not admin.list_namespaced_pod(NAMESPACE).items


def test_busy_gpus_leave_the_job_pending_with_the_schedulers_reason(backend, admin):
    backend.submit(tf_spec("gpu-a", workers=2, gpus=2))
    wait_job(backend, "gpu-a", lambda j: j["phase"] == "Running", "the first job holds every GPU")
    backend.submit(tf_spec("gpu-b", workers=1, gpus=2))
    job = wait_job(backend, "gpu-b", lambda j: j["reason"] == "Unschedulable", "the second job waits")
    assert job["phase"] == "Pending"
    assert "Insufficient nvidia.com/gpu" in replica(job, "worker-0")["message"]
    assert "worker-0: " in job["message"] and "Insufficient nvidia.com/gpu" in job["message"]
    assert backend.cluster()["gpus"] == {"capacity": 4, "available": 0, "held_in": "every namespace",
                                         "devices": [{"node": "gpu-0", "gpus": 2}, {"node": "gpu-1", "gpus": 2}]}
    # the README's narrower rights: no pods of other namespaces; GPUs held are then counted in this one
    rbac = client.RbacAuthorizationV1Api(admin.api_client)
    capacity = rbac.read_cluster_role("jupyter-distrain-capacity")
    rbac.patch_cluster_role(capacity.metadata.name, {"rules": [{"apiGroups": [""], "resources": ["nodes"],
                                                                "verbs": ["list"]}]})
    try:
        gpus = wait(lambda: (g := backend.cluster()["gpus"])["held_in"] == NAMESPACE and g, "pods of one namespace")
        assert (gpus["capacity"], gpus["available"]) == (4, 0)
    finally:
        rbac.patch_cluster_role(capacity.metadata.name, {"rules": capacity.rules})
    backend.delete("gpu-a")
    wait_job(backend, "gpu-b", lambda j: j["phase"] == "Running", "the second job runs once GPUs are free", 60)


def test_deleting_the_jobs_configmap_deletes_everything_it_owns(control_plane, backend, admin):
    backend.submit(tf_spec("gc"))
    wait_job(backend, "gc", lambda j: j["phase"] == "Running", "the job runs")
    admin.delete_namespaced_config_map("gc", NAMESPACE)  # no cascade asked for: the garbage collector's work
    selector = f"{naming.JOB}=gc"
    wait(lambda: not admin.list_namespaced_pod(NAMESPACE, label_selector=selector).items
         and not admin.list_namespaced_service(NAMESPACE, label_selector=selector).items,
         "the garbage collector deleted the pods and services", 60)


def test_delete_leaves_nothing_but_keeps_no_logs(control_plane, backend, admin, tmp_path):
    backend.submit(tf_spec("gone"))
    wait_job(backend, "gone", lambda j: j["phase"] == "Running", "the job runs")
    backend.delete("gone")
    selector = f"{naming.JOB}=gone"
    assert not admin.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    assert not admin.list_namespaced_service(NAMESPACE, label_selector=selector).items
    assert not backend.exists("gone")
    assert not (backend.home / "gone").exists()



def test_every_verb_at_once_on_one_job_ends_consistent(control_plane, backend, admin, tmp_path):
    """Eight threads submit, stop, restart, delete and read one job for 10 s through one backend (as a
    server's request threads do): each call either does what it says or is refused as not found or taken
    (without the backend's per-job lock, some answered errors of the API server: a JobSet that exists, a
    ConfigMap that does not), and at the end deleting the job leaves nothing in the cluster."""
    from jupyter_distrain.errors import DistrainError

    verbs = {"submit": lambda: backend.submit(tf_spec("hammered", workers=1)), "stop": lambda: backend.stop("hammered"),
             "restart": lambda: backend.restart("hammered"), "delete": lambda: backend.delete("hammered"),
             "get": lambda: backend.get("hammered")}
    answers, wrong = [], []

    def hammer(seed: int, until: float) -> None:
        import random
        choose = random.Random(seed)
        while time.monotonic() < until:
            verb = choose.choice(sorted(verbs))
            try:
                verbs[verb]()
                answers.append((verb, 200))
            except DistrainError as e:
                answers.append((verb, e.status))
                if e.status not in (404, 409):
                    wrong.append((verb, type(e).__name__, str(e)))
            except Exception as e:  # noqa: BLE001 - every other error is a 500
                wrong.append((verb, type(e).__name__, str(e)))

    at_once(hammer, count=8, seconds=10)
    assert not wrong, wrong
    assert {status for _, status in answers} == {200, 404, 409}, answers  # done, and refused both ways
    if backend.exists("hammered"):
        backend.delete("hammered")
    wait(lambda: not pods_of(admin, "hammered") and not admin.list_namespaced_config_map(
        NAMESPACE, label_selector=f"{naming.JOB}=hammered").items, "nothing of the job is left")


def test_each_owner_sees_and_touches_only_their_own_jobs(control_plane, admin, tmp_path):
    """Two users' servers on one namespace (one watching, one not) and an admin's: the job's ConfigMap
    carries its owner (a label to select by, an annotation with the exact name); each sees only their own
    job, every verb on the other's is JobNotFound and changes nothing; the admin sees and acts on both."""
    from jupyter_distrain.errors import JobConflict, JobNotFound

    def server(owner: str, **settings_) -> KubeBackend:
        return KubeBackend(Distrain(root=str(tmp_path / owner), namespace=NAMESPACE, owner=owner, **settings_),
                           control_plane.client(RESTRICTED))

    alice, bob, carol = server("alice@example.com"), server("bob"), server("carol", see_all_owners=True)
    alice.start(logging.getLogger("alice"))  # a watching server: its cache holds both jobs, it shows one
    try:
        alice.submit(tf_spec("alices", workers=1))
        bob.submit(tf_spec("bobs", workers=1))
        root = admin.read_namespaced_config_map("alices", NAMESPACE)
        assert root.metadata.labels[naming.OWNER] == "alice-example.com"
        assert root.metadata.annotations[naming.OWNER] == "alice@example.com"
        wait(lambda: [j["name"] for j in alice.list()] == ["alices"], "alice's server lists her job only")
        assert [(j["name"], j["owner"]) for j in bob.list()] == [("bobs", "bob")]
        wait_job(bob, "bobs", lambda j: j["phase"] == "Running", "bob's job runs")
        for verb in (alice.get, alice.stop, alice.restart, alice.delete, lambda name: list(alice.logs(name))):
            with pytest.raises(JobNotFound):
                verb("bobs")
        with pytest.raises(JobConflict):
            alice.submit(tf_spec("bobs", workers=1))
        assert bob.get("bobs")["phase"] == "Running" and bob.get("bobs")["run"] == 1
        assert sorted((j["name"], j["owner"]) for j in carol.list()) == [("alices", "alice@example.com"),
                                                                         ("bobs", "bob")]
        pods = wait(lambda: pods_of(admin, "alices"), "alice's pods")  # every object of a job names its owner
        assert {p.metadata.labels[naming.OWNER] for p in pods} == {"alice-example.com"}
        carol.restart("bobs")  # an admin's restart keeps the job its owner's
        wait(lambda: {p.metadata.labels[naming.OWNER] for p in pods_of(admin, "bobs")
                      if p.metadata.labels[naming.RUN] == "2"} == {"bob"}, "the second run's pods are bob's")
        carol.delete("bobs")
        assert not bob.exists("bobs")
        alice.delete("alices")
    finally:
        alice.close()


def test_on_a_shared_volume_each_owner_writes_resumes_reads_and_purges_only_their_own(control_plane, admin,
                                                                                      tmp_path):
    """Two owners on one namespace: whatever path a spec names, its pods write in its owner's directory of the
    volume, resume_from: job:NAME finds that owner's job (or their directory of its name), a purge deletes in
    that directory only, and reading another owner's outputs (or a whole volume holding them) is refused
    unless the admin allows it. A volume outputs go to says so on its claim. A job named as another's objects
    are shows none of its events there."""
    def server(owner: str, **settings_) -> KubeBackend:
        return KubeBackend(Distrain(root=str(tmp_path / owner), namespace=NAMESPACE, owner=owner,
                                    kubernetes_engine="jobset", **settings_), control_plane.client(RESTRICTED))

    def mounts(job: str) -> dict[str, str]:
        pod = wait(lambda: pods_of(admin, job), f"{job}'s pods")[0]
        return {m.mount_path: m.sub_path for m in pod.spec.containers[0].volume_mounts
                if m.mount_path in ("/output", "/input", "/resume")}

    def refused(kube: KubeBackend, **fields) -> dict[str, str]:
        with pytest.raises(SpecError) as caught:
            kube.check(chief_spec("refused", **fields))
        return {e.path: e.message for e in caught.value.errors}

    alice, bob = server("alice@example.com"), server("bob")
    reader = server("bob", read_others_outputs=True)
    admin.create_namespaced_persistent_volume_claim(NAMESPACE, {
        "metadata": {"name": "team-results"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    try:
        alice.submit(chief_spec("aj"))
        alice.submit(chief_spec("av", output={"volume": "team-results"}))
        bob.submit(chief_spec("bout", output={"volume": "distrain-outputs", "path": "aj"}, resume_from="job:aj"))
        alice.submit(chief_spec("again", resume_from="job:aj"))
        assert alice.get("aj")["output_dir"] == "pvc://distrain-outputs/owners/alice%40example.com/aj"
        assert mounts("aj")["/output"] == "owners/alice%40example.com/aj"
        assert mounts("av")["/output"] == "owners/alice%40example.com/av"
        assert mounts("bout") == {"/output": "owners/bob/aj", "/resume": "owners/bob/aj"}
        assert mounts("again")["/resume"] == "owners/alice%40example.com/aj"
        claim = admin.read_namespaced_persistent_volume_claim("team-results", NAMESPACE)
        assert claim.metadata.labels[naming.HOLDS_OUTPUTS] == "true"
        purger = render.purger(bob.get("bout")["spec"], bob.settings,
                                  bob.api.sanitize_for_serialization(bob.job_root("bout")))
        assert purger["spec"]["containers"][0]["command"][-2:] == ["/output", "owners/bob/aj"]

        for volume in ("distrain-outputs", "team-results"):
            assert refused(bob, data={"volume": volume}) == {"data.volume": (
                f"{volume} holds other owners' outputs (in owners/): name a directory of the volume, or your own "
                "outputs (owners/bob/...)")}
            assert refused(bob, data={"volume": volume, "path": "owners/alice%40example.com/aj"}) == {
                "data.path": f"{volume}/owners/alice%40example.com/aj is another owner's output directory"}
            reader.check(chief_spec("reads", data={"volume": volume}))  # the admin lets outputs be read
        bob.check(chief_spec("reads", data={"volume": "datasets"}))  # a volume no outputs go to
        bob.check(chief_spec("reads", data={"volume": "team-results", "path": "owners/bob/x"}))

        bob.submit(chief_spec("aj-chief-0-x"))  # named as alice's objects are: its events are not hers
        assert "Submitted" in [e["reason"] for e in bob.get("aj-chief-0-x")["events"]]
        assert [(e["replica"], e["reason"]) for e in alice.get("aj")["events"] if e["reason"] == "Submitted"] == [
            ("", "Submitted")]
    finally:
        for job in ("aj", "av", "bout", "again", "aj-chief-0-x"):
            with suppress(client.ApiException):
                admin.delete_namespaced_config_map(job, NAMESPACE)
        admin.delete_namespaced_persistent_volume_claim("team-results", NAMESPACE)
        wait(lambda: not admin.list_namespaced_pod(NAMESPACE).items
             and not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items,
             "the test's jobs and pods deleted")


@ENGINES
def test_a_job_ends_while_no_server_runs_and_a_new_server_shows_all_of_it(control_plane, admin, tmp_path, engine):
    """The case the engines are for: the cluster ends the job while no Jupyter server (or CLI) runs. On "pods"
    nothing does until a server starts again, and the job says so."""
    first = KubeBackend(settings(tmp_path / "home", engine=engine), control_plane.client(RESTRICTED))
    first.start(logging.getLogger("first"))
    job = first.submit(tf_spec("survivor"))
    assert ("supervised by the Jupyter server" in job["supervision"]) == (engine == "pods")
    wait_job(first, "survivor", lambda j: j["phase"] == "Running", "the job runs")
    chief = pod_name(admin, "survivor", "chief-0")
    control_plane.write_log(chief, "step 1 while watched")
    wait(lambda: first.log_files("survivor", "chief-0")["chief-0"].exists(), "the server copies the chief's log")
    first.close()  # the Jupyter server goes away; the job runs on in the cluster
    control_plane.write_log(chief, "step 2 while nobody watched", "done")
    end(admin, "survivor", "chief-0", 0)
    if engine != "pods":
        wait(lambda: not running(admin, "survivor"), "the cluster stops the parameter server and the workers")
    else:
        time.sleep(3)
        assert running(admin, "survivor") == ["ps-0", "worker-0", "worker-1"]  # until a server returns
    second = KubeBackend(settings(tmp_path / "home", engine=engine), control_plane.client(RESTRICTED))
    second.start(logging.getLogger("second"))
    job = wait_job(second, "survivor", lambda j: j["phase"] == "Succeeded", "the new server shows the job's end")
    assert [replica(job, r)["phase"] for r in ("chief-0", "ps-0", "worker-0")] == ["Succeeded", "Stopped", "Stopped"]
    wait(lambda: [line.text for line in second.logs("survivor", replica="chief-0")] == [
        "step 1 while watched", "step 2 while nobody watched", "done"], "the new server copies what the chief logged")
    if engine != "pods":  # what the engine did while no server ran
        assert ENGINE_DONE[engine] in {e["reason"] for e in job["events"]}
    wait(lambda: not running(admin, "survivor"), "nothing runs")
    second.delete("survivor")
    second.close()


def play_kubelet(control_plane, admin, pod_name_: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    """Run the pod's main container's command here (ControlPlane.run_here, with `env`); what it prints becomes
    the pod's pods/log, as a container runtime would keep it. The process reads its stdin."""
    process = control_plane.run_here(admin, admin.read_namespaced_pod(pod_name_, NAMESPACE), cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env or {})

    def runtime():
        for line in process.stdout:
            control_plane.write_log(pod_name_, line.decode(errors="replace").rstrip("\n"))

    threading.Thread(target=runtime, daemon=True).start()
    return process


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
    chief = pod_name(admin, "outlived", "chief-0")
    wait(lambda: admin.read_namespaced_pod(chief, NAMESPACE).status.phase == "Running", "the chief runs")
    process = play_kubelet(control_plane, admin, chief, tmp_path)
    process.stdin.write(b"epoch 1\nepoch 2\n")
    process.stdin.flush()
    texts = lambda backend: [line.text for line in backend.logs("outlived", replica="chief-0")]  # noqa: E731
    wait(lambda: texts(first) == ["epoch 1", "epoch 2"], "the server copies the chief's first lines")
    first.close()

    process.stdin.write(b"epoch 3\n\xff done\n")  # not even UTF-8
    process.stdin.close()
    assert process.wait(30) == 0
    end(admin, "outlived", "chief-0", 0)
    observer = KubeBackend(settings(tmp_path / "observer", engine=engine), control_plane.client(RESTRICTED))
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
        second.delete("outlived")
        second.close()
        shutil.rmtree(volume.parents[3])


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


def test_the_training_operator_runs_each_replica_with_its_own_variables(control_plane, admin):
    """On "kubeflow" a role's replicas share one template: the operator sets TF_CONFIG, and each pod runs the
    branch of its index with clusterenv's variables. Policies the operator cannot keep are refused."""
    spec = tf_spec("kf-env", policy={"restart": "exit-code", "max_restarts": 2, "deadline_seconds": 600})
    objects = render.render(spec, SETTINGS, "kubeflow")
    assert [o["kind"] for o in objects] == ["ConfigMap", "TFJob"]
    tfjob = objects[1]["spec"]
    assert tfjob["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 2, "activeDeadlineSeconds": 600}
    assert {t: r["restartPolicy"] for t, r in tfjob["tfReplicaSpecs"].items()} == dict.fromkeys(
        ["Chief", "PS", "Worker"], "ExitCode")
    assert {r["template"]["spec"]["activeDeadlineSeconds"] for r in tfjob["tfReplicaSpecs"].values()} == {600}
    dry_run_create(admin, objects)
    with pytest.raises(SpecError, match="a TFJob with these replicas succeeds as 'chief' says, not 'all-workers'"):
        render.render(tf_spec("kf-all", policy={"success": "all-workers"}), SETTINGS, "kubeflow")
    with pytest.raises(SpecError, match="runs tensorflow, keras, pytorch and paddle jobs, not python ones"):
        render.render(spec_.validate({"name": "py", "command": "python a.py"}), SETTINGS, "kubeflow")

    admin_custom = client.CustomObjectsApi(admin.api_client)
    admin_custom.create_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "tfjobs", objects[1])
    try:
        pod = wait(lambda: next((p for p in pods_of(admin, "kf-env", "worker-1")), None), "the operator makes worker 1")
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert json.loads(env["TF_CONFIG"]) == {  # the operator's
            "cluster": {"chief": ["kf-env-chief-0.training.svc:2222"], "ps": ["kf-env-ps-0.training.svc:2222"],
                        "worker": ["kf-env-worker-0.training.svc:2222", "kf-env-worker-1.training.svc:2222"]},
            "task": {"type": "worker", "index": 1}, "environment": "cloud"}
        assert json.loads(env["DISTRAIN_CLUSTER"]) == json.loads(env["TF_CONFIG"])["cluster"]
        command = pod.spec.containers[0].command
        assert command[3] == "/output/.distrain/logs/UID/1/worker-$(DISTRAIN_INDEX).log"  # the kubelet expands it
        exported = branch_env(pod)
        assert (exported["DISTRAIN_REPLICA"], exported["DISTRAIN_SHARD_INDEX"]) == ("worker-1", "2")
    finally:
        admin_custom.delete_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "tfjobs", "kf-env")
        wait(lambda: not pods_of(admin, "kf-env"), "the TFJob's pods are deleted")


def branch_env(pod: client.V1Pod) -> dict[str, str]:
    """The variables the "kubeflow" engine's script exports in the pod's branch (its index's), with the pod's."""
    script = pod.spec.containers[0].command[-1].removeprefix(podspec.INSTALL + "\n").replace("exec /bin/sh -c", ":") + "; env -0"
    own = {e.name: e.value for e in pod.spec.containers[0].env if e.value is not None}
    exported = subprocess.run(["sh", "-c", script], env={**own, "DISTRAIN_INDEX": pod.metadata.labels[
        naming.KUBEFLOW_INDEX], "PATH": os.environ["PATH"]}, capture_output=True, text=True, check=True).stdout
    return dict(entry.split("=", 1) for entry in exported.split("\0")[:-1] if "=" in entry)


def test_paddle_parameter_servers_render_as_paddle_needs_them(control_plane, admin):
    """The paddle-ps example on the cluster. JobSet: a pserver finds its index as POD_IP:PADDLE_PORT in the
    pserver list, and gloo's store is on ps-0, at the port after its own. Training Operator: a PaddleJob whose
    Masters are the pservers; the pods the operator makes carry the operator's variables and ours, naming
    the Services it makes."""
    example = spec_.load_file(Path(__file__).parent.parent / "examples" / "paddle-ps" / "distrain.yaml")
    spec = spec_.validate({**example, "code": {"git": "https://example.com/team/models.git", "commit": COMMIT}})
    objects = render.render(spec, SETTINGS, "jobset")
    # the TensorBoard's last
    assert [o["kind"] for o in objects] == ["ConfigMap", "JobSet", "Secret", "Deployment", "Service"]
    dry_run_create(admin, objects[:2])
    env = {job["name"]: {e["name"]: e.get("value") for e in
                         job["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
           for job in objects[1]["spec"]["replicatedJobs"]}
    pservers = env["worker-1"]["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
    assert [f"{env[ps]['POD_IP']}:{env[ps]['PADDLE_PORT']}" for ps in ("ps-0", "ps-1")] == pservers
    assert {e["PADDLE_GLOO_HTTP_ENDPOINT"] for e in env.values()} == {f"{env['ps-0']['POD_IP']}:2223"}
    assert pservers[0] == f"{env['ps-0']['POD_IP']}:2222"

    objects = render.render(spec, SETTINGS, "kubeflow")
    assert [o["kind"] for o in objects] == ["ConfigMap", "PaddleJob", "Secret", "Deployment", "Service"]
    assert {t: r["replicas"] for t, r in objects[1]["spec"]["paddleReplicaSpecs"].items()} == {"Master": 2, "Worker": 2}
    dry_run_create(admin, objects[:2])
    custom = client.CustomObjectsApi(admin.api_client)
    custom.create_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "paddlejobs", objects[1])
    try:
        pods = wait(lambda: len(pods_of(admin, "paddle-ps")) == 4 and pods_of(admin, "paddle-ps"),
                    "the operator makes the 4 pods")
        services = {s.metadata.name for s in admin.list_namespaced_service(NAMESPACE).items}
        for pod in pods:
            exported = branch_env(pod)
            role = exported["DISTRAIN_ROLE"]
            assert exported["TRAINING_ROLE"] == {"ps": "PSERVER", "worker": "TRAINER"}[role]
            assert exported["PADDLE_JOB_ID"] == "paddle-ps"  # the operator's, beside ours
            listed = exported["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
            assert [address.split(".")[0] for address in listed] == ["paddle-ps-master-0", "paddle-ps-master-1"]
            assert {address.split(".")[0] for address in listed} <= services
            if role == "ps":
                assert f"{exported['POD_IP']}:{exported['PADDLE_PORT']}" == listed[int(exported["DISTRAIN_INDEX"])]
    finally:
        custom.delete_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "paddlejobs", "paddle-ps")
        wait(lambda: not pods_of(admin, "paddle-ps"), "the PaddleJob's pods are deleted")


def test_a_snapshot_travels_in_a_secret_that_fetch_code_applies(control_plane, admin, checkout, tmp_path):
    """--include-changes on the cluster: the bundle is a Secret the job's ConfigMap owns, which the pods'
    fetch-code mounts; its command, run here on the Secret's bytes, checks out the work tree byte for byte.
    A clone carries the Secret's bundle; the job's deletion takes the Secret along; one over what a Secret
    holds is refused with both sizes, creating nothing."""
    kube = KubeBackend(settings(tmp_path / "home", engine="jobset"), control_plane.client(RESTRICTED))
    manager = JobManager({"kubernetes": kube}, kube.settings)
    spec = {**yaml.safe_load((checkout / "distrain.yaml").read_text()), "name": "snapped"}
    spec["code"].update(git=f"file://{tmp_path / 'remote.git'}", changes_from=str(checkout))
    job = manager.submit(spec)
    taken = job["spec"]["code"]["snapshot"]
    secret = admin.read_namespaced_secret("snapped-snapshot", NAMESPACE)
    bundle = base64.b64decode(secret.data["snapshot.bundle"])
    assert hashlib.sha256(bundle).hexdigest() == taken["sha256"] and kube.snapshot("snapped") == bundle
    assert [o.kind for o in secret.metadata.owner_references] == ["ConfigMap"]
    assert "snapped-snapshot" not in kube.credential_names()

    pod = wait(lambda: next(iter(pods_of(admin, "snapped")), None), "the JobSet's pod")
    assert {"name": "snapshot", "secret": "snapped-snapshot"} in [
        {"name": v.name, "secret": v.secret.secret_name} for v in pod.spec.volumes if v.secret]
    fetch = pod.spec.init_containers[0]
    (tmp_path / "mounted").mkdir()
    (tmp_path / "mounted" / "snapshot.bundle").write_bytes(bundle)
    script = fetch.command[-1].replace("/workspace", str(tmp_path / "workspace")).replace(
        " /snapshot/", f" {tmp_path / 'mounted'}/")  # the pod's mounts, here
    subprocess.run(["sh", "-c", script], check=True, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    files = sorted(p.name for p in checkout.iterdir() if p.name not in (".git", "secret.txt"))
    workspace = tmp_path / "workspace"
    assert sorted(p.name for p in workspace.iterdir() if p.name != ".git") == files
    assert filecmp.cmpfiles(checkout, workspace, files, shallow=False) == (files, [], [])

    clone = manager.clone("snapped")
    assert clone["spec"]["code"]["snapshot"] == taken and kube.snapshot(clone["name"]) == bundle
    for name in ("snapped", clone["name"]):
        manager.delete(name)
    wait(lambda: not admin.list_namespaced_secret(NAMESPACE, label_selector=f"{naming.JOB}=snapped").items,
         "the garbage collector deletes the Secret with its job")

    (checkout / "weights.bin").write_bytes(os.urandom(3 << 19))
    with pytest.raises(SpecError, match=r"code.changes_from: the snapshot of your changes is 1.5 MiB, over the "
                                        r"1.0 MiB a Secret holds"):
        manager.submit({**spec, "name": "too-big"})
    assert not kube.exists("too-big") and not admin.list_namespaced_secret(
        NAMESPACE, label_selector=f"{naming.JOB}=too-big").items


@pytest.fixture(scope="module")
def kueue_queue(control_plane):
    """Kueue's LocalQueue `team` in the namespace, on a ClusterQueue whose quota (3 CPUs) fits one job of two
    1-CPU replicas at a time."""
    kueue = ("kueue.x-k8s.io", "v1beta1")
    objects = [
        ("resourceflavors", {"metadata": {"name": "default"}}),
        ("clusterqueues", {"metadata": {"name": "one-job"}, "spec": {"namespaceSelector": {}, "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [
                {"name": "cpu", "nominalQuota": 3}]}]}]}}),
        ("localqueues", {"metadata": {"name": "team", "namespace": NAMESPACE}, "spec": {"clusterQueue": "one-job"}}),
    ]
    with control_plane.client(ADMIN) as api:
        custom = client.CustomObjectsApi(api)
        for plural, body in objects:
            body = {"apiVersion": "/".join(kueue), "kind": KUEUE_KINDS[plural], **body}
            if plural == "localqueues":
                custom.create_namespaced_custom_object(*kueue, NAMESPACE, plural, body)
            else:
                custom.create_cluster_custom_object(*kueue, plural, body)
        yield "team"
        custom.delete_namespaced_custom_object(*kueue, NAMESPACE, "localqueues", "team")
        custom.delete_cluster_custom_object(*kueue, "clusterqueues", "one-job")
        custom.delete_cluster_custom_object(*kueue, "resourceflavors", "default")


KUEUE_KINDS = {"resourceflavors": "ResourceFlavor", "clusterqueues": "ClusterQueue", "localqueues": "LocalQueue"}


@pytest.mark.parametrize("engine", ["jobset", "kubeflow"])
def test_kueue_holds_a_job_in_its_queue_until_there_is_quota(backend, admin, kueue_queue):
    """With a ClusterQueue whose quota fits one job, a second job waits Queued with Kueue's reason and runs
    once the first is deleted. A queue the namespace lacks, or one for bare pods, is refused up front."""
    def queued_spec(name: str) -> dict:
        return tf_spec(name, queue=kueue_queue, replicas={"chief": {"resources": {"cpu": 1}},
                                                          "worker": {"resources": {"cpu": 1}}})

    assert backend.cluster()["queues"] == [kueue_queue]
    with pytest.raises(SpecError, match="no LocalQueue 'elsewhere' in namespace training; queues: team"):
        backend.submit({**queued_spec("lost"), "queue": "elsewhere"})
    assert not backend.exists("lost")
    with pytest.raises(SpecError, match="Kueue queues JobSets and the Training Operator's jobs"):
        render.render(queued_spec("bare"), SETTINGS, "pods")

    backend.submit(queued_spec("first"))
    wait_job(backend, "first", lambda j: j["phase"] == "Running", "Kueue admits the first job", 60)
    backend.submit(queued_spec("second"))
    job = wait_job(backend, "second", lambda j: j["phase"] == "Queued" and j["reason"] != "Queued",
                   "the second job waits for quota, with Kueue's reason", 60)
    assert job["reason"] == "Pending" and "insufficient unused quota for cpu" in job["message"], job["message"]
    assert [r["phase"] for r in job["replicas"]] == ["Pending", "Pending"] and not pods_of(admin, "second")
    backend.submit(queued_spec("third"))
    wait_job(backend, "third", lambda j: j["phase"] == "Queued", "a third job waits too")
    stopped = backend.stop("third")  # a queued job stops as any other: its engine's object (and Kueue's) go
    assert (stopped["phase"], [r["phase"] for r in stopped["replicas"]]) == ("Stopped", ["Stopped", "Stopped"])
    group, version = naming.KUEUE_API.split("/")
    custom = client.CustomObjectsApi(admin.api_client)
    wait(lambda: not any(o["name"] == "third" for w in custom.list_namespaced_custom_object(
        group, version, NAMESPACE, "workloads")["items"] for o in w["metadata"].get("ownerReferences", [])),
         "Kueue's workload of the stopped job is gone")
    backend.delete("third")
    backend.delete("first")
    wait_job(backend, "second", lambda j: j["phase"] == "Running", "the second job runs once the first is gone", 60)
    backend.delete("second")


def test_a_cluster_without_jobset_runs_jobs_as_pods_the_server_supervises(tmp_path):
    from controlplane.cluster import ControlPlane

    bare = ControlPlane(tmp_path / "bare", engines=False)
    bare.start()
    try:
        bare.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        bare.add_node("cpu-0")
        bare.wait_nodes_ready(1)
        with bare.client(ADMIN) as api:
            wanted = KubeBackend(settings(tmp_path / "home", engine="jobset"), api)
            with pytest.raises(KubeError, match="kubernetes_engine is 'jobset' but the cluster does not serve "
                                                "jobset.x-k8s.io/v1alpha2"):
                wanted.submit(tf_spec("nowhere"))
            assert not client.CoreV1Api(api).list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items
            with pytest.raises(KubeError, match="kubernetes_engine is 'kubeflow' but the cluster does not serve "
                                                "kubeflow.org/v1"):
                KubeBackend(settings(tmp_path / "home", engine="kubeflow"), api).submit(tf_spec("nowhere"))
            assert not client.CoreV1Api(api).list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items
            kube = KubeBackend(settings(tmp_path / "home"), api)
            assert kube.cluster()["engine"] == {
                "name": "pods", "reason": "the cluster serves neither JobSet nor Kubeflow's Training Operator: jobs are "
                "supervised by the Jupyter server (no engine in the cluster runs it): while no server or following "
                "CLI runs, nothing ends the job's other replicas, restarts a failed one or enforces its deadline"}
            job = kube.submit(tf_spec("fallback", workers=1, output={"host_path": str(tmp_path)}))
            assert job["engine"] == "pods" and "supervised by the Jupyter server" in job["supervision"]
            submitted = next(e for e in job["events"] if e["reason"] == "Submitted")
            assert "engine pods: the cluster serves neither JobSet nor" in submitted["message"]
            kube.delete("fallback")
            assert kube.cluster()["queues"] == []
            with pytest.raises(SpecError, match="Kueue queues JobSets and the Training Operator's jobs; on this "
                                                "cluster the job would run on bare pods"):
                kube.submit(tf_spec("queued", queue="team"))

            # with the Training Operator's TFJob, auto runs the jobs it can run on it, the rest on pods; a server
            # that started before the engine was installed watches its jobs too
            server = KubeBackend(settings(tmp_path / "server"), api)
            controller = NamespaceController(server, logging.getLogger("test"))
            try:
                bare.create(yaml.safe_load((BIN / "crds" / "kubeflow.org_tfjobs.yaml").read_text()))
                wait(lambda: "tfjobs" in kube.engines(), "the API server serves TFJobs")
                assert kube.engine(tf_spec("tf"))[0] == "kubeflow"
                late = tf_spec("late-engine", workers=1, output={"host_path": str(tmp_path)})
                assert server.submit(late)["engine"] == "kubeflow"
                done = {"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded", "message": "done",
                        "lastTransitionTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
                client.CustomObjectsApi(api).patch_namespaced_custom_object_status(  # as the operator would
                    "kubeflow.org", "v1", NAMESPACE, "tfjobs", "late-engine", {"status": {"conditions": [done]}})
                wait(lambda: kube.get("late-engine")["phase"] == "Succeeded", "a fresh read sees the job succeed")
                wait(lambda: server.get("late-engine")["phase"] == "Succeeded", "the server's watch sees it succeed")
                server.delete("late-engine")
                with pytest.raises(SpecError, match=r"the cluster has no Kueue \(kueue.x-k8s.io\)"):
                    kube.submit(tf_spec("queued", queue="team"))
                assert not kube.exists("queued")
                assert "(TFJob): it enforces" in kube.cluster()["engine"]["reason"]
                assert kube.engine(tf_spec("tf", policy={"success": "all-workers"})) == (
                    "pods", "the Training Operator cannot run this job (a TFJob with these replicas succeeds as 'chief' "
                    "says, not 'all-workers'): it is supervised by the Jupyter server (no engine in the cluster runs "
                    "it): while no server or following CLI runs, nothing ends the job's other replicas, restarts a "
                    "failed one or enforces its deadline")
                assert kube.engine(spec_.validate({"name": "torch", "framework": "pytorch", "command": "python a.py"}))[1] \
                    .startswith("the cluster's Training Operator serves no PyTorchJob: this job is supervised")

                # a job a JobSet ran, in a cluster that serves JobSets no more: a server's cache and a CLI's reads
                # show the same job (its engine object is gone), neither fails
                orphan = render.root(tf_spec("orphan"), settings(tmp_path / "home"), "jobset")
                orphan["data"]["status.json"] = json.dumps(new_status(tf_spec("orphan")))
                client.CoreV1Api(api).create_namespaced_config_map(NAMESPACE, orphan)
                read = kube.get("orphan")
                assert [(job["name"], job["phase"]) for job in server.list()] == [("orphan", read["phase"])]
                assert server.get("orphan")["replicas"] == read["replicas"]
                server.delete("orphan")
                assert not server.exists("orphan")
            finally:
                controller.stop()
    finally:
        bare.stop()


@pytest.mark.parametrize("engine", ["jobset", "kubeflow"])
def test_a_run_whose_engine_object_is_missing_fails_as_every_observer_says(control_plane, admin, tmp_path, engine):
    """A run whose JobSet or TFJob is missing past the grace after it was asked for (never made: its submit was
    interrupted after the ConfigMap; or deleted by hand mid-run) Failed, saying Restart makes it again; every
    observer (here a CLI's backend, no server) sees the same end and time to be kept; a restart makes it again."""
    kube = KubeBackend(settings(tmp_path / "cli", engine=engine), control_plane.client(RESTRICTED))
    custom = client.CustomObjectsApi(admin.api_client)
    long_ago = time.time() - 3600

    def asked_long_ago(root: dict | client.V1ConfigMap) -> None:
        data = root["data"] if isinstance(root, dict) else root.data
        data["status.json"] = json.dumps({**json.loads(data["status.json"]), "requested": long_ago})

    kept = {"policy": {"ttl_after_finished": "1h"}}
    interrupted = render.root(tf_spec("interrupted", workers=1, **kept), settings(tmp_path / "x"), engine)
    interrupted["data"]["status.json"] = json.dumps(new_status(tf_spec("interrupted", workers=1)))
    asked_long_ago(interrupted)
    admin.create_namespaced_config_map(NAMESPACE, interrupted)
    kube.submit(tf_spec("lost", workers=1, **kept))
    try:
        api_version, resource = naming.engine_resource(tf_spec("lost", workers=1), engine)
        group, version = api_version.split("/")
        custom.delete_namespaced_custom_object(group, version, NAMESPACE, resource, "lost")  # by hand, mid-run
        wait(lambda: kube._workload_fresh(kube.job_root("lost")) is None, "the engine's object is gone")
        root = admin.read_namespaced_config_map("lost", NAMESPACE)
        asked_long_ago(root)
        admin.replace_namespaced_config_map("lost", NAMESPACE, root)
        for name in ("interrupted", "lost"):
            job = kube.get(name)
            assert (job["phase"], job["reason"]) == ("Failed", "WorkloadMissing"), job
            assert "missing from the cluster" in job["message"] and "Restart makes it again" in job["message"]
            assert job["finished"] == long_ago + kube_state.WORKLOAD_GRACE
            assert job["expires"] == job["finished"] + 3600
        assert sorted(j["name"] for j in kube.list() if j["phase"] == "Failed") == ["interrupted", "lost"]
        kube.restart("lost")
        assert kube._workload_fresh(kube.job_root("lost")) is not None and kube.get("lost")["phase"] != "Failed"
    finally:
        for name in ("interrupted", "lost"):
            admin.delete_namespaced_config_map(name, NAMESPACE)
        wait(lambda: not admin.list_namespaced_pod(NAMESPACE).items
             and not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items,
             "the test's jobs and pods deleted")


def test_the_restricted_token_is_refused_clearly_outside_its_namespace(control_plane, tmp_path):
    kube = KubeBackend(settings(tmp_path, namespace="default"), control_plane.client(RESTRICTED))
    with pytest.raises(KubeError) as refused:
        kube.submit(tf_spec("nope"))
    assert refused.value.status == 403
    assert "Kubernetes refused to" in str(refused.value) and 'User "distrain-jupyter" cannot' in str(refused.value)


def test_render_prints_what_the_api_server_accepts(control_plane, admin, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "train.py").write_text("print('hi')\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "train"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    write_spec(repo, {"name": "from-cli", "framework": "pytorch", "command": "python train.py", "code": {"git": "."},
                      "replicas": {"master": {}, "worker": {"count": 2, "resources": {"gpus": 1, "gpu_type": "a100"}}}})
    config_dir = tmp_path / "jupyter-config"  # the admin's rules apply, as to a submit
    config_dir.mkdir()
    (config_dir / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {
        "max_deadline_seconds": 600, "gpu_types": {"a100": {"node_selector": {"gpu": "a100"}}}}}))
    environment = {**os.environ, "KUBECONFIG": "/nonexistent", "JUPYTER_CONFIG_DIR": str(config_dir)}
    result = subprocess.run([*distrain_command(), "--namespace", NAMESPACE, "render", "-f", str(repo / "distrain.yaml")],
                            capture_output=True, text=True, check=True, env=environment)
    objects = list(yaml.safe_load_all(result.stdout))
    assert [o["kind"] for o in objects] == ["ConfigMap", "JobSet"]  # the default engine's
    assert json.loads(objects[0]["data"]["spec.json"])["policy"]["deadline_seconds"] == 600
    dry_run_create(admin, objects)  # the JobSet webhooks' validation included
    jobset = objects[1]["spec"]
    assert jobset["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["master-0"]}
    assert [(r["name"], r["groupName"]) for r in jobset["replicatedJobs"]] == [
        ("master-0", "master"), ("worker-0", "worker"), ("worker-1", "worker")]
    worker = jobset["replicatedJobs"][-1]["template"]["spec"]["template"]
    assert head in worker["spec"]["initContainers"][0]["command"][-1]
    assert worker["spec"]["nodeSelector"] == {"gpu": "a100"}
    env = {e["name"]: e["value"] for e in worker["spec"]["containers"][0]["env"]}
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["RANK"], env["WORLD_SIZE"]) == \
        ("from-cli-master-0-0-0.from-cli.training.svc", "23456", "2", "3")
    pods = subprocess.run([*distrain_command(), "--namespace", NAMESPACE, "--engine", "pods", "render", "-f",
                           str(repo / "distrain.yaml")], capture_output=True, text=True, check=True, env=environment).stdout
    objects = list(yaml.safe_load_all(pods))
    assert [o["kind"] for o in objects] == ["ConfigMap"] + ["Service", "Pod"] * 3
    dry_run_create(admin, objects)
    env = {e["name"]: e["value"] for e in objects[-1]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "from-cli-master-0.training.svc"


@pytest.mark.parametrize("engine", ["pods"])
def test_a_supervised_replica_whose_pod_never_came_is_lost(control_plane, backend, admin, tmp_path):
    """On "pods", where Jupyter servers make and supervise the pods: a replica still without its pod past the
    grace after it was asked for (its submit was interrupted after the ConfigMap, or after some pods) is Lost,
    with no change in the cluster to mark it (the watching server reminds itself), as a CLI observing says too;
    the job fails by its policy; a restart makes the pods again. One asked for just now waits."""
    cli = KubeBackend(settings(tmp_path / "cli", engine="pods"), control_plane.client(RESTRICTED))
    now = time.time()

    def interrupted(name: str, asked: float, made: tuple = ()) -> None:
        spec = tf_spec(name, workers=1)
        root = render.root(spec, settings(tmp_path / "x", engine="pods"), "pods")
        root["data"]["status.json"] = json.dumps({**new_status(spec), "requested": asked})
        owner = admin.api_client.sanitize_for_serialization(admin.create_namespaced_config_map(NAMESPACE, root))
        for role, index in made:
            admin.create_namespaced_pod(NAMESPACE, podspec.pod(spec, role, index, SETTINGS, owner, run=1))

    missing = now - kube_state.WORKLOAD_GRACE + 3  # asked for so long ago that its pods are missing in 3 s
    interrupted("unmade", missing)
    interrupted("partly", missing, made=[("chief", 0)])
    interrupted("just-asked", now)
    for name, lost in (("unmade", ["chief-0", "ps-0", "worker-0"]), ("partly", ["ps-0", "worker-0"])):
        wait_job(backend, name, lambda j: j["phase"] == "Failed", "the watching server fails the job")
        job = cli.get(name)  # as it is recorded in the cluster
        assert job["phase"] == "Failed" and [r["name"] for r in job["replicas"] if r["reason"] == "PodMissing"] == lost
        ps = next(r for r in job["replicas"] if r["name"] == "ps-0")
        assert ps["phase"] == "Lost" and "Restart makes it again" in ps["message"]
        assert ps["finished"] == pytest.approx(missing + kube_state.WORKLOAD_GRACE)
    assert cli.get("just-asked")["phase"] == "Pending"
    cli.restart("unmade")
    assert {p.metadata.labels[naming.REPLICA] for p in cli.job_pods_fresh("unmade")} == {"chief-0", "ps-0", "worker-0"}
    assert cli.get("unmade")["phase"] != "Failed"


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


def test_rest_api_and_cli_on_the_kubernetes_backend(control_plane, kube_server, admin, tmp_path):
    api, headers = kube_server.api, kube_server.headers
    spec = {"name": "via-rest", "framework": "tensorflow", "command": "python train.py",
            "code": {"git": "https://example.com/models.git", "ref": COMMIT},
            "replicas": {"chief": {}, "ps": {}, "worker": {"count": 1, "resources": {"gpus": 2}}}}
    cluster = requests.get(f"{api}/cluster", headers=headers).json()
    assert cluster["gpus"]["capacity"] == 4
    assert cluster["engine"]["name"] == "jobset" and "the cluster serves JobSet" in cluster["engine"]["reason"]
    too_big = {**spec, "replicas": {"worker": {"resources": {"gpus": 8}}}}
    refused = requests.post(f"{api}/jobs?dry_run=true", json=too_big, headers=headers)
    assert refused.status_code == 400
    assert refused.json()["errors"][0]["path"] == "replicas.worker.resources.gpus"
    assert requests.post(f"{api}/jobs?dry_run=true", json=spec, headers=headers).status_code == 200
    assert not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items

    created = requests.post(f"{api}/jobs", json=spec, headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["backend"] == "kubernetes"
    control_plane.write_log(pod_name(admin, "via-rest", "chief-0"), "hello from the chief")
    wait(lambda: requests.get(f"{api}/jobs/via-rest", headers=headers).json()["phase"] == "Running", "running")

    cli = CLI(kube_server.root, tmp_path)  # a terminal's: the server's config files, as the server exports
    cli.env.update(JUPYTER_CONFIG_DIR=str(kube_server.config_dir), DISTRAIN_BACKEND="kubernetes")
    assert [j["name"] for j in cli.json("list")] == ["via-rest"]
    assert "hello from the chief" in cli("logs", "via-rest", "--replica", "chief-0").stdout
    wait(lambda: "hello from the chief" in requests.get(f"{api}/jobs/via-rest/logs", headers=headers).text,
         "the server copied the chief's log")

    end(admin, "via-rest", "chief-0", 0)
    job = wait(lambda: (j := cli.json("get", "via-rest"))["phase"] == "Succeeded" and j, "the job succeeds")
    assert {r["name"]: r["phase"] for r in job["replicas"]} == {"chief-0": "Succeeded", "ps-0": "Stopped",
                                                              "worker-0": "Stopped"}
    listed = requests.get(f"{api}/jobs", headers=headers).json()  # the list: replicas counted, no spec
    assert [(j["name"], j["phase"], j["replica_phases"]) for j in listed] == \
        [("via-rest", "Succeeded", {"Succeeded": 1, "Stopped": 2})] and "spec" not in listed[0]
    assert [m["phase"] for m in requests.get(f"{api}/jobs/via-rest/metrics", headers=headers).json()] == \
        ["Succeeded", "Stopped", "Stopped"]

    # clone over REST; stop, restart and delete from the CLI, which renders pods as the server does
    clone = requests.post(f"{api}/jobs/via-rest/clone", headers=headers)
    assert clone.status_code == 201 and clone.json()["name"] == "via-rest-2"
    assert clone.json()["spec"]["code"]["commit"] == COMMIT
    wait(lambda: cli.json("get", "via-rest-2")["phase"] == "Running", "the clone runs")
    cli("stop", "via-rest-2")
    assert cli.json("get", "via-rest-2")["phase"] == "Stopped"
    cli("restart", "via-rest-2")
    wait(lambda: requests.get(f"{api}/jobs/via-rest-2", headers=headers).json()["phase"] == "Running",
         "the restarted clone runs")
    pods = admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}=via-rest-2,{naming.RUN}=2").items
    assert len(pods) == 3 and {p.spec.containers[0].image for p in pods} == {CONFIGURED_IMAGE}
    assert {v.persistent_volume_claim.claim_name for p in pods for v in p.spec.volumes
            if v.persistent_volume_claim} == {"datasets"}
    cli("delete", "via-rest-2")
    assert requests.delete(f"{api}/jobs/via-rest", headers=headers).status_code == 204
    assert requests.get(f"{api}/jobs/via-rest", headers=headers).status_code == 404
    assert not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items


def test_forbidden_answers_reach_the_user_as_a_clear_error(control_plane, tmp_path):
    server = JupyterServer(tmp_path, "--Distrain.backend=kubernetes", "--Distrain.namespace=default",
                           f"--Distrain.kubeconfig={control_plane.kubeconfig(RESTRICTED)}")
    try:
        answer = requests.get(f"{server.url}/distrain/api/jobs", headers=server.headers)
        assert answer.status_code == 403
        assert "Kubernetes refused to list jobs" in answer.json()["message"]
        assert 'User \\"distrain-jupyter\\" cannot list resource \\"configmaps\\"' in answer.text
    finally:
        server.stop()


class StallingRelay:
    """A relay on a loopback port to the API server that, while stalled, passes no byte either way: a hung API
    server, whose connections stay open and never answer."""

    def __init__(self, port: int):
        self.target = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.passing = threading.Event()
        self.passing.set()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with suppress(OSError):
            while True:
                downstream = self.listener.accept()[0]
                upstream = socket.create_connection(self.target)
                self.sockets += [downstream, upstream]
                for source, sink in ((downstream, upstream), (upstream, downstream)):
                    threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                self.passing.wait()
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.passing.set()
        for s in [self.listener, *self.sockets]:
            s.close()


def test_a_stalled_api_server_answers_504_and_the_cache_still_answers(control_plane, tmp_path, admin):
    """With the API server stalled (connections open, no answer), each request that needs it fails within the
    server's kubernetes_timeout (504), or at once when many wait already (503), and the job list, served from
    the watch cache, answers meanwhile; once the API server answers again, so does everything."""
    relay = StallingRelay(int(control_plane.url.rsplit(":", 1)[1]))
    kubeconfig = yaml.safe_load(control_plane.kubeconfig(RESTRICTED).read_text())
    kubeconfig["clusters"][0]["cluster"]["server"] = relay.url
    (tmp_path / "relayed.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    server = JupyterServer(tmp_path, "--Distrain.backend=kubernetes", f"--Distrain.namespace={NAMESPACE}",
                           f"--Distrain.kubeconfig={tmp_path / 'relayed.kubeconfig'}",
                           "--Distrain.kubernetes_timeout=2")
    api, headers = f"{server.url}/distrain/api", server.headers
    try:
        spec = {"name": "patient", "command": "python train.py",
                "code": {"git": "https://example.com/models.git", "ref": COMMIT}}
        assert requests.post(f"{api}/jobs", json=spec, headers=headers).status_code == 201
        wait(lambda: [j["name"] for j in requests.get(f"{api}/jobs", headers=headers).json()] == ["patient"],
             "the job listed")
        relay.passing.clear()
        with ThreadPoolExecutor(24) as pool:  # more than wait on Kubernetes at once: some answer 503 at once
            asked = [pool.submit(requests.get, f"{api}/cluster", headers=headers, timeout=120) for _ in range(24)]
            time.sleep(0.5)
            listed = requests.get(f"{api}/jobs", headers=headers, timeout=60)  # before: hung with the threads
            assert listed.status_code == 200 and [j["name"] for j in listed.json()] == ["patient"]
            answers = [a.result() for a in asked]
        assert {a.status_code for a in answers} == {503, 504}
        assert {a.headers["Content-Type"] for a in answers} == {"application/json"}  # as the OpenAPI document says
        no_answer = next(a.json()["message"] for a in answers if a.status_code == 504)
        assert no_answer.startswith("Kubernetes did not answer GET ") and no_answer.endswith(" within 2 s")
        assert "wait for it already" in next(a.json()["message"] for a in answers if a.status_code == 503)
        relay.passing.set()
        wait(lambda: requests.get(f"{api}/cluster", headers=headers).ok, "the server answers again", 60)
        assert requests.delete(f"{api}/jobs/patient", headers=headers).status_code == 204
    finally:
        server.stop()
        relay.close()
        with suppress(client.ApiException):
            admin.delete_namespaced_config_map("patient", NAMESPACE)


def test_one_server_offers_both_backends(control_plane, tmp_path, admin):
    server = JupyterServer(tmp_path, "--Distrain.backends=local", "--Distrain.backends=kubernetes",
                           f"--Distrain.namespace={NAMESPACE}",
                           f"--Distrain.kubeconfig={control_plane.kubeconfig(RESTRICTED)}")
    api, headers = f"{server.url}/distrain/api", server.headers
    try:
        cluster = requests.get(f"{api}/cluster", headers=headers).json()
        assert (cluster["backends"], cluster["default_backend"], cluster["backend"]) == \
            (["local", "kubernetes"], "local", "local")
        assert requests.get(f"{api}/cluster?backend=kubernetes", headers=headers).json()["gpus"]["capacity"] == 4
        bogus = requests.post(f"{api}/jobs?backend=slurm", json={"name": "x", "command": "true"}, headers=headers)
        assert bogus.status_code == 400 and "enabled: local, kubernetes" in bogus.json()["message"]

        in_cluster = {"name": "twin", "command": "python train.py",
                      "code": {"git": "https://example.com/models.git", "ref": COMMIT}}
        assert requests.post(f"{api}/jobs?backend=kubernetes", json=in_cluster, headers=headers).status_code == 201
        here = {"name": "twin", "command": "sleep 30"}
        assert requests.post(f"{api}/jobs", json=here, headers=headers).status_code == 409  # names are shared
        here["name"] = "twin-local"
        assert requests.post(f"{api}/jobs", json=here, headers=headers).status_code == 201
        listed = {j["name"]: j["backend"] for j in requests.get(f"{api}/jobs", headers=headers).json()}
        assert listed == {"twin": "kubernetes", "twin-local": "local"}
        for name in listed:  # each call goes to the job's own backend
            assert requests.post(f"{api}/jobs/{name}/stop", headers=headers).json()["phase"] == "Stopped"
            assert requests.delete(f"{api}/jobs/{name}", headers=headers).status_code == 204
        assert requests.get(f"{api}/jobs", headers=headers).json() == []
        assert not admin.list_namespaced_pod(NAMESPACE, label_selector=naming.JOB).items
        assert_nothing_left(server.root)
    finally:
        server.stop()


def test_a_jobs_tensorboard_runs_in_the_cluster_behind_the_api_servers_proxy(control_plane, kube_server, tmp_path):
    api, headers = kube_server.api, kube_server.headers
    spec = {"name": "tb-job", "framework": "tensorflow", "command": "python train.py",
            "code": {"git": "https://example.com/models.git", "ref": COMMIT},
            "replicas": {"chief": {}, "worker": {"count": 1}}, "tensorboard": {"enabled": True}}
    assert requests.post(f"{api}/jobs", json=spec, headers=headers).status_code == 201
    with control_plane.client(ADMIN) as admin_api:
        apps, core = client.AppsV1Api(admin_api), client.CoreV1Api(admin_api)
        deployment = apps.read_namespaced_deployment("tb-job-tensorboard", NAMESPACE)
        assert [o.name for o in deployment.metadata.owner_references] == ["tb-job"]
        container = deployment.spec.template.spec.containers[0]
        mount = container.volume_mounts[0]
        mine = f"{storage.OWNERS}/{storage.owner_dir(SETTINGS.owner)}"  # the server's owner is this user
        assert (mount.mount_path, mount.sub_path, mount.read_only) == ("/output", f"{mine}/tb-job", True)
        selector = f"{naming.COMPONENT}=tensorboard,{naming.JOB}=tb-job"
        pod = wait(lambda: next((p for p in core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
                                 if p.status.pod_ip == HOST_IP), None), "the TensorBoard pod runs", 60)

        output = control_plane.dir / "volumes" / "datasets" / mine / "tb-job"  # the server's output_claim
        write_scalars(output / "training_logs" / "chief-0", "loss", [1.0, 0.5, 0.25])
        write_scalars(output / "training_logs" / "worker-0", "loss", [2.0, 1.0])
        tensorboard = control_plane.run_here(core, pod, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            direct = f"http://{HOST_IP}:{podspec.TENSORBOARD_PORT}"  # as any pod of the namespace reaches it
            probe = container.readiness_probe.http_get.path

            def ready() -> bool:
                with suppress(requests.ConnectionError):
                    return requests.get(f"{direct}{probe}").ok
                return False

            wait(ready, "the TensorBoard is ready", 60)
            assert requests.get(f"{direct}/data/runs").status_code == 403  # no secret: nothing read
            secret = core.read_namespaced_secret("tb-job-tensorboard", NAMESPACE)
            assert secret.metadata.annotations == {naming.OWNER: SETTINGS.owner}
            assert [o.name for o in secret.metadata.owner_references] == ["tb-job"]
            board = f"{kube_server.url}/distrain/tensorboard/tb-job"
            runs = wait(lambda: (r := requests.get(f"{board}/all/data/runs", headers=headers)).ok and r.json(),
                        "the TensorBoard answers through Jupyter and the API server", 60)
            assert sorted(runs) == ["chief-0", "worker-0"]
            scalars = requests.get(f"{board}/all/data/plugin/scalars/scalars", params={"run": "worker-0", "tag": "loss"},
                                   headers=headers).json()
            assert [value for _, _, value in scalars] == [2.0, 1.0]
            # the same numbers in the job's own scalars, asked of its TensorBoard
            assert requests.get(f"{api}/jobs/tb-job/scalars", headers=headers).json() == {
                "tags": ["loss"], "tag": "loss", "runs": {"chief-0": [[0, 1.0], [1, 0.5], [2, 0.25]],
                                                          "worker-0": [[0, 2.0], [1, 1.0]]}}
            page = requests.get(f"{board}/all/", headers=headers)
            assert page.ok and "<tb-webapp>" in page.text  # the page passes the API server's proxy
            fonts = set(re.findall(r"""url\(\s*["']?([^)"']*font-roboto/[^)"']*)""", page.text))
            assert fonts and all(url.startswith("/distrain/tensorboard/tb-job/all/font-roboto/") for url in fonts)
            font = requests.get(f"{kube_server.url}{min(fonts)}", headers=headers)
            assert font.ok and font.headers["Content-Type"] == "font/woff2"
            assert requests.get(f"{board}/all/index.js", headers=headers).headers["Content-Type"].startswith(
                "text/javascript")
            one = requests.get(f"{board}/worker-0/", headers=headers, allow_redirects=False)
            assert one.status_code == 302 and one.headers["Location"].endswith("/worker-0/?runFilter=%5Eworker-0%28%2F%7C%24%29")
            anonymous = requests.get(f"{board}/all/data/runs", allow_redirects=False)  # no Jupyter token
            assert anonymous.status_code == 302 and "/login" in anonymous.headers["Location"]
        finally:
            tensorboard.terminate()
            tensorboard.wait()

        assert requests.delete(f"{api}/jobs/tb-job", headers=headers).status_code == 204
        wait(lambda: not apps.list_namespaced_deployment(NAMESPACE, label_selector=naming.JOB).items
             and not core.list_namespaced_service(NAMESPACE, label_selector=naming.JOB).items
             and not core.list_namespaced_secret(NAMESPACE, label_selector=naming.JOB).items
             and not core.list_namespaced_pod(NAMESPACE, label_selector=naming.JOB).items,
             "the garbage collector deleted the TensorBoard", 60)


def test_credentials_from_the_form_become_a_secret_that_pods_only_reference(control_plane, kube_server, admin):
    api, headers, password = kube_server.api, kube_server.headers, "hunter2-not-in-manifests"
    stored = requests.put(f"{api}/secrets/git-login", json={"username": "alice", "password": password,
                                                            "host": "example.com"}, headers=headers)
    assert stored.status_code == 204, stored.text
    secret = admin.read_namespaced_secret("git-login", NAMESPACE)
    assert secret.type == "kubernetes.io/basic-auth"
    assert secret.metadata.labels == {**naming.MANAGED, naming.OWNER: naming.label_value(getpass.getuser())}
    assert requests.get(f"{api}/secrets", headers=headers).json() == [{"name": "git-login"}]

    spec = {"name": "private-code", "framework": "python", "command": "python train.py",
            "code": {"git": "https://example.com/private.git", "ref": COMMIT, "credentials": "git-login"}}
    created = requests.post(f"{api}/jobs", json=spec, headers=headers)
    assert created.status_code == 201, created.text
    pods = wait(lambda: pods_of(admin, "private-code"), "the job's pod is made")
    fetch = pods[0].spec.init_containers[0]
    secrets = {e.name: e.value_from.secret_key_ref.name for e in fetch.env
               if e.value_from and e.value_from.secret_key_ref}  # the Job also adds its completion index
    assert secrets == {"DISTRAIN_GIT_USERNAME": "git-login", "DISTRAIN_GIT_PASSWORD": "git-login",
                       "DISTRAIN_GIT_HOST": "git-login"}
    everything = json.dumps([admin.api_client.sanitize_for_serialization(o) for o in [
        *pods, admin.read_namespaced_config_map("private-code", NAMESPACE),
        *admin.list_namespaced_service(NAMESPACE).items]]) + created.text
    assert password not in everything

    assert requests.delete(f"{api}/jobs/private-code", headers=headers).status_code == 204
    assert requests.delete(f"{api}/secrets/git-login", headers=headers).status_code == 204
    assert requests.get(f"{api}/secrets", headers=headers).json() == []



def test_only_secrets_made_here_for_this_owner_are_read_replaced_or_deleted(control_plane, kube_server, admin,
                                                                          tmp_path):
    """A Secret of the namespace that jupyter-distrain did not make (another team's registry login), made
    for another owner, or holding a job's snapshot (which carries its owner too), is never read for a job,
    listed, replaced or deleted; no credentials take a snapshot's name."""
    api, headers = kube_server.api, kube_server.headers
    admin.create_namespaced_secret(NAMESPACE, client.V1Secret(
        metadata=client.V1ObjectMeta(name="registry"), type="kubernetes.io/basic-auth",
        string_data={"username": "team", "password": "their-password", "host": "example.com"}))
    bobs_root = {"metadata": {"name": "bobs-job", "annotations": {naming.OWNER: "bob"}}}
    snapshot = render.snapshot_secret(chief_spec("bobs-job"), SETTINGS, bobs_root, b"bundle")
    assert snapshot["metadata"]["annotations"] == {naming.OWNER: "bob"}
    admin.create_namespaced_secret(NAMESPACE, {**snapshot, "metadata": {**snapshot["metadata"], "annotations": {}}})
    for suffix, whose in (("snapshot", "jobs' snapshots of changes"), ("tensorboard", "jobs' TensorBoards")):
        taken = requests.put(f"{api}/secrets/future-{suffix}", json={"username": "me", "password": "mine",
                                                                     "host": "example.com"}, headers=headers)
        assert taken.status_code == 400 and taken.json()["errors"] == [
            {"path": "name", "message": f"names ending in -{suffix} are those of {whose}; choose another"}]
    bob = KubeBackend(Distrain(root=str(tmp_path / "bob"), namespace=NAMESPACE, owner="bob"),
                      control_plane.client(RESTRICTED))
    bob.set_credentials("bobs-login", "bob", "bobs-password", "example.com")
    try:
        assert requests.get(f"{api}/secrets", headers=headers).json() == []
        for name in ("registry", "bobs-login", "bobs-job-snapshot"):
            spec = {"name": "thief", "framework": "python", "command": "true",
                    "code": {"git": "https://example.com/x.git", "ref": COMMIT, "credentials": name}}
            refused = requests.post(f"{api}/jobs?dry_run=true", json=spec, headers=headers)
            assert refused.status_code == 400 and refused.json()["errors"][0]["message"].startswith(
                f"no secret named {name!r} of yours"), refused.text
            replaced = requests.put(f"{api}/secrets/{name}", json={"username": "me", "password": "mine",
                                                                   "host": "example.com"}, headers=headers)
            assert replaced.status_code == 400 and replaced.json()["errors"][0]["path"] == "name", replaced.text
            assert requests.delete(f"{api}/secrets/{name}", headers=headers).status_code == 404
        stored = admin.read_namespaced_secret("registry", NAMESPACE)
        assert base64.b64decode(stored.data["password"]).decode() == "their-password"
        assert bob.credentials("bobs-login")["password"] == "bobs-password"
        assert bob.credential_names() == ["bobs-login"]
    finally:
        admin.delete_namespaced_secret("registry", NAMESPACE)
        admin.delete_namespaced_secret("bobs-job-snapshot", NAMESPACE)
        bob.delete_credentials("bobs-login")


def test_pods_pass_the_restricted_pod_security_standard_when_asked(control_plane, admin, tmp_path):
    """In a namespace that enforces Pod Security "restricted", jobs rendered with pod_security "restricted"
    run (replicas on bare pods and through a JobSet, their init containers, the TensorBoard, a log reader);
    rendered for "baseline" the API server refuses them at the dry run (403, naming what each container
    lacks), so nothing is made."""
    namespace = "secured"
    admin.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=namespace, labels={"pod-security.kubernetes.io/enforce": "restricted"})))
    admin.create_persistent_volume({
        "metadata": {"name": "secured-outputs"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "hostPath": {"path": str(tmp_path / "out")},
                 "claimRef": {"namespace": namespace, "name": "distrain-outputs"}}})
    admin.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": "distrain-outputs"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}},
                 "volumeName": "secured-outputs", "storageClassName": ""}})

    def backend(engine: str, security: str) -> KubeBackend:
        return KubeBackend(Distrain(root=str(tmp_path / engine), namespace=namespace, kubernetes_engine=engine,
                                    pod_security=security), control_plane.client(ADMIN))

    try:
        baseline = backend("pods", "baseline")
        with pytest.raises(KubeError, match='violates PodSecurity "restricted') as refused:
            baseline.submit(tf_spec("exposed", workers=1))
        assert refused.value.status == 403
        assert not baseline.exists("exposed")
        for engine in ("pods", "jobset"):
            kube = backend(engine, "restricted")
            kube.submit(tf_spec(f"confined-{engine}", workers=1, tensorboard={"enabled": True}))
            job = f"{naming.JOB}=confined-{engine}"
            pods = wait(lambda: [p for p in admin.list_namespaced_pod(namespace, label_selector=job).items
                                 if p.status.phase == "Running"] if len(admin.list_namespaced_pod(
                                     namespace, label_selector=job).items) == 4 else None,
                        f"the {engine} job's three replicas and its TensorBoard run", 60)
            for pod in pods:
                assert pod.spec.security_context.run_as_user == 1000
                assert all(c.security_context.capabilities.drop == ["ALL"]
                           for c in [*pod.spec.containers, *(pod.spec.init_containers or [])])
            kube._create(render.log_reader(tf_spec(f"confined-{engine}"), kube.settings,
                                              kube.api.sanitize_for_serialization(kube.job_root_fresh(f"confined-{engine}"))))
            kube.delete(f"confined-{engine}")
    finally:
        admin.delete_namespace(namespace)
        admin.delete_persistent_volume("secured-outputs")

def test_the_admins_rules_hold_and_a_gpu_type_places_replicas_on_its_nodes(control_plane, admin, tmp_path):
    """Through the job manager, as every entry point submits: host paths are refused by default on Kubernetes
    and accepted under an allowed prefix; a GPU type becomes the pods' node selector and tolerations, and the
    scheduler puts them on its (tainted) node only; the admin's priority class is every replica's."""
    a100 = {"node_selector": {"gpu": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}]}
    control_plane.add_node("a100-0", gpus=2, labels={"gpu": "a100"},
                           taints=[{"key": "gpu", "value": "a100", "effect": "NoSchedule"}])
    scheduling = client.SchedulingV1Api(admin.api_client)
    scheduling.create_priority_class({"metadata": {"name": "training"}, "value": 1000})

    def manager(namespace: str = NAMESPACE, user: str = RESTRICTED, **rules) -> JobManager:
        return JobManager.from_config(Distrain(
            root=str(tmp_path / "home"), backend="kubernetes", namespace=namespace, gpu_types={"a100": a100},
            priority_class="training", kubeconfig=str(control_plane.kubeconfig(user)), **rules))

    def spec(name: str, **worker) -> dict:
        return {"name": name, "framework": "tensorflow", "command": "python train.py",
                "code": {"git": "https://example.com/team/models.git", "ref": COMMIT},
                "replicas": {"chief": {}, "worker": {"count": 2, "resources": worker}}}

    jobs = manager()
    try:
        control_plane.wait_nodes_ready(4)
        assert jobs.cluster()["limits"] == {
            "host_paths": [], "images": [], "max_replicas": None, "max_gpus_per_replica": None,
            "max_gpus_per_job": None, "max_deadline_seconds": None, "gpu_types": ["a100"], "ttl_after_finished": None}
        hosted = {**spec("hosted"), "output": {"host_path": str(tmp_path)}}
        with pytest.raises(SpecError) as refused:
            jobs.submit(hosted)
        assert [(e.path, e.message) for e in refused.value.errors] == [
            ("output.host_path", f"{str(tmp_path)!r} is outside the host directories jobs may mount here: none "
                                 "(use a volume)")]
        # allowed under a prefix (in a namespace without Pod Security "baseline", which forbids host paths)
        roomy = manager("default", ADMIN, allowed_host_paths=[str(tmp_path)])
        assert roomy.submit(hosted, dry_run=True)["output"] == {"host_path": str(tmp_path)}
        roomy.close()
        for worker, path, says in (
                ({"gpus": 1, "gpu_type": "h100"}, "replicas.worker.resources.gpu_type",
                 "'h100' is not a GPU type of this server; types: a100"),
                ({"gpus": 3, "gpu_type": "a100"}, "replicas.worker.resources.gpus",
                 "3 GPUs per worker requested; the largest a100 node has 2 (a100-0: 2)")):
            with pytest.raises(SpecError) as refused:
                jobs.submit(spec("untyped", **worker))
            assert [(e.path, e.message) for e in refused.value.errors] == [(path, says)]
        assert not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items

        jobs.submit(spec("typed", gpus=1, gpu_type="a100"))
        placed = wait(lambda: (pods := pods_of(admin, "typed")) and len(pods) == 3
                      and all(p.spec.node_name for p in pods) and pods, "the scheduler places the three replicas")
        nodes = {naming.replica_of(p.metadata.labels): p.spec.node_name for p in placed}
        assert nodes["worker-0"] == nodes["worker-1"] == "a100-0" and nodes["chief-0"] != "a100-0", nodes
        for pod in placed:
            assert (pod.spec.priority_class_name, pod.spec.priority) == ("training", 1000)
            typed = pod.metadata.labels[naming.ROLE] == "worker"
            assert pod.spec.node_selector == (a100["node_selector"] if typed else None)
            assert any(t.key == "gpu" and t.value == "a100" for t in pod.spec.tolerations or []) == typed
        jobs.delete("typed")
        wait(lambda: not pods_of(admin, "typed"), "the job's pods are deleted")
    finally:
        jobs.close()
        admin.delete_node("a100-0")
        scheduling.delete_priority_class("training")


def chief_lines(kube: KubeBackend, job: str, run: int | None = None) -> list[str]:
    return [line.text for line in kube.logs(job, replica="chief-0", run=run)]


@ENGINES
def test_restart_runs_the_job_again_with_the_edited_spec(control_plane, backend, admin):
    backend.submit(tf_spec("again", workers=1))
    wait_job(backend, "again", lambda j: j["phase"] == "Running", "the job runs")
    chief = pod_name(admin, "again", "chief-0")
    control_plane.write_log(chief, "run 1 step 1")
    wait(lambda: chief_lines(backend, "again") == ["run 1 step 1"], "run 1's log is copied")
    end(admin, "again", "chief-0", 3)
    wait_job(backend, "again", lambda j: j["phase"] == "Failed", "the chief's failure fails the job")

    (control_plane.dir / "pod-logs" / f"{chief}.log").write_text("")  # a new pod of that name logs anew
    backend.restart("again", tf_spec("again", workers=1, tensorboard={"enabled": True}))
    job = wait_job(backend, "again", lambda j: j["phase"] == "Running", "the restarted job runs")
    assert job["run"] == 2 and job["exit_code"] is None
    assert [replica(job, r)["phase"] for r in ("chief-0", "ps-0", "worker-0")] == ["Running"] * 3
    assert [p.metadata.labels[naming.RUN] for p in pods_of(admin, "again", "chief-0")] == ["2"]
    control_plane.write_log(pod_name(admin, "again", "chief-0"), "run 2 step 1")
    wait(lambda: chief_lines(backend, "again") == ["run 2 step 1"], "run 2's log is copied into its own run")
    assert chief_lines(backend, "again", run=1) == ["run 1 step 1"]
    assert sorted(p.name for p in backend.log_dir("again").parent.iterdir()) == ["1", "2"]
    with pytest.raises(RunNotFound, match="job 'again' has no run 3; runs: 1 to 2"):
        backend.logs("again", run=3)
    with client.ApiClient(admin.api_client.configuration) as api:
        assert names(client.AppsV1Api(api).list_namespaced_deployment(NAMESPACE).items) == {"again-tensorboard"}
    end(admin, "again", "chief-0", 0)
    wait_job(backend, "again", lambda j: j["phase"] == "Succeeded", "the second run succeeds")


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
    assert (cache.get("configmaps", name) is None) == (version is None) == (name not in cache.by_job["configmaps"])
    return version


def test_the_cache_shows_its_own_writes_and_orders_by_the_watch_not_by_version_numbers():
    # not started: the test plays the watch
    cache = Cache(lambda: {"configmaps": lambda **kw: None}, lambda job: None, logging.getLogger("test"))
    cache.ready["configmaps"].set()
    watched = lambda type_, version: cache._deliver("configmaps", type_, configmap("j", version))  # noqa: E731
    watched("ADDED", "zz-9")

    # the answer comes before the watch delivers the write: shown, and older events skipped until it
    with cache.writing("configmaps", "j") as write:
        write.put(configmap("j", "a-10"))  # "smaller" than zz-9 as a string and not a number: versions are opaque
    assert cached(cache, "j") == "a-10"
    watched("MODIFIED", "b-3")  # another writer's change, before ours in the stream
    assert cached(cache, "j") == "a-10"
    watched("MODIFIED", "a-10")
    watched("MODIFIED", "0")  # after ours: applies
    assert cached(cache, "j") == "0"

    # the watch delivers the write (and a later change) before its answer: the answer is stale, dropped
    with cache.writing("configmaps", "j") as write:
        watched("MODIFIED", "m-1")
        watched("MODIFIED", "m-2")
        write.put(configmap("j", "m-1"))
    assert cached(cache, "j") == "m-2"
    watched("MODIFIED", "m-3")  # and nothing waits for an event that has passed
    assert cached(cache, "j") == "m-3"

    # a deletion: gone at once; changes before it are skipped until its DELETED event; a new one shows
    with cache.writing("configmaps", "j") as write:
        write.forget()
    watched("MODIFIED", "m-4")
    assert cached(cache, "j") is None
    watched("DELETED", "m-5")
    watched("ADDED", "n-1")
    assert cached(cache, "j") == "n-1"

    # a listing replaces everything: a write in flight across it drops its answer (the watch brings it)
    listing = client.V1ConfigMapList(metadata=client.V1ListMeta(resource_version="list-1"),
                                     items=[configmap("j", "n-2")])
    with cache.writing("configmaps", "j") as write:
        cache._list("configmaps", lambda: listing)
        write.put(configmap("j", "n-3"))
    assert cached(cache, "j") == "n-2" and cache.versions["configmaps"] == "list-1"
    watched("MODIFIED", "n-3")
    assert cached(cache, "j") == "n-3" and cache.versions["configmaps"] == "n-3"
    assert not cache.awaited["configmaps"] and not cache.in_flight["configmaps"]


def test_the_work_queue_holds_a_job_once_and_never_gives_it_to_two_workers():
    work = WorkQueue()
    for _ in range(100):
        work.add("a")
    work.add("b")
    assert work.get() == "a"
    for _ in range(50):  # changes while "a" is reconciled: "a" once more, after
        work.add("a")
    assert work.get() == "b"
    work.done("b")
    assert list(work.waiting) == []
    work.done("a")
    assert work.get() == "a" and list(work.waiting) == []
    work.done("a")

    # a burst from many threads: each job reconciled by one worker at a time, again after its last change
    ticket = itertools.count()
    added, started, processed, busy, overlaps = {}, {}, [], set(), []

    def worker():
        while (name := work.get()) is not None:
            if name in busy:
                overlaps.append(name)
            busy.add(name)
            started[name] = next(ticket)
            time.sleep(0.002)
            processed.append(name)
            busy.discard(name)
            work.done(name)

    def burst(names):
        for i in range(1000):
            name = names[i % len(names)]
            added[name] = next(ticket)
            work.add(name)

    workers = [threading.Thread(target=worker) for _ in range(4)]
    bursts = [threading.Thread(target=burst, args=([f"job-{i}" for i in range(k, k + 3)],)) for k in (0, 3)]
    for t in workers + bursts:
        t.start()
    for t in bursts:
        t.join()
    wait(lambda: not work.waiting and not work.processing, "the queue drains")
    work.shut_down()
    for t in workers:
        t.join(5)
    assert not overlaps
    assert all(started[name] > added[name] for name in added)  # every change seen by a later reconcile
    assert len(processed) < 2000 / 4, len(processed)  # de-duplicated


def apiserver_requests(control_plane, verb: str, resource: str) -> int:
    """The API server's count of namespaced `verb` requests on `resource`, from its /metrics."""
    metrics = requests.get(f"{control_plane.url}/metrics", verify=str(control_plane.dir / "ca.crt"),
                           headers={"Authorization": f"Bearer {control_plane.tokens[ADMIN]}"}, timeout=10)
    metrics.raise_for_status()
    total = 0
    for line in metrics.text.splitlines():
        if line.startswith("apiserver_request_total{"):
            labels, value = line[len("apiserver_request_total{"):].rsplit("} ", 1)
            fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            if (fields["verb"], fields["resource"], fields["scope"]) == (verb, resource, "namespace"):
                total += int(float(value))
    return total


def test_watches_resume_from_their_version_without_listing_again(control_plane, admin, tmp_path):
    kinds = ("configmaps", "pods", "events", "jobs", "jobsets")
    lists = {k: apiserver_requests(control_plane, "LIST", k) for k in kinds}
    watches = apiserver_requests(control_plane, "WATCH", "configmaps")
    started = time.monotonic()
    kube = KubeBackend(settings(tmp_path / "home"), control_plane.client(RESTRICTED))
    controller = NamespaceController(kube, logging.getLogger("test"), watch_timeout=1)
    try:
        kube.submit(tf_spec("resumed", workers=1))  # its changes cross many one-second watches
        wait_job(kube, "resumed", lambda j: j["phase"] == "Running", "the job runs")
        end(admin, "resumed", "chief-0", 0)  # its one LIST of pods finds the chief's
        wait_job(kube, "resumed", lambda j: j["phase"] == "Succeeded", "the job succeeds")
        wait(lambda: apiserver_requests(control_plane, "WATCH", "configmaps") >= watches + 4, "four watches ended")
        assert {k: apiserver_requests(control_plane, "LIST", k) - lists[k] for k in kinds} == \
            {"configmaps": 1, "pods": 2, "events": 1, "jobs": 1, "jobsets": 1}
        print(f"{apiserver_requests(control_plane, 'WATCH', 'configmaps') - watches} configmap watches, one LIST per kind,"
              f" {time.monotonic() - started:.1f} s")
    finally:
        if kube.exists("resumed"):
            kube.delete("resumed")
        controller.stop()


def compact_etcd(control_plane) -> None:
    """Make etcd forget every version before its current one, as the API server does every few minutes."""
    revision = requests.post(f"{control_plane.etcd}/v3/kv/range", json={"key": "AA=="}, timeout=10).json()
    requests.post(f"{control_plane.etcd}/v3/kv/compaction", json={"revision": revision["header"]["revision"]},
                  timeout=10).raise_for_status()


def test_an_expired_watch_version_lists_again_once(control_plane, admin, caplog):
    caplog.set_level(logging.DEBUG, logger="test")
    seen = []
    cache = Cache(lambda: listers(admin.api_client, NAMESPACE, {}), seen.append, logging.getLogger("test")).start()
    try:
        admin.create_namespaced_config_map(NAMESPACE, configmap("expiry", None))
        wait(lambda: cached(cache, "expiry"), "the cache holds the job")
        cache.items("events")
        lists = apiserver_requests(control_plane, "LIST", "events")
        # the events watch fell behind: it resumes from a version etcd has compacted (the API server keeps no
        # watch cache of events), and is told 410 Gone
        cache.versions["events"] = "1"
        compact_etcd(control_plane)
        cache.watches["events"].stop()
        wait(lambda: apiserver_requests(control_plane, "LIST", "events") == lists + 1, "the cache lists events again")
        assert len([r for r in caplog.records if "(410)" in r.getMessage() and "too old" in r.getMessage()]) == 1
        seen.clear()
        admin.create_namespaced_event(NAMESPACE, client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name="expiry."), reason="Checked", message="after the relist",
            involved_object=client.V1ObjectReference(kind="ConfigMap", name="expiry", namespace=NAMESPACE)))
        wait(lambda: "Checked" in [e.reason for e in cache.items("events")], "the watch from the new listing runs")
        assert seen == ["expiry"]
        time.sleep(1)
        assert apiserver_requests(control_plane, "LIST", "events") == lists + 1
        cache.stop()
        for thread in cache.threads:  # each blocked reading its watch (of 300 s) until stop() ended it
            thread.join(10)
        assert not [t.name for t in cache.threads if t.is_alive()]
    finally:
        cache.stop()
        admin.delete_namespaced_config_map("expiry", NAMESPACE)


class SlowlyCompared(str):
    """A job name whose comparisons take a while: it widens the moment a worker spends looking through what the
    controller keeps of every job, as a long list of jobs would."""

    def __ne__(self, other):
        time.sleep(0.2)
        return str.__ne__(self, other)

    def __eq__(self, other):
        time.sleep(0.2)
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_job_gone_while_other_workers_begin_runs_loses_no_run(control_plane, admin, tmp_path, caplog):
    """Workers forgetting a deleted job while others note new runs neither fail nor lose what the others noted."""
    caplog.set_level(logging.ERROR, logger="test")
    home = settings(tmp_path / "home", engine="jobset")
    kube = KubeBackend(home, control_plane.client(RESTRICTED))
    controller = NamespaceController(kube, logging.getLogger("test"))
    jobs = [f"noted-{i}" for i in range(6)]
    try:
        for name in jobs[:3]:  # roots alone: their JobSets are never made, the controller notes their runs
            root = render.root(tf_spec(name), home, "jobset")
            root["data"]["status.json"] = json.dumps(new_status(tf_spec(name)))
            admin.create_namespaced_config_map(NAMESPACE, root)
        wait(lambda: len(kube.list()) == 3, "the controller sees the jobs")
        time.sleep(1)
        controller.queue.add(SlowlyCompared("deleted-meanwhile"))
        for name in jobs[3:]:
            root = render.root(tf_spec(name), home, "jobset")
            root["data"]["status.json"] = json.dumps(new_status(tf_spec(name)))
            admin.create_namespaced_config_map(NAMESPACE, root)
        wait(lambda: len(kube.list()) == 6, "the controller sees the new jobs")
        time.sleep(3)
        assert [f"{r.getMessage()}: {r.exc_info and r.exc_info[1]!r}" for r in caplog.records] == []
    finally:
        controller.stop()
        for name in jobs:
            with suppress(client.ApiException):
                admin.delete_namespaced_config_map(name, NAMESPACE)


@pytest.mark.parametrize("engine", ["pods"])  # the supervisor's own clean-up
def test_a_finished_runs_stray_pod_is_deleted(control_plane, backend, admin):
    spec = tf_spec("strays", workers=1)
    backend.submit(spec)
    wait_job(backend, "strays", lambda j: j["phase"] == "Running", "the job runs")
    backend.stop("strays")
    wait(lambda: not admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}=strays").items,
         "the stopped job's pods are deleted")
    # a reconcile that lost the status write to the stop replaced a replica as the job stopped
    owner = admin.api_client.sanitize_for_serialization(admin.read_namespaced_config_map("strays", NAMESPACE))
    admin.create_namespaced_pod(NAMESPACE, podspec.pod(spec, "worker", 0, SETTINGS, owner, restarts=1))
    wait(lambda: not admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}=strays").items,
         "the stray pod is deleted")
    assert backend.get("strays")["phase"] == "Stopped"


def test_a_stop_requested_on_a_stale_version_is_recorded(control_plane, admin, tmp_path):
    kube = KubeBackend(settings(tmp_path / "home"), control_plane.client(RESTRICTED))  # no controller: as the CLI
    kube.submit(tf_spec("stale-stop", workers=1))
    stale = kube.job_root_fresh("stale-stop")
    admin.patch_namespaced_config_map("stale-stop", NAMESPACE, {"metadata": {"annotations": {"touched": "yes"}}})
    stale_once = iter([stale])  # what a cache a step behind shows stop: its status write meets a 409
    kube.job_root = lambda name: next(stale_once, None) or KubeBackend.job_root(kube, name)
    try:
        assert kube.stop("stale-stop")["phase"] == "Stopped"
    finally:
        del kube.job_root
        kube.delete("stale-stop")


def test_a_reconcile_that_loses_the_status_write_announces_nothing(control_plane, admin, tmp_path):
    """Two reconciles of one change (two servers, or a server and a CLI) restart the failed replica; the one
    whose status write meets the other's version (409) records no second restart."""
    kube = KubeBackend(settings(tmp_path / "home", engine="pods"), control_plane.client(RESTRICTED))  # as the CLI
    kube.submit(tf_spec("raced", workers=1, policy={"restart": "exit-code", "max_restarts": 2}))
    try:
        wait_job(kube, "raced", lambda j: j["phase"] == "Running", "the job runs")
        end(admin, "raced", "worker-0", 143)
        wait(lambda: any(p.status.phase == "Failed" for p in pods_of(admin, "raced", "worker-0")), "the worker ends")
        root, pods = kube.job_root_fresh("raced"), newest(kube.job_pods_fresh("raced"))  # what both reconciles see
        kube.reconcile(root, pods)
        kube.reconcile(root, pods)  # a step behind: its status write meets a 409
        job = kube.get("raced")
        assert [e["message"] for e in job["events"] if e["reason"] == "Restarting"] == ["restart 1 after exit code 143"]
        assert replica(job, "worker-0")["restarts"] == 1
    finally:
        kube.delete("raced")


def test_following_a_jobs_logs_supervises_that_job_alone(control_plane, admin, tmp_path):
    """`distrain logs --follow` copies and supervises the job it follows (on "pods"), no other of the owner's."""
    kube = KubeBackend(settings(tmp_path / "home", engine="pods"), control_plane.client(RESTRICTED))
    for name in ("followed", "unfollowed"):
        kube.submit(tf_spec(name, workers=1))
    cli = CLI(tmp_path / "cli-home", tmp_path)
    cli.env.update(KUBECONFIG=str(control_plane.kubeconfig(RESTRICTED)), DISTRAIN_BACKEND="kubernetes",
                   DISTRAIN_NAMESPACE=NAMESPACE, DISTRAIN_KUBERNETES_ENGINE="pods")
    output = tmp_path / "followed.log"
    with output.open("w") as out:
        follower = subprocess.Popen([*distrain_command(), "logs", "followed", "--follow", "-r", "chief-0"],
                                    env=cli.env, stdout=out, stderr=subprocess.STDOUT)
    try:
        control_plane.write_log(pod_name(admin, "followed", "chief-0"), "step 1")
        wait(lambda: "step 1" in output.read_text(), "the follower shows the chief's line")
        wait_job(kube, "unfollowed", lambda j: j["phase"] == "Running", "the other job runs")
        end(admin, "unfollowed", "worker-0", 1)  # an end only a supervisor acts on
        wait(lambda: any(p.status.phase == "Failed" for p in pods_of(admin, "unfollowed", "worker-0")),
             "the other job's worker ends")
        time.sleep(3)
        recorded = lambda name: json.loads(admin.read_namespaced_config_map(name, NAMESPACE).data["status.json"])
        assert recorded("unfollowed")["phase"] == "Running"  # as it was: nothing of the follower's acted on it
        end(admin, "followed", "chief-0", 0)
        assert follower.wait(60) == 0
        assert recorded("followed")["phase"] == "Succeeded"
    finally:
        follower.kill()
        for name in ("followed", "unfollowed"):
            kube.delete(name)


def test_a_sweep_runs_in_the_cluster_and_a_replaced_controller_takes_its_trials_over(control_plane, backend, admin):
    spec = spec_.validate({"name": "hp", "command": "python train.py --lr {{ lr }}",
                           "code": {"git": "https://example.com/models.git", "commit": COMMIT},
                           "replicas": {"worker": {}}, "tensorboard": {"enabled": True},
                           "sweep": {"parameters": {"lr": {"values": [0.1, 0.2, 0.3]}}, "parallelism": 2}})
    with pytest.raises(SpecError, match="c.Distrain.controller_image"):
        backend.submit(spec)
    assert not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items
    backend.settings.controller_image = "registry.example.com/notebook:1"
    job = backend.submit(spec)
    assert (job["engine"], job["replicas"]) == ("sweep", [])

    def trials() -> list[str]:
        return sorted(cm.metadata.name for cm in admin.list_namespaced_config_map(
            NAMESPACE, label_selector=naming.JOB).items if cm.metadata.name != "hp")

    def controller() -> client.V1Pod | None:  # the sweep's, running (its Job makes a new one if it goes)
        pods = admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.COMPONENT}=sweeper").items
        return next((p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp), None)

    wait(lambda: trials() == ["hp-1", "hp-2"], "the sweep's controller launched two trials", 60)
    assert controller().spec.service_account_name == "hp-sweeper"
    sweep_uid = admin.read_namespaced_config_map("hp", NAMESPACE).metadata.uid
    for name in trials():  # made by the controller's service account, for the sweep's owner, owned by the sweep
        trial = wait_job(backend, name, lambda j: j["phase"] == "Running", f"{name} runs")
        assert (trial["owner"], trial["engine"], trial["spec"]["trial_of"]) == (backend.owner, "jobset", "hp")
        assert [o.uid for o in admin.read_namespaced_config_map(name, NAMESPACE).metadata.owner_references] == \
            [sweep_uid]
    assert [j["spec"]["hyperparameters"]["lr"] for j in map(backend.get, trials())] == [0.1, 0.2]
    time.sleep(2)
    assert trials() == ["hp-1", "hp-2"]  # never more than the parallelism

    volume, logdir = own_outputs(control_plane), spec["tensorboard"]["logdir"]
    write_scalars(volume / "hp-1" / logdir / "worker-0", "loss", [1.0, 0.5])  # as the trials' training would
    write_scalars(volume / "hp-2" / logdir / "worker-0", "loss", [0.4, 0.2])
    end(admin, "hp-1", "worker-0", 0)
    wait_job(backend, "hp", lambda j: "hp-3: lr=0.3" in [e["message"] for e in j["events"]],
             "the third trial is launched once the first ends", 60)

    first = controller()
    admin.delete_namespaced_pod(first.metadata.name, NAMESPACE)
    wait(lambda: (pod := controller()) and pod.metadata.uid != first.metadata.uid, "a new controller runs", 90)
    end(admin, "hp-2", "worker-0", 0)
    wait_job(backend, "hp", lambda j: j["message"] == "1 running, 2 succeeded", "the new controller sees hp-2 end", 60)
    backend.stop("hp")
    job = wait_job(backend, "hp", lambda j: j["phase"] == "Stopped", "the sweep stops")
    assert backend.get("hp-3")["phase"] == "Stopped"
    launched = [e["message"] for e in job["events"] if e["reason"] == "Launched"]
    assert launched == ["hp-1: lr=0.1", "hp-2: lr=0.2", "hp-3: lr=0.3"]  # none twice
    # the table asks each trial's TensorBoard, which no pod here serves: the trials without a value
    table = JobManager({"kubernetes": backend}, backend.settings).trials("hp")["trials"]
    assert [(row["name"], row["phase"], row["value"]) for row in table] == [
        ("hp-1", "Succeeded", None), ("hp-2", "Succeeded", None), ("hp-3", "Stopped", None)]

    board = volume / "hp" / logdir  # the sweep's TensorBoard: its links to every trial's event files
    for name in ("hp-1", "hp-2", "hp-3"):
        assert (board / name).resolve() == (volume / name / logdir).resolve()
        assert len(list((volume / name / logdir).glob("events.out.tfevents.*.hparams"))) == 1
    with control_plane.client(ADMIN) as admin_api:
        tensorboard = client.AppsV1Api(admin_api).read_namespaced_deployment("hp-tensorboard", NAMESPACE)
    container = tensorboard.spec.template.spec.containers[0]
    assert container.volume_mounts[0].sub_path == f"{storage.OWNERS}/{storage.owner_dir(backend.owner)}"  # all
    assert f"/output/hp/{logdir}" in container.command  # of the owner's, where the sweep's links lead

    backend.delete("hp")  # its trials go with it, by the garbage collector
    wait(lambda: not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items
         and not admin.list_namespaced_pod(NAMESPACE).items, "the sweep, its trials and their pods are gone", 60)


def test_the_janitor_deletes_every_owners_jobs_past_their_time_while_no_server_runs(control_plane, admin, tmp_path):
    """The first job with a time to be kept (policy.ttl_after_finished) makes the namespace's janitor: a CronJob
    whose pod runs incluster/janitor.py with a service account of its own. Jobs of two owners end and their time
    passes while no Jupyter server runs; a run of the janitor deletes both, with everything they owned, keeps
    their outputs, and keeps a job whose time is not over."""
    def cli_of(owner: str) -> KubeBackend:
        own = settings(tmp_path / owner, engine="jobset")
        own.owner, own.controller_image, own.janitor_schedule = owner, "registry.example.com/notebook:1", "*/5 * * * *"
        return KubeBackend(own, control_plane.client(RESTRICTED))

    def job(name: str, ttl: str) -> dict:
        return chief_spec(name, policy={"ttl_after_finished": ttl})

    ada, bob = cli_of("ada"), cli_of("bob")
    batch = client.BatchV1Api(admin.api_client)
    outputs = control_plane.dir / "volumes" / "distrain-outputs"
    try:
        ada.submit(job("ada-done", "1s"))
        cron = batch.read_namespaced_cron_job(naming.JANITOR, NAMESPACE)
        assert cron.spec.schedule == "*/5 * * * *" and cron.spec.concurrency_policy == "Forbid"
        pod = cron.spec.job_template.spec.template.spec
        assert (pod.service_account_name, pod.containers[0].image) == (naming.JANITOR, "registry.example.com/notebook:1")
        bob.submit(job("bob-done", "1s"))
        bob.submit(job("bob-kept", "1h"))
        for name in ("ada-done", "bob-done", "bob-kept"):
            end(admin, name, "chief-0", 0)
        for backend, name in ((ada, "ada-done"), (bob, "bob-done")):  # as the janitor sees them: listed
            wait(lambda: ({j["name"]: j for j in backend.list()}[name]["expires"] or time.time() + 1) < time.time(),
                 f"{name}'s time is over")
            (outputs / name).mkdir(parents=True, exist_ok=True)
            (outputs / name / "model.bin").write_bytes(b"weights")
        wait_job(bob, "bob-kept", lambda j: j["phase"] == "Succeeded", "bob-kept succeeds")

        # what the CronJob controller does on its schedule
        batch.create_namespaced_job(NAMESPACE, client.V1Job(
            metadata=client.V1ObjectMeta(name="distrain-janitor-now", labels=cron.spec.job_template.metadata.labels),
            spec=cron.spec.job_template.spec))
        wait(lambda: batch.read_namespaced_job_status("distrain-janitor-now", NAMESPACE).status.succeeded,
             "the janitor's run succeeds", 60)
        janitor = admin.list_namespaced_pod(NAMESPACE, label_selector="job-name=distrain-janitor-now").items[0]
        said = (control_plane.dir / "logs" / f"{janitor.metadata.name}.log").read_text()
        assert "deleted ada-done of ada" in said and "deleted bob-done of bob" in said and "bob-kept" not in said
        for name in ("ada-done", "bob-done"):
            wait(lambda: not admin.list_namespaced_config_map(NAMESPACE, label_selector=f"{naming.JOB}={name}").items
                 and not pods_of(admin, name), f"{name} and everything it owned are gone")
            assert (outputs / name / "model.bin").read_bytes() == b"weights"
        assert [j["name"] for j in bob.list()] == ["bob-kept"]
    finally:
        bob.delete("bob-kept")
        if batch.list_namespaced_job(NAMESPACE, field_selector="metadata.name=distrain-janitor-now").items:
            batch.delete_namespaced_job("distrain-janitor-now", NAMESPACE, propagation_policy="Background")
        remove_janitor(admin)
        for name in ("ada-done", "bob-done"):
            shutil.rmtree(outputs / name, ignore_errors=True)


def test_delete_with_purge_output_deletes_only_the_jobs_own_output_through_a_pod(control_plane, backend, admin,
                                                                                 tmp_path):
    """`delete --purge-output` deletes the job's output directory on its volume through a pod that mounts the
    volume, and waits for it: the default directory, or the spec's path, in its owner's directory, and nothing
    beside it. A path whose link leads out of the volume, and its owner's whole directory, stay; so does the
    output of a plain delete."""
    outputs = own_outputs(control_plane)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.bin").write_bytes(b"not the job's")
    (outputs / "team").mkdir(parents=True, exist_ok=True)
    (outputs / "escape").symlink_to(outside)
    outputs_of = {"purged": None, "kept": None, "team-run": "team/run-7", "escape": "escape", "whole": ""}
    try:
        for name, path in outputs_of.items():
            output = {} if path is None else {"output": {"volume": "distrain-outputs", "path": path}}
            backend.submit(chief_spec(name, **output))
        for directory in ("purged", "kept", "team/run-7", "team/other"):
            (outputs / directory).mkdir(parents=True, exist_ok=True)
            (outputs / directory / "model.bin").write_bytes(b"weights")
        for name in outputs_of:
            backend.delete(name, purge_output=name != "kept")
            assert not admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}={name}").items
        assert not (outputs / "purged").exists() and not (outputs / "team" / "run-7").exists()
        assert all((directory / "model.bin").exists() for directory in (outputs / "kept", outputs / "team" / "other",
                                                                        outside))
    finally:
        (outputs / "escape").unlink()
        for directory in ("kept", "team"):
            shutil.rmtree(outputs / directory, ignore_errors=True)
