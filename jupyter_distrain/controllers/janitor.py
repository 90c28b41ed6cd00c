"""The namespace's janitor: `python -m jupyter_distrain.controllers.janitor --namespace NS`, the command of
the CronJob distrain-janitor (render.janitor). Each run deletes every owner's jobs whose time to be kept once
finished (policy.ttl_after_finished) is over, as a Jupyter server or `distrain prune` would, so they go
whether or not one runs. Outputs stay. Exits 1 if a job it should delete could not be."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from ..config import Distrain
from ..manager import JobManager
from . import kube_backend


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:  # where a deletion copies the last log lines: nowhere kept
        settings = Distrain(namespace=args.namespace, root=root, see_all_owners=True)
        manager = JobManager({"kubernetes": kube_backend(settings)}, settings)
        failed = False
        for job, error in manager.delete_expired(time.time()):
            failed = failed or error is not None
            print(f"cannot delete {job['name']}, past its time to be kept: {error}" if error else
                  f"deleted {job['name']} of {job['owner'] or 'no owner'}, past its time to be kept", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
