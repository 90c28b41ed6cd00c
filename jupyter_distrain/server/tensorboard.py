"""TensorBoard per replica (or per job), reached through Jupyter's authenticated proxy.

For local jobs this server starts them on first request; each serves under the very path the
browser uses (`--path_prefix`), so the proxy forwards requests and responses as they are but for
one thing: TensorBoard's page loads its fonts from the site's root, which the proxy points under
its own path. A Kubernetes job runs its own TensorBoard in the cluster, reached through the API
server's service proxy (or its Service, from inside the cluster). No other TensorBoard is reachable.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from logging import Logger
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import ensure_async, url_path_join
from jupyter_server_proxy.handlers import ProxyHandler, RewritableResponse
from tornado import httpclient, web

from ..backends import procs
from ..backends.base import ClusterTensorBoard, EventFiles
from .handlers import AUTH_RESOURCE, JUPYTER_QUERY, JsonErrors, authorize, call

ROUTE = r"distrain/tensorboard/(?P<job>[^/]+)/(?P<replica>[^/]+)(?P<path>/.*)?"
WHOLE_JOB = "all"
# TensorBoard's index.html loads its Roboto fonts from the site's root whatever --path_prefix says
# (tensorflow/tensorboard#1885): `url(/font-roboto/<hash>.woff2)` in an inline <style>. It serves
# them under its prefix, at font-roboto/<hash>.woff2.
ROOT_FONTS = re.compile(rb"url\(/font-roboto/([-\w]+\.woff2)\)")
HOST = "127.0.0.1"
STOP_GRACE_SECONDS = 5.0


@dataclass
class Board:
    prefix: str
    port: int
    process: asyncio.subprocess.Process
    ready: asyncio.Future
    runs: Path | None = None  # a replica's: the --logdir whose one entry, named after it, links to its own
    last_used: float = field(default_factory=time.monotonic)
    output: deque = field(default_factory=lambda: deque(maxlen=20))

    def remove_runs(self) -> None:
        if self.runs is not None:
            shutil.rmtree(self.runs, ignore_errors=True)  # the link only, never what it points to


class TensorBoards:
    """The running TensorBoards, keyed by (job, replica); each stops when its job goes or it idles."""

    def __init__(self, base_url: str, idle_timeout: float, start_timeout: float, job_exists: Callable[[str], bool],
                 log: Logger, runs_root: Path):
        self.base_url = base_url
        self.runs_root = runs_root  # where a replica's TensorBoard gets the directory naming its run
        self.job_exists = job_exists
        self.idle_timeout = idle_timeout
        self.start_timeout = start_timeout
        self.log = log
        self.boards: dict[tuple[str, str], Board] = {}
        self.reaper: asyncio.Task | None = None
        self.starting = asyncio.Lock()

    def prefix(self, job: str, replica: str) -> str:
        """The path TensorBoard serves under: the proxied URL's path, decoded (as TensorBoard matches it)."""
        return unquote(url_path_join(self.base_url, "distrain", "tensorboard", job, replica)).rstrip("/")

    async def port(self, job: str, replica: str, logdir: Path) -> int:
        """The port of this replica's TensorBoard, started (and awaited until it serves) if need be."""
        async with self.starting:  # concurrent first requests start one TensorBoard
            board = self.boards.get((job, replica))
            if board is None or board.process.returncode is not None:
                board = self.boards[(job, replica)] = await self._start(job, replica, logdir)
        await asyncio.shield(board.ready)
        board.last_used = time.monotonic()
        return board.port

    async def _start(self, job: str, replica: str, logdir: Path) -> Board:
        logdir.mkdir(parents=True, exist_ok=True)
        port = procs.free_ports(1)[0]
        prefix = self.prefix(job, replica)
        runs = None
        if replica != WHOLE_JOB:
            # TensorBoard names a run by its directory's path under --logdir: the replica's own directory
            # would be ".", and `--logdir_spec <replica>:<dir>` makes it "<replica>/.". Under a directory
            # whose one entry is a link named after the replica, it is "<replica>" (and a subdirectory's
            # "<replica>/<sub>"), as in the whole job's TensorBoard.
            self.runs_root.mkdir(parents=True, exist_ok=True)
            runs = Path(tempfile.mkdtemp(prefix=f"{job}.{replica}.", dir=self.runs_root))
            (runs / replica).symlink_to(logdir, target_is_directory=True)
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tensorboard.main", "--logdir", str(runs or logdir), "--host", HOST,
                "--port", str(port), "--path_prefix", prefix, "--reload_interval", "2",
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True, preexec_fn=procs.dies_with_parent(),  # even if the server is killed
            )
        except BaseException:
            if runs is not None:
                shutil.rmtree(runs, ignore_errors=True)
            raise
        board = Board(prefix, port, process, asyncio.get_running_loop().create_future(), runs)
        self.log.info("TensorBoard for %s/%s on port %d (pid %d), logdir %s", job, replica, port, process.pid, logdir)
        asyncio.ensure_future(self._watch(board))
        if self.reaper is None:
            self.reaper = asyncio.ensure_future(self._reap())
        return board

    async def _watch(self, board: Board) -> None:
        """Keep the last lines of output (for errors) and resolve `ready` once the TensorBoard answers."""
        async def ready() -> None:
            client = httpclient.AsyncHTTPClient()
            url = f"http://{HOST}:{board.port}{quote(board.prefix)}/data/environment"
            deadline = time.monotonic() + self.start_timeout
            while board.process.returncode is None and time.monotonic() < deadline:
                try:
                    await client.fetch(url, request_timeout=2)
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

    async def stop(self, job: str | None = None) -> None:
        """Stop the job's TensorBoards, or every one."""
        keys = [key for key in self.boards if job is None or key[0] == job]
        await asyncio.gather(*(self._terminate(self.boards.pop(key)) for key in keys))
        if job is None and self.reaper is not None:
            self.reaper.cancel()
            self.reaper = None

    async def _terminate(self, board: Board) -> None:
        """SIGTERM to the TensorBoard's process group (it has a data-server child), SIGKILL if it lingers."""
        await procs.stop_groups([board.process], STOP_GRACE_SECONDS)
        procs.signal_group(board.process.pid, signal.SIGKILL)  # whatever else is left in the group
        board.remove_runs()

    async def _reap(self) -> None:
        """Stop TensorBoards idle too long, or whose job was deleted elsewhere (e.g. by the CLI)."""
        while True:
            await asyncio.sleep(min(self.idle_timeout / 4, 30) if self.idle_timeout > 0 else 30)
            jobs = {job for job, _ in self.boards}
            gone = {job for job in jobs if not await asyncio.to_thread(self.job_exists, job)}
            now = time.monotonic()
            for key, board in list(self.boards.items()):
                idle = self.idle_timeout > 0 and board.ready.done() and now - board.last_used > self.idle_timeout
                if (idle or key[0] in gone) and self.boards.get(key) is board:
                    self.log.info("stopping TensorBoard %s/%s: %s", *key, "idle" if idle else "job deleted")
                    del self.boards[key]
                    await self._terminate(board)


