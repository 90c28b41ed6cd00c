"""The programs that run inside the cluster's pods: beside a replica (install: its requirements; logtee: its
lines stamped onto the output volume), as pods of their own (logreader: a run's lines read back; tensorboard: a
job's board behind its secret) and as the commands of in-cluster controllers (sweep: a sweep's trials; janitor:
jobs past their time to be kept). Some are sent as text in a manifest, so the first four import nothing of the
package."""

from importlib.resources import files


def source(program: str) -> str:
    """The text of one of these programs, as a manifest carries it to a pod."""
    return (files(__name__) / f"{program}.py").read_text()
