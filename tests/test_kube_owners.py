"""Owners on the Kubernetes backend (tests/controlplane): each sees and touches only their own jobs, outputs
on a shared volume, credentials and the Secrets made for them, the admin's rules and GPU types."""

from __future__ import annotations

import base64
import getpass
import json
import logging
from contextlib import suppress

import pytest
import requests
from conftest import wait
from controlplane.cluster import ADMIN, NAMESPACE, RESTRICTED
from kube_support import COMMIT, SETTINGS, chief_spec, pods_of, tf_spec, wait_job
from kubernetes import client

from jupyter_distrain.backends.kubernetes import KubeBackend, naming, render
from jupyter_distrain.config import Distrain
from jupyter_distrain.errors import SpecError
from jupyter_distrain.manager import JobManager

pytestmark = pytest.mark.usefixtures("fresh_logs")


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
                                  bob.objects.api.sanitize_for_serialization(bob.objects.job_root("bout")))
        assert purger["spec"]["containers"][0]["command"][-2:] == ["/output", "aj"]
        assert purger["spec"]["containers"][0]["volumeMounts"][0]["subPath"] == "owners/bob"  # bob's alone

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
            "max_gpus_per_job": None, "max_deadline_seconds": None, "gpu_types": ["a100"], "ttl_after_finished": None,
            "hang_after": None}
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


def test_a_jobs_pods_carry_no_token_its_log_reader_needs_its_secret_and_its_policy_admits_its_own(
        control_plane, admin, tmp_path):
    """A replica's pod (any pod of a job but a controller's) mounts no service account token; the log reader
    answers only requests carrying its secret (another pod of the namespace reaches its port); with
    c.Distrain.network_policy, the job's NetworkPolicy lets only its own pods reach its replicas."""
    kube = KubeBackend(Distrain(root=str(tmp_path), namespace=NAMESPACE, kubernetes_engine="jobset",
                                network_policy=True), control_plane.client(RESTRICTED))
    try:
        kube.submit(tf_spec("sealed", workers=1, tensorboard={"enabled": True}))
        pods = wait(lambda: (found := admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}=sealed"
                                                                ).items) and len(found) == 4 and found,
                    "the job's replicas and its TensorBoard")
        assert [p.spec.automount_service_account_token for p in pods] == [False] * 4
        policy = client.NetworkingV1Api(admin.api_client).read_namespaced_network_policy("sealed", NAMESPACE)
        assert policy.metadata.owner_references[0].name == "sealed"  # it goes with the job
        assert policy.spec.pod_selector.match_labels == {naming.JOB: "sealed"}
        assert [e.key for e in policy.spec.pod_selector.match_expressions] == [naming.ROLE]
        assert policy.spec.ingress[0]._from[0].pod_selector.match_labels == {naming.JOB: "sealed"}

        root = kube.objects.api.sanitize_for_serialization(kube.objects.job_root_fresh("sealed"))
        reader = render.log_reader(kube.get("sealed")["spec"], kube.settings, root, "s3cret")
        kube.objects.create(reader)
        name = reader["metadata"]["name"]
        kube.copier._wait_serving(name)  # its readiness probe's path, open to all, tells nothing
        core = client.CoreV1Api(kube.objects.api)
        target, options = f"{name}:{render.LOG_READER_PORT}", {"_preload_content": False}
        for headers in ({}, {"X-Distrain-Reader-Secret": "guess"}):
            with pytest.raises(client.ApiException) as refused:
                core.connect_get_namespaced_pod_proxy_with_path(target, NAMESPACE, "1", _headers=headers, **options)
            assert refused.value.status == 403
        answer = core.connect_get_namespaced_pod_proxy_with_path(
            target, NAMESPACE, "1", _headers={"X-Distrain-Reader-Secret": "s3cret"}, **options)
        assert json.loads(answer.read()) == []
        kube.objects.delete_pod_named(name)
    finally:
        kube.delete("sealed")
