"""A run's end reaches whoever follows it as an event: the supervisor marks the run's log directory once the
end is recorded (logs.ENDED), and followers wait on the directory's changes. Here their periodic check is
pushed out of reach, so a follower that ends at all ended by the event."""

import asyncio
import json
import logging
import threading

import pytest
from conftest import assert_nothing_left, kill, processes_of, wait

from jupyter_distrain import logs
from jupyter_distrain import spec as spec_
from jupyter_distrain.backends.local.backend import LocalBackend
from jupyter_distrain.server import logstream

pytest_plugins = ["pytest_jupyter.jupyter_server"]

NEVER = 3600.0  # seconds: a periodic check that no test waits for
PATIENCE = 60  # seconds a test waits for what an event should bring at once (a hung follower fails, never hangs)
SHORT = {"command": 'echo "out $DISTRAIN_INDEX"; echo "err $DISTRAIN_INDEX" >&2',
         "replicas": {"worker": {"count": 2}}, "policy": {"success": "all-workers"}}


def in_thread(lines) -> tuple[threading.Thread, list]:
    """Read `lines` (a follower) in a daemon thread, which a failing test leaves behind without waiting on it;
    the list has each line as soon as it is read."""
    got: list = []

    def read() -> None:
        for line in lines:
            got.append(line)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


@pytest.fixture
def no_idle_checks(monkeypatch):
    monkeypatch.setattr(logs, "IDLE_CHECK_SECONDS", NEVER)
    monkeypatch.setattr(logstream, "IDLE_CHECK_SECONDS", NEVER)


def test_a_follower_wakes_when_the_run_ends_even_just_after_it_looked(tmp_path, no_idle_checks):
    """The end recorded between a follower's check and its wait still wakes the wait: the watch is on before
    the first check."""
    (tmp_path / "worker-0.log").touch()
    checks: list[bool] = []

    def finished() -> bool:
        checks.append(bool(checks))  # the first check says no; the end is recorded right after it
        if len(checks) == 1:
            logs.mark_ended(tmp_path)
        return checks[-1]

    thread, got = in_thread(logs.follow(lambda: {"worker-0": tmp_path / "worker-0.log"}, finished,
                                        directory=tmp_path))
    thread.join(PATIENCE)
    assert not thread.is_alive() and checks == [False, True] and got == []


def test_a_follower_wakes_when_the_run_ends_while_it_waits(tmp_path, no_idle_checks):
    path = tmp_path / "worker-0.log"
    writer = logs.LogWriter(path)
    ended = threading.Event()
    thread, got = in_thread(logs.follow(lambda: {"worker-0": path}, ended.is_set, directory=tmp_path))
    writer.line("the last line")
    writer.close()
    wait(lambda: got, "the follower read the last line")  # and waits for more
    ended.set()  # as the supervisor does: the end recorded, then marked
    logs.mark_ended(tmp_path)
    thread.join(PATIENCE)
    assert not thread.is_alive() and [line.text for line in got] == ["the last line"]


@pytest.mark.skipif(not logstream.INOTIFY, reason="the stream's watch sees a change before its task runs on Linux")
def test_a_streams_watch_tells_the_runs_end_from_a_log_growing(tmp_path):
    async def watching() -> None:
        watch = logstream.Watch(tmp_path, logging.getLogger("test"))
        try:
            seen = watch.version
            logs.LogWriter(tmp_path / "worker-0.log").line("a line")
            assert await watch.wait(seen, NEVER) and not watch.ended
            seen = watch.version
            logs.mark_ended(tmp_path)
            assert await watch.wait(seen, NEVER) and watch.ended
        finally:
            await watch.close()

    asyncio.run(asyncio.wait_for(watching(), PATIENCE))


def test_following_a_local_job_ends_with_the_job_every_line_read(tmp_path, no_idle_checks):
    """`distrain logs -f` and `submit --follow` follow so: they return once the job's end is recorded, woken by
    the supervisor; the run's lines are all there, and nothing of the job is left."""
    code = tmp_path / "code"
    code.mkdir()
    backend = LocalBackend(tmp_path / "home")
    try:
        backend.submit(spec_.validate({"name": "short", "code": {"path": str(code)}, **SHORT}))
        thread, got = in_thread(backend.logs("short", follow=True))
        thread.join(PATIENCE)
        assert not thread.is_alive(), "the follower missed the job's end"
        assert backend.get("short", events=0)["phase"] == "Succeeded"
        assert sorted((line.replica, line.text, line.stderr) for line in got if line.replica != "setup") == [
            ("worker-0", "err 0", True), ("worker-0", "out 0", False),
            ("worker-1", "err 1", True), ("worker-1", "out 1", False)]
        assert_nothing_left(tmp_path / "home")
    finally:
        kill(processes_of(tmp_path / "home"))
        backend.close()


async def test_a_jobs_log_stream_ends_with_the_job(jp_fetch, jp_ws_fetch, root, no_idle_checks):
    """The live stream (the panel's, the client's followed logs) sends its end once the end is recorded."""
    code = root.parent / "code"
    code.mkdir()
    try:
        response = await jp_fetch("distrain", "api", "jobs", method="POST",
                                  body=json.dumps({"name": "short", "code": {"path": str(code)}, **SHORT}))
        assert response.code == 201
        ws = await jp_ws_fetch("distrain", "api", "jobs", "short", "logs", "stream")
        messages = []
        while (message := await asyncio.wait_for(ws.read_message(), PATIENCE)) is not None:
            messages.append(json.loads(message))
        assert messages[-1] == {"type": "end", "phase": "Succeeded", "run": 1}
        text = "".join(m["data"] for m in messages if m["type"] == "lines")
        assert all(f"{said} {i}\n" in text for said in ("out", "err") for i in (0, 1)), text
        assert_nothing_left(root)
    finally:
        kill(processes_of(root))
