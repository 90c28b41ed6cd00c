"""Log files: timestamps, bounded lines, tails read backwards, merging and following; the log tee a
Kubernetes replica runs under."""

import signal
import subprocess
import sys
import threading
import time

import pytest

from jupyter_distrain import logs
from jupyter_distrain.backends.kubernetes import podspec
from jupyter_distrain.backends.kubernetes.loglines import from_pods_log, from_volume


def write(path, *chunks):
    writer = logs.LogWriter(path)
    for chunk in chunks:
        writer.feed(chunk)
    writer.close()


def test_lines_are_timestamped_and_split(tmp_path):
    path = tmp_path / "a.log"
    write(path, b"one\ntw", b"o\r\nthree", b"")
    lines = list(logs.read({"a": path}))
    assert [line.text for line in lines] == ["one", "two", "three"]
    assert all(line.time.endswith("Z") and len(line.time) == logs.STAMP_LEN for line in lines)


def test_an_endless_line_is_cut_into_bounded_pieces(tmp_path):
    path = tmp_path / "a.log"
    writer = logs.LogWriter(path)
    for _ in range(40):
        writer.feed(b"x" * 10_000)
        assert len(writer.partial) <= logs.MAX_LINE
    writer.close()
    pieces = [line.text for line in logs.read({"a": path})]
    assert "".join(pieces) == "x" * 400_000 and max(map(len, pieces)) == logs.MAX_LINE


def test_tail_reads_from_the_end(tmp_path):
    path = tmp_path / "a.log"
    write(path, b"".join(b"line %d\n" % i for i in range(20_000)))
    assert [line.text for line in logs.read({"a": path}, tail=3)] == ["line 19997", "line 19998", "line 19999"]
    assert list(logs.read({"a": path}, tail=0)) == []
    assert len(list(logs.read({"a": path}, tail=50_000))) == 20_000
    assert logs.tail_offset(path, 1) == path.stat().st_size - len("2026-01-01T00:00:00.000000Z line 19999\n")


def test_replicas_are_merged_in_time_order(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    wa, wb = logs.LogWriter(a), logs.LogWriter(b)
    for i in range(5):
        (wa if i % 2 else wb).feed(b"%d\n" % i)
        time.sleep(0.002)
    wa.close()
    wb.close()
    merged = list(logs.read({"a": a, "b": b}))
    assert [line.text for line in merged] == ["0", "1", "2", "3", "4"]
    assert [line.replica for line in merged] == ["b", "a", "b", "a", "b"]
    assert [line.text for line in logs.read({"a": a, "b": b, "missing": tmp_path / "none.log"}, tail=2)] == ["3", "4"]


@pytest.mark.parametrize("watched", [False, True], ids=["polled", "watched"])
def test_follow_sees_new_lines_and_stops_when_finished(tmp_path, watched):
    path = tmp_path / "a.log"
    writer = logs.LogWriter(path)
    writer.feed(b"before\n")
    done = threading.Event()

    def produce():
        for i in range(3):
            time.sleep(0.05)
            writer.feed(b"live %d\n" % i)
        writer.feed(b"last line without newline")
        writer.close()
        done.set()

    threading.Thread(target=produce).start()
    got = [line.text for line in logs.follow(lambda: {"a": path}, done.is_set, poll=0.01,
                                              directory=path.parent if watched else None)]
    assert got == ["before", "live 0", "live 1", "live 2", "last line without newline"]


def tee(log, *command, **options):
    """The program a Kubernetes replica's container runs its command under, run here."""
    return subprocess.Popen([sys.executable, "-c", podspec.TEE_PROGRAM, str(log), *command],
                            stdout=subprocess.PIPE, **options)


def test_the_pods_log_tee_writes_the_same_stamped_lines_to_both_and_keeps_the_exit_code(tmp_path):
    log = tmp_path / "volume" / "logs" / "1" / "worker-0.log"
    long = "x" * (logs.MAX_LINE + 10)
    process = tee(log, "sh", "-c", f"echo one; echo two >&2; echo {long}; printf 'no newline\\r'; exit 3")
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 3
    assert out == log.read_bytes()
    lines = [logs.parse(raw, "worker-0") for raw in out.splitlines(keepends=True)]
    assert [line.text for line in lines] == ["one", "two", "x" * logs.MAX_LINE, "x" * 10, "no newline"]
    assert [line.time for line in lines] == sorted({line.time for line in lines})  # strictly increasing
    # pods/log serves each line behind the runtime's own time: the tee's stamp is kept, so the copies match
    runtime = b"2030-01-01T00:00:00.123456789Z "
    assert [from_pods_log(runtime + raw.rstrip(b"\n")) for raw in out.splitlines(keepends=True)] == [
        from_volume(raw.rstrip(b"\n")) for raw in log.read_bytes().splitlines(keepends=True)]
    assert from_pods_log(runtime + b"plain") == b"2030-01-01T00:00:00.123456Z plain"  # not under the tee
    assert from_volume(b"written by the job itself") is None


def test_the_pods_log_tee_passes_signals_on_and_runs_without_its_volume(tmp_path):
    process = tee(tmp_path / "log", sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)")
    assert process.stdout.readline().endswith(b" ready\n")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 128 + signal.SIGTERM  # as a shell reports a command a signal ended
    (tmp_path / "file").touch()
    unwritable = tee(tmp_path / "file" / "worker-0.log", "echo", "still runs")
    out, _ = unwritable.communicate(timeout=30)
    assert unwritable.returncode == 0
    lines = [logs.parse(raw, "w").text for raw in out.splitlines()]
    assert lines[0].startswith("distrain: no copy of this log on the output volume: ") and lines[1:] == ["still runs"]


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "watchfiles"])
def test_a_watch_wakes_its_streams_on_each_write_and_times_out_when_nothing_changes(tmp_path, inotify):
    """The file watch the websocket streams wait on, with the kernel's inotify (Linux) and with watchfiles
    (elsewhere): a write wakes it, a quiet directory lets the wait time out, closing it ends its task."""
    import asyncio
    import logging

    from jupyter_distrain.server.logstream import Watch

    async def scenario() -> None:
        watch = Watch(tmp_path, logging.getLogger("test"), inotify=inotify)
        await asyncio.sleep(0.3)  # watching
        assert not await watch.wait(watch.version, 0.2)
        for line in range(3):
            seen = watch.version
            with open(tmp_path / "worker-0.log", "a") as f:
                f.write(f"line {line}\n")
            assert await watch.wait(seen, 5) and watch.version > seen
        await asyncio.wait_for(watch.close(), 5)
        assert watch.task.done()

    asyncio.run(scenario())
