"""The Kubernetes backend: jobs as objects in a namespace, run by an engine in the cluster (see backend.py).

    backend.py    the backend's verbs (submit, get, stop, restart, delete, logs...) and its controller
    render.py     the objects of a job, per engine, as plain dicts (no I/O)
    state.py      a job's status from its objects (the engines', the pods')
    watch.py      the watch-fed cache of the namespace and the work queue of changed jobs
    loglines.py   the lines of the log files copied from pods/log and the output volume
    apiclient.py  the API client, each request with its deadline
"""

from .backend import KubeBackend

__all__ = ["KubeBackend"]
