"""Logs copied from pods/log into files under the storage root as they are written, so they outlive the pods;
the lines that only the output volume holds are read back through a short-lived reader pod."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import json
import secrets
import threading
import time
from pathlib import Path
from typing import Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ... import logs, reasons
from ...errors import DistrainError
from ...incluster import logreader
from ...policy import Event
from . import render
from .loglines import append, ends_log, from_pods_log, from_volume, last_stamp, line_batches, seconds_since
from .naming import RUN, replica_of
from .objects import NamespaceObjects
from .state import created, current_run, ended_pod, why_not_running
from .watch import KubeError

COMPLETE = ".complete"  # in a run's log directory: it holds every line of the run
READER_TIMEOUT = 120  # seconds a log reader pod may take to serve (its image may be pulled first)
LOG_SILENCE = 300  # seconds a followed log may send nothing before it is asked for again
LOGS_GRACE = 30  # seconds a follower waits, past a run's end, for a controller to copy its last lines


def run_of_pod(pod: client.V1Pod) -> int | None:
    """The run a pod belongs to; None for pods made before runs were labelled (the current run)."""
    run = (pod.metadata.labels or {}).get(RUN)
    return None if run is None else int(run)


class LogCopier:
    """Copies a job's lines into its run's log files."""

    def __init__(self, objects: NamespaceObjects, copies_logs: bool = True):
        """`copies_logs`: whether this process keeps copies of pods' logs: a Jupyter server, the CLI do; not the
        cluster's controllers, which may not read pods' logs (roles.py) and need none: every line is on the job's
        output volume."""
        self.objects, self.copies_logs = objects, copies_logs
        self.settings, self.ns, self.core = objects.settings, objects.ns, objects.core
        self.copied_whole: dict[str, set[str]] = {}  # job -> uids of its pods whose logs are copied to their end

    def log_files(self, name: str, replica: str | None = None, run: int | None = None) -> dict[str, Path]:
        """Each replica's log file of a run (default: the current one), or only `replica`'s."""
        root = self.objects.job_root(name)
        current = current_run(root)
        run = logs.run_of(name, run, current)
        directory = self.objects.run_log_dir(name, run)
        directory.mkdir(parents=True, exist_ok=True)  # watched by live streams
        names = list(json.loads(root.data["status.json"])["replicas"]) if run == current else None
        return logs.run_files(name, directory, names, replica)

    def until_lines_copied(self, name: str, run: int, over: Callable[[], bool]) -> Callable[[], bool]:
        """`over()`, and the run's lines all in its files: the cluster ends a run as its pods end, and a
        controller copies what they logged after that (and marks it done), or LOGS_GRACE seconds later; a read of
        the volume's lines in this process (its reader pod may take READER_TIMEOUT to serve) is waited for."""
        seen_over: list[float] = []

        def finished() -> bool:
            if not over():
                return False
            seen_over[:] = seen_over or [time.monotonic()]
            if self.logs_complete(name, run):
                return True
            return time.monotonic() - seen_over[0] > LOGS_GRACE and not self.objects.reading.locked()
        return finished

    def catch_up(self, name: str) -> None:
        """Copy whatever the job's pods logged since their files' last lines; first, once a run has ended,
        what its replicas wrote to the output volume."""
        root = self.objects.job_root(name)
        run = current_run(root)
        unread = self.objects.run_over(root) and not self.logs_complete(name, run)
        read = unread and self.read_volume_logs(name, run)
        self.copy_logs(name, self.objects.job_pods(name))
        if read:
            self.mark_logs_complete(name, run)

    def copy_logs(self, job: str, pods: builtins.list[client.V1Pod],
                  ended: bool = False) -> builtins.list[client.V1Pod]:
        """Copy what `pods` (with `ended`, those that ended or are being deleted) logged since their files'
        last lines, oldest pods first: a replica's restarts in order; a pod that has ended only once (a job
        changes many times as it ends). The pods that were gone before they were read."""
        gone = []
        for pod in sorted(pods, key=created):
            if (ended and not ended_pod(pod)) or self.whole(job, pod):
                continue
            if not self.archive(job, replica_of(pod.metadata.labels), pod):
                gone.append(pod)
            if pod.status.phase in ("Succeeded", "Failed"):
                self._copied_whole(job, pod)
        return gone

    def whole(self, job: str, pod: client.V1Pod) -> bool:
        """Whether every line of the pod's log is copied: it ended, or its one container's log came to its end."""
        return pod.metadata.uid in self.copied_whole.get(job, ())

    def _copied_whole(self, job: str, pod: client.V1Pod) -> None:
        self.copied_whole.setdefault(job, set()).add(pod.metadata.uid)

    def forget(self, job: str) -> None:
        """The job is gone: what was copied of it need not be remembered."""
        self.copied_whole.pop(job, None)

    def archive(self, job: str, replica: str, pod: client.V1Pod, follow: bool = False,
                held: threading.Event | None = None) -> bool:
        """Append the pod's log lines not yet in its file, in the directory of the pod's run; with `follow`,
        until the container ends; with `held`, the log is opened at once and read once `held` is set (older lines
        are being merged into the file). False if the pod, or its container's log, is gone: what it logged since
        is only on the volume. A log read to its end line (incluster/logtee.py's) of a container never restarted
        in place is copied whole (see `whole`)."""
        if not self.copies_logs:
            return True  # nothing this process keeps
        if not pod.status.container_statuses and pod.status.phase == "Pending":
            return True
        run = run_of_pod(pod)
        path = (self.objects.log_dir(job) if run is None else self.objects.run_log_dir(job, run)) / f"{replica}.log"
        since = last_stamp(path)
        try:
            response = self.core.read_namespaced_pod_log(
                pod.metadata.name, self.ns, container=pod.spec.containers[0].name, timestamps=True, follow=follow,
                _preload_content=False, _request_timeout=(self.settings.kubernetes_timeout,
                                                          LOG_SILENCE if follow else self.settings.kubernetes_timeout),
                **({"since_seconds": seconds_since(since)} if since else {}))
        except ApiException as e:
            return e.status != 404  # not started (nothing to copy), or gone
        self.objects.streams.add(response)
        if held:
            held.wait()
        gone = False  # the kubelet answered, in place of the log, that it has none left
        try:
            with response:
                for lines in line_batches(response.stream(logs.READ_CHUNK, decode_content=True)):
                    if lines and ends_log(lines[-1]) and pod.spec.restart_policy == "Never":
                        lines.pop()
                        self._copied_whole(job, pod)
                    copies = [from_pods_log(line) for line in lines]
                    gone = gone or None in copies
                    append(path, [line for line in copies if line is not None])
        except HTTPError:  # silent too long (a connection that died unseen, or a quiet container): ask again
            if not follow:
                raise
        finally:
            self.objects.streams.discard(response)
        return not gone

    def logs_complete(self, name: str, run: int) -> bool:
        return (self.objects.run_log_dir(name, run) / COMPLETE).exists()

    def mark_logs_complete(self, name: str, run: int) -> None:
        directory = self.objects.run_log_dir(name, run)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / COMPLETE).touch()

    def read_volume_logs(self, name: str, run: int) -> bool:
        """Merge what the job's replicas wrote to its output volume in run `run` into the run's log files;
        lines copied from pods/log already are the same bytes (incluster/logtee.py's stamps) and are skipped.
        A failure becomes a Warning event on the job (and False): pods/log still gives what it has."""
        try:
            self._read_volume_logs(name, run)
            return True
        except (DistrainError, ApiException, HTTPError, OSError, ValueError) as e:
            self.objects.record(name, Event(reasons.LOGS_NOT_READ, "the lines the replicas wrote to the output "
                                            f"volume could not be read: {e}", type="Warning"))
            return False

    def _read_volume_logs(self, name: str, run: int) -> None:
        root = self.objects.job_root_fresh(name)
        secret = secrets.token_urlsafe(32)
        reader = render.log_reader(json.loads(root.data["spec.json"]), self.settings,
                                   self.objects.api.sanitize_for_serialization(root), secret)
        pod, directory = reader["metadata"]["name"], self.objects.run_log_dir(name, run)
        with self.objects.reading:
            self.objects.make_programs()
            self.objects.create(reader)
            try:
                self._wait_serving(pod)
                for file in json.loads(self._from_reader(pod, str(run), secret).read()):
                    if not isinstance(file, str) or not render.LOG_FILE.fullmatch(file):
                        raise ValueError(f"the reader listed {file!r}, which is no replica's log")
                    self._import(self._from_reader(pod, f"{run}/{file}", secret), directory / file)
            finally:
                self.objects.delete_pod_named(pod)

    def _from_reader(self, pod: str, path: str = "", secret: str = ""):
        """GET `path` from a log reader pod through the API server's pod proxy (a streaming response), with the
        reader's `secret`."""
        options = {"_preload_content": False, "_request_timeout": (10, 60),
                   "_headers": {logreader.SECRET_HEADER: secret}}
        target = f"{pod}:{render.LOG_READER_PORT}"
        if path:
            return self.core.connect_get_namespaced_pod_proxy_with_path(target, self.ns, path, **options)
        return self.core.connect_get_namespaced_pod_proxy(target, self.ns, **options)

    def _wait_serving(self, pod: str) -> None:
        """Until the reader answers; it fails if its pod ends or it takes READER_TIMEOUT."""
        deadline = time.monotonic() + READER_TIMEOUT
        while True:
            try:
                return self._from_reader(pod).release_conn()
            except ApiException as e:
                status = self.objects.read_pod_status(pod)
                if status.phase in ("Succeeded", "Failed") or time.monotonic() > deadline:
                    raise KubeError(f"its reader pod {pod} did not serve ({why_not_running(status)}; "
                                    f"{e.status} {e.reason})") from None
                time.sleep(0.5)

    def _import(self, response, path: Path) -> None:
        with response:  # a last line without its newline is still being written: pods/log brings it
            for lines in line_batches(response.stream(logs.READ_CHUNK), partial=False):
                append(path, [line for line in map(from_volume, lines) if line])
