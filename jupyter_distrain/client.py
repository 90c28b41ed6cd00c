"""The Python client of a Jupyter server's distrain API, for notebooks (magics, widgets) and scripts.

    from jupyter_distrain import Client
    client = Client()                      # the Jupyter server running this kernel, or found nearby
    job = client.submit("distrain.yaml")   # a spec file, YAML text or a dict
    for line in client.logs(job["name"], follow=True):
        print(line)

Jobs submitted here are the server's: the panel shows them and they outlive the kernel.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote, urlsplit

import requests

from . import logs as logs_
from . import repo as repo_
from . import spec as spec_
from .errors import DistrainError, FieldError, SpecError
from .eta import said
from .policy import running, shown_reason

API = "distrain/api"
TIMEOUT = 60  # seconds for one request; a followed log has none


class ServerNotFound(DistrainError):
    """No Jupyter server with this extension answered."""


@dataclass(frozen=True)
class Server:
    url: str  # http://host:port/base_url/
    token: str = ""
    root_dir: str = ""

    @classmethod
    def running(cls, info: dict) -> Server:
        """A server as its runtime file describes it."""
        return cls(info["url"], info.get("token", ""), info.get("root_dir", ""))

    @property
    def base_path(self) -> str:
        """The server's base URL path, as the browser sees it (/user/alice/)."""
        return urlsplit(self.url).path or "/"


def running_servers() -> list[dict]:
    from jupyter_server.serverapp import list_running_servers

    return list(list_running_servers())


def kernel_id() -> str | None:
    """This kernel's id, when running in a kernel a Jupyter server started (kernel-<id>.json)."""
    app = sys.modules.get("ipykernel.kernelapp")
    if app is None or not app.IPKernelApp.initialized():
        return None
    match = re.fullmatch(r"kernel-(.+)\.json", Path(app.IPKernelApp.instance().connection_file).name)
    return match.group(1) if match else None


def find_server(url: str | None = None, token: str | None = None) -> Server:
    """The server to talk to: `url` if given, else $JUPYTER_SERVER_URL, else the running server that
    started this kernel, else one whose root directory holds the working directory."""
    token = token if token is not None else os.environ.get("JUPYTER_TOKEN", "")
    url = url or os.environ.get("JUPYTER_SERVER_URL")
    if url:
        return Server(url.rstrip("/") + "/", token)
    found = running_servers()
    here, kernel = Path.cwd().resolve(), kernel_id()
    if kernel:
        for info in found:
            try:
                kernels = requests.get(f"{info['url']}api/kernels", headers=auth(info.get("token", "")),
                                       timeout=5).json()
            except (requests.RequestException, ValueError):
                continue
            if any(k.get("id") == kernel for k in kernels if isinstance(k, dict)):
                return Server.running(info)
    around = [info for info in found if here.is_relative_to(Path(info.get("root_dir", "/")).resolve())]
    if around:
        return Server.running(max(around, key=lambda info: len(Path(info["root_dir"]).resolve().parts)))
    from jupyter_core.paths import jupyter_runtime_dir

    raise ServerNotFound(
        f"no running Jupyter server found for {here} (looked in {jupyter_runtime_dir()}: "
        f"{len(found)} server(s), none started this kernel or serves this directory); start JupyterLab "
        "here, or give the server: Client(url='http://host:8888/', token='...') or $JUPYTER_SERVER_URL "
        "and $JUPYTER_TOKEN")


def auth(token: str) -> dict:
    return {"Authorization": f"token {token}"} if token else {}


