"""A job's life on the Kubernetes backend, against a real control plane (tests/controlplane), on each engine
(JobSet's controller, the Training Operator, or the pods this backend supervises): its run, failures,
restarts, deadline, OOM, GPUs, stop and delete, every verb at once, a restart with an edited spec, stray pods,
a stale stop, the reconcile's races, following its logs."""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import threading
import time
from collections import Counter
from contextlib import suppress
from urllib.parse import urlparse

import pytest
from conftest import CLI, at_once, distrain_command, wait
from controlplane.cluster import NAMESPACE, RESTRICTED, image_id
from kube_support import (COMMIT, ENGINE_DONE, ENGINE_NAMES, ENGINES, SETTINGS, end, names, pod_name, pods_of,
                          replica, running, settings, tf_spec, wait_job)
from kubernetes import client
from webhooks import Receiver

from jupyter_distrain import spec as spec_
from jupyter_distrain.backends.kubernetes import KubeBackend, naming, podspec, render
from jupyter_distrain.backends.kubernetes import state as kube_state
from jupyter_distrain.backends.kubernetes.objects import NamespaceObjects
from jupyter_distrain.controllers import kube_backend, monitor
from jupyter_distrain.backends.kubernetes.state import event_time, new_status, newest
from jupyter_distrain.errors import NotFound, NotSupported, ReplicaNotFound, RunNotFound, SpecError
from jupyter_distrain.jobjson import job_json
from jupyter_distrain.manager import JobManager

pytestmark = pytest.mark.usefixtures("fresh_logs")


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
    assert job["reason"] == "ReplicaFailed" and "chief-0" in job["message"] and "code 3" in job["message"]
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


def test_stacks_say_why_they_cannot_be_taken(backend):
    """Stacks are dumped in real containers (test_real_pods.py); of simulated pods, what stops them, in words."""
    backend.submit(tf_spec("no-stacks", workers=1))
    job = wait_job(backend, "no-stacks", lambda j: j["phase"] == "Running", "the job runs")
    with pytest.raises(ReplicaNotFound, match="job 'no-stacks' has no replica 'worker-9'; replicas: chief-0, "):
        backend.stacks("no-stacks", "worker-9")
    with pytest.raises(NotFound, match="job 'no-stacks' has no stacks kept: they are kept when it hangs"):
        backend.stacks("no-stacks", kept=True)
    with pytest.raises(NotSupported, match=r"from c\.Distrain\.controller_image; it is not set$"):
        backend.stacks("no-stacks")
    backend.settings.controller_image = "registry.example.com/notebook:1"  # set after the pods were made
    found = backend.stacks("no-stacks")
    assert {r["name"]: r["error"] for r in found["replicas"]} == dict.fromkeys(
        [r["name"] for r in job["replicas"]],
        "its pod was made without the stack tools (c.Distrain.controller_image was not set)")


def monitor_backend(control_plane, tmp_path, engine: str) -> KubeBackend:
    """A run's monitor's backend, as controllers/monitor.py makes it (no Jupyter server's, no controller), acting
    as the namespace's distrain-monitor service account (the job's submit made it): a right its Role lacks fails
    the test. Close its `api` after use."""
    own = settings(tmp_path / "monitor-home", engine=engine)
    own.controller_image, own.janitor_schedule = "registry.example.com/notebook:1", ""  # as its command line says
    return kube_backend(own, control_plane.acting_as(naming.MONITOR))


def counted(api: client.ApiClient) -> list[str]:
    """The requests `api` sends from now on (method and path, a watch once), as the API server receives them."""
    sent: list[str] = []
    rest, request = api.rest_client, api.rest_client.request

    def counting(method, url, *args, **kwargs):
        sent.append(f"{method} {url.split('?')[0]}")
        return request(method, url, *args, **kwargs)

    rest.request = counting
    return sent


