"""What the Kubernetes backend renders for each engine and the API server accepts (tests/controlplane): the
manifests, `distrain render`, the Training Operator's and Paddle's variables, a snapshot's Secret, Kueue's
queues, a bare cluster's fallback to pods, a run whose engine object is missing, Pod Security "restricted"."""

from __future__ import annotations

import base64
import filecmp
import hashlib
import json
import logging
import os
import subprocess
import time
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests
import yaml
from conftest import CLI, distrain_command, wait, write_spec
from controlplane.cluster import ADMIN, BIN, NAMESPACE, RESTRICTED, kubelet_expanded, local_queue
from kube_support import COMMIT, SETTINGS, dry_run_create, pods_of, settings, tf_spec, wait_job
from kubernetes import client

from jupyter_distrain import spec as spec_
from jupyter_distrain import storage
from jupyter_distrain.backends.kubernetes import KubeBackend, naming, podspec, render
from jupyter_distrain.backends.kubernetes import state as kube_state
from jupyter_distrain.backends.kubernetes.state import new_status
from jupyter_distrain.backends.kubernetes.watch import KubeError
from jupyter_distrain.config import Distrain
from jupyter_distrain.errors import SpecError
from jupyter_distrain.manager import JobManager

pytestmark = pytest.mark.usefixtures("fresh_logs")
PROGRAMS = render.programs(SETTINGS)["metadata"]["name"]  # the namespace's ConfigMap of the product's programs


def dry_run(admin: client.CoreV1Api, objects: list[dict]) -> None:
    """dry_run_create, the namespace's shared objects (its programs' ConfigMap, the identity of its monitors), which an
    earlier test may have made, checked under a name of their own."""
    dry_run_create(admin, [{**o, "metadata": {**o["metadata"], "name": "dry-run"}}
                           if o["metadata"]["name"] in (PROGRAMS, naming.MONITOR) else o for o in objects])


def test_manifests_are_accepted_by_the_api_server(control_plane, admin):
    spec = tf_spec("render-check", gpus=1, data={"volume": "datasets", "path": "mnist", "link_as": "../data"},
                   code={"git": "https://example.com/private.git", "commit": COMMIT, "credentials": "git-login"})
    settings = Distrain(namespace=NAMESPACE, controller_image="registry.example.com/notebook:1")
    objects = render.render(spec, settings, "pods")
    assert [o["kind"] for o in objects] == ["ConfigMap", "ConfigMap"] + ["Service", "Pod"] * 4 + [
        "ServiceAccount", "Role", "RoleBinding", "Job"]  # the run's monitor (hangs, stragglers), as it has replicas
    assert objects[1]["metadata"]["name"] == PROGRAMS
    assert json.loads(objects[0]["data"]["status.json"])["phase"] == "Pending"  # applied by hand, a job to list
    dry_run(admin, objects)
    assert not admin.list_namespaced_pod(NAMESPACE).items

    pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "render-check-worker-1")
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"chief": ["render-check-chief-0.training.svc:2222"], "ps": ["render-check-ps-0.training.svc:2222"],
                    "worker": ["render-check-worker-0.training.svc:2222", "render-check-worker-1.training.svc:2222"]},
        "task": {"type": "worker", "index": 1}, "environment": "cloud"}
    main = pod["spec"]["containers"][0]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert 'python train.py --steps "$${DISTRAIN_HP_steps}"' in main["command"][-1]  # the kubelet makes $$ $
    assert env["DISTRAIN_HP_steps"] == "100"
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert mounts["/input"]["readOnly"] and mounts["/input"]["subPath"] == "mnist"
    assert {**mounts["/data"], "mountPath": "/input"} == mounts["/input"]  # link_as: also where the code looks
    assert mounts["/output"]["subPath"] == f"owners/{storage.owner_dir(SETTINGS.owner)}/render-check"
    fetch, tools = pod["spec"]["initContainers"]
    assert COMMIT in fetch["command"][-1]
    assert {"secretKeyRef": {"name": "git-login", "key": "password"}} in [e.get("valueFrom") for e in fetch["env"]]
    # py-spy from the product's image, for the replica's stacks (podstacks.py)
    assert (tools["name"], tools["image"]) == ("stack-tools", settings.controller_image)
    assert mounts["/distrain-tools"] == {"name": "stack-tools", "mountPath": "/distrain-tools", "readOnly": True}
    assert mounts["/opt/distrain"] == {"name": "distrain-programs", "mountPath": "/opt/distrain", "readOnly": True}
    assert main["command"][:2] == ["python", "/opt/distrain/logtee"] and len(main["command"][-1]) < 300
    monitor = objects[-1]["spec"]["template"]["spec"]
    assert monitor["containers"][0]["volumeMounts"] == [{**mounts["/output"], "readOnly": True}]
    assert {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]} in objects[-3]["rules"]


