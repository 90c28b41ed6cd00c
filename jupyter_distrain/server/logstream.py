"""Live logs over a websocket.

The log files are the buffer: each stream keeps a byte offset per replica, reads whole lines in
bounded chunks and sends the next chunk only once the previous one was flushed to the client.
So a flooding replica or a slow client costs the server one chunk, never a queue. A file watch
(inotify on Linux, FSEvents and others through watchfiles; one per followed run) wakes streams when a
log grows.

A stream follows one run of the job: `?run=N`, or the current run when it opens. It ends when that
run ended, by the job finishing or by a restart beginning a later run (an earlier run ends at once,
once its lines are sent).

Messages, server to client, JSON:
    {"type": "lines", "replica": "worker-0", "offset": 1234, "data": "<time> text\\n<time>!text\\n..."}
                                                     whole lines of the log file; `!` marks a line of stderr
    {"type": "end", "phase": "Succeeded", "run": 1}  the run ended and every line was sent; `phase` is
                                                     the job's now, a newer run exists if its run > 1
    {"type": "error", "message": "..."}              e.g. the job was deleted
`offset` is where the next line of that replica starts: reconnecting with
`?cursor=worker-0:1234,chief-0:99&run=1` resumes without losing or repeating a line.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import AsyncIterator, Iterable

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado.websocket import WebSocketClosedError, WebSocketHandler
from watchfiles import awatch

from .. import logs
from ..policy import run_ended
from .base import (AUTH_RESOURCE, ApiError, JsonErrors, authorize, call, check_query, in_thread, is_whole_number,
                       strict_json, whole_number)

INOTIFY = sys.platform == "linux"
if INOTIFY:
    from inotify_simple import INotify, flags

CHUNK_BYTES = 2 * logs.MAX_LINE  # always holds at least one whole line
IDLE_CHECK_SECONDS = logs.IDLE_CHECK_SECONDS  # how often a stream with nothing new checks whether its job ended


class Watch:
    """A file watch on one run's log directory; `version` grows on every change, and `ended` turns true once
    the run's end is recorded (logs.ENDED appeared). On Linux it is the kernel's inotify, watching from its
    creation on and read as soon as the event loop sees its descriptor ready (no thread, no polling interval
    between a write and the streams it wakes) and only while a stream waits: a stream busy sending a flood is
    not interrupted by every write; elsewhere watchfiles (FSEvents, ...)."""

    def __init__(self, directory: Path, log, inotify: bool = INOTIFY):
        self.version = 0
        self.users = 0
        self.ended = False
        self.next_change = asyncio.get_running_loop().create_future()
        self.stopped = asyncio.Event()
        self.inotify: INotify | None = None
        self.armed = False
        if inotify:  # now, not in the task: a change before the task first runs wakes the streams too
            try:
                self.inotify = INotify()
                self.inotify.add_watch(directory, flags.MODIFY | flags.CREATE | flags.MOVED_TO)
            except OSError as e:  # streams still see new lines, IDLE_CHECK_SECONDS later
                log.warning("cannot watch %s: %s", directory, e)
                self.close_inotify()
        self.task = asyncio.ensure_future(self._run(directory, log, inotify))

    def _changed(self, names: Iterable[str]) -> None:
        self.ended = self.ended or logs.ENDED in names
        self.version += 1
        self.next_change.set_result(None)
        self.next_change = asyncio.get_running_loop().create_future()

    async def _run(self, directory: Path, log, inotify: bool) -> None:
        try:
            if inotify:
                await self._inotify()
            else:
                async for changes in awatch(directory, watch_filter=None, debounce=50, step=5,
                                            stop_event=self.stopped):
                    self._changed(Path(path).name for _, path in changes)
        except Exception as e:  # streams still see new lines, IDLE_CHECK_SECONDS later
            log.warning("cannot watch %s: %s", directory, e)

    async def _inotify(self) -> None:
        if self.inotify is None:
            return
        self._arm()
        try:
            await self.stopped.wait()
        finally:
            self._disarm()
            self.close_inotify()

    def close_inotify(self) -> None:
        if self.inotify is not None:
            self.inotify.close()
            self.inotify = None

    def _arm(self) -> None:
        """Wake on the next change (what was written meanwhile is already queued in the kernel)."""
        if self.inotify is not None and not self.armed:
            asyncio.get_running_loop().add_reader(self.inotify.fileno(), self._ready)
            self.armed = True

    def _disarm(self) -> None:
        if self.inotify is not None and self.armed:
            asyncio.get_running_loop().remove_reader(self.inotify.fileno())
            self.armed = False

    def _ready(self) -> None:
        assert self.inotify is not None  # armed only while it is open
        events = self.inotify.read(timeout=0)  # drained: what changed matters only if it is the run's end
        self._disarm()
        self._changed(event.name for event in events)

    async def wait(self, seen: int, timeout: float) -> bool:
        """Until something changed after version `seen` (True), or `timeout` seconds passed (False)."""
        if self.version != seen:
            return True
        self._arm()
        try:
            await asyncio.wait_for(asyncio.shield(self.next_change), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def close(self) -> None:
        self.stopped.set()
        await self.task


class LogWatcher:
    """One watch per followed run, shared by all of its streams, closed with the last of them."""

    def __init__(self, log: logging.Logger):
        self.log = log
        self.watches: dict[Path, Watch] = {}

    @asynccontextmanager
    async def subscribe(self, directory: Path) -> AsyncIterator[Watch]:
        watch = self.watches.get(directory)
        if watch is None:
            watch = self.watches[directory] = Watch(directory, self.log)
        watch.users += 1
        try:
            yield watch
        finally:
            watch.users -= 1
            if not watch.users and self.watches.get(directory) is watch:
                del self.watches[directory]
                await watch.close()

    async def close(self) -> None:
        watches, self.watches = list(self.watches.values()), {}
        await asyncio.gather(*(w.close() for w in watches))


def parse_cursor(value: str) -> dict[str, int]:
    """`worker-0:1234,chief-0:99` -> {"worker-0": 1234, "chief-0": 99}."""
    cursor = {}
    for part in filter(None, value.split(",")):
        replica, _, offset = part.rpartition(":")
        if not replica or not is_whole_number(offset):
            raise ApiError(400, {"message": f"query parameter 'cursor': {part!r} is not <replica>:<byte offset>"})
        cursor[replica] = int(offset)
    return cursor


class LogStreamHandler(JsonErrors, WebSocketMixin, WebSocketHandler, JupyterHandler):
    auth_resource = AUTH_RESOURCE
    query_params = ("replica", "tail", "cursor", "run")

    async def prepare(self, *args, **kwargs) -> None:
        await super().prepare(*args, **kwargs)
        await authorize(self)
        check_query(self, self.query_params)

    async def get(self, name: str) -> None:
        """Check the request before upgrading, so bad input gets a plain 4xx reply."""
        self.manager = self.settings["distrain_manager"]
        self.name = name
        self.replica = self.get_query_argument("replica", None) or None
        self.offsets = parse_cursor(self.get_query_argument("cursor", ""))
        tail, run = self.get_query_argument("tail", ""), self.get_query_argument("run", "")
        self.tail = whole_number("tail", tail) if tail else None
        self.run = whole_number("run", run) if run else (await call(self.manager.get, name))["run"]
        # the job, replica and run exist; a run's replicas stay the same
        self.files = await call(self.manager.log_files, name, self.replica, self.run)
        self.directory = await call(self.manager.log_dir, name, self.run)
        if self.request.headers.get("Upgrade", "").lower() != "websocket":  # tornado would answer in HTML
            raise ApiError(400, {"message": "this endpoint streams over a WebSocket: send 'Upgrade: websocket'"})
        await super().get(name)

    def open(self, name: str) -> None:
        super().open()
        self.task = asyncio.ensure_future(self.send_logs())

    def on_close(self) -> None:
        self.task.cancel()

    async def send_logs(self) -> None:
        try:
            async with self.settings["distrain_watcher"].subscribe(self.directory) as watch:
                idle = True
                while True:
                    seen = watch.version
                    # Whether the run ended matters once its lines stop coming, or its end is recorded (the
                    # watch saw logs.ENDED): the job is read then, before the files, so no line written before
                    # the end is missed.
                    job = await call(self.manager.get, self.name, events=0) if idle or watch.ended else None
                    while await self.send_round(self.files):
                        pass
                    if job is not None and run_ended(job, self.run):
                        await self.write_message({"type": "end", "phase": job["phase"], "run": self.run})
                        return self.close()
                    idle = not await watch.wait(seen, IDLE_CHECK_SECONDS)
        except ApiError as e:  # e.g. the job was deleted meanwhile
            with suppress(WebSocketClosedError):
                await self.write_message({"type": "error", **e.body})
            self.close()
        except WebSocketClosedError:
            pass

    async def send_round(self, files: dict[str, Path]) -> bool:
        """One chunk from each replica with new lines (round robin, so a flood cannot starve the others)."""
        sent = False
        for replica, path in files.items():
            if replica not in self.offsets:
                self.offsets[replica] = await in_thread(self.start_offset, path)
            # read on the event loop: a bounded read of a file being written (in the page cache) takes
            # microseconds, less than handing it to a thread
            chunk = logs.read_chunk(path, self.offsets[replica], CHUNK_BYTES)
            if chunk:
                self.offsets[replica] += len(chunk)
                message = {"type": "lines", "replica": replica, "offset": self.offsets[replica],
                           "data": chunk.decode(errors="replace")}
                await self.write_message(strict_json(message))  # resolves once flushed: the backpressure
                sent = True
        return sent

    def start_offset(self, path: Path) -> int:
        return logs.tail_offset(path, self.tail) if self.tail is not None and path.exists() else 0