class Job(dict):
    """A job as the API returns it: by itself (name, phase, replicas, spec, ...), shown with a table of its
    replicas in a notebook, or as the list has it (replicas counted by phase, no spec), shown in one line."""

    def __repr__(self) -> str:
        return f"<Job {self['name']} {self['phase']} on {self['backend']}: {replica_summary(self)}>"

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(repr(self))

    def _repr_html_(self) -> str:
        replicas = self.replicas_html() if "replicas" in self else f" · {html.escape(replica_summary(self))}"
        return f"<div class='jp-distrain-job'>{self.summary_html()}{replicas}</div>"

    def summary_html(self) -> str:
        """Its name, backend and phase, and why it is in that phase (its reason and message, as the panel's)."""
        reason = ": ".join(filter(None, (shown_reason(self), self.get("message"))))
        why = f": {html.escape(reason)}" if reason else ""
        code = "" if self.get("exit_code") is None else f", exit code {self['exit_code']}"
        progress = f" · {html.escape(said(self['progress']))}" if self.get("progress") else ""
        return (f"<b>{html.escape(self['name'])}</b> ({html.escape(self['backend'])}) "
                f"<b>{html.escape(self['phase'])}</b>{why}{code}{progress}")

    def replicas_html(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(r['name'])}</td><td>{html.escape(r['phase'])}</td>"
            f"<td>{'' if r['exit_code'] is None else r['exit_code']}</td><td>{html.escape(r['reason'] or '')}</td>"
            f"<td>{r['restarts']}</td><td>{html.escape(said(r.get('progress')))}</td></tr>" for r in self["replicas"])
        return ("<table><thead><tr><th>replica</th><th>phase</th><th>exit code</th><th>reason</th>"
                f"<th>restarts</th><th>progress</th></tr></thead><tbody>{rows}</tbody></table>")


def replica_summary(job: dict) -> str:
    return f"{running(job)} replicas running"


