"""The one error root: every error a request can meet is a DistrainError, which knows its HTTP status and
its JSON form. Each entry point (REST, CLI, magics, widgets) catches it once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class DistrainError(Exception):
    """A request that cannot be carried out; the message says why."""

    status = 400
    field = ""  # the spec field the error is about, if any

    def to_json(self) -> dict[str, Any]:
        return {"message": str(self)}

    def field_errors(self) -> list[FieldError]:
        """The error as failing fields of a draft spec (see POST check)."""
        return [FieldError(self.field, str(self))]


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


class NotRunning(DistrainError):
    """What only a running replica can answer (its stacks)."""

    status = 409


class NotSupported(DistrainError):
    """What a backend cannot do (yet)."""

    status = 501


class StorageError(DistrainError):
    """The job store cannot be read or written (a corrupt or unreachable database)."""

    status = 503


class StorageFull(StorageError):
    status = 507  # Insufficient Storage


class Unavailable(DistrainError):
    """A backend that could not be opened (its reason in the message)."""

    status = 503


class Forbidden(DistrainError):
    status = 403


class JobConflict(DistrainError):
    status = 409
    field = "name"

    def __init__(self, name: str):
        super().__init__(f"a job named {name!r} exists; delete it or choose another name")


@dataclass(frozen=True)
class FieldError:
    """One failing field of a spec: its dotted path ('' for the whole spec) and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '(spec)'}: {self.message}"


class SpecError(DistrainError):
    """An invalid job spec (or other request body); `errors` lists every failing field."""

    def __init__(self, errors: list[FieldError], subject: str = "job spec"):
        self.errors = errors
        self.subject = subject
        super().__init__(f"invalid {subject}: " + "; ".join(map(str, errors)))

    def to_json(self) -> dict[str, Any]:
        return {
            "message": f"invalid {self.subject}",
            "errors": [{"path": e.path, "message": e.message} for e in self.errors],
        }

    def field_errors(self) -> list[FieldError]:
        return self.errors
