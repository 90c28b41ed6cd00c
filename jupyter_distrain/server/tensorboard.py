"""TensorBoard through Jupyter's authenticated proxy.

Local jobs share one TensorBoard of this server's, started at the first request: its --logdir is a
directory of views, one per job looked at since it started (`<job>`: every event file under the job's
output directory, the replicas' directories by their names, incluster/tensorboard.py's View, made of links
and kept current), so each run is named `<job>/<replica>` (or `<job>/<path in the output>`), and a
replica's or a job's page is that board with its runs filtered (TensorBoard's `runFilter`). A job joins the
running board without a restart; the board stops when idle, or when the last of its jobs is deleted. A
Kubernetes job runs its own TensorBoard in the cluster, its runs named `<replica>` (or by their paths), from
the same View, reached through the API server's service proxy (or its Service, from inside the cluster). No
other TensorBoard is reachable.

Per request, the proxy does no more than authenticate and relay (relay.py), on a connection kept open for
the next request to the same board (the local board is served with keep-alive, board.py): where a (job,
replica) is served from is looked up once and remembered until the job is deleted. Here: the local board's
process, where each job's board is, and the route's handler.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from logging import Logger
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from jupyter_server.base.handlers import JupyterHandler
from tornado import httpclient, httputil, web
from tornado.iostream import StreamClosedError

from ..backends.local import processes
# a board answers only requests carrying its secret in this header: the port is anyone's to connect to, the
# secret only this user's (the local board's environment) or the job's (a cluster board's Secret) to read
from ..incluster.tensorboard import SECRET_HEADER, SECRET_VARIABLE
from ..records import EventFiles, TensorBoardTarget
from ..manager import JobManager
from .base import AUTH_RESOURCE, JUPYTER_QUERY, JsonErrors, authorize, call, in_thread
from .relay import Connections, relay

ROUTE = r"distrain/tensorboard/(?P<job>[^/]+)/(?P<replica>[^/]+)(?P<path>/.*)?"
WHOLE_JOB = "all"
# TensorBoard's index.html loads its Roboto fonts from the site's root whatever --path_prefix says
# (tensorflow/tensorboard#1885): `url(/font-roboto/<hash>.woff2)` in an inline <style>.
ROOT_FONTS = re.compile(rb"url\(/font-roboto/([-\w]+\.woff2)\)")
HOST = "127.0.0.1"
BOARD_PROGRAM = "jupyter_distrain.server.board"  # `python -m` it, with TensorBoard's flags
STOP_GRACE_SECONDS = 5.0
RELOAD_SECONDS = 2  # how often the board looks for new event files (and runs), and its jobs' views are synced


@dataclass
class Board:
    """The one local TensorBoard: its --logdir `runs` holds a view per job it shows."""

    port: int
    process: asyncio.subprocess.Process
    runs: Path
    ready: asyncio.Future
    jobs: dict[str, asyncio.Future] = field(default_factory=dict)  # job: done once its runs are loaded
    shown: dict[str, EventFiles] = field(default_factory=dict)  # job: what its view shows
    lock: threading.Lock = field(default_factory=threading.Lock)  # held while `runs` changes
    syncing: asyncio.Task | None = None  # keeps the views current while it runs
    last_used: float = field(default_factory=time.monotonic)
    output: deque = field(default_factory=lambda: deque(maxlen=20))

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    def sync(self, job: str, files: EventFiles) -> None:
        """Make the job's view show what it shows now, unless the job (or the board) has gone meanwhile."""
        with self.lock:
            if self.running and self.shown.get(job) is files:
                files.view().sync(str(self.runs / job))

    def unshow(self, job: str) -> None:
        with self.lock:
            shutil.rmtree(self.runs / job, ignore_errors=True)  # directories and links, never what links lead to

    def remove_runs(self) -> None:
        with self.lock:
            shutil.rmtree(self.runs, ignore_errors=True)  # directories and links, never what links lead to


