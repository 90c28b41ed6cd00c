"""The Kubernetes backend's watch cache and work queue, on their own: the test plays the watch, no control
plane runs."""

from __future__ import annotations

import itertools
import logging
import threading
import time

from conftest import wait
from kube_support import cached, configmap
from kubernetes import client

from jupyter_distrain.backends.kubernetes.objects import KeyedLocks
from jupyter_distrain.backends.kubernetes.state import event_job
from jupyter_distrain.backends.kubernetes.watch import Cache, WorkQueue


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

    # a write that changed nothing: answered with the version the watch delivered before it, and no event comes;
    # nothing waits for one, another writer's change shows
    with cache.writing("configmaps", "j") as write:
        write.put(configmap("j", "m-3"))
    watched("MODIFIED", "p-1")
    assert cached(cache, "j") == "p-1"

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

    # deleting what is gone already (its DELETED delivered before): nothing waits, a new one of that name shows
    watched("DELETED", "n-4")
    with cache.writing("configmaps", "j") as write:
        write.forget()
    watched("ADDED", "q-1")
    assert cached(cache, "j") == "q-1"
    assert not cache.awaited["configmaps"] and not cache.in_flight["configmaps"]


def test_a_jobs_events_are_found_by_the_objects_they_involve_among_every_other_jobs():
    """The events of job aj (its ConfigMap's, its pods' and Jobs', labelled or not) come from the index of the objects
    they involve, without a scan: none of aj2's; those of job aj-worker-0-x's objects come too, which the backend
    then gives to the longer name (their job); each is forgotten with the last event of its object."""
    cache = Cache(lambda: {"configmaps": lambda **kw: None, "events": lambda **kw: None}, lambda job: None,
                  logging.getLogger("test"))
    for kind in ("configmaps", "events"):
        cache.ready[kind].set()
    involving = {"aj": "aj", "aj-worker-0": "aj-worker-0", "aj-worker-0-x7k2p": "aj-worker-0-x7k2p", "aj2": "aj2",
                 "aj2-chief-0": "aj2-chief-0", "b": "b", "aj-worker-0-x-chief-0": "aj-worker-0-x-chief-0"}
    for i, involved in enumerate([*involving, *involving]):
        cache._deliver("events", "ADDED", client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{involved}.{i}", resource_version=str(i)),
            involved_object=client.V1ObjectReference(name=involved)))
    for job in ("aj", "aj2", "aj-worker-0-x", "b"):
        cache._deliver("configmaps", "ADDED", configmap(job, "1"))
    found = cache.under("events", "aj")
    assert sorted(found) == ["aj", "aj-worker-0", "aj-worker-0-x-chief-0", "aj-worker-0-x7k2p"]
    assert all(len(events) == 2 for events in found.values())
    assert list(cache.under("configmaps", "aj")) == ["aj", "aj-worker-0-x"]
    assert cache.keys["events"] == sorted(involving)
    for i in (1, len(involving) + 1):  # both of aj-worker-0's events
        cache._deliver("events", "DELETED", cache.get("events", f"aj-worker-0.{i}"))
    assert "aj-worker-0" not in cache.under("events", "aj") and "aj-worker-0" not in cache.keys["events"]
    assert event_job("aj-worker-0-x-chief-0", cache.objects["configmaps"]) == "aj-worker-0-x"
    assert event_job("aj-worker-0-x7k2p", cache.objects["configmaps"]) == "aj"
    assert event_job("aj2-chief-0", ["aj", "aj2"]) == "aj2" and event_job("c-0", ["aj"]) is None

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


def test_a_jobs_change_lock_serializes_its_changes_and_is_forgotten_once_free():
    """NamespaceObjects.changing's locks: two changes of one job take turns, a nested one passes, other jobs' go
    on, and no lock stays for a job nobody changes (a server's lifetime of jobs keeps none)."""
    locks, order, holding, release = KeyedLocks(), [], threading.Event(), threading.Event()

    def change(name: str, hold: bool = False) -> None:
        with locks.held(name):
            with locks.held(name):  # a change within a change of the same job, on its thread
                order.append(f"{name} in")
                if hold:
                    holding.set()
                    release.wait()
                order.append(f"{name} out")

    first, second, other = (threading.Thread(target=change, args=args) for args in [("a", True), ("a",), ("b",)])
    first.start()
    holding.wait()
    second.start()
    other.start()
    other.join()
    assert order == ["a in", "b in", "b out"] and second.is_alive()
    release.set()
    first.join()
    second.join()
    assert order == ["a in", "b in", "b out", "a out", "a in", "a out"]
    assert locks.locks == {}
    for name in map(str, range(1000)):
        change(name)
    assert locks.locks == {}


