"""REST handlers: parse, authorize, call the job manager, shape JSON. No job logic lives here."""

from __future__ import annotations

import functools
import json
from dataclasses import asdict
from itertools import islice
from pathlib import Path
from typing import Any

from jupyter_server.base.handlers import APIHandler

from .. import compare, logs, repo
from .. import spec as spec_
from ..errors import DistrainError
from ..jobjson import job_json, summary_json
from ..joblist import ListChanges, TrialChanges, matches
from ..manager import JobManager
from .base import (AUTH_RESOURCE, ApiError, JsonErrors, authorize, call, check_query, in_thread, strict_json,
                   whole_number)
from .openapi import openapi_document

try:  # not from the package, which imports the server: an import circle
    from .._version import __version__
except ImportError:  # a source tree that was never built
    __version__ = "0.0.0"

LOG_BATCH_LINES = 2000
MAX_QUERY, SEARCH_HITS, MAX_HITS = 1000, 200, 1000  # a log search's query length, hits by default, at most
JSON_KINDS = {list: "an array", str: "a string", bool: "true or false"}


def no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class DistrainHandler(JsonErrors, APIHandler):
    auth_resource = AUTH_RESOURCE
    query_params: tuple[str, ...] = ()  # as documented in openapi.yaml (a test compares them)

    async def prepare(self, **kwargs: Any) -> None:
        await super().prepare(**kwargs)
        await authorize(self)
        check_query(self, self.query_params)

    @property
    def manager(self) -> JobManager:
        return self.settings["distrain_manager"]

    @property
    def root_dir(self) -> Path:
        """Relative code paths in a spec are relative to the server's root directory."""
        return Path(self.settings["server_root_dir"]).expanduser()

    def body(self) -> dict | None:
        """The request's JSON object; None without a body. Any other JSON value is a 400: every body of this
        API is an object (a spec, the fields a clone changes, a secret)."""
        if not self.request.body:
            return None
        if len(self.request.body) > spec_.MAX_SPEC_BYTES:
            raise ApiError(400, {"message": f"the request body is {len(self.request.body)} bytes; at most "
                                            f"{spec_.MAX_SPEC_BYTES} (1 MiB)"})
        try:
            body = json.loads(self.request.body, parse_constant=no_constants)
        except ValueError as e:
            raise ApiError(400, {"message": f"the request body is not valid JSON: {e}"}) from None
        except RecursionError:
            raise ApiError(400, {"message": "the request body is nested too deeply"}) from None
        if not isinstance(body, dict):
            kind = "null" if body is None else JSON_KINDS.get(type(body), "a number")  # never the value: a secret?
            raise ApiError(400, {"message": f"the request body must be a JSON object {{...}}, not {kind}"})
        return body

    def query_int(self, name: str) -> int | None:
        value = self.get_query_argument(name, None)
        return None if value in (None, "") else whole_number(name, value)

    def query_bool(self, name: str) -> bool:
        value = self.get_query_argument(name, "false").lower()
        if value not in ("true", "false", "1", "0"):
            raise ApiError(400, {"message": f"query parameter {name!r} must be true or false, not {value!r}"})
        return value in ("true", "1")

    async def carried(self) -> bytes | None:
        """The snapshot bundle of the job named by ?snapshot_of=, which a spec copied from it runs (a clone
        edited in the form)."""
        name = self.get_query_argument("snapshot_of", None)
        return None if name is None else await call(self.manager.snapshot, name)

    def reply(self, value: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(strict_json(value))

    async def create(self, make: functools.partial, jobs: str) -> None:
        """With ?dry_run, answer the spec `make` would submit; else make the job: 201, the job, and its URL
        (under `jobs`, this request's path to the job collection) in Location."""
        if self.query_bool("dry_run"):
            self.reply(await call(make, dry_run=True))
            return
        job = await call(make)
        self.set_header("Location", f"{jobs}/{job['name']}")
        self.reply(job_json(job), 201)


class VersionHandler(DistrainHandler):
    def get(self) -> None:
        self.reply({"version": __version__})


class JobsHandler(DistrainHandler):
    query_params = ("dry_run", "backend", "snapshot_of", "q")

    async def get(self) -> None:
        words = self.get_query_argument("q", "")
        self.reply([summary_json(job) for job in await call(self.manager.listed) if matches(job, words)])

    async def post(self) -> None:
        submit = functools.partial(self.manager.submit, self.body(), self.root_dir,
                                   backend=self.get_query_argument("backend", None), carried=await self.carried())
        await self.create(submit, self.request.path)


class JobChangesHandler(DistrainHandler):
    query_params = ("since",)

    async def get(self) -> None:
        changes: ListChanges = self.settings["distrain_list"]
        self.reply(await call(changes.since, self.get_query_argument("since", None)))


class CheckHandler(DistrainHandler):
    query_params = ("backend", "snapshot_of")

    async def post(self) -> None:
        """A dry run answered as a verdict: the spec it would run and what would keep it waiting, or every error
        of the spec. The request itself (a JSON object, an enabled backend, the job named by snapshot_of) is
        checked as any other."""
        draft, backend = self.body(), self.get_query_argument("backend", None)
        if draft is None:
            raise ApiError(400, {"message": "the body must be a job spec: a JSON object"})
        await call(self.manager.target, backend)
        carried = await self.carried()
        try:
            spec = await in_thread(self.manager.submit, draft, self.root_dir, dry_run=True, backend=backend,
                                           carried=carried)
        except DistrainError as e:
            if e.status >= 500:
                raise ApiError(e.status, e.to_json()) from None
            self.reply({"spec": None, "errors": [asdict(f) for f in e.field_errors()], "warnings": []})
            return
        warnings = await in_thread(self.manager.outlook, spec, backend)
        self.reply({"spec": spec, "errors": [], "warnings": [asdict(w) for w in warnings]})


class CompareHandler(DistrainHandler):
    query_params = ("a", "b")

    async def get(self) -> None:
        """Two jobs side by side (compare.compare), named by ?a= and ?b=."""
        names = [self.get_query_argument(side, "") for side in compare.SIDES]
        if not all(names):
            raise ApiError(400, {"message": "query parameters 'a' and 'b' must name the two jobs to compare"})
        self.reply(await call(compare.compare, self.manager, *names))


class UsageHandler(DistrainHandler):
    query_params = ("since", "owner")

    async def get(self) -> None:
        """What runs used since ?since= (default: this month's start), ?owner='s alone if named (accounting.py)."""
        self.reply(await call(self.manager.accounts.report, self.get_query_argument("since", None),
                              self.get_query_argument("owner", None)))


class JobHandler(DistrainHandler):
    query_params = ("purge_output",)

    async def get(self, name: str) -> None:
        self.reply(job_json(await call(self.manager.view, name)))

    async def delete(self, name: str) -> None:
        await call(self.manager.delete, name, purge_output=self.query_bool("purge_output"))
        await self.settings["distrain_tensorboards"].stop(name)
        self.set_status(204)
        self.finish()


class StopHandler(DistrainHandler):
    async def post(self, name: str) -> None:
        self.reply(job_json(await call(self.manager.stop, name)))


class RestartHandler(DistrainHandler):
    query_params = ("repin",)

    async def post(self, name: str) -> None:
        """Run the job again; a body, if any, is the edited spec; ?repin: at the commit its ref names now."""
        self.reply(job_json(await call(self.manager.restart, name, self.body(), self.root_dir,
                                       repin=self.query_bool("repin"))))


class CodeHandler(DistrainHandler):
    async def get(self, name: str) -> None:
        """The code the job runs, and what its ref names now."""
        self.reply(await call(self.manager.code_now, name))


class CloneHandler(DistrainHandler):
    query_params = ("dry_run", "reproduce")

    async def post(self, name: str) -> None:
        """A new job from this one's spec (same pinned commit); a body overrides top-level fields."""
        clone = functools.partial(self.manager.clone, name, self.body(), self.root_dir,
                                  reproduce=self.query_bool("reproduce"))
        await self.create(clone, self.request.path.rsplit("/", 2)[0])


class FinetuneHandler(DistrainHandler):
    query_params = ("dry_run",)

    async def post(self, name: str) -> None:
        """A new job from the sweep's best trial that resumes from its output; a body overrides fields."""
        finetune = functools.partial(self.manager.finetune, name, self.body(), self.root_dir)
        await self.create(finetune, self.request.path.rsplit("/", 2)[0])


class LogsHandler(DistrainHandler):
    query_params = ("replica", "tail", "since", "timestamps", "download", "run")

    async def get(self, name: str) -> None:
        """Plain-text logs, streamed in batches so memory stays bounded however long they are."""
        replica = self.get_query_argument("replica", None) or None
        try:
            since = logs.parse_since(self.get_query_argument("since", None))
        except ValueError as e:
            raise ApiError(400, {"message": f"query parameter 'since': {e}"}) from None
        lines = await call(self.manager.logs, name, replica=replica, tail=self.query_int("tail"), since=since,
                           run=self.query_int("run"))
        timestamps = self.query_bool("timestamps")
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        if self.query_bool("download"):
            filename = f"{name}-{replica}.log" if replica else f"{name}.log"
            self.set_header("Content-Disposition", f'attachment; filename="{filename}"')
        while batch := await in_thread(lambda: list(islice(lines, LOG_BATCH_LINES))):
            self.write("".join(
                (f"{line.time} " if timestamps else "") + ("" if replica else f"[{line.replica}] ") + line.text + "\n"
                for line in batch))
            await self.flush()
        self.finish()


class LogSearchHandler(DistrainHandler):
    query_params = ("q", "replica", "run", "limit")

    async def get(self, name: str) -> None:
        query = self.get_query_argument("q", "")
        if not 1 <= len(query) <= MAX_QUERY or "\n" in query:
            raise ApiError(400, {"message": f"query parameter 'q': what to look for, 1 to {MAX_QUERY} characters on "
                                            "one line"})
        limit = self.query_int("limit")
        if limit is not None and not 1 <= limit <= MAX_HITS:
            raise ApiError(400, {"message": f"query parameter 'limit': from 1 to {MAX_HITS}, not {limit}"})
        files = await call(self.manager.log_files, name, self.get_query_argument("replica", None) or None,
                           self.query_int("run"))
        hits, complete = await in_thread(logs.search, files, query, limit or SEARCH_HITS)
        self.reply({"hits": hits, "complete": complete})


class MetricsHandler(DistrainHandler):
    async def get(self, name: str) -> None:
        self.reply(await call(self.manager.metrics, name))


class StacksHandler(DistrainHandler):
    query_params = ("replica", "kept")

    async def get(self, name: str) -> None:
        self.reply(await call(self.manager.stacks, name, self.get_query_argument("replica", None),
                              self.query_bool("kept")))


class WaitingHandler(DistrainHandler):
    async def get(self, name: str) -> None:
        self.reply(await call(self.manager.waiting, name))


class ScalarsHandler(DistrainHandler):
    query_params = ("tag", "run")

    async def get(self, name: str) -> None:
        self.reply(await call(self.manager.scalars, name, self.get_query_argument("tag", None), self.query_int("run")))


class TrialsHandler(DistrainHandler):
    query_params = ("since",)

    async def get(self, name: str) -> None:
        since = self.get_query_argument("since", None)
        if since is None:
            self.reply(await call(self.manager.trials, name))
        else:
            changes: TrialChanges = self.settings["distrain_trials"]
            self.reply(await call(changes.since, name, since))


class RepoHandler(DistrainHandler):
    query_params = ("path",)

    async def get(self) -> None:
        """What the panel needs to prefill a job from the git repository around a notebook."""
        path = self.get_query_argument("path", "")
        found = await call(repo.inspect, self.root_dir, path)
        self.reply({**found, "last_job": await call(self.manager.last_with_code, found["code"])})


class ClusterHandler(DistrainHandler):
    query_params = ("backend",)

    async def get(self) -> None:
        cluster = await call(self.manager.cluster, self.get_query_argument("backend", None))
        config = self.settings["distrain_config"]
        self.reply({**cluster, "default_images": config.default_images, "backends": list(self.manager.backends),
                    "default_backend": self.manager.default, "owner": config.owner,
                    "see_all_owners": config.see_all_owners})


class SecretsHandler(DistrainHandler):
    query_params = ("backend",)

    async def get(self) -> None:
        """Names only: a secret's contents never leave the server."""
        names = await call(self.manager.credential_names, self.get_query_argument("backend", None))
        self.reply([{"name": name} for name in names])


class SecretHandler(DistrainHandler):
    query_params = ("backend",)

    async def put(self, name: str) -> None:
        body = self.body()
        if body is None:
            raise ApiError(400, {"message": "the body must be an object with username, password and host"})
        await call(self.manager.set_credentials, name, body.get("username"), body.get("password"), body.get("host"),
                   self.get_query_argument("backend", None))
        self.set_status(204)
        self.finish()

    async def delete(self, name: str) -> None:
        await call(self.manager.delete_credentials, name, self.get_query_argument("backend", None))
        self.set_status(204)
        self.finish()


class WebhookHandler(DistrainHandler):
    """This owner's webhook: set, shown by its host only, tested, deleted."""

    async def get(self) -> None:
        self.reply(await call(self.manager.webhooks.shown))

    async def put(self) -> None:
        body = self.body()
        if body is None:
            raise ApiError(400, {"message": "the body must be an object with the webhook's url"})
        await call(self.manager.webhooks.set, body.get("url"))
        self.set_status(204)
        self.finish()

    async def post(self) -> None:
        """Post a test event to it: ["not delivered"] if it was not, [] if it was; nothing more."""
        self.reply({"problems": await call(self.manager.webhooks.test, self.manager.default)})

    async def delete(self) -> None:
        await call(self.manager.webhooks.delete)
        self.set_status(204)
        self.finish()


class SchemaHandler(DistrainHandler):
    def get(self) -> None:
        self.reply(spec_.schema())


class OpenAPIHandler(DistrainHandler):
    def get(self) -> None:
        document = dict(openapi_document())
        document["servers"] = [{"url": self.base_url.rstrip("/") + "/distrain/api"}]
        self.reply(document)