class TensorBoards:
    """Where each job's TensorBoard is, and the local one, which stops when idle or when its jobs go."""

    def __init__(self, manager: JobManager, idle_timeout: float, start_timeout: float, log: Logger, runs_root: Path):
        self.manager = manager
        self.runs_root = runs_root  # where the board's directory of links is made
        self.idle_timeout = idle_timeout
        self.start_timeout = start_timeout
        self.log = log
        self.targets: dict[tuple[str, str], TensorBoardTarget] = {}
        self.board: Board | None = None
        self.starting = asyncio.Lock()
        self.reaper: asyncio.Task | None = None
        self.connections = Connections()
        self.secret = {SECRET_HEADER: secrets.token_urlsafe(32)}  # the header every request to the board carries

    async def target(self, job: str, replica: str) -> TensorBoardTarget:
        """Where the replica's (or the whole job's) TensorBoard is, remembered until the job goes."""
        target = self.targets.get((job, replica))
        if target is None:
            target = await call(self.manager.tensorboard, job, None if replica == WHOLE_JOB else replica)
            self.targets[(job, replica)] = target
            self._reap_later()
        return target

    async def url(self, job: str, files: EventFiles) -> str:
        """The local board's URL, the board started and the job's runs loaded if need be."""
        board = self.board
        if board is None or not board.running:
            async with self.starting:  # concurrent first requests start one board
                if self.board is None or not self.board.running:
                    self.board = await self._start()
            board = self.board
        loaded = board.jobs.get(job)
        if loaded is None:
            board.shown[job] = files
            loaded = board.jobs[job] = asyncio.ensure_future(self._loaded(board, job, files))
        await asyncio.shield(board.ready)
        await asyncio.shield(loaded)
        board.last_used = time.monotonic()
        return board.url

    async def _start(self) -> Board:
        self.runs_root.mkdir(parents=True, exist_ok=True)
        runs = Path(tempfile.mkdtemp(prefix="board.", dir=self.runs_root))
        port = processes.free_ports(1)[0]
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", BOARD_PROGRAM, "--logdir", str(runs), "--host", HOST, "--port", str(port),
                "--reload_interval", str(RELOAD_SECONDS),
                env={**os.environ, SECRET_VARIABLE: self.secret[SECRET_HEADER]}, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True, preexec_fn=processes.dies_with_parent(),  # even if the server is killed
            )
        except BaseException:
            shutil.rmtree(runs, ignore_errors=True)
            raise
        board = Board(port, process, runs, asyncio.get_running_loop().create_future())
        self.log.info("TensorBoard on port %d (pid %d), logdir %s", port, process.pid, runs)
        asyncio.ensure_future(self._watch(board))
        board.syncing = asyncio.ensure_future(self._keep_synced(board))
        self._reap_later()
        return board

    async def _watch(self, board: Board) -> None:
        """Keep the last lines of output (for errors) and resolve `ready` once the board answers."""
        async def ready() -> None:
            deadline = time.monotonic() + self.start_timeout
            while board.running and time.monotonic() < deadline:
                try:
                    await httpclient.AsyncHTTPClient().fetch(f"{board.url}/data/environment", request_timeout=2,
                                                             headers=self.secret)
                    return board.ready.set_result(None)
                except (httpclient.HTTPClientError, OSError):
                    await asyncio.sleep(0.1)
            output = "\n".join(board.output)
            board.ready.set_exception(web.HTTPError(
                503, "TensorBoard did not start within %d s: %s", self.start_timeout, output[-2000:]))
            await self._terminate(board)

        probe = asyncio.ensure_future(ready())
        output = board.process.stdout
        assert output is not None  # a pipe
        while line := await output.readline():
            board.output.append(line.decode(errors="replace").rstrip())
        await board.process.wait()
        board.remove_runs()
        await probe

    async def _keep_synced(self, board: Board) -> None:
        """Sync the views of the board's jobs while it runs: directories made since show at its next reload."""
        while board.running:
            await asyncio.sleep(RELOAD_SECONDS)
            for job, files in list(board.shown.items()):
                try:
                    await in_thread(board.sync, job, files)
                except OSError as e:  # e.g. a volume gone for a moment: again at the next round
                    self.log.warning("TensorBoard: could not sync the view of %s: %s", job, e)

    async def _loaded(self, board: Board, job: str, files: EventFiles) -> None:
        """Make the job's view, and wait until the board lists its runs, if it has event files: a page opened
        at once shows them, as a board started for the job alone would."""
        try:
            await in_thread(board.sync, job, files)
        except OSError as e:  # the next round tries again
            self.log.warning("TensorBoard: could not make the view of %s: %s", job, e)
        if not await in_thread(lambda: self.manager.event_files.event_files(files.view())):
            return  # nothing to load yet: its runs appear at a reload, as they are written
        deadline = time.monotonic() + 3 * RELOAD_SECONDS + 5
        try:
            await asyncio.shield(board.ready)
            while board.running and time.monotonic() < deadline:
                runs = await httpclient.AsyncHTTPClient().fetch(f"{board.url}/data/runs", request_timeout=10,
                                                                headers=self.secret)
                if any(run.split("/")[0] == job for run in json.loads(runs.body)):
                    return
                await asyncio.sleep(0.2)
        except (web.HTTPError, httpclient.HTTPClientError, OSError, ValueError):
            return  # the board did not start, or stopped: the request says so

    async def stop(self, job: str | None = None) -> None:
        """Stop showing the job (the board stops with its last job), or stop everything."""
        for key in [key for key in self.targets if job is None or key[0] == job]:
            del self.targets[key]
        board = self.board
        if board is not None and job is not None and board.jobs.pop(job, None) is not None:
            board.shown.pop(job, None)
            await in_thread(board.unshow, job)
        if board is not None and (job is None or not board.jobs):
            await self._end(board)
        if job is None:
            self.connections.drop()
            if self.reaper is not None:
                self.reaper.cancel()
                self.reaper = None

    async def _end(self, board: Board) -> None:
        self.board = None
        self.connections.drop(board.url)
        await self._terminate(board)

    async def _terminate(self, board: Board) -> None:
        """SIGTERM to the board's process group (it has a data-server child), SIGKILL if it lingers."""
        if board.syncing is not None:
            board.syncing.cancel()
        await processes.stop_groups([board.process], STOP_GRACE_SECONDS)
        processes.signal_group(board.process.pid, signal.SIGKILL)  # whatever else is left in the group
        board.remove_runs()

    def _reap_later(self) -> None:
        if self.reaper is None:
            self.reaper = asyncio.ensure_future(self._reap())

    async def _reap(self) -> None:
        """Forget jobs deleted elsewhere (e.g. by the CLI) and stop the board once it idles."""
        while True:
            await asyncio.sleep(min(self.idle_timeout / 4, 30) if self.idle_timeout > 0 else 30)
            try:
                shown = {job for job, _ in self.targets} | set(self.board.jobs if self.board else ())
                for job in shown:
                    if not await in_thread(self.manager.exists, job):
                        self.log.info("TensorBoard: job %s was deleted", job)
                        await self.stop(job)
                board = self.board
                if board is not None and self.idle_timeout > 0 and board.ready.done() and \
                        time.monotonic() - board.last_used > self.idle_timeout:
                    self.log.info("stopping the idle TensorBoard")
                    await self._end(board)
            except Exception:  # e.g. the cluster unreachable for a while: try again at the next round
                self.log.exception("TensorBoard: could not check its jobs")

    def forget(self, job: str, replica: str) -> None:
        """Resolve the target again at the next request (after it failed to answer)."""
        self.targets.pop((job, replica), None)

    @staticmethod
    def runs(target: TensorBoardTarget, job: str, replica: str) -> str:
        """The `runFilter` of a page's runs ("": all of the board's)."""
        if replica == WHOLE_JOB:  # the local board shows every job: its own runs, those at its top too
            return f"^{job}(/|$)" if isinstance(target, EventFiles) else ""
        prefix = f"{job}/" if isinstance(target, EventFiles) else ""
        return f"^{prefix}{replica}(/|$)"