@ENGINES
def test_a_hung_jobs_monitor_warns_keeps_its_stacks_and_fails_it(control_plane, backend, admin, engine, tmp_path):
    """policy.hang_after on Kubernetes: each run gets a monitor (render.monitor: a Job in the product's image), here
    run in this process with its arguments' files (none written: quiet from the start), as its service account
    (monitor_backend); of simulated pods the stacks are their errors, none a refusal. It warns, keeps them in the
    job's ConfigMap, fails the job as Hung (on_hang fail) and, the run over, ends. test_real_pods.py has it in its
    pod, on a real hang."""
    backend.settings.controller_image = "registry.example.com/notebook:1"
    spec = tf_spec("stuck", workers=1, policy={"hang_after": "1s", "on_hang": "fail"})
    backend.submit(spec)
    [made] = client.BatchV1Api(admin.api_client).list_namespaced_job(
        NAMESPACE, label_selector=f"{naming.JOB}=stuck,app.kubernetes.io/component=monitor").items
    command = made.spec.template.spec.containers[0].command
    assert made.metadata.name == "stuck-monitor-1" and command[:6] == [
        "python", "-m", "jupyter_distrain.controllers.monitor", "stuck", "--run", "1"]
    wait_job(backend, "stuck", lambda j: j["phase"] == "Running", "the job runs")
    (tmp_path / "logs").mkdir()
    (tmp_path / "output").mkdir()
    alone = monitor_backend(control_plane, tmp_path, engine)
    sent = counted(alone.objects.api)
    monitor.watch(alone, "stuck", 1, tmp_path / "logs", tmp_path / "output")
    alone.objects.api.close()
    assert not [r for r in sent if r.endswith("/log")], "the monitor reads no pod's log (they are on the volume)"
    job = backend.get("stuck")
    message = "no replica wrote a log line or a TensorBoard step for 1s; their stacks then are kept (distrain " \
              "stacks stuck --kept)"
    assert (job["phase"], job["reason"], job["message"]) == ("Failed", "Hung", message)
    assert ("Warning", "NoProgress", message) in [(e["type"], e["reason"], e["message"]) for e in job["events"]]
    kept = backend.stacks("stuck", kept=True)
    assert (kept["reason"], kept["message"]) == ("NoProgress", message)
    assert {r["name"] for r in kept["replicas"]} == {"chief-0", "ps-0", "worker-0"}
    assert all(r["error"] and not r["processes"] for r in kept["replicas"]), kept  # kwok runs no command
    print("KEPT", [r["error"] for r in kept["replicas"]])
    assert not [r["error"] for r in kept["replicas"] if "Forbidden" in r["error"] or "403" in r["error"]], kept
    assert [r["name"] for r in backend.stacks("stuck", "ps-0", kept=True)["replicas"]] == ["ps-0"]
    wait(lambda: not running(admin, "stuck"), "every replica stops")


