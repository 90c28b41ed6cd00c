"""A sweep's controller in the cluster: `python -m jupyter_distrain.controllers.sweep SWEEP`, the command
of the sweep's Job (render.sweeper). It runs sweep.Controller with the pod's service account, acting for the
sweep's owner, so the sweep goes on whether or not a Jupyter server runs. The sweep's ConfigMap is its record:
the spec and the server's settings are read from it, the status (progress, end) written to it, and a stop
requested there stops the running trials; its end is posted to the sweep's webhooks. A controller that replaces
one that failed takes its trials over."""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from pathlib import Path

from .. import notify, sweep
from ..config import Distrain
from ..errors import JobNotFound
from ..policy import FINISHED, Event, Phase
from ..backends.kubernetes import KubeBackend, naming
from . import kube_backend


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--owner", required=True, help="who submitted the sweep: its trials are theirs")
    parser.add_argument("--output", required=True, help="where the output volume's root is mounted")
    args = parser.parse_args(argv)
    reader = KubeBackend(Distrain(namespace=args.namespace, owner=args.owner))
    settings = Distrain(namespace=args.namespace, owner=args.owner, **reader.sweep_settings(args.sweep),
                        janitor_schedule="")  # the server that made the sweep made the janitor, if any
    backend = kube_backend(settings, reader.objects.api, supervises=args.sweep)  # its trials on "pods", which it made
    # its trials read from watches of theirs alone: looking at them every POLL_SECONDS asks nothing while none
    # changes, and its memory is its trials', whatever else the namespace holds
    backend.start(logging.getLogger(__name__), naming.of_sweep(args.sweep), explained=False)
    try:
        asyncio.run(run(backend, args.sweep, Path(args.output), notify.from_environment()))
    finally:
        backend.close()
        backend.notifier.wait()  # its end posted


async def run(backend: KubeBackend, name: str, output: Path, hooks: dict | None = None) -> None:
    """Run the sweep to its end, then post its end to `hooks`."""
    status = backend.status(name)
    if status["phase"] in FINISHED:
        return  # recorded by the controller before this one
    spec = backend.get(name, events=0)["spec"]
    backend.update_status(name, phase=str(Phase.RUNNING), reason="", started=status["started"] or time.time())

    def say(reason: str, message: str) -> None:
        backend.record(name, Event(reason, message))
        print(message, flush=True)

    def show(progress: str) -> None:
        backend.update_status(name, message=progress)

    def logdir(job: dict) -> Path:  # each job writes in its own directory of its owner's, mounted at `output`
        return output / job["name"] / job["tensorboard"]["logdir"]

    stop = asyncio.Event()
    watching = asyncio.ensure_future(watch_for_stop(backend, name, stop))
    try:
        decision = await sweep.Controller(backend, spec, logdir, say, show).run(stop)
    finally:
        watching.cancel()
    try:
        backend.update_status(name, phase=str(decision.phase), reason=decision.reason, message=decision.message,
                              finished=time.time())
    except JobNotFound:
        return  # the sweep was deleted: its trials go with it
    backend.tell(backend.get(name, events=0), hooks)


async def watch_for_stop(backend: KubeBackend, name: str, stop: asyncio.Event) -> None:
    """Set `stop` once a stop of the sweep is requested, or the sweep is deleted."""
    while not stop.is_set():
        try:
            if (await asyncio.to_thread(backend.status, name))["stop_requested"]:
                stop.set()
        except JobNotFound:
            stop.set()
        await asyncio.sleep(sweep.POLL_SECONDS)


if __name__ == "__main__":
    main()
