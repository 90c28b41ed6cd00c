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
import time
from contextlib import suppress
from pathlib import Path

from .. import notify, reasons
from ..backends.kubernetes import KubeBackend
from ..config import Distrain
from ..errors import DistrainError, JobNotFound
from ..policy import FINISHED, Decision, Event, Phase
from ..progress import PACE_CHECK_SECONDS, Quiet, Stragglers, hung_message, last_written, several
from ..records import EventFiles, JobRecord
from . import kube_backend

IDLE_SECONDS = 5.0  # how often a run that has not started yet is looked at
END_SECONDS = 2.0  # how often a run with webhooks is looked at for its end
TOLD_END = "told_end"  # marked in the run's status by the monitor that posts its end


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
    named, and these and its end posted to `hooks`."""
    try:
        spec = backend.get(name, events=0)["spec"]
    except JobNotFound:  # deleted before this pod started
        return
    quiet = Quiet.of(spec)
    paces = None
    if several(spec):  # TensorBoard's protos: only for a job of several replicas
        from ..scalars import Scalars

        paces = (Stragglers(), Scalars(), EventFiles(output, spec["tensorboard"]["logdir"]))
    hang_check = pace_check = 0.0  # time.monotonic()
    while True:
        try:
            job = backend.get(name, events=0)
        except JobNotFound:
            return
        if job["run"] != run:
            return
        if job["phase"] in FINISHED:
            with suppress(JobNotFound):  # deleted as it ended: no one to tell of it
                if hooks and backend.claim(name, TOLD_END):
                    backend.tell(job, hooks)
            return
        now, started = time.monotonic(), job["started"]
        if job["phase"] != str(Phase.RUNNING) or not started:
            time.sleep(min(IDLE_SECONDS, END_SECONDS) if hooks else IDLE_SECONDS)
            continue
        if quiet and now >= hang_check:
            change, wait = quiet.update(last_written(logs, output, started), time.time())
            if change == "resumed":
                backend.update_status(name, hung="")
            if change == "hung":
                warning = hung(backend, job)
                backend.tell(job, hooks, warning)
                if job["spec"]["policy"]["on_hang"] == "fail":
                    continue  # to its end
            hang_check = now + wait
        if paces and now >= pace_check:
            stragglers, scalars, files = paces
            running = {r["name"] for r in job["replicas"] if r["phase"] == str(Phase.RUNNING)}
            rates = {n: rate for n, rate in scalars.of(files, None, started)["rates"].items() if n in running}
            for warning in stragglers.warnings(rates, now):
                backend.record(name, warning)
                backend.tell(job, hooks, warning)
            pace_check = now + PACE_CHECK_SECONDS
        wakes = (hang_check if quiet else None, pace_check if paces else None, now + END_SECONDS if hooks else None)
        time.sleep(max(1.0, min(t for t in wakes if t is not None) - time.monotonic()))


def hung(backend: KubeBackend, job: JobRecord) -> Event:
    """Warn, keep the running replicas' stacks, and with on_hang fail, fail the job; the warning."""
    name, message = job["name"], hung_message(job["spec"])
    try:
        backend.keep_stacks(name, {**backend.stacks(name), "reason": reasons.NO_PROGRESS, "message": message})
    except DistrainError as e:  # none running (they ended meanwhile), or too many to keep: the warning says so
        message = hung_message(job["spec"], not_kept=str(e))
    warning = Event(reasons.NO_PROGRESS, message, type="Warning")
    backend.record(name, warning)
    print(message, flush=True)
    if job["spec"]["policy"]["on_hang"] != "fail":
        backend.update_status(name, hung=message)  # the job's reason while it lasts (state.unfinished)
    else:
        backend.stop(name, Decision(Phase.FAILED, reasons.HUNG, message, stop_others=True))
    return warning


if __name__ == "__main__":
    main()