def test_a_replica_a_signal_ended_as_the_engine_ended_the_job_was_stopped_by_that_end():
    """The Training Operator marks a job Succeeded as its chief exits 0, then deletes the worker's pod: the worker,
    ended by SIGTERM (143) in the same second, was stopped by the job's end, which the job shows at once, not a
    failure that makes its end wait for the watches to settle (the job showed Running meanwhile on the real node);
    a worker that exited 0 by itself then shows Succeeded, also once its pod is gone. One whose kill is the end's
    cause stays Failed."""
    import json
    from datetime import datetime, timezone

    from jupyter_distrain import spec as spec_
    from jupyter_distrain.backends.kubernetes.naming import RUN, labels
    from jupyter_distrain.backends.kubernetes.state import kubeflow_state, new_status, record_seen

    spec = spec_.validate({"name": "tf", "framework": "tensorflow", "command": "python train.py",
                           "replicas": {"chief": {}, "worker": {}}})
    end = 1_800_000_000
    at = lambda seconds: datetime.fromtimestamp(seconds, timezone.utc)  # noqa: E731
    root = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="tf", labels={}, creation_timestamp=at(end - 60)),
                              data={"spec.json": json.dumps(spec), "status.json": json.dumps(new_status(spec))})
    def ended(condition: str) -> dict:
        return {"metadata": {"labels": {}}, "spec": {}, "status": {"conditions": [
            {"type": condition, "status": "True", "reason": f"TFJob{condition}", "message": "",
             "lastTransitionTime": at(end).strftime("%Y-%m-%dT%H:%M:%SZ")}]}}

    def pod(role: str, code: int, finished: int) -> client.V1Pod:
        ended = client.V1ContainerStateTerminated(exit_code=code, finished_at=at(finished), started_at=at(end - 30),
                                                  reason="Completed" if code == 0 else "Error")
        return client.V1Pod(
            metadata=client.V1ObjectMeta(name=f"tf-{role}-0", uid=role, labels={**labels("tf", role, 0), RUN: "1"},
                                         creation_timestamp=at(end - 40)),
            spec=client.V1PodSpec(containers=[client.V1Container(name="main")], restart_policy="Never"),
            status=client.V1PodStatus(phase="Succeeded" if code == 0 else "Failed", start_time=at(end - 35),
                                      container_statuses=[client.V1ContainerStatus(
                                          name="main", image="python", image_id="", ready=False, restart_count=0,
                                          state=client.V1ContainerState(terminated=ended))]))

    chief = pod("chief", 0, end - 1)
    stopped = kubeflow_state(root, ended("Succeeded"), [chief, pod("worker", 143, end)], None, end + 1)
    assert (stopped["phase"], stopped["reason"]) == ("Succeeded", "Completed")
    assert {k: stopped["replicas"]["worker-0"][k] for k in ("phase", "reason", "exit_code")} == {
        "phase": "Stopped", "reason": "job succeeded", "exit_code": 143}
    worker = pod("worker", 0, end)
    exited = kubeflow_state(root, ended("Succeeded"), [chief, worker], None, end + 1)
    assert (exited["phase"], exited["replicas"]["worker-0"]["phase"]) == ("Succeeded", "Succeeded")
    # its end recorded as a watcher saw it (record_pods), it stays once the engine deleted its pod
    status = new_status(spec)
    assert record_seen(status, {"chief-0": chief, "worker-0": worker}, end + 1)
    assert not record_seen(status, {"chief-0": chief, "worker-0": worker}, end + 2)  # nothing new: nothing written
    root.data["status.json"] = json.dumps(status)
    gone = kubeflow_state(root, ended("Succeeded"), [chief], None, end + 1)
    assert {k: gone["replicas"]["worker-0"][k] for k in ("phase", "exit_code", "finished")} == {
        "phase": "Succeeded", "exit_code": 0, "finished": end}
    root.data["status.json"] = json.dumps(new_status(spec))
    killed = kubeflow_state(root, ended("Failed"), [pod("chief", 137, end), pod("worker", 143, end)], None, end + 1)
    assert killed["phase"] == killed["replicas"]["chief-0"]["phase"] == "Failed" and killed["exit_code"] == 137
