"""Errors every entry point (CLI, REST, magics) turns into a clear message."""


class DistrainError(Exception):
    """A request that cannot be carried out; the message says why."""

    status = 400


class NotFound(DistrainError):
    status = 404


class JobNotFound(NotFound):
    def __init__(self, name: str):
        super().__init__(f"no job named {name!r}")


class ReplicaNotFound(DistrainError):
    def __init__(self, job: str, replica: str, replicas: list[str]):
        super().__init__(f"job {job!r} has no replica {replica!r}; replicas: {', '.join(replicas)}")


class RunNotFound(DistrainError):
    def __init__(self, job: str, run: int, current: int):
        runs = "1" if current == 1 else f"1 to {current}"
        super().__init__(f"job {job!r} has no run {run}; runs: {runs}")


class JobConflict(DistrainError):
    status = 409

    def __init__(self, name: str):
        super().__init__(f"a job named {name!r} exists; delete it or choose another name")
