"""The local backend: every replica a real process on this machine, each job run by a detached supervisor.

    backend.py       the backend's verbs (submit, get, stop, restart, delete, logs, metrics...)
    storage_root.py  the job records and where each thing of a job is under the storage root; what a job may read
    credentials.py   git credentials as files under the storage root
    launcher.py      how the backend starts a job's supervisor (a launcher kept ready, or a new interpreter)
    daemon.py        the supervisor's process: how it starts, detaches and outlives its launcher
    supervisor.py    the supervisor: runs the replicas, applies the lifecycle policy, leaves nothing behind
    store.py         the job records (a run's supervisor writes through its run only)
    run_setup.py     a run's setup: its code in the workspace and its requirements installed
    venvs.py         the Python environments of jobs' requirements.txt, shared where they can be
    processes.py     process helpers: identity, group signals, subreaping, ports, process trees, GPUs
    processstacks.py a running job's stacks, its processes' dumped by py-spy; those kept when a run hung
"""

from .backend import LocalBackend

__all__ = ["LocalBackend"]
