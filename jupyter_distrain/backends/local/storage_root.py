"""The local backend's storage root: its job records, where each thing of a job is, and what of the root a job
of an owner may read or write (storage.py's rules). State lives in SQLite, so any process (CLI, Jupyter server)
sees every job:

    <root>/jobs.sqlite
    <root>/jobs/<name>/logs/<run>/<replica>.log
                                               each run's (1, then one more per restart) setup and
                                               replica logs, kept until the job is deleted
    <root>/jobs/<name>/workspace/              the code; exists only while the job runs
    <root>/jobs/<name>/snapshot.bundle         the checkout's changes the job runs (code.snapshot), if any
    <root>/jobs/<name>/hooks.json              the run's webhooks (mode 0600, notify.py), if any
    <root>/outputs/owners/<owner>/<name>/      default output directory, kept after the job is deleted
    <root>/volumes/<volume>/                   named volumes for data and output (outputs in owners/<owner>/,
                                               see storage.py)
    <root>/secrets/<name>.json                 git credentials (mode 0600, credentials.py)
    <root>/webhooks/<owner>.json               the URL an owner's jobs are posted to (mode 0600, notify.py)
    <root>/envs/<hash>/                        a Python environment per requirements.txt, reused (venvs.py)
    <root>/locks/<name>                        held while an operation changes the job (see backend.changing)
    <root>/stack-locks/<pid>.lock              held while a process's stacks are dumped (processstacks.take)
"""

from __future__ import annotations

from pathlib import Path

from ... import storage
from ...errors import FieldError, JobNotFound
from ...owners import current_owner, sees
from .store import Store, StoreLedger