def test_the_training_operator_runs_each_replica_with_its_own_variables(control_plane, admin):
    """On "kubeflow" a role's replicas share one template: the operator sets TF_CONFIG, and each pod runs the
    branch of its index with clusterenv's variables; the API server keeps the env value as rendered, $(VAR)
    escaped, so the container gets the spec's string. Policies the operator cannot keep are refused."""
    spec = tf_spec("kf-env", policy={"restart": "exit-code", "max_restarts": 2, "deadline_seconds": 600},
                   env={"K": "$(DISTRAIN_CLUSTER)"})
    objects = render.render(spec, SETTINGS, "kubeflow")
    assert [o["kind"] for o in objects] == ["ConfigMap", "ConfigMap", "TFJob"]
    tfjob = objects[2]["spec"]
    assert tfjob["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 2, "activeDeadlineSeconds": 600}
    assert {t: r["restartPolicy"] for t, r in tfjob["tfReplicaSpecs"].items()} == dict.fromkeys(
        ["Chief", "PS", "Worker"], "ExitCode")
    assert {r["template"]["spec"]["activeDeadlineSeconds"] for r in tfjob["tfReplicaSpecs"].values()} == {600}
    dry_run(admin, objects)
    with pytest.raises(SpecError, match="a TFJob with these replicas succeeds as 'chief' says, not 'all-workers'"):
        render.render(tf_spec("kf-all", policy={"success": "all-workers"}), SETTINGS, "kubeflow")
    with pytest.raises(SpecError, match="runs tensorflow, keras, pytorch and paddle jobs, not python ones"):
        render.render(spec_.validate({"name": "py", "command": "python a.py"}), SETTINGS, "kubeflow")

    admin_custom = client.CustomObjectsApi(admin.api_client)
    admin_custom.create_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "tfjobs", objects[2])
    try:
        pod = wait(lambda: next((p for p in pods_of(admin, "kf-env", "worker-1")), None), "the operator makes worker 1")
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert json.loads(env["TF_CONFIG"]) == {  # the operator's
            "cluster": {"chief": ["kf-env-chief-0.training.svc:2222"], "ps": ["kf-env-ps-0.training.svc:2222"],
                        "worker": ["kf-env-worker-0.training.svc:2222", "kf-env-worker-1.training.svc:2222"]},
            "task": {"type": "worker", "index": 1}, "environment": "cloud"}
        assert json.loads(env["DISTRAIN_CLUSTER"]) == json.loads(env["TF_CONFIG"])["cluster"]
        assert env["K"] == "$$(DISTRAIN_CLUSTER)" and kubelet_expanded(env["K"], env) == "$(DISTRAIN_CLUSTER)"
        command = pod.spec.containers[0].command
        assert command[2] == "/output/.distrain/logs/UID/1/worker-$${DISTRAIN_INDEX}.log"  # the log tee expands it
        exported = branch_env(pod)
        assert (exported["DISTRAIN_REPLICA"], exported["DISTRAIN_SHARD_INDEX"]) == ("worker-1", "2")
    finally:
        admin_custom.delete_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "tfjobs", "kf-env")
        wait(lambda: not pods_of(admin, "kf-env"), "the TFJob's pods are deleted")


