"""Replica log files: one line per record, `<RFC 3339 UTC timestamp> <text>` for what a replica wrote to its
standard output, `<timestamp>!<text>` to its standard error, read with bounded memory. Each run of a job (1, then
one more per restart) has its own directory of them."""

from __future__ import annotations

import heapq
import os
import re
import sys
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Generator, Iterable, Iterator

from .errors import ReplicaNotFound, RunNotFound
from .incluster import logtee
from .repo import strip_credentials

if TYPE_CHECKING:
    import asyncio

READ_CHUNK = 64 * 1024
MAX_LINE = logtee.MAX_LINE  # longer lines are split, so one endless line cannot grow memory
STAMP_LEN = len("2026-01-01T00:00:00.000000Z")
STDOUT, STDERR = b" ", b"!"  # between a line's stamp and its text: which of its outputs the replica wrote it to
STAMP = rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"  # a log file line's time (UTC, microseconds)
STAMPED = re.compile(STAMP + rb"[ !]")  # a log file line's beginning
MAX_ERROR = 200  # characters of a failed replica's error line (error_line)
ERROR_TAIL = 64 * 1024  # bytes at the end of a failed replica's log searched for it
TRACEBACK = "Traceback (most recent call last):"
# the exceptions launchers raise when a process they started failed: that process's own is the cause
LAUNCHER_ERRORS = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError",  # torchrun's
                   "subprocess.CalledProcessError")  # accelerate launch's, and other wrappers in Python
# a launcher's mark on each line of one process it ran, copying its output (torchrun --tee: "[default1]:", "[rank1]:")
PROCESS_MARK = re.compile(r"\[[A-Za-z_]*\d+\]:")
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")  # terminal colours, control characters
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
ENDED = ".ended"  # in a run's log directory once the run's end is recorded: it wakes the run's followers
SEARCH_BLOCK = 4 * 1024 * 1024  # read at a time by a search
KEPT_ROOM = 64 * 1024  # in a search's buffer for the lines a block keeps for the next (more if they need it)
SEARCH_CONTEXT = 20  # lines shown before a search's hit
IDLE_CHECK_SECONDS = 1.0  # how often a watching follower with nothing new asks whether its run ended anyway


