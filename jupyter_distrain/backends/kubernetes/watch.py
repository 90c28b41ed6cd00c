"""Watching a namespace: an informer-style cache of the jobs' objects that reads its own writes, and the
work queue that hands each changed job to one worker at a time."""

from __future__ import annotations

import bisect
import itertools
import json
import threading
import time
from collections import deque
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Callable, Iterator

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from ...errors import DistrainError
from .naming import JOB, MANAGED
from .state import event_job

SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED.items())


class KubeError(DistrainError):
    """The cluster refused a request; the message names the API call and the cluster's reason."""

    status = 502


def api_error(e: ApiException, what: str) -> KubeError:
    try:
        detail = json.loads(e.body).get("message", e.reason)
    except (TypeError, ValueError):
        detail = e.reason
    error = KubeError(f"Kubernetes refused to {what}: {detail}")
    error.status = 403 if e.status == 403 else 502 if e.status >= 500 else 400
    return error


class Resource(dict):
    """A custom resource as the API gives it (a dict), with the `metadata` attributes the Cache reads."""

    @property
    def metadata(self) -> SimpleNamespace:
        meta = self["metadata"]
        return SimpleNamespace(name=meta["name"], resource_version=meta.get("resourceVersion"),
                               labels=meta.get("labels"), uid=meta.get("uid"))


WATCH_TIMEOUT = 300  # seconds the API server lets a watch run; it then resumes where it was
_GONE = object()  # a write's answer and a watch's note that the object was deleted


class Write:
    """One write of this process to a cached object: `put` the API server's answer, or `forget` the
    object once deleted, by `Cache`'s rule (without a cache, both do nothing)."""

    def __init__(self, cache: Cache | None, kind: str, name: str, generation: int = 0):
        self.cache, self.kind, self.name, self.generation = cache, kind, name, generation

    def put(self, obj) -> None:
        if self.cache:
            self.cache._answer(self, obj.metadata.resource_version, obj)

    def forget(self) -> None:
        if self.cache:
            self.cache._answer(self, _GONE, None)


def listers(api: client.ApiClient, namespace: str, engines: dict[str, str], scope: str = "",
            explained: bool = True) -> dict[str, Callable]:
    """What a Cache lists and watches in the namespace: the jobs' (or only those `scope` selects: naming.of_job,
    of_sweep) ConfigMaps and pods, the events, and the engines' objects: `engines` maps each resource the cluster
    serves (jobsets, tfjobs..., Kueue's workloads) to its API version; with JobSets come their Jobs. Kueue's
    Workloads carry none of the jobs' labels: all of the namespace's are watched. Without `explained`, neither
    they nor the events, which explain a job's state but do not make it (a reader of its phase alone)."""
    core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
    jobs = SELECTOR + (f",{scope}" if scope else "")
    out: dict[str, Callable] = {
        "configmaps": lambda **kw: core.list_namespaced_config_map(namespace, label_selector=jobs, **kw),
        "pods": lambda **kw: core.list_namespaced_pod(namespace, label_selector=jobs, **kw),
    }
    if explained:
        out["events"] = lambda **kw: core.list_namespaced_event(namespace, **kw)
    if "jobsets" in engines:
        out["jobs"] = lambda **kw: batch.list_namespaced_job(namespace, label_selector=jobs, **kw)
    for plural, api_version in engines.items():
        if plural == "workloads" and not explained:
            continue
        group, version = api_version.split("/")
        selector = "" if plural == "workloads" else jobs
        out[plural] = (lambda group, version, plural, selector: lambda **kw: custom.list_namespaced_custom_object(
            group, version, namespace, plural, label_selector=selector, **kw))(group, version, plural, selector)
    return out


def kept(kind: str, obj):
    """What the cache keeps of an object: not its managedFields (which writer set which field: nothing here reads
    them), and of a Job its metadata and status alone (what a job's state is made of, state.jobset_replica), not
    its pods' template. A 1,000-trial sweep's controller held 298 MiB with them, 225 without the managedFields."""
    if isinstance(obj, Resource):
        obj["metadata"].pop("managedFields", None)
        return obj
    obj.metadata.managed_fields = None
    return client.V1Job(api_version=obj.api_version, kind=obj.kind, metadata=obj.metadata, status=obj.status) \
        if kind == "jobs" else obj


def job_label(obj) -> str | None:
    return (obj.metadata.labels or {}).get(JOB)