def branch_env(pod: client.V1Pod) -> dict[str, str]:
    """The variables the "kubeflow" engine's script exports in the pod's branch (its index's), with the pod's."""
    own = {e.name: e.value for e in pod.spec.containers[0].env if e.value is not None}
    script = kubelet_expanded(pod.spec.containers[0].command[-1], own).removeprefix(podspec.INSTALL + "\n").replace(
        "exec /bin/sh -c", ":") + "; env -0"
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
    assert [o["kind"] for o in objects] == ["ConfigMap", "ConfigMap", "JobSet", "Secret", "Deployment", "Service"]
    dry_run(admin, objects[:3])
    env = {job["name"]: {e["name"]: e.get("value") for e in
                         job["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
           for job in objects[2]["spec"]["replicatedJobs"]}
    pservers = env["worker-1"]["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
    assert [f"{env[ps]['POD_IP']}:{env[ps]['PADDLE_PORT']}" for ps in ("ps-0", "ps-1")] == pservers
    assert {e["PADDLE_GLOO_HTTP_ENDPOINT"] for e in env.values()} == {f"{env['ps-0']['POD_IP']}:2223"}
    assert pservers[0] == f"{env['ps-0']['POD_IP']}:2222"

    objects = render.render(spec, SETTINGS, "kubeflow")
    assert [o["kind"] for o in objects] == ["ConfigMap", "ConfigMap", "PaddleJob", "Secret", "Deployment", "Service"]
    assert {t: r["replicas"] for t, r in objects[2]["spec"]["paddleReplicaSpecs"].items()} == {"Master": 2, "Worker": 2}
    dry_run(admin, objects[:3])
    custom = client.CustomObjectsApi(admin.api_client)
    custom.create_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, "paddlejobs", objects[2])
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
    script = kubelet_expanded(fetch.command[-1], {}).replace("/workspace", str(tmp_path / "workspace")).replace(
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
    with control_plane.client(ADMIN) as api, local_queue(api, "team", 3) as name:
        yield name


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


def test_a_queued_job_says_its_place_in_its_queue_and_the_check_says_so_before(control_plane, kube_server, kueue_queue,
                                                                               tmp_path):
    """With quota for one job, two more wait in queue team. The check of a fourth warns that it would queue behind
    them; submitted, it says why it waits: Kueue's reason and its place in the queue, behind the two, from Kueue's
    visibility API (over REST, and in the CLI's `why` and `get`)."""
    api, headers = kube_server.api, kube_server.headers

    def queued_spec(name: str) -> dict:
        return {"name": name, "framework": "tensorflow", "command": "python train.py", "queue": kueue_queue,
                "code": {"git": "https://example.com/models.git", "ref": COMMIT},
                "replicas": {"chief": {"resources": {"cpu": 1}}, "worker": {"resources": {"cpu": 1}}}}

    def job(name: str) -> dict:
        return requests.get(f"{api}/jobs/{name}", headers=headers).json()

    def in_line() -> list[str]:
        """The jobs waiting in the queue, in the order Kueue's visibility API gives (the workloads' owners)."""
        with control_plane.client(ADMIN) as kube:
            found = client.CustomObjectsApi(kube).get_namespaced_custom_object(
                "visibility.kueue.x-k8s.io", "v1beta1", NAMESPACE, "localqueues", f"{kueue_queue}/pendingworkloads")
        return [w["metadata"]["ownerReferences"][0]["name"] for w in sorted(
            found["items"], key=lambda w: w["positionInLocalQueue"])]

    names = ["first", "second", "third", "fourth"]
    try:
        for name in names[:3]:
            assert requests.post(f"{api}/jobs", json=queued_spec(name), headers=headers).status_code == 201
            wait(lambda: job(name)["phase"] in ("Running", "Queued") and job(name)["reason"] != "Queued",
                 f"Kueue has looked at {name}", 60)
            time.sleep(1)  # Kueue orders workloads of one priority by their creation times, which are in seconds
        assert [job(name)["phase"] for name in names[:3]] == ["Running", "Queued", "Queued"]
        ahead = in_line()
        assert ahead == ["second", "third"]
        check = requests.post(f"{api}/check", json=queued_spec("fourth"), headers=headers).json()
        assert check["errors"] == [] and check["warnings"] == [
            {"path": "queue", "message": f"2 workloads wait in queue team ({ahead[0]} and {ahead[1]}): it would queue "
                                         "behind them"}]

        assert requests.post(f"{api}/jobs", json=queued_spec("fourth"), headers=headers).status_code == 201
        wait(lambda: job("fourth")["reason"] == "Pending", "Kueue has looked at the fourth", 60)
        waiting = requests.get(f"{api}/jobs/fourth/waiting", headers=headers).json()
        reason = job("fourth")["message"]
        assert "insufficient unused quota for cpu in flavor default" in reason
        assert in_line() == [*ahead, "fourth"], "Kueue's own order"
        assert waiting["sentence"] == (f"Kueue holds it in queue team, 3rd in line behind {ahead[0]} and {ahead[1]}: "
                                       f"{reason}.")
        assert waiting["queue"] == {"queue": "team", "position": 2, "ahead": 2, "ahead_seen": ahead,
                                    "position_in_cluster_queue": 2}
        cli = CLI(kube_server.root, tmp_path)
        cli.env.update(JUPYTER_CONFIG_DIR=str(kube_server.config_dir), DISTRAIN_BACKEND="kubernetes")
        assert cli("why", "fourth").stdout == (f"{waiting['sentence']}\n\nQueue team: position 3, 2 ahead "
                                               "(in its ClusterQueue: position 3)\n")
        assert f"Waits:     {waiting['sentence']}\n" in cli("get", "fourth").stdout
        assert requests.get(f"{api}/jobs/first/waiting", headers=headers).json()["waiting"] is False
    finally:
        for name in names:
            requests.delete(f"{api}/jobs/{name}", headers=headers)


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
            server.start(logging.getLogger("test"))
            try:
                bare.create(yaml.safe_load((BIN / "crds" / "kubeflow.org_tfjobs.yaml").read_text()))
                wait(lambda: "tfjobs" in kube.engines.served(), "the API server serves TFJobs")
                assert kube.engines.engine(tf_spec("tf"))[0] == "kubeflow"
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
                assert kube.engines.engine(tf_spec("tf", policy={"success": "all-workers"})) == (
                    "pods", "the Training Operator cannot run this job (a TFJob with these replicas succeeds as 'chief' "
                    "says, not 'all-workers'): it is supervised by the Jupyter server (no engine in the cluster runs "
                    "it): while no server or following CLI runs, nothing ends the job's other replicas, restarts a "
                    "failed one or enforces its deadline")
                assert kube.engines.engine(spec_.validate({"name": "torch", "framework": "pytorch", "command": "python a.py"}))[1] \
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
                server.close()
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
        wait(lambda: kube.objects.workload_fresh(kube.objects.job_root("lost")) is None, "the engine's object is gone")
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
        assert kube.objects.workload_fresh(kube.objects.job_root("lost")) is not None and kube.get("lost")["phase"] != "Failed"
    finally:
        for name in ("interrupted", "lost"):
            admin.delete_namespaced_config_map(name, NAMESPACE)
        wait(lambda: not admin.list_namespaced_pod(NAMESPACE).items
             and not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items,
             "the test's jobs and pods deleted")


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
    assert [o["kind"] for o in objects] == ["ConfigMap", "ConfigMap", "JobSet"]  # the default engine's
    assert json.loads(objects[0]["data"]["spec.json"])["policy"]["deadline_seconds"] == 600
    assert objects[1]["metadata"]["name"] == PROGRAMS  # the namespace's programs, which the pods mount
    dry_run(admin, objects)  # the JobSet webhooks' validation included
    jobset = objects[2]["spec"]
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
    assert [o["kind"] for o in objects] == ["ConfigMap", "ConfigMap"] + ["Service", "Pod"] * 3
    dry_run(admin, objects)
    env = {e["name"]: e["value"] for e in objects[-1]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "from-cli-master-0.training.svc"


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
            kube.objects.create(render.log_reader(tf_spec(f"confined-{engine}"), kube.settings, kube.objects.api.sanitize_for_serialization(
                kube.objects.job_root_fresh(f"confined-{engine}")), "s3cret"))
            kube.delete(f"confined-{engine}")
    finally:
        admin.delete_namespace(namespace)
        admin.delete_persistent_volume("secured-outputs")


@pytest.mark.parametrize("engine", ["pods"])
def test_the_namespaces_programs_are_made_with_a_job_once_and_outlive_every_job(backend, admin):
    """The namespace's ConfigMap of the product's programs, which every replica mounts, is made with the first job
    that needs it, as it is rendered (immutable, its name their hash); a later job finds it made and leaves it as it
    is; a watching server lists no job of it; deleting every job keeps it (shared, tiny)."""
    with suppress(client.ApiException):
        admin.delete_namespaced_config_map(PROGRAMS, NAMESPACE)  # an earlier test's
    backend.submit(tf_spec("first", workers=1))
    made = admin.read_namespaced_config_map(PROGRAMS, NAMESPACE)
    assert made.immutable and made.data == render.programs(SETTINGS)["data"]
    assert made.metadata.labels == {"app.kubernetes.io/part-of": "jupyter-distrain", naming.COMPONENT: "programs"}
    backend.submit(tf_spec("second", workers=1))
    assert admin.read_namespaced_config_map(PROGRAMS, NAMESPACE).metadata.resource_version == \
        made.metadata.resource_version
    assert sorted(job["name"] for job in backend.list()) == ["first", "second"]
    pod = admin.read_namespaced_pod("first-worker-0", NAMESPACE)
    assert pod.spec.containers[0].command[:2] == ["python", "/opt/distrain/logtee"]
    assert next(v for v in pod.spec.volumes if v.config_map).config_map.name == PROGRAMS
    for job in ("first", "second"):
        backend.delete(job)
    assert admin.read_namespaced_config_map(PROGRAMS, NAMESPACE).metadata.uid == made.metadata.uid
