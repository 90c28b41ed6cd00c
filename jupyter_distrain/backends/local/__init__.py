"""The local backend: every replica a real process on this machine, each job run by a detached supervisor.

    backend.py       the backend's verbs (submit, get, stop, restart, delete, logs, metrics...)
    storage_root.py  the job records and where each thing of a job is under the storage root; what a job may read
    credentials.py   git credentials as files under the storage root
    launcher.py      how the backend starts a job's supervisor (a launcher kept ready, or a new interpreter)
    supervisor.py    the supervisor process: runs the replicas, applies the lifecycle policy, leaves nothing behind
    run_setup.py     a run's setup: its code in the workspace and its requirements installed
    venvs.py         the Python environments of jobs' requirements.txt, shared where they can be
    processes.py     process helpers: identity, group signals, subreaping, ports, process trees, GPUs
"""

from .backend import LocalBackend

__all__ = ["LocalBackend"]