@ENGINES
def test_the_runs_monitor_posts_a_hang_and_the_end_to_the_webhooks_once(control_plane, backend, admin, engine,
                                                                         tmp_path):
    """A job with webhooks: its Secret (owned by the job) holds them, its monitor's environment reads them. The
    monitor, with a backend of its own (no Jupyter server's), posts the hang, fails the job and posts its end; a
    second monitor pod of the run (its Job's retry) posts nothing again; a restart's run is told of anew."""
    backend.settings.controller_image = "registry.example.com/notebook:1"
    receiver = Receiver()
    hooks = {"urls": [receiver.url("/T0KEN")], "link": "https://lab.example.org/lab?distrain-job=told",
             "allow_private": True}  # the receiver is on loopback
    backend.submit(tf_spec("told", workers=1, policy={"hang_after": "1s", "on_hang": "fail"}), hooks=hooks)
    secret = admin.read_namespaced_secret(naming.notify_name("told"), NAMESPACE)
    assert json.loads(base64.b64decode(secret.data[naming.NOTIFY_KEY])) == hooks
    assert secret.metadata.owner_references[0].name == "told"
    [made] = client.BatchV1Api(admin.api_client).list_namespaced_job(
        NAMESPACE, label_selector=f"{naming.JOB}=told,app.kubernetes.io/component=monitor").items
    assert made.spec.template.spec.containers[0].env[0].value_from.secret_key_ref.to_dict() == {
        "name": "told-notify", "key": "hooks.json", "optional": True}
    shown = json.dumps(job_json(backend.get("told"))) + json.dumps(admin.api_client.sanitize_for_serialization(made))
    assert "T0KEN" not in shown
    wait_job(backend, "told", lambda j: j["phase"] == "Running", "the job runs")
    (tmp_path / "logs").mkdir()
    (tmp_path / "output").mkdir()
    alone = monitor_backend(control_plane, tmp_path, engine)
    monitor.watch(alone, "told", 1, tmp_path / "logs", tmp_path / "output", hooks)
    told = receiver.wait("told", 2)
    assert receiver.events("told") == [("NoProgress", "Running", "NoProgress", None), ("ended", "Failed", "Hung", None)]
    assert told[1]["link"] == hooks["link"] and told[1]["backend"] == "kubernetes" and told[1]["run"] == 1
    monitor.watch(alone, "told", 1, tmp_path / "logs", tmp_path / "output", hooks)  # a retry of the monitor's pod
    assert len(receiver.wait("told", 2, timeout=0)) == 2

    backend.restart("told", tf_spec("told", workers=1), hooks=hooks)  # no hang_after: a monitor for its webhooks
    wait_job(backend, "told", lambda j: j["phase"] == "Running", "the next run runs")
    watching = threading.Thread(target=monitor.watch, args=(alone, "told", 2, tmp_path / "logs", tmp_path / "output",
                                                            hooks), daemon=True)
    watching.start()
    for name in ("worker-0", "chief-0"):
        end(admin, "told", name, 0)
    watching.join(60)
    assert not watching.is_alive(), "the monitor ends with the run"
    alone.notifier.wait()  # as its process does before it exits
    assert receiver.events("told")[2:] == [("ended", "Succeeded", backend.get("told")["reason"], None)]
    assert receiver.wait("told", 3)[2]["run"] == 2
    receiver.close()
    alone.objects.api.close()


def test_a_forms_checks_and_the_submit_ask_the_api_server_only_what_they_must(backend, admin):
    """The form's checks while one types (a server-side dry run of each object, and the outlook) and the submit that
    follows ask the API server only what none but it can answer: the dry runs, the creates, and at submit what the
    cluster serves, afresh. Its engines, nodes, pods and claims come from answers of the last moments (Recent: held
    for the whole test here, so a loaded machine's pauses change nothing); the output claim is labelled once.
    Before: 8 requests a check (what the cluster serves, its nodes twice, its claims, all its pods), 10 a submit."""
    for recent in (backend.engines.served, backend.engines.node_list, backend.engines.live_pods,
                   backend.engines.claim_list, backend.engines.queue_list):
        recent.seconds = 600
    output = {"volume": "datasets"}
    backend.submit(tf_spec("first", workers=1, output=output))
    sent = counted(backend.objects.api)

    def asked() -> list[str]:  # but the controller's copies of the jobs' logs and records of their replicas' starts
        found = [f"{r.split()[0]} {urlparse(r.split()[1]).path}" for r in sent if not r.endswith("/log")]
        sent.clear()
        return [r for r in found if not r.startswith(f"PATCH /api/v1/namespaces/{NAMESPACE}/configmaps/")]
    second = tf_spec("second", workers=1, output=output)
    checks = []
    for _ in range(3):  # three pauses while typing
        backend.check(second)
        backend.outlook(second)
        checks.append(asked())
    dry_runs = [f"POST /api/v1/namespaces/{NAMESPACE}/configmaps",  # the job's root and its workload
                f"POST /apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets"]
    assert checks == [[*dry_runs, "GET /api/v1/pods"], dry_runs, dry_runs], checks  # the cluster's pods read once
    backend.submit(second)
    submitted = asked()
    assert sorted(submitted) == sorted(["GET /apis/", "GET /apis/kubeflow.org/v1", *dry_runs, *dry_runs,
                                        f"POST /api/v1/namespaces/{NAMESPACE}/events"]), submitted
    print(f"a check: {len(checks[-1])} requests; a submit: {len(submitted)}")
    admin.patch_namespaced_persistent_volume_claim("datasets", NAMESPACE,
                                                   {"metadata": {"labels": {naming.HOLDS_OUTPUTS: None}}})

