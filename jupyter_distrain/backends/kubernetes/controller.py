"""The namespace controller: the watch-fed cache of the jobs kept current, the policy applied to supervised jobs,
logs copied as they are written (by a process that copies them: a Jupyter server's)."""

from __future__ import annotations

import json
import threading
import time
from contextlib import suppress
from typing import Callable
from kubernetes import client

from ...errors import JobNotFound
from ...policy import FINISHED, Phase
from .logcopy import LogCopier, run_of_pod
from .naming import JOB, SWEEP, replica_of
from .objects import NamespaceObjects
from .observe import JobObserver
from .reconcile import PodSupervisor
from .state import WORKLOAD_GRACE, current_run, deadline_left, ended_pod, engine_of, newest, unmade
from .watch import WATCH_TIMEOUT, Cache, WorkQueue, listers

FOLLOW_AGAIN = (0.5, 30.0)  # seconds between a followed log's streams: the first wait, the longest


class NamespaceController:
    """Keeps the backend's cache current and applies the policy to every job a change touches (of those `scope`
    selects: see listers), a few jobs at a time and each job by one worker at a time (see WorkQueue); copies running
    pods' logs into the log files as they are written."""

    WORKERS = 4

    def __init__(self, objects: NamespaceObjects, observer: JobObserver, supervisor: PodSupervisor, copier: LogCopier,
                 served: Callable[[], dict[str, str]], log, watch_timeout: int = WATCH_TIMEOUT, scope: str = "",
                 explained: bool = True):
        """The jobs of `objects` (those `scope` selects), on the engines whose resources `served()` names as the
        watches (re)start (Engines.served: one installed meanwhile is watched too); `explained`: see listers."""
        self.objects, self.observer, self.supervisor, self.copier, self.log = objects, observer, supervisor, copier, log
        self.queue = WorkQueue()
        self.followers: dict[str, tuple[str, threading.Thread]] = {}  # pod uid -> its job, its log copier
        self.unread: set[tuple[str, int | None]] = set()  # (job, run) of pods gone before their logs were read
        self.copied: dict[str, set[tuple[int | None, str]]] = {}  # job -> (run, replica) whose pod's log it copies
        self.merged: dict[str, threading.Event] = {}  # job -> set once the volume read under way has merged its lines
        self.reminders: dict[str, threading.Timer] = {}  # job -> its deadline's reconcile
        # job -> its runs seen: whether this process has all their lines; a job's entry is only ever touched by
        # the one worker that has the job (see WorkQueue)
        self.runs: dict[str, dict[int, bool]] = {}
        self.stopping = threading.Event()
        self.workers = [threading.Thread(target=self._work, daemon=True, name=f"distrain-reconcile-{i}")
                        for i in range(1 if scope.startswith(f"{JOB}=") else self.WORKERS)]
        for worker in self.workers:
            worker.start()
        self.cache = objects.cache = Cache(lambda: listers(objects.api, objects.ns, served(), scope, explained),
                                           self.queue.add, log, watch_timeout, scope)
        self.cache.start()

    def _work(self) -> None:
        while (name := self.queue.get()) is not None:
            try:
                try:
                    root = self.objects.job_root(name)
                except JobNotFound:  # deleted, or another owner's
                    self.runs.pop(name, None)
                    self.copied.pop(name, None)
                    self.copier.forget(name)
                else:
                    if engine_of(root) != SWEEP:  # a sweep's controller runs it in the cluster: no pods, no logs
                        self._reconcile(root)
            except Exception:
                self.log.exception("reconciling job %s", name)
            finally:
                self.queue.done(name)

    def _reconcile(self, root: client.V1ConfigMap) -> None:
        """Apply the policy to the job, if this process supervises it, and copy its pods' logs, if it copies them."""
        name, logs = root.metadata.name, self.copier.copies_logs
        pods = self.objects.job_pods(name)
        if logs:
            self._read_volume_first(root, pods)
        if engine_of(root) == "pods":
            if self.supervisor.supervises(root):
                self.supervisor.reconcile(root, newest(pods))
                self._remind(name)
        else:  # the engine applies the policy; copy what ended pods logged
            self.supervisor.record_pods(root, pods)
            if logs:
                for pod in self.copier.copy_logs(name, pods, ended=True):
                    self.unread.add((name, run_of_pod(pod)))
                self._copied(name, [pod for pod in pods if ended_pod(pod)])
        if logs:
            self._follow(name, pods)
            self._mark_complete(root, pods)

    def _read_volume_first(self, root: client.V1ConfigMap, pods: list[client.V1Pod]) -> None:
        """Before this process copies anything of a run from pods/log: if the run began while it was not
        watching, merge in what the replicas wrote to the output volume, which holds the lines of pods that
        are gone (pods/log brings only later lines after those a log file has). The running pods' logs are
        opened first, their lines held meanwhile: a pod that ends while the volume is read (its reader pod
        takes seconds to start) is still read whole."""
        name, run = root.metadata.name, current_run(root)
        runs = self.runs.setdefault(name, {})
        if run in runs:
            return
        runs[run] = False  # tried once
        began = self.observer.get(name, events=0)["started"] or self.objects.run_over(root)
        if not began or self.copier.logs_complete(name, run):
            runs[run] = True
            return
        # a replica whose pod this process never sees running is merged again at the run's end (see
        # _mark_complete): what it logs after this read is on the volume only
        merged = self.merged[name] = threading.Event()
        try:
            self._follow(name, pods)
            runs[run] = self.copier.read_volume_logs(name, run)
        finally:
            merged.set()
            del self.merged[name]

    def _mark_complete(self, root: client.V1ConfigMap, pods: list[client.V1Pod]) -> None:
        """Once the cluster has ended a run whose lines this process has all, its pods have ended and their logs
        are copied. A pod that was gone before its log was read to its end (an engine deletes the replicas
        still running once the job has succeeded), or before this process saw it run at all, left its lines on
        the output volume only: merged first, unless the run was stopped (a delete stops the job first: a reader
        pod would race it)."""
        name, run = root.metadata.name, current_run(root)
        if not (self.runs[name][run] and all(ended_pod(p) for p in pods) and not self.copier.logs_complete(name, run)
                and self.objects.run_over(root)):
            return
        if any(job == name for job, _ in list(self.followers.values())):
            return  # reconciled again as each ends
        status = json.loads(root.data["status.json"])
        unseen = engine_of(root) != "pods" and any((run, replica) not in self.copied.get(name, ())
                                                   for replica in status["replicas"])
        if (name, run) in self.unread or unseen:
            self.unread.discard((name, run))
            if status["phase"] != Phase.STOPPED:
                self.runs[name][run] = self.copier.read_volume_logs(name, run)
        if self.runs[name][run]:
            self.copier.mark_logs_complete(name, run)

    def _remind(self, name: str) -> None:
        """Reconcile a supervised job again at its deadline, or when a pod it lacks is missing (no change in the
        cluster marks either)."""
        root = self.objects.job_root(name)
        status = json.loads(root.data["status.json"])
        if status["phase"] in FINISHED:
            return
        spec, now = json.loads(root.data["spec.json"]), time.time()
        times = [deadline_left(spec, status["started"], now),
                 *(asked + WORKLOAD_GRACE - now
                   for asked in unmade(status, newest(self.objects.job_pods(name))).values())]
        left = min((t for t in times if t is not None), default=None)
        if previous := self.reminders.pop(name, None):
            previous.cancel()
        if left is not None:
            timer = threading.Timer(max(left, 0) + 0.1, self._reminded, (name,))
            timer.daemon = True
            self.reminders[name] = timer
            timer.start()

    def _reminded(self, name: str) -> None:
        self.reminders.pop(name, None)
        self.queue.add(name)

    def _follow(self, job: str, pods: list[client.V1Pod]) -> None:
        for pod in pods:
            replica, uid = replica_of(pod.metadata.labels), pod.metadata.uid
            if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp and uid not in self.followers \
                    and not self.copier.whole(job, pod):
                thread = threading.Thread(target=self._copy, args=(job, replica, pod), daemon=True,
                                          name=f"distrain-logs-{pod.metadata.name}")
                self.followers[uid] = job, thread
                self._copied(job, [pod])
                thread.start()

    def _copied(self, job: str, pods: list[client.V1Pod]) -> None:
        """Note that this process copies what `pods` logged (their runs' replicas are not unseen)."""
        self.copied.setdefault(job, set()).update((run_of_pod(p), replica_of(p.metadata.labels)) for p in pods)

    def _copy(self, job: str, replica: str, pod: client.V1Pod) -> None:
        read, wait = False, FOLLOW_AGAIN[0]
        try:
            while not self.stopping.is_set():
                began = time.monotonic()
                self.copier.archive(job, replica, pod, follow=True, held=self.merged.get(job))
                if self.copier.whole(job, pod):
                    read = True
                    return
                current = next((p for p in self.cache.items("pods") if p.metadata.uid == pod.metadata.uid), None)
                if current is None or current.status.phase != "Running" or current.metadata.deletion_timestamp:
                    read = self.copier.archive(job, replica, current or pod)
                    return
                # the stream ended while the container runs: pick up where the file ends, at once after a stream
                # that lasted (a quiet container's), later and later while each ends at once (a kubelet that
                # cannot be reached, a container not started)
                if time.monotonic() - began > FOLLOW_AGAIN[1]:
                    wait = FOLLOW_AGAIN[0]
                self.stopping.wait(wait)
                wait = min(2 * wait, FOLLOW_AGAIN[1])
        except Exception:
            if not self.stopping.is_set():
                self.log.exception("copying the log of %s", pod.metadata.name)
        finally:
            if not read:
                self.unread.add((job, run_of_pod(pod)))
            self.followers.pop(pod.metadata.uid, None)
            self.queue.add(job)  # its run may be complete now

    def stop(self) -> None:
        self.stopping.set()
        for timer in list(self.reminders.values()):
            timer.cancel()
        self.cache.stop()
        self.queue.shut_down()
        for response in list(self.objects.streams):
            with suppress(ValueError, RuntimeError, OSError):  # raised when its connection is closed already
                response.shutdown()  # unblocks the copier reading it
        for thread in [*self.workers, *(thread for _, thread in list(self.followers.values()))]:
            thread.join(10)  # none is left reading a connection as the process exits
