"""The small programs that run inside the cluster's pods beside a job, in whatever image the pod has: install (a
replica's requirements, then what its Python has), logtee (its lines stamped onto the output volume), logreader (a
run's lines read back), tensorboard (the job's board, behind its secret), purge (a job's output deleted),
await_pservers (a Paddle trainer's wait for its parameter servers, which local replicas run too), stackdump (a
replica's stacks, run through pods/exec; the local backend imports it). They import nothing of this package.
A pod gets them as files, not in its manifest: the namespace's ConfigMap of them (render.programs, one per version
of them), mounted read-only where its command runs them (podspec.PROGRAMS_DIR). The controllers that run in the
cluster are in controllers/."""

from importlib.resources import files
from pathlib import Path

# the programs a pod runs from its mounted files (stackdump comes through pods/exec, as text)
PROGRAMS = ("logtee", "install", "logreader", "tensorboard", "purge", "await_pservers")


def source(program: str) -> str:
    """The text of one of these programs."""
    return (files(__name__) / f"{program}.py").read_text()


def path(program: str) -> Path:
    """The file of one of these programs, where this package is installed (local replicas run it from there)."""
    return Path(__file__).resolve().parent / f"{program}.py"
