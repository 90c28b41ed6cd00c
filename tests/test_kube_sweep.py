"""What runs in the cluster for the Kubernetes backend (tests/controlplane) beside a job's replicas: a sweep's
controller, the namespace's janitor, the pod that purges a job's output."""

from __future__ import annotations

import shutil
import time
import urllib.parse
from contextlib import suppress

import psutil
import pytest
from conftest import remove_janitor, wait, write_scalars
from controlplane.cluster import ADMIN, NAMESPACE, RESTRICTED, local_queue
from kube_support import COMMIT, chief_spec, end, own_outputs, pods_of, settings, wait_job
from kubernetes import client, utils
from webhooks import Receiver

from jupyter_distrain import spec as spec_
from jupyter_distrain import storage
from jupyter_distrain.backends.kubernetes import KubeBackend, naming, render, roles
from jupyter_distrain.errors import JobNotFound, SpecError
from jupyter_distrain.manager import JobManager

pytestmark = pytest.mark.usefixtures("fresh_logs")
METADATA_ONLY = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}  # a list's metadata


def test_a_sweep_runs_in_the_cluster_and_a_replaced_controller_takes_its_trials_over(control_plane, backend, admin):
    spec = spec_.validate({"name": "hp", "command": "python train.py --lr {{ lr }}",
                           "code": {"git": "https://example.com/models.git", "commit": COMMIT},
                           "replicas": {"worker": {}}, "tensorboard": {"enabled": True},
                           "sweep": {"parameters": {"lr": {"values": [0.1, 0.2, 0.3]}}, "parallelism": 2}})
    with pytest.raises(SpecError, match="c.Distrain.controller_image"):
        backend.submit(spec)
    assert not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items
    backend.settings.controller_image = "registry.example.com/notebook:1"
    submitted = time.time()
    receiver = Receiver()  # the sweep's controller, a process of its own, posts its end; its trials none
    job = backend.submit(spec, hooks={"urls": [receiver.url()], "link": None, "allow_private": True})
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
    wait_job(backend, "hp", lambda j: j["message"].startswith("2 running"), "the sweep shows its trials running")
    began = time.time() + 1  # its last write answered
    time.sleep(11)
    assert trials() == ["hp-1", "hp-2"]  # never more than the parallelism
    # its jobs read from watches: while none changes, the sweep's controller asks nothing (it listed them every second)
    asked = control_plane.audited(f"system:serviceaccount:{NAMESPACE}:hp-sweeper", began)
    assert not asked, [(e["verb"], e["requestURI"]) for e in asked]

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
    [told] = receiver.wait("hp", 1)
    assert (told["kind"], told["event"], told["phase"]) == ("sweep", "ended", "Stopped")
    assert [b["job"] for _, b in receiver.posts] == ["hp"]
    receiver.close()
    launched = [e["message"] for e in job["events"] if e["reason"] == "Launched"]
    assert launched == ["hp-1: lr=0.1", "hp-2: lr=0.2", "hp-3: lr=0.3"]  # none twice
    # nor did a launch list the namespace's events (each trial's listed more than the one before: quadratic); it
    # watched its sweep's objects alone (another sweep's, a namespace of 10,000 jobs, take none of its memory); since
    # this test began (test_kube_roles acts as an hp-sweeper too)
    asked = control_plane.audited(f"system:serviceaccount:{NAMESPACE}:hp-sweeper", submitted)
    listed = [urllib.parse.urlsplit(e["requestURI"]) for e in asked if e["verb"] in ("list", "watch")
              and e["objectRef"]["resource"] in ("configmaps", "pods", "jobs", "jobsets")]
    assert listed and all(e["objectRef"]["resource"] != "events" for e in asked if e["verb"] == "list")
    selectors = [urllib.parse.parse_qs(uri.query).get("labelSelector", [""])[0] for uri in listed]
    assert all(naming.of_sweep("hp") in selector or naming.of_job("hp") in selector  # hp's, or one of its trials'
               for selector in selectors), selectors
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
    at = container.command.index("--distrain_output")  # the board shows each trial's output: runs <trial>/...
    assert container.command[at + 1] == "/output/hp" and "--distrain_trials" in container.command

    backend.delete("hp")  # its trials go with it, by the garbage collector
    wait(lambda: not admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.JOB).items
         and not admin.list_namespaced_pod(NAMESPACE).items, "the sweep, its trials and their pods are gone", 60)