def test_a_claim_made_a_moment_ago_is_found_where_a_recent_answer_lacks_it(backend, admin):
    """A refusal is decided on a fresh answer: a claim missing from the recent list of claims is asked for again, so
    one made a moment ago admits the job, and one that is not there is refused naming the field."""
    spec = tf_spec("reads", workers=1, data={"volume": "made-late"})
    with pytest.raises(SpecError, match="data.volume: no PersistentVolumeClaim 'made-late' in namespace training"):
        backend.check(spec)
    admin.create_namespaced_persistent_volume_claim(NAMESPACE, {
        "metadata": {"name": "made-late"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    try:
        backend.check(spec)  # within the recent answer's 10 s
    finally:
        admin.delete_namespaced_persistent_volume_claim("made-late", NAMESPACE)

def test_a_runs_monitor_and_the_servers_controller_ask_next_to_nothing_while_the_job_does_not_change(
        control_plane, backend, admin, tmp_path):
    """A run's monitor watches its job's objects (a cache of them alone, as the Jupyter server's, with no policy
    applied and no logs copied): while the job runs unchanged it sends no request, and it sees the run's end as the
    watch brings it. The server's controller beside it asks for nothing but the pods' logs: kwok's pods have none,
    so each follow ends at once (as when a kubelet cannot be reached) and is asked again later and later
    (FOLLOW_AGAIN), not twice a second (40 a pod in 20 s before); as the job ends, each pod that ended has its log
    read once more, not again at each of the many changes an ending job makes. A job on each engine, side by side
    (the server's engine set anew before each submit): they are idle together."""
    backend.settings.controller_image = "registry.example.com/notebook:1"
    receiver = Receiver()
    jobs = {engine: f"idle-{engine}" for engine in ENGINE_NAMES}
    hooks = {name: {"urls": [receiver.url(f"/{name}")], "link": None, "allow_private": True} for name in jobs.values()}
    for engine, name in jobs.items():
        backend.settings.kubernetes_engine = engine
        backend.submit(tf_spec(name, workers=1), hooks=hooks[name])
    served = counted(backend.objects.api)
    monitors, watching, sent = {}, {}, {}
    for engine, name in jobs.items():
        wait_job(backend, name, lambda j: j["phase"] == "Running", f"{name} runs")
        for directory in ("logs", "output"):
            (tmp_path / name / directory).mkdir(parents=True)
        monitors[name] = alone = monitor_backend(control_plane, tmp_path / name, engine)
        sent[name] = counted(alone.objects.api)
        watching[name] = threading.Thread(target=monitor.watch, daemon=True, args=(
            alone, name, 1, tmp_path / name / "logs", tmp_path / name / "output", hooks[name]))
        watching[name].start()
    time.sleep(5)  # their watches begin
    began, server_began = {name: len(sent[name]) for name in jobs.values()}, len(served)
    time.sleep(20)
    server_idle = served[server_began:]
    for name in jobs.values():
        idle = sent[name][began[name]:]
        print(f"REQUESTS of {name}'s monitor at start {began[name]}, in 20 s idle {len(idle)}: {sorted(set(idle))}")
        assert not idle, idle
    print(f"REQUESTS of the server in 20 s idle: {server_idle}")
    followed = Counter(r for r in server_idle if r.endswith("/log"))
    assert sum(followed.values()) == len(server_idle) and max(followed.values(), default=0) <= 7, server_idle
    ending = len(served)
    for name in jobs.values():
        for replica_ in ("worker-0", "chief-0"):
            end(admin, name, replica_, 0)
    for name, alone in monitors.items():
        watching[name].join(60)
        assert not watching[name].is_alive(), f"{name}'s monitor ends with the run"
        alone.notifier.wait()
        [told] = receiver.events(name)
        assert told[:2] == ("ended", "Succeeded"), told
        # the server's view of the end may lag its parts (a JobSet's condition after its pods' ends)
        wait_job(backend, name, lambda job: (job["phase"], job["reason"]) == told[1:3], f"the server sees {name}'s end")
        alone.objects.api.close()
    receiver.close()
    for name in jobs.values():
        wait(lambda: backend.copier.logs_complete(name, 1), f"{name}'s lines all copied")
    # each ps, deleted as its job succeeds while it runs, is read at each change until it is gone (it may log on)
    read = Counter(r for r in served[ending:] if r.endswith("/log") and "-ps-" not in r.rpartition("/pods/")[2])
    assert max(read.values()) <= 4, read  # a follow's last try, its end's read, the controller's


def test_a_run_restarted_while_its_monitor_looked_away_is_told_of_once(control_plane, backend, tmp_path):
    """A run's monitor busy (dumping stacks) while its run is stopped and restarted finds the next run when it
    looks again: it posts its own run's end, as the restart kept it, once (a retry of its pod posts nothing)."""
    backend.settings.controller_image = "registry.example.com/notebook:1"
    receiver = Receiver()
    hooks = {"urls": [receiver.url("/away")], "link": None, "allow_private": True}
    backend.submit(tf_spec("away", workers=1), hooks=hooks)
    wait_job(backend, "away", lambda j: j["phase"] == "Running", "the job runs")
    backend.restart("away", hooks=hooks)
    (tmp_path / "logs").mkdir()
    (tmp_path / "output").mkdir()
    alone = monitor_backend(control_plane, tmp_path, "jobset")
    for _ in range(2):
        monitor.watch(alone, "away", 1, tmp_path / "logs", tmp_path / "output", hooks)
    alone.notifier.wait()
    [told] = receiver.wait("away", 1)
    assert (told["event"], told["phase"], told["reason"], told["run"]) == ("ended", "Stopped", "Stopped", 1)
    receiver.close()
    alone.objects.api.close()
    backend.delete("away")


def test_without_the_products_image_a_hang_watch_is_refused_and_webhooks_unposted_said(control_plane, backend):
    """No c.Distrain.controller_image, so no monitor can run in the cluster: policy.hang_after is refused with the
    field and what to do; a job with webhooks runs, and a Warning says no one will post its events."""
    backend.settings.controller_image = ""
    with pytest.raises(SpecError) as refused:
        backend.submit(tf_spec("unwatched", workers=1, policy={"hang_after": "5m", "on_hang": "fail"}))
    [error] = refused.value.errors
    assert error.path == "policy.hang_after" and "c.Distrain.controller_image" in error.message
    with pytest.raises(NotFound):
        backend.get("unwatched")
    hooks = {"urls": ["https://hooks.example.org/T0KEN"], "link": None}
    backend.submit(tf_spec("untold", workers=1), hooks=hooks)
    [warned] = [e for e in backend.get("untold")["events"] if e["reason"] == "NoMonitor"]
    assert warned["type"] == "Warning" and "webhooks" in warned["message"], warned
    backend.delete("untold")


@ENGINES
def test_a_quiet_job_is_no_progress_while_its_monitor_finds_it_hung(control_plane, backend, engine, tmp_path):
    """on_hang warn: the job runs on, its reason NoProgress while the monitor finds it quiet, and no longer once a
    replica writes again (a line in its log file on the volume)."""
    backend.settings.controller_image = "registry.example.com/notebook:1"
    backend.submit(tf_spec("quiet", workers=1, policy={"hang_after": "5s"}))
    wait_job(backend, "quiet", lambda j: j["phase"] == "Running", "the job runs")
    logs, output = tmp_path / "logs", tmp_path / "output"
    logs.mkdir()
    output.mkdir()
    alone = monitor_backend(control_plane, tmp_path, engine)
    watching = threading.Thread(target=monitor.watch, args=(alone, "quiet", 1, logs, output), daemon=True)
    watching.start()
    job = wait_job(backend, "quiet", lambda j: j["reason"] == "NoProgress", "the monitor finds it hung", 30)
    assert job["phase"] == "Running" and job["message"].startswith("no replica wrote a log line or a TensorBoard "
                                                                   "step for 5s; their stacks then are kept")
    # its owner is told of it (the warning follows the reason): the job's notice, in the list too (which the panel
    # notifies from)
    hung = wait(lambda: next((e for e in backend.get("quiet")["events"] if e["reason"] == "NoProgress"), None),
                "the monitor's warning")
    notice = {"reason": "NoProgress", "message": job["message"], "replica": "", "time": hung["time"]}
    assert backend.get("quiet")["notice"] == notice
    wait(lambda: [j["notice"] for j in backend.list()] == [notice], "the list has the notice")
    (logs / "worker-0.log").write_text("2026-11-27T00:00:00.000000Z  again\n")
    wait_job(backend, "quiet", lambda j: j["reason"] == "", "no longer hung once a replica writes", 30)
    backend.stop("quiet")
    wait(lambda: [j["notice"] for j in backend.list()] == [None], "no notice once it ended (its end is told)")
    watching.join(30)
    assert not watching.is_alive(), "the monitor ends with the run"
    alone.objects.api.close()


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
    assert "3 GPUs per worker requested; the largest node has 2 (cpu-0: 0, gpu-0: 2, gpu-1: 2)" in str(refused.value)
    assert not backend.exists("too-big")
    with pytest.raises(SpecError) as refused:
        backend.submit(tf_spec("too-big", replicas={"chief": {"resources": {"cpu": 12, "memory": "40Gi"}}}))
    assert [(e.path, e.message) for e in refused.value.errors] == [
        ("replicas.chief.resources.cpu", "12 CPUs per chief requested; the largest node has 8 (cpu-0: 8, gpu-0: 8, "
                                         "gpu-1: 8)"),
        ("replicas.chief.resources.memory", "40 GiB of memory per chief requested; the largest node has 32 GiB "
                                            "(cpu-0: 32 GiB, gpu-0: 32 GiB, gpu-1: 32 GiB)")]
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
    said = "it asks for 2 GPUs; the most free on a node is 0 GPUs (gpu-0)"
    waiting = backend.waiting("gpu-b")
    assert waiting["sentence"] == f"worker-0 waits for a node with room: {said}."
    assert [(r["name"], r["resources"], r["nodes_with_room"]) for r in waiting["replicas"]] == [
        ("worker-0", [{"resource": "gpus", "requested": 2, "largest_free": 0, "node": "gpu-0",
                       "largest_allocatable": 2}],
         [])]
    assert backend.waiting("gpu-a")["waiting"] is False
    # before a submit, the same numbers: a warning, not a refusal (it would run once GPUs are free)
    assert [(w.path, w.message) for w in backend.outlook(tf_spec("gpu-c", workers=1, gpus=1))] == [
        ("replicas.worker.resources", "no node has room for a worker now: it asks for 1 GPU; the most free on a "
                                      "node is 0 GPUs (gpu-0). It would wait (Pending) until one has")]
    assert backend.cluster()["gpus"] == {"capacity": 4, "available": 0, "held_in": "every namespace",
                                         "devices": [{"node": "gpu-0", "gpus": 2}, {"node": "gpu-1", "gpus": 2}]}
    # the narrower rights of docs/jupyterhub.md: no pods of other namespaces; GPUs held are then counted in this one
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
    job = wait_job(backend, "gpu-b", lambda j: j["phase"] == "Running", "the second job runs once GPUs are free", 60)
    assert backend.cluster()["gpus"]["available"] == 2
    [idle] = {"gpu-0", "gpu-1"} - {replica(job, "worker-0")["node"]}
    admin.patch_node(idle, {"spec": {"unschedulable": True}})
    try:  # a cordoned node takes no new pod: its GPUs are not available, as why-it-waits says
        assert backend.cluster()["gpus"]["available"] == 0
    finally:
        admin.patch_node(idle, {"spec": {"unschedulable": False}})


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
    assert not (backend.objects.home / "gone").exists()


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
    assert {p.metadata.labels[naming.REPLICA] for p in cli.objects.job_pods_fresh("unmade")} == {"chief-0", "ps-0", "worker-0"}
    assert cli.get("unmade")["phase"] != "Failed"


def chief_lines(kube: KubeBackend, job: str, run: int | None = None) -> list[str]:
    return [line.text for line in kube.logs(job, replica="chief-0", run=run)]


def test_a_restart_records_its_run_over_a_write_that_came_first(backend):
    """The ended run's monitor may mark its end told while the restart records the next run: the restart reads the job
    again and keeps the mark (the next run's monitor posts nothing of it), where it failed on the write's 409."""
    backend.submit(tf_spec("crossed", workers=1))
    wait_job(backend, "crossed", lambda j: j["phase"] == "Running", "the job runs")
    resume_source = backend.engines.resume_source

    def resume_source_as_the_monitor_writes(spec, owner=None):
        if owner is not None:  # asked for the job's owner: between the restart's read of the job and its write
            backend.engines.resume_source = resume_source
            assert backend.claim("crossed", naming.TOLD_END)  # as the monitor of run 1 does once it sees the stop
        return resume_source(spec, owner)
    backend.engines.resume_source = resume_source_as_the_monitor_writes
    assert backend.restart("crossed")["run"] == 2
    assert backend.status("crossed")["previous"] == {"run": 1, "phase": "Stopped", "reason": "Stopped",
                                                     "message": "stopped by request", "told": True}
    backend.delete("crossed")

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
    first = backend.earlier_run("again", 1)  # kept in the job's ConfigMap, as the restart ended it
    assert (first["run"], first["phase"], first["exit_code"], first["spec"]["tensorboard"]["enabled"]) == (
        1, "Failed", 3, False)
    assert replica(first, "chief-0")["exit_code"] == 3 and backend.earlier_run("again", 2) is None
    with client.ApiClient(admin.api_client.configuration) as api:
        assert names(client.AppsV1Api(api).list_namespaced_deployment(NAMESPACE).items) == {"again-tensorboard"}
    end(admin, "again", "chief-0", 0)
    wait_job(backend, "again", lambda j: j["phase"] == "Succeeded", "the second run succeeds")


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
    kube.start(logging.getLogger("test"))
    jobs = [f"noted-{i}" for i in range(6)]
    try:
        for name in jobs[:3]:  # roots alone: their JobSets are never made, the controller notes their runs
            root = render.root(tf_spec(name), home, "jobset")
            root["data"]["status.json"] = json.dumps(new_status(tf_spec(name)))
            admin.create_namespaced_config_map(NAMESPACE, root)
        wait(lambda: len(kube.list()) == 3, "the controller sees the jobs")
        time.sleep(1)
        kube.controller.queue.add(SlowlyCompared("deleted-meanwhile"))
        for name in jobs[3:]:
            root = render.root(tf_spec(name), home, "jobset")
            root["data"]["status.json"] = json.dumps(new_status(tf_spec(name)))
            admin.create_namespaced_config_map(NAMESPACE, root)
        wait(lambda: len(kube.list()) == 6, "the controller sees the new jobs")
        time.sleep(3)
        assert [f"{r.getMessage()}: {r.exc_info and r.exc_info[1]!r}" for r in caplog.records] == []
    finally:
        kube.close()
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
    stale = kube.objects.job_root_fresh("stale-stop")
    admin.patch_namespaced_config_map("stale-stop", NAMESPACE, {"metadata": {"annotations": {"touched": "yes"}}})
    stale_once = iter([stale])  # what a cache a step behind shows stop: its status write meets a 409
    kube.objects.job_root = lambda name: next(stale_once, None) or NamespaceObjects.job_root(kube.objects, name)
    try:
        assert kube.stop("stale-stop")["phase"] == "Stopped"
    finally:
        del kube.objects.job_root
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
        root, pods = kube.objects.job_root_fresh("raced"), newest(kube.objects.job_pods_fresh("raced"))  # what both reconciles see
        kube.supervisor.reconcile(root, pods)
        kube.supervisor.reconcile(root, pods)  # a step behind: its status write meets a 409
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
