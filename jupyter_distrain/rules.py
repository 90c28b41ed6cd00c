"""The admin's rules for jobs (c.Distrain.allowed_host_paths, allowed_images, max_*, gpu_types), checked in
one place, JobManager.prepare, before anything of a job is created, however it was submitted."""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from .errors import FieldError, SpecError
from .spec import gpu_type, gpus

if TYPE_CHECKING:
    from .config import Distrain


@dataclass(frozen=True)
class AdminRules:
    host_paths: tuple[str, ...] | None  # directories (prefixes) a spec may mount from the host; None: any
    images: tuple[str, ...]  # patterns a spec's image must match; empty: any
    max_replicas: int | None
    max_gpus_per_replica: int | None
    max_gpus_per_job: int | None
    max_deadline_seconds: int | None
    gpu_types: tuple[str, ...]
    ttl_after_finished: str | None  # how long a finished job is kept when its spec names no time; None: ever
    hang_after: str | None  # when a running job is hung, when its spec names no time; None: never

    @classmethod
    def from_config(cls, config: Distrain, default_host_paths: tuple[str, ...] | None) -> AdminRules:
        """The rules for one backend: host paths as the admin set them, else the backend's default."""
        allowed = config.allowed_host_paths
        return cls(host_paths=tuple(map(posixpath.normpath, allowed)) if allowed is not None else default_host_paths,
                   images=tuple(config.allowed_images), max_replicas=config.max_replicas,
                   max_gpus_per_replica=config.max_gpus_per_replica, max_gpus_per_job=config.max_gpus_per_job,
                   max_deadline_seconds=config.max_deadline_seconds, gpu_types=tuple(config.gpu_types),
                   ttl_after_finished=config.ttl_after_finished or None, hang_after=config.hang_after or None)

    def public(self) -> dict:
        """The rules as GET cluster shows them (`limits`), for the form to show and check as a person types."""
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}

    def apply(self, spec: dict) -> dict:
        """The spec under these rules (a job naming no deadline gets the longest allowed, one naming no time
        to be kept once finished, or no time after which it is hung, the server's), or SpecError naming each
        field that breaks one, and the rule."""
        errors = [*self._host_path_errors(spec), *self._image_errors(spec), *self._replica_errors(spec)]
        for field in ("ttl_after_finished", "hang_after"):
            if spec["policy"].get(field) is None and getattr(self, field):
                spec = {**spec, "policy": {**spec["policy"], field: getattr(self, field)}}
        deadline = spec["policy"].get("deadline_seconds")
        if self.max_deadline_seconds is not None:
            if deadline is None:
                spec = {**spec, "policy": {**spec["policy"], "deadline_seconds": self.max_deadline_seconds}}
            elif deadline > self.max_deadline_seconds:
                errors.append(FieldError("policy.deadline_seconds", f"{deadline} s; jobs here run at most "
                                                                    f"{self.max_deadline_seconds} s"))
        if errors:
            raise SpecError(errors)
        return spec

    def _host_path_errors(self, spec: dict) -> list[FieldError]:
        if self.host_paths is None:
            return []
        allowed = ", ".join(self.host_paths) or "none (use a volume)"
        return [FieldError(f"{field}.host_path", f"{spec[field]['host_path']!r} is outside the host directories "
                                                 f"jobs may mount here: {allowed}")
                for field in ("data", "output")
                if "host_path" in spec.get(field, {}) and not self.host_path_allowed(spec[field]["host_path"])]

    def host_path_allowed(self, path: str) -> bool:
        """Whether `path`, once its '.' and '..' are resolved, is one of the allowed directories or inside one."""
        path = posixpath.normpath(path)
        return any(path == prefix or path.startswith(prefix.rstrip("/") + "/") for prefix in self.host_paths or ())

    def _image_errors(self, spec: dict) -> list[FieldError]:
        image = spec.get("image")
        if image is None or not self.images or any(fnmatchcase(image, pattern) for pattern in self.images):
            return []
        return [FieldError("image", f"{image!r} is not an image jobs may use here: {', '.join(self.images)}")]

    def _replica_errors(self, spec: dict) -> list[FieldError]:
        errors = []
        total = sum(replica["count"] for replica in spec["replicas"].values())
        if self.max_replicas is not None and total > self.max_replicas:
            errors.append(FieldError("replicas", f"{total} replicas; a job has at most {self.max_replicas} here"))
        for role in spec["replicas"]:
            wanted, kind = gpus(spec, role), gpu_type(spec, role)
            if self.max_gpus_per_replica is not None and wanted > self.max_gpus_per_replica:
                errors.append(FieldError(f"replicas.{role}.resources.gpus", f"{wanted} GPUs per {role}; a replica "
                                         f"has at most {self.max_gpus_per_replica} here"))
            if kind is not None and kind not in self.gpu_types:
                errors.append(FieldError(f"replicas.{role}.resources.gpu_type", f"{kind!r} is not a GPU type of "
                                         f"this server; types: {', '.join(self.gpu_types) or 'none'}"))
        in_all = sum(replica["count"] * gpus(spec, role) for role, replica in spec["replicas"].items())
        if self.max_gpus_per_job is not None and in_all > self.max_gpus_per_job:
            errors.append(FieldError("replicas", f"{in_all} GPUs in all; a job has at most "
                                                 f"{self.max_gpus_per_job} here"))
        return errors
