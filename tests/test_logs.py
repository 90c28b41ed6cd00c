"""Log files: timestamps, bounded lines, tails read backwards, merging and following."""

import threading
import time

import pytest

from jupyter_distrain import logs


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