class TensorBoardProxyHandler(JsonErrors, ProxyHandler):
    """<base_url>/distrain/tensorboard/<job>/<replica|all>/...: authenticated, to our TensorBoards only:
    those this server starts for local jobs, and a Kubernetes job's own TensorBoard in the cluster."""

    auth_resource = AUTH_RESOURCE
    cluster: ClusterTensorBoard | None = None  # set while forwarding to a TensorBoard in the cluster

    def initialize(self) -> None:
        self.absolute_url = True  # the TensorBoard serves under the same prefix: its paths are ours
        self.host_allowlist = [HOST]
        self.rewrite_response = lambda response: self.fonts_under_prefix(response)

    def mount(self) -> str:
        """This TensorBoard's path as the browser writes it: <base_url>distrain/tensorboard/<job>/<replica>."""
        rest = self.request.path[len(self.base_url):]  # the route matched the raw path after base_url
        matched = re.match(ROUTE, rest)
        assert matched is not None  # this handler's route
        return self.base_url + rest[:matched.end("replica")]

    def fonts_under_prefix(self, response: RewritableResponse) -> None:
        """Point the page's fonts, asked for at the site's root, to this proxy, where they are served
        (with the page's authentication)."""
        plain = response.headers.get("Content-Encoding", "identity") == "identity"
        if plain and response.headers.get("Content-Type", "").startswith("text/html"):
            fonts = f'url("{self.mount()}/font-roboto/'.encode()
            response.body = ROOT_FONTS.sub(lambda m: fonts + m[1] + b'")', response.body)

    async def prepare(self, *args, **kwargs) -> None:
        await ensure_async(super().prepare(*args, **kwargs))
        if not self._finished:  # not already redirected to the login page
            await authorize(self)

    def check_xsrf_cookie(self) -> None:
        """A POST (or any unsafe method) comes from this site's own pages, as TensorBoard's do (the browser
        sends their Origin), or carries Jupyter's XSRF token: a cross-site one riding on the user's cookie is
        refused. jupyter-server-proxy leaves this check to the proxied app, and TensorBoard makes none."""
        origin = self.request.headers.get("Origin")
        if origin and urlsplit(origin).netloc == self.request.host:
            return None
        return JupyterHandler.check_xsrf_cookie(self)

    def _get_context_path(self, host: str, port: int) -> str:
        # the decoded prefix TensorBoard serves under; a base URL like /user/a%40b/ must not be escaped twice
        return self.settings["distrain_tensorboards"].prefix(self.path_kwargs["job"], self.path_kwargs["replica"])

    async def where(self, job: str, replica: str) -> int | ClusterTensorBoard:
        """The port of this server's TensorBoard of the replica's event files (started if need be), or the
        cluster's TensorBoard."""
        manager, boards = self.settings["distrain_manager"], self.settings["distrain_tensorboards"]
        target = await call(manager.tensorboard, job, None if replica == WHOLE_JOB else replica)
        if isinstance(target, EventFiles):
            return await boards.port(job, replica, target.logdir)
        return target

    async def forward(self, job: str, replica: str, path: str | None) -> None:
        if path is None:  # TensorBoard's pages need the trailing slash
            return self.redirect(self.request.path + "/" + (f"?{self.request.query}" if self.request.query else ""))
        where = await self.where(job, replica)
        if isinstance(where, int):
            return await self.proxy(HOST, where, path)
        if replica != WHOLE_JOB:  # the cluster runs one TensorBoard per job: show it with this replica's runs
            whole = url_path_join(self.base_url, "distrain", "tensorboard", quote(job), WHOLE_JOB)
            return self.redirect(f"{whole}/?{urlencode({'runFilter': f'^{replica}(/|$)'})}")
        self.cluster = where
        upstream = urlsplit(where.url)
        return await self.proxy(upstream.hostname, upstream.port, path)

    def _check_host_allowlist(self, host: str) -> bool:
        return self.cluster is not None or super()._check_host_allowlist(host)

    def get_client_uri(self, protocol: str, host: str, port: int, proxied_path: str) -> str:
        if self.cluster is None:
            return super().get_client_uri(protocol, host, port, proxied_path)
        query = urlencode([(k, v) for k, v in parse_qsl(self.request.query, keep_blank_values=True)
                           if k not in JUPYTER_QUERY])  # Jupyter's token stays here
        return self.cluster.url + quote(proxied_path) + (f"?{query}" if query else "")

    def proxy_request_headers(self) -> dict:
        headers = super().proxy_request_headers()
        if self.cluster is not None:  # the cluster gets its own credentials, never the user's Jupyter ones
            for name in ("Cookie", "Authorization", "Host", "X-Xsrftoken"):
                headers.pop(name, None)
            headers.update(self.cluster.headers)
        return headers

    def proxy_request_options(self) -> dict:
        return {**super().proxy_request_options(), **(self.cluster.tls if self.cluster else {})}

    async def http_get(self, job: str, replica: str, path: str | None = None) -> None:
        return await self.forward(job, replica, path)

    async def open(self, job: str, replica: str, path: str | None = None) -> None:
        where = await self.where(job, replica)
        if not isinstance(where, int):
            raise web.HTTPError(404, "a TensorBoard in the cluster is reached over HTTP only")
        return await self.proxy_open(HOST, where, path or "/")

    post = put = delete = patch = options = head = http_get