class Client:
    """The distrain REST API of one Jupyter server. Errors raise DistrainError (SpecError for an
    invalid spec, listing every failing field) with the server's message."""

    def __init__(self, url: str | None = None, token: str | None = None):
        self.server = find_server(url, token)
        self.session = requests.Session()
        self.session.headers.update(auth(self.server.token))
        try:
            self.session.get(self._url("version"), timeout=TIMEOUT).raise_for_status()
        except requests.RequestException as e:
            raise ServerNotFound(f"the Jupyter server at {self.server.url} does not answer the distrain API: "
                                 f"{e}") from None

    def _url(self, endpoint: str) -> str:
        return f"{self.server.url}{API}/{endpoint}"

    def _call(self, method: str, endpoint: str, body: Any = None, **params: Any) -> Any:
        response = self.session.request(method, self._url(endpoint), json=body, timeout=TIMEOUT,
                                        params={k: v for k, v in params.items() if v is not None})
        if not response.ok:
            raise error_of(response)
        return response.json() if response.content else None

    # jobs
    def submit(self, spec: dict | str | Path, backend: str | None = None, dry_run: bool = False,
               base_dir: Path | None = None, include_changes: bool = False) -> Job | dict:
        """Submit a spec: a mapping, YAML text, or a distrain.yaml path. A relative code.path (or
        code.changes_from) is relative to `base_dir`, by default the file's directory (a path) or the working
        directory. With `include_changes`, the job runs the git checkout there with its uncommitted changes
        and unpushed commits. A dry run checks everything a submit checks and returns the spec it would run."""
        raw, base = load_spec(spec)
        if include_changes and isinstance(raw, dict):
            raw = {**raw, "code": {**(raw.get("code") or {}), "changes_from": "."}}
        answer = self._call("POST", "jobs", with_absolute_code(raw, base_dir or base), backend=backend,
                            dry_run="true" if dry_run else None)
        return answer if dry_run else Job(answer)

    def jobs(self, words: str | None = None) -> list[Job]:
        """Every job, or those whose name, phase, backend or owner holds each of `words`."""
        return [Job(job) for job in self._call("GET", "jobs", q=words)]

    def get(self, name: str) -> Job:
        return Job(self._call("GET", f"jobs/{quote(name)}"))

    def stop(self, name: str) -> Job:
        return Job(self._call("POST", f"jobs/{quote(name)}/stop"))

    def restart(self, name: str) -> Job:
        return Job(self._call("POST", f"jobs/{quote(name)}/restart"))

    def scalars(self, name: str, tag: str | None = None, run: int | None = None) -> dict:
        """What the job's replicas log to their event files: every tag, and `tag`'s (default: the loss's)
        [step, value] points per run, in the job's current run or in `run`."""
        return self._call("GET", f"jobs/{quote(name)}/scalars", tag=tag, run=run)

    def compare(self, a: str, b: str) -> dict:
        """Jobs `a` and `b` (or runs of them: NAME@RUN) side by side: how each ended, their specs field by field
        (`differs` marked), the diff of their code, the packages and image that differ, each metric's last values
        (see `distrain diff`)."""
        return self._call("GET", "jobs/compare", a=a, b=b)

    def usage(self, since: str | None = None, owner: str | None = None) -> dict:
        """What runs used since `since` (a date or time, or a duration before now such as "7d"; default: this
        month's start), `owner`'s alone if named: each run with its cost, the sums per owner (with their budget)
        and per sweep (see `distrain usage`)."""
        return self._call("GET", "usage", since=since, owner=owner)

    def stacks(self, name: str, replica: str | None = None, kept: bool = False) -> dict:
        """Where the running replicas (or only `replica`) are now: every Python thread's stack, taken at once;
        `shared` outermost frames of their training processes are the same everywhere, `differs` names the
        replicas elsewhere than most (see `distrain stacks`). `kept`: those kept when the job hung."""
        return self._call("GET", f"jobs/{quote(name)}/stacks", replica=replica, kept="true" if kept else None)

    def waiting(self, name: str) -> dict:
        """Why the job waits, if it does: a sentence, each replica no node can take with what it asks for against
        the most free on a node, and its place in its Kueue queue (see `distrain why`)."""
        return self._call("GET", f"jobs/{quote(name)}/waiting")

    def webhook(self) -> dict:
        """Your webhook, shown by its scheme and host only, and whether the admin's is set (`admin`)."""
        return self._call("GET", "webhook")

    def set_webhook(self, url: str) -> None:
        """Post the ends and warnings of the jobs you submit or restart from now on to `url` (a secret: read it
        from getpass or the environment rather than writing it in a notebook)."""
        self._call("PUT", "webhook", {"url": url})

    def test_webhook(self) -> list[str]:
        """Post a test event to your webhook: [] if it was delivered, else ["not delivered"]."""
        return self._call("POST", "webhook")["problems"]

    def delete_webhook(self) -> None:
        self._call("DELETE", "webhook")

    def trials(self, name: str) -> dict:
        """A sweep's trials, best first: each one's swept hyperparameters, phase and metric, and the best that
        succeeded."""
        return self._call("GET", f"jobs/{quote(name)}/trials")

    def finetune(self, name: str, **changes: Any) -> Job:
        """A new job from the sweep's best trial that resumes from its output; `changes` replace spec fields
        (hyperparameters are merged into the trial's), e.g. name="tuned", hyperparameters={"epochs": 10}."""
        return Job(self._call("POST", f"jobs/{quote(name)}/finetune", changes))

    def delete(self, name: str, purge_output: bool = False) -> None:
        self._call("DELETE", f"jobs/{quote(name)}", purge_output="true" if purge_output else None)

    def logs(self, name: str, replica: str | None = None, tail: int | None = None,
             follow: bool = False, run: int | None = None) -> Iterator[str]:
        """The log lines of a run of the job, the current one by default ("[worker-0] text" unless one
        replica is asked for); with `follow`, streamed over the server's websocket as they are written,
        until that run ends."""
        params = {k: v for k, v in (("replica", replica), ("tail", tail), ("run", run)) if v is not None}
        if not follow:
            response = self.session.get(self._url(f"jobs/{quote(name)}/logs"), stream=True, timeout=TIMEOUT,
                                        params=params)
            if not response.ok:
                raise error_of(response)
            yield from response.iter_lines(decode_unicode=True)
            return
        yield from self._follow(name, replica, params)

    def _follow(self, name: str, replica: str | None, params: dict) -> Iterator[str]:
        import websocket

        query = "&".join(f"{k}={quote(str(v))}" for k, v in params.items())
        url = "ws" + self._url(f"jobs/{quote(name)}/logs/stream")[4:] + (f"?{query}" if query else "")
        try:
            stream = websocket.create_connection(url, header=[f"{k}: {v}" for k, v in auth(self.server.token).items()])
        except websocket.WebSocketBadStatusException as e:  # refused before the upgrade: say why, as the REST call
            try:
                message = json.loads(e.resp_body or b"")["message"]
            except (TypeError, ValueError, KeyError):
                message = f"cannot stream the logs of {name!r}: {e}"
            raise DistrainError(message) from None
        try:
            while True:
                message = json.loads(stream.recv())
                if message["type"] == "end":
                    return
                if message["type"] == "error":
                    raise DistrainError(message["message"])
                for raw in message["data"].encode().splitlines():
                    text = logs_.parse(raw, message["replica"]).text  # without the time stamp
                    yield text if replica else f"[{message['replica']}] {text}"
        finally:
            stream.close()

    # what the server offers
    def cluster(self, backend: str | None = None) -> dict:
        return self._call("GET", "cluster", backend=backend)

    def schema(self) -> dict:
        return self._call("GET", "schema")

    def repo(self, directory: Path | str = ".") -> dict | None:
        """The git state of `directory` as the server sees it; None outside the server's root (or when
        the server was named by URL, its root unknown)."""
        path, root = Path(directory).resolve(), Path(self.server.root_dir).resolve()
        if not self.server.root_dir or not path.is_relative_to(root):
            return None
        return self._call("GET", "repo", path=str(path.relative_to(root)))

    def code_of(self, directory: Path) -> tuple[dict, list[str]]:
        """The code a job started from `directory` (a notebook's) runs, and what to know about it: the
        server's proposal, as the panel's form prefills it (here, by the same rule, outside its root)."""
        found = self.repo(directory)
        if found is None:
            path = Path(directory).resolve()
            found = repo_.proposed_code(path, repo_.git_state(path))
        return found["code"], found["notes"]

    def tensorboard_url(self, name: str, replica: str = "all") -> str:
        """The path the browser opens the job's (or a replica's) TensorBoard at, on this server."""
        return f"{self.server.base_path}distrain/tensorboard/{quote(name)}/{quote(replica)}/"