def test_the_janitor_deletes_every_owners_jobs_past_their_time_while_no_server_runs(control_plane, admin, tmp_path):
    """The first job with a time to be kept (policy.ttl_after_finished) makes the namespace's janitor: a CronJob
    whose pod runs controllers/janitor.py with a service account of its own; the janitor an earlier version made,
    with another image, schedule and rights, is brought up to this version's. Jobs of two owners end and their time
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
    rbac = client.RbacAuthorizationV1Api(admin.api_client)
    outputs = control_plane.dir / "volumes" / "distrain-outputs"
    earlier = settings(tmp_path / "earlier", engine="jobset")  # what an earlier version left in the namespace:
    earlier.controller_image, earlier.janitor_schedule = "registry.example.com/notebook:0", "0 0 1 1 *"
    try:
        for obj in render.janitor(earlier):  # its image, its schedule, and a Role that cannot touch a job's root
            if obj["kind"] == "Role":
                obj["rules"] = [rule for rule in obj["rules"] if "configmaps" not in rule["resources"]]
            utils.create_from_dict(admin.api_client, obj)
        ada.submit(job("ada-done", "1s"))
        role = rbac.read_namespaced_role(naming.JANITOR, NAMESPACE)
        assert admin.api_client.sanitize_for_serialization(role.rules) == roles.janitor()
        cron = batch.read_namespaced_cron_job(naming.JANITOR, NAMESPACE)
        assert cron.spec.schedule == "*/5 * * * *" and cron.spec.concurrency_policy == "Forbid"
        pod = cron.spec.job_template.spec.template.spec
        assert (pod.service_account_name, pod.containers[0].image) == (naming.JANITOR, "registry.example.com/notebook:1")
        # its runs are this test's own: the CronJob controller would start one at the next multiple of 5 minutes
        batch.patch_namespaced_cron_job(naming.JANITOR, NAMESPACE, {"spec": {"suspend": True}})
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

        # what the CronJob controller does on its schedule (suspended above)
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
        with suppress(JobNotFound):  # made late in the test
            bob.delete("bob-kept")
        if batch.list_namespaced_job(NAMESPACE, field_selector="metadata.name=distrain-janitor-now").items:
            batch.delete_namespaced_job("distrain-janitor-now", NAMESPACE, propagation_policy="Background")
        remove_janitor(admin)
        for name in ("ada-done", "bob-done"):
            shutil.rmtree(outputs / name, ignore_errors=True)


def test_delete_with_purge_output_deletes_only_the_jobs_own_output_through_a_pod(control_plane, backend, admin,
                                                                                 tmp_path):
    """`delete --purge-output` deletes the job's output directory on its volume through a pod that mounts its
    owner's directory alone, and waits for it: the default directory, or the spec's path, and nothing beside it.
    Where a link stands in its place, the link goes and what it leads to stays; so does the output of a plain
    delete. An output inside another's, or the owner's whole directory, is refused (storage.output_path_problem)."""
    outputs = own_outputs(control_plane)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.bin").write_bytes(b"not the job's")
    outputs.mkdir(parents=True, exist_ok=True)
    (outputs / "escape").symlink_to(outside)
    outputs_of = {"purged": None, "kept": None, "team-run": "run-7", "escape": "escape"}
    try:
        for path in ("team/run-7", ""):
            with pytest.raises(SpecError, match="output.path: .* is not one directory name"):
                backend.submit(chief_spec("nested", output={"volume": "distrain-outputs", "path": path}))
        for name, path in outputs_of.items():
            output = {} if path is None else {"output": {"volume": "distrain-outputs", "path": path}}
            backend.submit(chief_spec(name, **output))
        for directory in ("purged", "kept", "run-7", "other"):
            (outputs / directory).mkdir(parents=True, exist_ok=True)
            (outputs / directory / "model.bin").write_bytes(b"weights")
        for name in outputs_of:
            backend.delete(name, purge_output=name != "kept")
            assert not admin.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.JOB}={name}").items
        assert not (outputs / "purged").exists() and not (outputs / "run-7").exists()
        assert not (outputs / "escape").is_symlink()
        assert all((directory / "model.bin").exists() for directory in (outputs / "kept", outputs / "other", outside))
    finally:
        (outputs / "escape").unlink(missing_ok=True)
        for directory in ("kept", "other"):
            shutil.rmtree(outputs / directory, ignore_errors=True)


@pytest.mark.last
@pytest.mark.timeout(1200)
def test_a_sweep_of_1000_trials_queues_every_trial_in_order_with_a_controller_of_bounded_memory(control_plane,
                                                                                                 backend, admin):
    """A sweep of 1,000 trials at once, each queued in Kueue (quota for two at a time): its controller makes every
    trial, in order, each JobSet in the queue; it watches its sweep's objects alone, without their managedFields, and
    loads no TensorFlow: its memory with 1,000 trials stays under twice what it was at its first trial. Deleting
    the sweep deletes them all. (bench/sweep.py times it beside the same objects created by hand.)"""
    trials = 1000
    with local_queue(admin.api_client, "thousand", 2):
        backend.settings.controller_image = "registry.example.com/notebook:1"
        backend.submit(spec_.validate({"name": "many", "command": "python train.py --lr {{ lr }}", "queue": "thousand",
                                       "code": {"git": "https://example.com/models.git", "commit": COMMIT},
                                       "replicas": {"worker": {"resources": {"cpu": 1}}},
                                       "sweep": {"parameters": {"lr": {"values": [i / 10_000 for i in range(trials)]}},
                                                 "parallelism": trials}}))
        custom = client.CustomObjectsApi(admin.api_client)

        def jobsets(selector: str = naming.of_sweep("many")) -> list[dict]:
            """Their metadata, as the API server's watch cache has them: a poll costs it a fraction of the whole."""
            group, version = naming.JOBSET_API.split("/")
            return custom.list_namespaced_custom_object(group, version, NAMESPACE, "jobsets", label_selector=selector,
                                                        resource_version="0", _headers=METADATA_ONLY)["items"]

        try:
            def controller() -> psutil.Process | None:  # run here by the control plane
                words = {"jupyter_distrain.controllers.sweep", "many"}
                return next((p for p in psutil.process_iter(["cmdline"]) if words <= set(p.info["cmdline"] or [])),
                            None)

            first = wait(lambda: jobsets() and controller(), "the first trial is made", 60).memory_info().rss
            peak = 0

            def made() -> int:
                nonlocal peak
                peak = max(peak, controller().memory_info().rss)
                return len(jobsets())

            wait(lambda: made() == trials, "every trial is made", 800, shown=made, every=5)
            roots = admin.list_namespaced_config_map(NAMESPACE, label_selector=naming.of_sweep("many")).items
            made_at = {cm.metadata.name: cm.metadata.creation_timestamp for cm in roots if cm.metadata.name != "many"}
            order = [made_at[f"many-{number}"] for number in range(1, trials + 1)]
            assert order == sorted(order)  # the list shows them in launch order
            assert all(jobset["metadata"]["labels"][naming.QUEUE_NAME] == "thousand" for jobset in jobsets())
            assert peak < 2 * first, (first, peak)
        finally:
            backend.delete("many")  # its trials go with it, by the garbage collector
            wait(lambda: not jobsets(naming.JOB) and not admin.list_namespaced_config_map(
                NAMESPACE, label_selector=naming.JOB).items, "the sweep and its trials are gone", 600, every=5)
