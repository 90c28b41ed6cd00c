"""The small programs that run inside the cluster's pods beside a job, sent as text in its manifests and run with
`python -c` in whatever image the pod has: install (a replica's requirements, then what its Python has), logtee
(its lines stamped onto the output volume), logreader (a run's lines read back), tensorboard (the job's board,
behind its secret), await_pservers (a Paddle trainer's wait for its parameter servers, which local replicas run
too), stackdump (a replica's stacks, run through pods/exec; the local backend imports it). They import nothing of
this package. The controllers that run in the cluster are in controllers/."""

from importlib.resources import files


def source(program: str) -> str:
    """The text of one of these programs, as a manifest carries it to a pod."""
    return (files(__name__) / f"{program}.py").read_text()