def error_of(response: requests.Response) -> DistrainError:
    try:
        body = response.json()
    except ValueError:
        body = {"message": f"{response.status_code} {response.reason}"}
    if body.get("errors"):
        return SpecError([FieldError(e["path"], e["message"]) for e in body["errors"]],
                         subject=body["message"].removeprefix("invalid "))
    error = DistrainError(body.get("message") or response.reason)
    error.status = response.status_code
    return error


def load_spec(spec: dict | str | Path) -> tuple[Any, Path]:
    """The raw spec and the directory its relative code.path is relative to."""
    if isinstance(spec, dict):
        return spec, Path.cwd()
    if isinstance(spec, Path) or (isinstance(spec, str) and "\n" not in spec and spec.endswith((".yaml", ".yml"))):
        return spec_.load_file(spec), Path(spec).resolve().parent
    return spec_.load(spec), Path.cwd()


def with_absolute_code(raw: Any, base: Path) -> Any:
    """The server resolves relative paths against its own root: send this side's absolute paths."""
    code = raw.get("code") if isinstance(raw, dict) else None
    if not isinstance(code, dict):
        return raw
    relative = {key: str((base / value).resolve()) for key in ("path", "changes_from")
                if isinstance(value := code.get(key), str) and not value.startswith("/")}
    return {**raw, "code": {**code, **relative}} if relative else raw