def parse_since(value: str | None) -> str | None:
    """A duration back from now (30s, 5m, 2h, 1d) or an RFC 3339 time, as a log timestamp."""
    if not value:
        return None
    match = re.fullmatch(r"(\d+)([smhd])", value)
    if match:
        seconds = int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        if seconds > time.time():
            raise ValueError("a duration reaching back at most to 1970")
        return timestamp(time.time() - seconds)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("use a duration like 30s, 5m, 2h or an RFC 3339 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    if moment.timestamp() < 0:
        raise ValueError("a time from 1970 on")
    return timestamp(moment.timestamp())


def timestamp(t: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if t is None else t, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def run_of(job: str, run: int | None, current: int) -> int:
    """The run asked for, None meaning the current one; a job's runs are 1 to `current`."""
    if run is None:
        return current
    if not 1 <= run <= current:
        raise RunNotFound(job, run, current)
    return run


def run_files(job: str, directory: Path, replicas: list[str] | None, replica: str | None = None) -> dict[str, Path]:
    """Each replica's log file in a run's `directory`, or only `replica`'s. `replicas` are the current
    run's; None for an earlier run: those its files show."""
    if replicas is None:
        replicas = sorted((path.stem for path in directory.glob("*.log")), key=lambda r: (r != "setup", r))
    if replica and replica not in replicas:
        raise ReplicaNotFound(job, replica, replicas)
    return {r: directory / f"{r}.log" for r in replicas if not replica or r == replica}


@dataclass(frozen=True, order=True)
class LogLine:
    time: str
    replica: str
    text: str
    stderr: bool = False  # written to the replica's standard error

    def to_json(self) -> dict:
        return {"time": self.time, "replica": self.replica, "text": self.text, "stderr": self.stderr}


class LogWriter:
    """Appends timestamped lines of one of a replica's outputs (`stderr`, else its standard output); each batch
    is one write, visible to readers at once. The writers of a replica's two outputs append to the same file,
    each batch whole where it lands."""

    def __init__(self, path: Path, stderr: bool = False):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file: BinaryIO = open(path, "ab", buffering=0)
        self.separator = STDERR if stderr else STDOUT
        self.lines = logtee.TerminalLines()  # as a terminal shows them: redrawn lines as last drawn (the pod's tee's too)

    def feed(self, data: bytes) -> None:
        """Take raw output: the lines it completes are written now, a line being redrawn in place as it stands at
        most every second (TerminalLines)."""
        self._write(self.lines.take(data))

    def line(self, text: str) -> None:
        self._write([text.encode()])

    def close(self) -> None:
        self._write(self.lines.end())
        self.file.close()

    def _write(self, lines: list[bytes]) -> None:
        if lines:
            stamp = timestamp().encode() + self.separator
            self.file.write(b"".join(stamp + line + b"\n" for line in lines))


async def pump(stream: asyncio.StreamReader, writer: LogWriter, failed: Callable[[OSError], None]) -> None:
    """Copy a process's output into its log until EOF. If the log cannot be written (a full disk), call
    `failed` once and read on, discarding: the process never blocks on its output."""
    error = None
    try:
        while chunk := await stream.read(READ_CHUNK):
            if error is None:
                try:
                    writer.feed(chunk)
                except OSError as e:
                    error = e
                    failed(e)
    finally:
        try:
            writer.close()
        except OSError as e:
            if error is None:
                failed(e)


def parse(raw: bytes, replica: str) -> LogLine:
    text = raw.decode(errors="replace").rstrip("\n")
    return LogLine(text[:STAMP_LEN], replica, text[STAMP_LEN + 1:], raw[STAMP_LEN:STAMP_LEN + 1] == STDERR)


def last_error(path: Path) -> str:
    """The error line (error_line) of a replica's log file."""
    try:
        with open(path, "rb") as f:
            start = f.seek(max(0, f.seek(0, os.SEEK_END) - ERROR_TAIL))
            tail = f.read()
    except FileNotFoundError:
        return ""
    return error_line(tail.partition(b"\n")[2] if start else tail)  # from the first whole line


def error_line(output: bytes) -> str:
    """The line of a failed program's last output that says why it failed: the exception line of its last Python
    traceback (through a launcher, torchrun's or another wrapper's, the last of the processes it ran: the cause,
    read without the mark a launcher puts on each of that process's lines), else its last line that is not blank.
    Of log file lines, only those written to stderr count; lines without a stamp (a container's termination
    message) all do. One line, at most MAX_ERROR characters, without terminal escapes or the credentials of a URL
    in it."""
    said = []
    for raw in output.splitlines():
        if STAMPED.match(raw):
            if raw[STAMP_LEN:STAMP_LEN + 1] != STDERR:
                continue
            raw = raw[STAMP_LEN + 1:]
        line = ESCAPES.sub("", raw.decode(errors="replace")).rstrip()
        if mark := PROCESS_MARK.match(line):  # that process's own line, as it wrote it
            line = line[mark.end():]
        if line:
            said.append(line)
    if TRACEBACK in said:
        raised = exception_lines(said)
        said = [next((line for line in reversed(raised) if not line.startswith(LAUNCHER_ERRORS)), raised[-1])]
    line = URL.sub(lambda url: strip_credentials(url.group()), said[-1]).strip() if said else ""
    return line if len(line) <= MAX_ERROR else line[:MAX_ERROR - 1] + "…"


def exception_lines(said: list[str]) -> list[str]:
    """The exception line of each Python traceback in the lines: its first after the frames (not indented)."""
    heads = [i for i, line in enumerate(said) if line == TRACEBACK]
    return [next((line for line in said[start + 1:end] if not line[0].isspace()), said[end - 1])
            for start, end in zip(heads, [*heads[1:], len(said)])]


def tail_offset(path: Path, lines: int) -> int:
    """Byte offset where the last `lines` lines of the file begin, reading backwards in blocks."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        if lines <= 0:
            return end
        position, newlines = end, 0
        while position > 0:
            step = min(READ_CHUNK, position)
            position -= step
            f.seek(position)
            block = f.read(step)
            if position + step == end and block.endswith(b"\n"):
                block = block[:-1]  # the final newline ends the last line; it does not start one
            found = block.count(b"\n")
            if newlines + found >= lines:
                cut = len(block)
                for _ in range(lines - newlines):
                    cut = block.rindex(b"\n", 0, cut)
                return position + cut + 1
            newlines += found
        return 0


def search(files: dict[str, Path], query: str, limit: int, context: int = SEARCH_CONTEXT) -> tuple[list[dict], bool]:
    """The first `limit` lines whose text holds `query` (ASCII letters of any case), replica by replica in
    `files`' order, each in its file's order; and whether every line was searched. A hit says its replica, the
    byte `offset` where its line starts, its time, text and stderr mark, and where a reader starts to show it
    after up to `context` lines before it (`from`; `before`: how many lines lie between)."""
    needle, hits, buffer = query.lower().encode(), [], bytearray(SEARCH_BLOCK + KEPT_ROOM)
    for replica, path in files.items():
        for hit in _found_in(path, needle, context, buffer):
            hits.append({"replica": replica, **hit})
            if len(hits) == limit:
                return hits, False
    return hits, True


def _found_in(path: Path, needle: bytes, context: int, data: bytearray) -> Iterator[dict]:
    """The hits of one log file, read a block at a time into `data` (bounded memory however long the file: a
    block, and the lines it keeps for the next; one buffer for every file of a search)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        base, held, searched = 0, 0, 0  # data[:held] is the file from offset `base`; data[:searched] was searched
        while True:
            if len(data) < held + SEARCH_BLOCK:  # kept lines longer than KEPT_ROOM
                data.extend(bytes(held + SEARCH_BLOCK - len(data)))
            with memoryview(data) as view:
                read = f.readinto(view[held:held + SEARCH_BLOCK])
            held += read
            end = data.rfind(b"\n", 0, held) + 1 if read else held  # whole lines only, but for the last
            if needle.upper() == needle:  # nothing to lower: no letter in it
                lowered = data
            else:
                lowered = (data if held > len(data) // 2 else data[:held]).lower()  # a small log's alone
            at = lowered.find(needle, searched, end)
            while at >= 0:
                start = data.rfind(b"\n", 0, at) + 1
                stop = end if (newline := data.find(b"\n", at, end)) < 0 else newline
                if at < start + STAMP_LEN + 1:  # in the line's stamp: its text is searched
                    at = lowered.find(needle, start + STAMP_LEN + 1, end)
                    continue
                first, before = _lines_back(data, start, context)
                line = parse(bytes(data[start:stop]), "")
                yield {"offset": base + start, "time": line.time, "text": line.text, "stderr": line.stderr,
                       "from": base + first, "before": before}
                at = lowered.find(needle, max(stop, at + 1), end)
            if not read:
                return
            keep, _ = _lines_back(data, end, context)  # the last `context` lines stay, for the next block's hits
            data[:held - keep] = data[keep:held]
            base, held, searched = base + keep, held - keep, end - keep


def _lines_back(data: bytes | bytearray, start: int, lines: int) -> tuple[int, int]:
    """Where the line `lines` lines before the one at `start` begins in `data` (its first line, if fewer), and
    how many lines back that is."""
    back = 0
    while back < lines and start > 0:
        start, back = data.rfind(b"\n", 0, start - 1) + 1, back + 1
    return start, back


def read_from(path: Path, offset: int, replica: str) -> Iterator[tuple[int, LogLine]]:
    """Complete lines from `offset` on, each with the offset just past it (a resumable cursor)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        f.seek(offset)
        for raw in f:
            if not raw.endswith(b"\n"):
                return  # a line still being written
            offset += len(raw)
            yield offset, parse(raw, replica)


def read_chunk(path: Path, offset: int, limit: int) -> bytes:
    """Whole lines from `offset`, at most `limit` bytes; b"" when there is no complete line yet."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return b""
    with f:
        f.seek(offset)
        data = f.read(limit)
    return data[:data.rfind(b"\n") + 1]


def read(files: dict[str, Path], tail: int | None = None, since: str | None = None) -> Iterator[LogLine]:
    """All replicas' lines merged in time order; `tail` keeps the last N overall, `since` a timestamp."""
    return follow(lambda: files, lambda: True, tail=tail, since=since)


def follow(files: Callable[[], dict[str, Path]], finished: Callable[[], bool], tail: int | None = None,
           since: str | None = None, poll: float = 0.1, directory: Path | None = None) -> Iterator[LogLine]:
    """Existing lines, then new ones as they are written, until `finished()` and every file is drained.

    With `directory` (the one holding the files), a file watch (DirectoryWatch) wakes the reader when a log
    grows or the run's end is recorded (mark_ended), and `finished` is also checked once a second; without it,
    the files are polled every `poll` seconds.
    Memory stays bounded: files are streamed, and `tail` keeps only the last N lines.
    """
    changes = DirectoryWatch(directory) if directory else None  # watching before the first check: nothing is missed
    offsets: dict[str, int] = {}
    first = True
    try:
        while True:
            done = finished()  # checked before reading, so no line written before the end is missed
            current = files()
            for replica, path in current.items():
                if replica not in offsets:
                    offsets[replica] = tail_offset(path, tail) if first and tail is not None and path.exists() else 0
            lines: Iterable[LogLine] = _merged(current, offsets, since)
            if first and tail is not None:
                lines = deque(lines, maxlen=tail) if tail else ()
            first = False
            count = 0
            for line in lines:
                count += 1
                yield line
            if done:
                return
            if not count:
                changes.wait(IDLE_CHECK_SECONDS) if changes else time.sleep(poll)
    finally:
        if changes:
            changes.close()


def mark_ended(directory: Path) -> None:
    """Say in a run's log `directory` that the run's end is recorded (ENDED): its followers wake at once, rather
    than at their next check. Best effort: a follower that misses it still sees the end within a second."""
    try:
        (directory / ENDED).touch()
    except OSError:
        pass


class DirectoryWatch:
    """Wakes a follower when a file in `directory` is written, created or moved in (a log grew, the run's end was
    recorded). On Linux the kernel's inotify, queueing every change from its creation on, so a change between a
    check and the wait after it still wakes the wait; elsewhere watchfiles (FSEvents, ...)."""

    def __init__(self, directory: Path):
        self.inotify: Any = None  # an inotify_simple.INotify
        self.changes: Generator[Any, None, None] | None = None
        if sys.platform == "linux":
            from inotify_simple import INotify, flags  # imported here: only a follower needs it

            self.inotify = INotify()
            try:
                self.inotify.add_watch(directory, flags.MODIFY | flags.CREATE | flags.MOVED_TO)
            except BaseException:
                self.inotify.close()
                raise
        else:
            from watchfiles import watch

            self.changes = watch(directory, debounce=50, step=5, rust_timeout=round(IDLE_CHECK_SECONDS * 1000),
                                 yield_on_timeout=True, watch_filter=None)

    def wait(self, timeout: float) -> None:
        """Until something changed since the last wait (at once if it did meanwhile), or about `timeout` seconds
        (watchfiles: IDLE_CHECK_SECONDS) passed. Changes within 5 ms of the first are taken together."""
        if self.inotify is not None:
            self.inotify.read(timeout=round(timeout * 1000), read_delay=5)
        elif self.changes is not None:
            next(self.changes)

    def close(self) -> None:
        if self.inotify is not None:
            self.inotify.close()
        elif self.changes is not None:
            self.changes.close()


def _merged(files: dict[str, Path], offsets: dict[str, int], since: str | None) -> Iterator[LogLine]:
    def stream(replica: str, path: Path) -> Iterator[LogLine]:
        for offset, line in read_from(path, offsets[replica], replica):
            offsets[replica] = offset
            if not since or line.time >= since:
                yield line

    return heapq.merge(*(stream(r, p) for r, p in files.items()))
