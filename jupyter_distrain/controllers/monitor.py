"""A run's monitor in the cluster: `python -m jupyter_distrain.controllers.monitor JOB --run N ...`, the command of
the Job render.monitor makes for a job with a policy.hang_after or several replicas. It watches the job's progress
as the local backend's supervisor does, whether or not a Jupyter server runs, from the job's output volume
(mounted read-only): once no replica has written a log line or an event file for hang_after it records a
NoProgress warning, keeps the replicas' stacks (taken through pods/exec) in the job's ConfigMap and, with
on_hang fail, fails the job as Hung; a replica whose pace, from its event files, stays far below the others' gets
a Straggler warning. It posts these warnings and the run's end to the job's webhooks, if it has any (notify.py):
the end once, whichever of the monitor's pods sees it. It ends with the run."""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from .. import notify, reasons
from ..backends.kubernetes import KubeBackend
from ..backends.kubernetes.naming import TOLD_END, TOLD_PREVIOUS
from ..config import Distrain
from ..errors import DistrainError, JobNotFound
from ..policy import FINISHED, Decision, Event, Phase
from ..progress import PACE_CHECK_SECONDS, Quiet, Stragglers, hung_message, last_written, several
from ..records import EventFiles, JobRecord
from . import kube_backend

WAKE_SECONDS = 30.0  # the longest a monitor waits without a change in its job's objects (time alone can end a run)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job")
    parser.add_argument("--run", type=int, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--owner", required=True, help="who submitted the job")
    parser.add_argument("--image", required=True, help="this product's image, whose py-spy the replicas have")
    parser.add_argument("--logs", required=True, help="where the replicas write the run's log files")
    parser.add_argument("--output", default="/output", help="where the job's output directory is mounted")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:  # the backend's copies of logs: none are made here
        backend = kube_backend(Distrain(namespace=args.namespace, owner=args.owner, controller_image=args.image,
                                        root=root, janitor_schedule=""))
        try:
            watch(backend, args.job, args.run, Path(args.logs), Path(args.output), notify.from_environment())
        finally:
            backend.notifier.wait()  # what it told of posted


def watch(backend: KubeBackend, name: str, run: int, logs: Path, output: Path, hooks: dict | None = None) -> None:
    """Until run `run` of job `name` ends (or the job is gone): its hangs found and acted on, its stragglers
    named, and these and its end posted to `hooks`. The job is read from the watches of its objects
    (backend.observe), woken by their changes: a run that does not change costs the API server nothing."""
    changed = threading.Event()
    backend.observe(name, changed.set)
    try:
        follow(backend, name, run, logs, output, hooks, changed)
    except JobNotFound:  # deleted: no one to tell of it
        pass
    finally:
        backend.close()


def follow(backend: KubeBackend, name: str, run: int, logs: Path, output: Path, hooks: dict | None,
           changed: threading.Event) -> None:
    spec = backend.get(name, events=0)["spec"]
    quiet = Quiet.of(spec)
    paces = None
    if several(spec):  # TensorBoard's protos: only for a job of several replicas
        from ..scalars import Scalars

        paces = (Stragglers(), Scalars(), EventFiles(output, spec["tensorboard"]["logdir"]))
    hang_check = pace_check = 0.0  # time.monotonic()
    while True:
        changed.clear()  # a change from here on wakes the wait below
        job = backend.get(name, events=0)
        if job["run"] != run:  # restarted while this monitor looked away (dumping stacks): its run's end as kept
            previous = backend.status(name).get("previous") or {}
            if hooks and previous.get("run") == run and not previous["told"] and backend.claim(name, TOLD_PREVIOUS):
                backend.tell({**job, **previous}, hooks)
            return
        if job["phase"] in FINISHED:
            if hooks and backend.claim(name, TOLD_END):
                backend.tell(job, hooks)
            return
        now, started = time.monotonic(), job["started"]
        wake = now + WAKE_SECONDS
        if job["phase"] == str(Phase.RUNNING) and started:
            # each replica's start, which its pod, deleted by the engine as the job ends, would not keep
            backend.supervisor.record_pods(backend.objects.job_root(name), backend.objects.job_pods(name))
            if quiet and now >= hang_check:
                hang_check = now + check_progress(backend, job, started, quiet, (logs, output), hooks)
            if paces and now >= pace_check:
                name_stragglers(backend, job, paces, now, hooks)
                pace_check = now + PACE_CHECK_SECONDS
            wake = min(wake, hang_check if quiet else wake, pace_check if paces else wake)
        changed.wait(max(0.5, wake - time.monotonic()))


def check_progress(backend: KubeBackend, job: JobRecord, started: float, quiet: Quiet, written: tuple[Path, Path],
                   hooks: dict | None) -> float:
    """Whether the run is hung now, or resumed, from what it has `written` (its logs, its output): acted on; the
    seconds until the next check."""
    change, wait = quiet.update(last_written(*written, started), time.time())
    if change == "resumed":
        backend.update_status(job["name"], hung="")
    if change == "hung":
        backend.tell(job, hooks, hung(backend, job))
    return wait


def name_stragglers(backend: KubeBackend, job: JobRecord, paces: tuple, now: float, hooks: dict | None) -> None:
    stragglers, scalars, files = paces
    running = {r["name"] for r in job["replicas"] if r["phase"] == str(Phase.RUNNING)}
    rates = {n: rate for n, rate in scalars.of(files, None, job["started"])["rates"].items() if n in running}
    for warning in stragglers.warnings(rates, now):
        backend.record(job["name"], warning)
        backend.tell(job, hooks, warning)


def hung(backend: KubeBackend, job: JobRecord) -> Event:
    """Warn, keep the running replicas' stacks, and with on_hang fail, fail the job; the warning."""
    name, message = job["name"], hung_message(job["spec"])
    try:
        backend.keep_stacks(name, {**backend.stacks(name), "reason": reasons.NO_PROGRESS, "message": message})
    except DistrainError as e:  # none running (they ended meanwhile), or too many to keep: the warning says so
        message = hung_message(job["spec"], not_kept=str(e))
    warning = Event(reasons.NO_PROGRESS, message, type="Warning")
    fails = job["spec"]["policy"]["on_hang"] == "fail"
    if not fails:  # the job's reason while it lasts (state.unfinished), before its warning, as on the local backend
        backend.update_status(name, hung=message)
    backend.record(name, warning)
    print(message, flush=True)
    if fails:
        backend.stop(name, Decision(Phase.FAILED, reasons.HUNG, message, stop_others=True))
    return warning


if __name__ == "__main__":
    main()