class TensorBoardProxyHandler(JsonErrors, JupyterHandler):
    """<base_url>/distrain/tensorboard/<job>/<replica|all>/...: authenticated, to our TensorBoards only."""

    auth_resource = AUTH_RESOURCE

    async def prepare(self, **kwargs: Any) -> None:
        await super().prepare(**kwargs)
        websocket = self.request.headers.get("Upgrade", "").lower() == "websocket"
        if websocket and not self.current_user:
            raise web.HTTPError(403, "authentication required")
        web.authenticated(lambda handler: None)(self)  # a page goes to the login page, anything else gets 403
        if not self._finished:
            await authorize(self)
        if websocket:
            raise web.HTTPError(400, "TensorBoard is reached over HTTP only")

    def check_xsrf_cookie(self) -> None:
        """A request riding on the user's cookie comes from this site's own pages, as TensorBoard's do (the
        browser says so: their Origin, or `Sec-Fetch-Site: same-origin`, which no page can set), or carries
        Jupyter's XSRF token, which TensorBoard's requests cannot: a cross-site one is refused. JupyterHub asks
        this of every cookie-authenticated request, its fetches (GET) included; TensorBoard makes no such check."""
        origin = self.request.headers.get("Origin", "")
        if self.request.headers.get("Sec-Fetch-Site") == "same-origin":
            return None
        with suppress(ValueError):  # not a URL: not this site
            if origin and urlsplit(origin).netloc == self.request.host:
                return None
        return JupyterHandler.check_xsrf_cookie(self)

    @property
    def content_security_policy(self) -> str:
        """The server's policy, but its pages may be framed by this site's: they show in JupyterLab's tabs.
        (JupyterHub's servers frame nothing by default, which would leave each tab blank.)"""
        policy = super().content_security_policy
        kept = [part for part in policy.split(";") if part.split()[:1] != ["frame-ancestors"]]
        return "; ".join(["frame-ancestors 'self'", *(part.strip() for part in kept if part.strip())])

    def compute_etag(self) -> None:
        return None  # the TensorBoard's own ETag, if any, is relayed; bodies are not hashed here

    @functools.cached_property
    def mount(self) -> str:
        """This page's path as the browser writes it: <base_url>distrain/tensorboard/<job>/<replica>."""
        rest = self.request.path[len(self.base_url):]  # the route matched the raw path after base_url
        matched = re.match(ROUTE, rest)
        assert matched is not None  # this handler's route
        return self.base_url + rest[:matched.end("replica")]

    async def get(self, job: str, replica: str, path: str | None = None) -> None:
        boards: TensorBoards = self.settings["distrain_tensorboards"]
        target = await boards.target(job, replica)
        query = [(k, v) for k, v in parse_qsl(self.request.query, keep_blank_values=True) if k not in JUPYTER_QUERY]
        page = path in (None, "/") and self.request.method == "GET"
        if page and (runs := boards.runs(target, job, replica)) and "runFilter" not in dict(query):
            # the page opens with this replica's (job's) runs
            return self.redirect(f"{self.mount}/?{urlencode([*query, ('runFilter', runs)])}")
        if path is None:  # TensorBoard's pages need the trailing slash
            return self.redirect(self.request.path + "/" + (f"?{self.request.query}" if self.request.query else ""))
        if isinstance(target, EventFiles):
            url, headers, tls = urlsplit(await boards.url(job, target)), boards.secret, None
        else:
            url, headers, tls = urlsplit(target.url), target.headers, target.tls
        path = url.path + self.request.path[len(self.mount):] + (f"?{urlencode(query)}" if query else "")
        try:
            answer = await relay(self, self.mount, boards.connections, url, path, headers, tls)
        except (OSError, StreamClosedError, httputil.HTTPInputError, asyncio.TimeoutError) as e:
            boards.forget(job, replica)
            raise web.HTTPError(502, "TensorBoard of %s did not answer: %s", job, e) from None
        if answer.page is not None:
            fonts = f'url("{self.mount}/font-roboto/'.encode()  # served here, with the page's authentication
            self.write(ROOT_FONTS.sub(lambda m: fonts + m[1] + b'")', b"".join(answer.page)))
        self.settings.setdefault("last_activity_times", {})["distrain-tensorboard"] = datetime.now(timezone.utc)
        self.finish()

    post = put = delete = patch = options = head = get