def index_key(kind: str, obj) -> str | None:
    """What the cache finds an object by besides its name: an event by the object it involves (not every event of a
    job carries its label: the scheduler's, the engines'), Kueue's Workload by its owner (the job's JobSet or
    TFJob..., named as the job: it carries none of the job's labels), any other object by its job's label."""
    if kind == "events":
        return obj.involved_object.name
    if kind == "workloads":
        return next((owner["name"] for owner in obj["metadata"].get("ownerReferences") or []), None)
    return job_label(obj)


class Cache:
    """An informer: list, then watch each kind `discover()` names (see `listers`), calling `changed(job)` for
    every job a change touches; a kind the cluster begins to serve later (an engine installed since) is
    watched from the first read that asks for it (`get`, `of_job`, `holds`).

    Each kind is listed once, then watched from the listing's resourceVersion. A watch that ends (the API
    server ends it after `watch_timeout`, the connection drops, an error after a backoff) resumes from the
    last resourceVersion it delivered, bookmarks included; only 410 Gone (that version has left the API
    server's window) lists again.

    resourceVersions are opaque: only equality means anything. The watch is the ordered truth, and this
    process reads its own writes at once by one rule:
    - a write runs in `writing(kind, name)`; while it is in flight, the watch notes the versions it
      delivers for that name;
    - its answer (`Write.put`, `Write.forget`) is dropped if the watch already delivered it, or if the cache
      holds it already (a write that changed nothing keeps its version, a deletion of what is gone: no event
      will come): the cache holds it or later. Otherwise the answer is shown, and the watch's events for that
      name are skipped until the one with its version (for a deletion, its DELETED event): they come before it
      in the stream;
    - a listing replaces everything and forgets the answers awaiting their event (a listing asked for after
      a write shows it or later); a write in flight across a listing drops its answer (the watch from the
      listing brings what the listing lacks).
    """

    WHAT = {"configmaps": "jobs", "pods": "pods", "events": "events", "jobs": "Jobs", "jobsets": "JobSets",
            "tfjobs": "TFJobs", "pytorchjobs": "PyTorchJobs", "paddlejobs": "PaddleJobs",
            "workloads": "Kueue's workloads"}
    # what the watch delivers; a custom resource comes as a dict, made a Resource
    MODELS = {"configmaps": "V1ConfigMap", "pods": "V1Pod", "events": "CoreV1Event", "jobs": "V1Job"}

    RECHECK = 10  # seconds between asks for the kinds the cluster serves, while a kind asked for is missing

    def __init__(self, discover: Callable[[], dict[str, Callable]], changed, log, watch_timeout: int = WATCH_TIMEOUT,
                 scope: str = ""):
        """`scope`: the selector of the jobs `discover`'s listers hold (see listers), "" for every job."""
        self.discover, self.changed, self.log, self.scope = discover, changed, log, scope
        self.watch_timeout = watch_timeout
        self.listers: dict[str, Callable] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self.index: dict[str, dict[str | None, dict[str, Any]]] = {}  # index_key -> name -> object
        self.keys: dict[str, list[str]] = {}  # the index's keys, sorted: those under a prefix are found at once
        self.versions: dict[str, str | None] = {}  # where each watch resumes; None: list
        self.generation: dict[str, int] = {}  # listings applied
        self.awaited: dict[str, dict[str, Any]] = {}  # name -> its answer's version
        self.in_flight: dict[str, dict[str, list]] = {}  # name -> [writes, versions seen]
        self.ready: dict[str, threading.Event] = {}
        self.errors: dict[str, Exception] = {}  # the last failure of each kind's list or watch
        self.watches: dict[str, watch.Watch] = {}  # each kind's current watch, ended by stop()
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # held around dictionary operations only
        self.started = False
        self.threads: list[threading.Thread] = []
        self.discovered = time.monotonic()
        self._add(discover())

    def holds(self, kind: str) -> bool:
        """Whether the cache holds `kind`; one it lacks is looked for among what the cluster serves now (at most
        every RECHECK seconds), and watched from then on."""
        if kind not in self.listers and time.monotonic() > self.discovered + self.RECHECK:
            self.discovered = time.monotonic()
            self._add(self.discover())
        return kind in self.listers

    def _add(self, listers: dict[str, Callable]) -> None:
        """Watch the kinds of `listers` not watched yet."""
        with self.lock:
            new = {kind: lister for kind, lister in listers.items() if kind not in self.listers}
            for kind in new:
                self.objects[kind], self.index[kind], self.keys[kind] = {}, {}, []
                self.awaited[kind], self.in_flight[kind] = {}, {}
                self.versions[kind], self.generation[kind], self.ready[kind] = None, 0, threading.Event()
            threads = [threading.Thread(target=self._run, args=(kind,), daemon=True, name=f"distrain-watch-{kind}")
                       for kind in new]
            self.threads += threads
            self.listers.update(new)  # last: a reader finds a kind only once all of it is in place
            started = self.started
        for thread in threads if started else []:
            thread.start()

    def start(self) -> Cache:
        with self.lock:
            self.started = True
            threads = list(self.threads)
        for thread in threads:
            thread.start()
        return self

    def items(self, kind: str) -> list:
        """The cached objects; until the first listing, its failure if it failed (e.g. Forbidden)."""
        deadline = time.monotonic() + 30
        while not self.ready[kind].wait(0.05):
            error = self.errors.get(kind)
            if isinstance(error, ApiException):
                raise api_error(error, f"list {self.WHAT[kind]}")
            if error or time.monotonic() > deadline:
                raise KubeError(f"cannot reach Kubernetes to list {self.WHAT[kind]}: {error or 'no answer in 30 s'}")
        with self.lock:
            return list(self.objects[kind].values())

    def get(self, kind: str, name: str) -> Any:
        """The cached object of that name, or None (always, for a kind the cluster does not serve: a job's
        engine object once the engine is gone; see `holds`)."""
        if not self.holds(kind):
            return None
        self.items(kind)  # ready, or its failure
        with self.lock:
            return self.objects[kind].get(name)

    def of_job(self, kind: str, job: str) -> list:
        """The cached objects labelled with the job's name (see `get`)."""
        if not self.holds(kind):
            return []
        self.items(kind)
        with self.lock:
            return list(self.index[kind].get(job, {}).values())

    def under(self, kind: str, key: str) -> dict[str, list]:
        """The cached objects whose index_key is `key` or begins with `key` and "-" (a job's events, of the objects
        named after it; the jobs whose names begin with a job's), by that key."""
        if not self.holds(kind):
            return {}
        self.items(kind)
        with self.lock:
            keys = self.keys[kind]
            found = itertools.takewhile(lambda k: k.startswith(key), keys[bisect.bisect_left(keys, key):])
            return {k: list(self.index[kind][k].values()) for k in found if k == key or k.startswith(key + "-")}

    # this process's writes
    @contextmanager
    def writing(self, kind: str, name: str) -> Iterator[Write]:
        """Bracket a write to object `name` of `kind`: the API call, then the `Write`'s answer."""
        with self.lock:
            self.in_flight[kind].setdefault(name, [0, set()])[0] += 1
            write = Write(self, kind, name, self.generation[kind])
        try:
            yield write
        finally:
            with self.lock:
                entry = self.in_flight[kind][name]
                entry[0] -= 1
                if not entry[0]:
                    del self.in_flight[kind][name]

    def _answer(self, write: Write, version, obj) -> None:
        kind, name = write.kind, write.name
        with self.lock:
            if write.generation != self.generation[kind] or version in self.in_flight[kind][name][1]:
                return
            cached = self.objects[kind].get(name)
            if (cached.metadata.resource_version == version) if cached is not None else version is _GONE:
                return  # cached already: a write that changed nothing (or deleted what was gone) makes no event
            self._set(kind, name, obj)
            self.awaited[kind][name] = version

    # the watch
    def _deliver(self, kind: str, type_: str, obj) -> str | None:
        """Apply one watch event; the job it touches."""
        with self.lock:
            job = self._job_of(kind, obj)
            self._apply(kind, type_, obj)
            self.versions[kind] = obj.metadata.resource_version
        return job

    def _apply(self, kind: str, type_: str, obj) -> None:
        """One watch event (the lock held), unless it comes before an answer awaiting its event."""
        name, version = obj.metadata.name, obj.metadata.resource_version
        if name in self.in_flight[kind]:
            self.in_flight[kind][name][1].update((version, _GONE) if type_ == "DELETED" else (version,))
        awaited = self.awaited[kind].get(name)
        if awaited is not None:
            if awaited != version and not (awaited is _GONE and type_ == "DELETED"):
                return
            del self.awaited[kind][name]
        self._set(kind, name, None if type_ == "DELETED" else obj)

    def _set(self, kind: str, name: str, obj) -> None:
        """Cache what it keeps of `obj` (`kept`) as `name`, or with None forget it (the lock held), in the job index
        too."""
        old = self.objects[kind].get(name)
        index, keys = self.index[kind], self.keys[kind]
        if old is not None:
            key = index_key(kind, old)
            del index[key][name]
            if not index[key]:
                del index[key]
                if key is not None:
                    del keys[bisect.bisect_left(keys, key)]
        if obj is None:
            self.objects[kind].pop(name, None)
            return
        obj = self.objects[kind][name] = kept(kind, obj)
        key = index_key(kind, obj)
        if key not in index and key is not None:
            bisect.insort(keys, key)
        index.setdefault(key, {})[name] = obj

    def _job_of(self, kind: str, obj) -> str | None:
        """The job an object belongs to (the lock held: an event's job is a cached ConfigMap's name)."""
        if kind == "events":
            return event_job(obj.involved_object.name or "", self.objects["configmaps"])
        if kind == "workloads":  # Kueue's, owned by the job's JobSet or TFJob..., named as the job
            owners = [o["name"] for o in obj["metadata"].get("ownerReferences", [])]
            return next((o for o in owners if o in self.objects["configmaps"]), None)
        return job_label(obj)

    def _run(self, kind: str) -> None:
        lister = self.listers[kind]
        failures = 0
        error: Exception
        while not self.stopping.is_set():
            try:
                if self.versions[kind] is None:
                    self._list(kind, lister)
                self._watch(kind, lister)
                failures = 0
                continue
            except ApiException as e:
                error = e
                if e.status == 410:  # the version has left the API server's window: list again
                    self.versions[kind] = None
            except Exception as e:  # a dropped connection, Forbidden, ...: resume after a backoff
                error = e
            if self.stopping.is_set():
                return
            self.errors[kind] = error
            self.log.debug("watch of %s restarts: %s", kind, error)
            if failures or not (isinstance(error, ApiException) and error.status == 410):
                self.stopping.wait(min(0.5 * 2 ** failures, 10))
            failures += 1

    def _list(self, kind: str, lister) -> None:
        listing = lister()
        if isinstance(listing, dict):  # custom resources
            items, version = [Resource(o) for o in listing["items"]], listing["metadata"]["resourceVersion"]
        else:
            items, version = listing.items, listing.metadata.resource_version
        with self.lock:
            touched = {self._job_of(kind, o) for o in self.objects[kind].values()}
            self.objects[kind], self.index[kind], self.keys[kind] = {}, {}, []
            for o in items:
                self._set(kind, o.metadata.name, o)
            touched |= {self._job_of(kind, o) for o in items}
            self.awaited[kind].clear()
            self.generation[kind] += 1
            self.versions[kind] = version
        self.errors.pop(kind, None)
        self.ready[kind].set()
        for job in touched - {None}:
            self.changed(job)

    def _watch(self, kind: str, lister) -> None:
        """Watch from `versions[kind]` until the API server ends the watch (raises its failure)."""
        stream = watch.Watch(return_type=self.MODELS.get(kind))  # a lambda names no type to find
        with self.lock:
            self.watches[kind] = stream
        if self.stopping.is_set():
            return
        for event in stream.stream(lister, resource_version=self.versions[kind], timeout_seconds=self.watch_timeout,
                                   allow_watch_bookmarks=True, _request_timeout=(30, self.watch_timeout + 30)):
            if self.stopping.is_set():
                return
            if event["type"] == "BOOKMARK":  # no object, only how far the stream has come
                self.versions[kind] = event["raw_object"]["metadata"]["resourceVersion"]
                continue
            obj = event["object"]
            job = self._deliver(kind, event["type"], Resource(obj) if isinstance(obj, dict) else obj)
            if job:
                self.changed(job)

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            watches = list(self.watches.values())
        for stream in watches:
            stream.stop()  # unblocks the thread reading it
        for thread in self.threads:
            if thread.is_alive():
                thread.join(10)  # none is left reading a connection as the process exits


class WorkQueue:
    """Job names to reconcile, as client-go's workqueue: a name added while it waits waits once (the dirty
    set); a name added while a worker processes it is processed again after `done`, never by two workers
    at once (the processing set)."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.waiting: deque[str] = deque()
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.closed = False

    def add(self, name: str) -> None:
        with self.condition:
            if self.closed or name in self.dirty:
                return
            self.dirty.add(name)
            if name not in self.processing:
                self.waiting.append(name)
                self.condition.notify()

    def get(self) -> str | None:
        """The next name, now processing until `done(name)`; None once shut down."""
        with self.condition:
            while not self.waiting and not self.closed:
                self.condition.wait()
            if self.closed:
                return None
            name = self.waiting.popleft()
            self.dirty.discard(name)
            self.processing.add(name)
            return name

    def done(self, name: str) -> None:
        with self.condition:
            self.processing.discard(name)
            if name in self.dirty and not self.closed:
                self.waiting.append(name)
                self.condition.notify()

    def shut_down(self) -> None:
        with self.condition:
            self.closed = True
            self.condition.notify_all()