class StorageRoot:
    def __init__(self, root: Path, owner: str | None = None, see_all: bool = False, others_outputs: bool = False):
        """The jobs under `root` that `owner` (default: this user, owners.current_owner) sees: their own, those
        made before jobs had owners, and with `see_all` every one. Their jobs read other owners' outputs only
        with `others_outputs`."""
        self.root = Path(root).resolve()
        self.store = Store(self.root / "jobs.sqlite")
        self.ledger = StoreLedger(self.store)
        self.owner = owner or current_owner()
        self.see_all = see_all
        self.others_outputs = others_outputs

    def row(self, name: str) -> dict:
        """The job's row as stored, even if nothing runs it any more (see LocalBackend.end_if_vanished);
        JobNotFound if there is none, or it is not the owner's."""
        job = self.store.job(name)
        if job is None or not self.visible(job):
            raise JobNotFound(name)
        return job

    def visible(self, job: dict) -> bool:
        return sees(self.owner, job["owner"], self.see_all)

    # where things are
    def job_dir(self, name: str) -> Path:
        return self.root / "jobs" / name

    def workspace(self, name: str) -> Path:
        return self.job_dir(name) / "workspace"

    def hooks_file(self, name: str) -> Path:
        return self.job_dir(name) / "hooks.json"

    def stack_locks(self) -> Path:
        """Where the locks of stack dumps are: in the root, which only its owner may write to."""
        (path := self.root / "stack-locks").mkdir(exist_ok=True, mode=0o700)
        return path

    def snapshot_file(self, name: str) -> Path:
        return self.job_dir(name) / "snapshot.bundle"

    def volume_root(self, source: dict | None) -> Path:
        """The root of the volume `source` names (the default outputs directory for None), or its host path."""
        if source is None:
            return self.root / "outputs"
        return Path(source["host_path"]) if "host_path" in source else self.root / "volumes" / source["volume"]

    def output_dir(self, spec: dict, owner: str) -> Path:
        """Where a job of `owner` writes its output (storage.output_parts): a host path, else its owner's own
        directory of its volume."""
        if "host_path" in spec.get("output", {}):
            return Path(spec["output"]["host_path"])
        return self.volume_root(spec.get("output")).joinpath(*storage.output_parts(spec, owner))

    def output_of(self, spec: dict) -> Path:
        """Where the job of this spec writes its output: as recorded, else (a trial not launched yet) where a job
        of this backend's owner would."""
        job = self.store.job(spec["name"])
        return Path(job["output_dir"]) if job else self.output_dir(spec, self.owner)

    def in_volume(self, path: Path) -> tuple[Path, tuple[str, ...]] | None:
        """The volume root holding the resolved `path` (the outputs directory, or a volume) and the parts of
        `path` within it; None for a path outside every volume."""
        for volumes, depth in ((self.root / "outputs", 0), (self.root / "volumes", 1)):
            if path.is_relative_to(volumes) and len(path.relative_to(volumes).parts) >= depth:
                parts = path.relative_to(volumes).parts
                return volumes.joinpath(*parts[:depth]), parts[depth:]
        return None

    def input_dir(self, spec: dict) -> Path:
        if "data" not in spec:
            return self.job_dir(spec["name"]) / "input"
        return self.volume_root(spec["data"]).joinpath(spec["data"].get("path", ""))

    def event_files(self, spec: dict, replica: str | None = None) -> Path:
        """Where a replica writes event files: <output>/<logdir>/<replica>; without a replica, the parent."""
        logdir = self.output_of(spec) / spec["tensorboard"]["logdir"]
        return logdir / replica if replica else logdir

    def resume_path(self, resume_from: str, owner: str) -> Path:
        """What `resume_from` names for a job of `owner`: a path, or job:NAME, the output of that job of theirs
        (or one they see), or, once it is deleted, its directory of theirs in the default outputs."""
        if not resume_from.startswith("job:"):
            return Path(resume_from)
        name = resume_from[4:]
        earlier = self.store.job(name)
        if earlier and self.visible(earlier):
            return Path(earlier["output_dir"])
        return self.volume_root(None).joinpath(*storage.area(owner), name)

    # what a job may touch
    def purgeable(self, output: Path, owner: str) -> bool:
        """Whether deleting the resolved path `output` deletes the output of a job of `owner` and nothing else:
        a directory inside the owner's own directory of a volume (storage.purgeable), never the storage root, a
        volume, another owner's directory, or anything outside the root (a `..` or a symbolic link cannot lead
        there: the path is resolved first)."""
        found = self.in_volume(output)
        return found is not None and storage.purgeable(found[1], owner)

    def storage_errors(self, spec: dict, owner: str) -> list[FieldError]:
        """What of the storage root the spec would read or write that a job of `owner` may not (storage.py):
        another owner's outputs, the root's own files."""
        errors = []
        if "host_path" in spec.get("output", {}):
            path = Path(spec["output"]["host_path"]).resolve()
            found = self.in_volume(path)
            if found and not storage.purgeable(found[1], owner):
                errors.append(FieldError("output.host_path", f"{path} is not inside your own directory of the volume "
                                                             f"({found[0].joinpath(*storage.area(owner))})"))
            elif not found and path.is_relative_to(self.root):
                errors.append(FieldError("output.host_path", f"{path} is inside distrain's own storage ({self.root})"))
        elif problem := storage.output_path_problem(spec):
            errors.append(FieldError("output.path", problem))
        else:  # in a volume: where its links lead (a job of the owner's may have made them)
            path = self.output_dir(spec, owner).resolve()
            found = self.in_volume(path)
            if not (found and storage.purgeable(found[1], owner)):
                field = storage.source_field("output", spec["output"]) if "output" in spec else "name"
                own = self.volume_root(spec.get("output")).joinpath(*storage.area(owner))
                errors.append(FieldError(field, f"leads to {path} through a link, outside your own directory of the "
                                                f"volume ({own})"))
        read = [(storage.source_field("data", spec["data"]), self.input_dir(spec))] if "data" in spec else []
        if spec.get("resume_from", "").startswith("/"):
            read.append(("resume_from", Path(spec["resume_from"])))
        for field, path in ((field, path.resolve()) for field, path in read):
            if problem := self.reading_problem(path, owner):
                errors.append(FieldError(field, f"{path} {problem}"))
        return errors

    def reading_problem(self, path: Path, owner: str) -> str | None:
        """Why a job of `owner` may not read the resolved `path` (None: it may): storage.reading_problem in a
        volume, whose owners/ says whose outputs it holds; the rest of the storage root is distrain's own."""
        found = self.in_volume(path)
        if found is None:
            return f"is inside distrain's own storage ({self.root})" if path.is_relative_to(self.root) else None
        owners = found[0] / storage.OWNERS
        holds_others = owners.is_dir() and any(entry.name != storage.owner_dir(owner) for entry in owners.iterdir())
        return storage.reading_problem(found[1], owner, self.others_outputs, holds_others)
