"""The namespace's janitor: `python -m jupyter_distrain.controllers.janitor --namespace NS`, the command of
the CronJob distrain-janitor (render.janitor). Each run deletes every owner's jobs whose time to be kept once
finished (policy.ttl_after_finished) is over, as a Jupyter server or `distrain prune` would, so they go
whether or not one runs. Outputs stay. Exits 1 if a job it should delete could not be."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Iterator

from ..config import Distrain
from ..errors import DistrainError
from ..manager import JobManager
from ..records import JobSummary
from . import kube_backend

if TYPE_CHECKING:
    from kubernetes import client


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    args = parser.parse_args(argv)
    failed = False
    for job, error in delete_expired(args.namespace):
        failed = failed or error is not None
        print(f"cannot delete {job['name']}, past its time to be kept: {error}" if error else
              f"deleted {job['name']} of {job['owner'] or 'no owner'}, past its time to be kept", flush=True)
    sys.exit(1 if failed else 0)


def delete_expired(namespace: str, api: client.ApiClient | None = None
                   ) -> Iterator[tuple[JobSummary, DistrainError | None]]:
    """Delete every owner's jobs of `namespace` past their time to be kept (through `api`, default: the pod's
    service account), each with the error that kept it from being deleted, None once it is. The jobs' objects are
    listed once (a kind a request), not asked for job by job."""
    with tempfile.TemporaryDirectory() as root:  # where a deletion copies the last log lines: nowhere kept
        settings = Distrain(namespace=namespace, root=root, see_all_owners=True)
        backend = kube_backend(settings, api)
        backend.observe()
        try:
            yield from JobManager({"kubernetes": backend}, settings).delete_expired(time.time())
        finally:
            backend.close()


if __name__ == "__main__":
    main()
