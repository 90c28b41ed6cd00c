"""Log files: timestamps, bounded lines, tails read backwards, merging and following; the log tee a
Kubernetes replica runs under."""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import pytest
import websocket
from conftest import CLI, write_spec

from jupyter_distrain import hints, logs
from jupyter_distrain.backends.kubernetes import podspec
from jupyter_distrain.backends.kubernetes.loglines import ends_log, from_pods_log, from_volume
from jupyter_distrain.backends.kubernetes.state import replica_state, used_by


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
        assert len(writer.lines.partial) <= logs.MAX_LINE
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


def test_a_search_finds_each_line_holding_the_words_with_where_to_show_it(tmp_path, monkeypatch):
    """Replica by replica, in file order, any case, in the text and never in the stamp; each hit's offset starts
    its line, and a read from its `from` shows `before` lines, then it, also across the blocks a search reads."""
    monkeypatch.setattr(logs, "SEARCH_BLOCK", 1000)  # many blocks, hits and their context across their edges
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    write(a, b"".join(b"step %d Loss %d\n" % (i, i % 7) for i in range(500)))
    writer = logs.LogWriter(b, stderr=True)
    writer.feed(b"2026 was a year\nloss 3 on stderr\n")
    writer.close()
    files = {"b": b, "a": a}
    hits, complete = logs.search(files, "LOSS 3", limit=1000)
    assert complete and [hit["replica"] for hit in hits[:2]] == ["b", "a"] and len(hits) == 1 + len(range(3, 500, 7))
    assert hits[0]["text"] == "loss 3 on stderr" and hits[0]["stderr"] and hits[0]["before"] == 1
    assert [hit["text"] for hit in hits[1:3]] == ["step 3 Loss 3", "step 10 Loss 3"]
    for hit in hits:
        shown = list(logs.read_from(files[hit["replica"]], hit["from"], hit["replica"]))
        assert shown[hit["before"]][1].text == hit["text"] and shown[hit["before"]][1].time == hit["time"]
        content = files[hit["replica"]].read_bytes()
        assert hit["before"] == min(logs.SEARCH_CONTEXT, content[:hit["offset"]].count(b"\n"))
        assert content[hit["offset"]:].split(b"\n")[0][logs.STAMP_LEN + 1:].decode() == hit["text"]
    assert [hit["text"] for hit in logs.search(files, "2026", 10)[0]] == ["2026 was a year"]  # not every stamp
    first, complete = logs.search(files, "loss", limit=3)
    assert not complete and [hit["text"] for hit in first] == ["loss 3 on stderr", "step 0 Loss 0", "step 1 Loss 1"]
    assert logs.search({"gone": tmp_path / "none.log"}, "loss", 5) == ([], True)
    long = tmp_path / "long.log"  # lines longer than a block, and the last without its newline
    write(long, b"first\n" + b"x" * 2500 + b" loss 3 far\nloss 3 near\n" + b"y" * 1500 + b" LOSS 3 last")
    hits = logs.search({"long": long}, "loss 3", 5)[0]
    assert [(hit["text"].lstrip("xy "), hit["before"]) for hit in hits] == [("loss 3 far", 1), ("loss 3 near", 2),
                                                                           ("LOSS 3 last", 3)]


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


def test_stderr_lines_are_marked_in_time_order_with_stdout(tmp_path):
    path = tmp_path / "a.log"
    out, err = logs.LogWriter(path), logs.LogWriter(path, stderr=True)
    out.feed(b"step 1\n")
    err.feed(b"warn")
    out.feed(b"step 2\n")
    err.feed(b"ing\n")
    out.close()
    err.close()
    assert [(line.text, line.stderr) for line in logs.read({"a": path})] == [
        ("step 1", False), ("step 2", False), ("warning", True)]
    assert path.read_bytes().splitlines()[2][logs.STAMP_LEN:] == b"!warning"


def stamped(*lines: str) -> bytes:
    """Log file lines; those beginning with ! were written to stderr."""
    return b"".join(b"2026-01-01T00:00:00.000000Z" + (b"!" + line[1:].encode() if line.startswith("!") else
                                                      b" " + line.encode()) + b"\n" for line in lines)


def test_a_failed_programs_error_line_is_its_exception_or_last_stderr_line():
    traceback = ["!Traceback (most recent call last):", '!  File "train.py", line 9, in <module>',
                 "!    raise ValueError(f'bad learning rate {lr}')", "!ValueError: bad learning rate 10",
                 "!  a second line of its message", "!  note: added to it"]
    assert logs.error_line(stamped("epoch 1", "!During handling of the above exception, another occurred:",
                                   *traceback, "cleaning up")) == "ValueError: bad learning rate 10"
    assert logs.error_line(stamped("!warning: slow disk", "!fatal: out of data", "bye", "")) == "fatal: out of data"
    assert logs.error_line(stamped("only stdout", "Traceback (most recent call last):")) == ""
    # through torchrun --tee, each line of a process it ran marked as that process's (its local rank)
    launched = ["[default1]:Traceback (most recent call last):", '[default1]:  File "train.py", line 3, in <module>',
                "[default1]:ValueError: the learning rate 10 diverged", "Traceback (most recent call last):",
                '  File "/usr/bin/torchrun", line 33, in <module>',
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "[0]:", "  rank : 1"]
    assert logs.error_line("\n".join(launched).encode()) == "ValueError: the learning rate 10 diverged"
    # a termination message: its lines carry no stamp and all count
    assert logs.error_line("\n".join(line[1:] for line in traceback).encode()) == "ValueError: bad learning rate 10"
    said = logs.error_line(b"\x1b[31mfatal:\x1b[0m cannot fetch https://bob:s3cret@example.com/team/models.git " +
                           b"x" * 500)
    assert said.startswith("fatal: cannot fetch https://example.com/team/models.git xx") and "s3cret" not in said
    assert len(said) == logs.MAX_ERROR and said.endswith("\u2026")


def test_the_error_line_of_a_log_file_is_read_from_its_end(tmp_path):
    path = tmp_path / "worker-0.log"
    path.write_bytes(stamped(*(["!" + "x" * 1000] * 100), "!ValueError: bad learning rate"))
    assert logs.last_error(path) == "ValueError: bad learning rate"
    path.write_bytes(b"2026-01-01T00:00:00.000000Z " + b"y" * logs.ERROR_TAIL + b"\n")  # stdout, cut in its middle
    assert logs.last_error(path) == "" and logs.last_error(tmp_path / "none.log") == ""


@cache
def mounted(program: str) -> str:
    """A program of the product's as a pod finds it: its ConfigMap's file (podspec.PROGRAM_FILES), named as the pod's
    mount names it (podspec.program_file)."""
    directory = Path(tempfile.mkdtemp(prefix="distrain-programs-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = directory / Path(podspec.program_file(program)).name
    path.write_text(podspec.PROGRAM_FILES[program])
    return str(path)


def tee(log, *command, termination="no-termination-log", env=None, **options):
    """The program a Kubernetes replica's container runs its command under, run here as the pod runs it: with `env`
    (else this process's), and, unless `env` and `options` name them, a $TMPDIR and a working directory of its own,
    as a container has (the tee names what the command wrote in either: not what other tests write meanwhile)."""
    scratch, workspace = (tempfile.mkdtemp(prefix=f"distrain-tee-{part}-") for part in ("tmp", "workspace"))
    for directory in (scratch, workspace):
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
    env = {"TMPDIR": scratch, **(env or os.environ)}
    return subprocess.Popen([sys.executable, mounted("logtee"), str(log), str(termination), *command],
                            stdout=subprocess.PIPE, env=env, **{"cwd": workspace, **options})


def whole(out: bytes) -> bytes:
    """The tee's container output but for its last line, which says, to a reader of pods/log alone, that the log
    ends there (and is no line of the volume's copy)."""
    *lines, last = out.splitlines(keepends=True)
    assert ends_log(b"2030-01-01T00:00:00.123456789Z " + last.rstrip(b"\n")), last
    return b"".join(lines)


def test_the_pods_log_tee_writes_the_same_stamped_lines_to_both_and_keeps_the_exit_code(tmp_path):
    log = tmp_path / "volume" / "logs" / "1" / "worker-0.log"
    termination = tmp_path / "termination-log"  # made by the kubelet
    termination.touch()
    long = "x" * (logs.MAX_LINE + 10)
    # named by ${DISTRAIN_INDEX}, as the replicas sharing a template on the kubeflow engine name theirs
    process = tee(log.with_name("worker-${DISTRAIN_INDEX}.log"), "sh", "-c",
                  f"echo one; sleep 0.1; echo two >&2; sleep 0.1; echo {long}; sleep 0.1; "
                  "echo why >&2; printf 'no newline\\r'; exit 3", termination=termination,
                  env={**os.environ, "DISTRAIN_INDEX": "0"})
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 3
    # the container's output ends with a line of its own, which says it is whole: the volume's copy has the rest
    out = whole(out)
    assert out == log.read_bytes()
    lines = [logs.parse(raw, "worker-0") for raw in out.splitlines(keepends=True)]
    assert [(line.text, line.stderr) for line in lines] == [  # a line without its newline is written at the end
        ("one", False), ("two", True), ("x" * logs.MAX_LINE, False), ("x" * 10, False), ("why", True),
        ("no newline", False)]
    assert [line.time for line in lines] == sorted({line.time for line in lines})  # strictly increasing
    used, said = used_by(termination.read_text())
    assert said == "two\nwhy" and used["cpu_seconds"] >= 0  # what it used, then the failed command's stderr's end
    # pods/log serves each line behind the runtime's own time: the tee's stamp is kept, so the copies match
    runtime = b"2030-01-01T00:00:00.123456789Z "
    assert [from_pods_log(runtime + raw.rstrip(b"\n")) for raw in out.splitlines(keepends=True)] == [
        from_volume(raw.rstrip(b"\n")) for raw in log.read_bytes().splitlines(keepends=True)]
    assert from_pods_log(runtime + b"plain") == b"2030-01-01T00:00:00.123456Z plain"  # not under the tee
    # the kubelet's answer once the container is gone is no line of it (seen on the real node)
    assert from_pods_log(b"unable to retrieve container logs for containerd://3f9a") is None
    assert from_volume(b"written by the job itself") is None


RICH_BARS = """import time
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), auto_refresh=False) as bars:
    training = bars.add_task("Epoch 0/0", total=100)
    for step in range(100):
        bars.update(training, advance=1, refresh=True)
        if step == 49:  # a second bar under the first, as Lightning's validation: each drawing moves up first
            checking = bars.add_task("Validation", total=400)
            for _ in range(400):
                bars.update(checking, advance=1, refresh=True)
            bars.update(checking, visible=False, refresh=True)
print("done")
"""


def test_rich_bars_drawn_into_a_log_keep_their_last_drawings_not_each(tmp_path):
    """Rich draws its bars into a replica's log as into a terminal (TTY_COMPATIBLE=1): two bars at once redraw the
    line above at each of 500 drawings; the server's writer and the pod's tee each write the latest at most once a
    second (and the last), not a line a drawing."""
    environment = {**os.environ, "TTY_COMPATIBLE": "1"}
    local, pods = tmp_path / "local.log", tmp_path / "pod.log"
    began = time.monotonic()
    writer = logs.LogWriter(local)
    with subprocess.Popen([sys.executable, "-c", RICH_BARS], stdout=subprocess.PIPE, env=environment) as process:
        while chunk := os.read(process.stdout.fileno(), 4096):
            writer.feed(chunk)
    writer.close()
    seconds = {local: time.monotonic() - began}
    began = time.monotonic()
    tee(pods, sys.executable, "-c", RICH_BARS, env=environment).communicate(timeout=60)
    seconds[pods] = time.monotonic() - began
    for log in (local, pods):
        texts = [logs.ESCAPES.sub("", line.text) for line in logs.read({"worker-0": log})]  # as the view shows
        assert texts[-2:] == ["Epoch 0/0 " + "━" * 40 + " 100/100", "done"], texts
        # its first drawing, as the second bar came under it, its latest as that went, its last, "done", and the two
        # bars' latest once a second meanwhile (a slow machine's seconds); a line a drawing would be 400 more
        assert len(texts) <= 5 + 2 * seconds[log], texts


BURNS = """import resource, time
kept = bytearray(300 * 2**20)  # resident once written
for i in range(0, len(kept), 4096):
    kept[i] = 1
start = time.process_time()
while time.process_time() - start < 1.5:
    pass
own = resource.getrusage(resource.RUSAGE_SELF)
print(own.ru_utime + own.ru_stime, own.ru_maxrss * 1024)
"""


def test_the_pods_log_tee_says_what_its_command_used_and_the_replicas_end_shows_it(tmp_path):
    """As its command ends, the tee writes its CPU seconds and largest resident set (the kernel's account of it) as
    the first line of the container's termination message; a pod ended with that message shows them in the
    replica's state, within 2% of what the process measured of itself (but for its exit), and a failure's message
    without that line."""
    from kubernetes import client

    termination = tmp_path / "termination-log"
    termination.touch()
    # started by a small process, as by a container's runtime: one started from this test's large one would count
    # this one's size as its own at first (the kernel keeps the mark across the exec), and so its command's
    small_parent = ["/bin/sh", "-c", '"$@"; exit $?', "sh", sys.executable, mounted("logtee")]
    out = subprocess.run([*small_parent, str(tmp_path / "worker-0.log"), str(termination), sys.executable, "-c", BURNS],
                         stdout=subprocess.PIPE, timeout=60, check=True).stdout
    own_cpu, own_peak = map(float, logs.parse(out.splitlines()[0], "worker-0").text.split())
    ended = client.V1ContainerStateTerminated(exit_code=0, message=termination.read_text(), reason="Completed",
                                              finished_at=datetime.now(timezone.utc))
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="job-worker-0-0-0-x"),
                       spec=client.V1PodSpec(containers=[client.V1Container(name="replica")], node_name="node"),
                       status=client.V1PodStatus(phase="Succeeded", container_statuses=[client.V1ContainerStatus(
                           name="replica", image="python", image_id="", ready=False, restart_count=0,
                           state=client.V1ContainerState(terminated=ended))]))
    recorded = {"phase": "Running", "reason": "", "message": "", "exit_code": None, "restarts": 0,
                "started": time.time() - 5, "finished": None, "node": "node"}
    state = replica_state(recorded, pod, time.time())
    assert (state["phase"], state["message"]) == ("Succeeded", "")
    # the process's exit (its 300 MiB freed, the interpreter's end) follows its own account
    assert own_cpu <= state["cpu_seconds"] <= 1.02 * own_cpu + 0.1, (state, own_cpu)
    assert own_peak <= state["peak_memory"] <= 1.02 * own_peak, (state, own_peak)
    assert used_by("distrain used {\"cpu_seconds\": ") == ({}, "")  # cut short: nothing known
    assert used_by("Error: it failed") == ({}, "Error: it failed")  # not the tee's message


def test_a_pods_log_the_kubelet_no_longer_has_is_no_copy_of_it(tmp_path):
    """Once a finished pod's container is removed, pods/log answers 200 with the kubelet's word that it has no log:
    the copy says the pod's lines are not all copied (False, as for a pod gone), so that its run's lines are read
    from the volume before the run is marked complete (a worker's last lines were lost so on the real node). A log
    that ends with the tee's last line was read whole, and that line is no line of the job's."""
    from kubernetes import client

    from jupyter_distrain.backends.kubernetes.logcopy import LogCopier
    from jupyter_distrain.backends.kubernetes.naming import RUN
    from jupyter_distrain.backends.kubernetes.objects import NamespaceObjects
    from jupyter_distrain.config import Distrain

    class PodsLog:  # the API server's answer to pods/log, streamed
        def __init__(self, *lines: bytes):
            self.body = b"".join(line + b"\n" for line in lines)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def stream(self, amount, decode_content=True):
            yield self.body

    objects = NamespaceObjects(Distrain(root=str(tmp_path), namespace="training"), client.ApiClient())
    objects.run_log_dir = lambda job, run: tmp_path
    answers = iter([PodsLog(b"2030-01-01T00:00:00.1Z 2030-01-01T00:00:00.000001Z rank 1/3 joined"),
                    PodsLog(b"unable to retrieve container logs for containerd://3f9a"),
                    PodsLog(b"2030-01-01T00:00:00.2Z 2030-01-01T00:00:00.000002Z done",
                            b"2030-01-01T00:00:00.3Z 2030-01-01T00:00:00.000003Z. the log ends here")])
    objects.core.read_namespaced_pod_log = lambda *args, **kwargs: next(answers)
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="job-worker-0-0-0-x", labels={RUN: "1"}, uid="7c1e"),
                       spec=client.V1PodSpec(containers=[client.V1Container(name="replica")], restart_policy="Never"),
                       status=client.V1PodStatus(phase="Succeeded", container_statuses=[]))
    copier = LogCopier(objects)
    assert copier.archive("job", "worker-0", pod) is True and not copier.whole("job", pod)
    assert copier.archive("job", "worker-0", pod) is False  # its container gone: what it logged is on the volume
    assert copier.archive("job", "worker-0", pod) is True and copier.whole("job", pod)
    assert (tmp_path / "worker-0.log").read_bytes() == (b"2030-01-01T00:00:00.000001Z rank 1/3 joined\n"
                                                        b"2030-01-01T00:00:00.000002Z done\n")


def test_a_follower_waits_past_its_grace_for_a_volume_read_under_way(tmp_path, monkeypatch):
    """A run over whose lines are not all copied ends a follower LOGS_GRACE seconds later, unless this process is
    reading the volume's lines then (a reader pod may take minutes to serve on a loaded node): it waits for them."""
    from kubernetes import client

    from jupyter_distrain.backends.kubernetes import logcopy
    from jupyter_distrain.backends.kubernetes.objects import NamespaceObjects
    from jupyter_distrain.config import Distrain

    monkeypatch.setattr(logcopy, "LOGS_GRACE", 0)
    objects = NamespaceObjects(Distrain(root=str(tmp_path), namespace="training"), client.ApiClient())
    objects.run_log_dir = lambda job, run: tmp_path
    finished = logcopy.LogCopier(objects).until_lines_copied("job", 1, lambda: True)
    with objects.reading:  # the controller's volume read, under way
        assert not finished()
    assert finished()


def test_the_pods_log_tee_passes_signals_on_and_runs_without_its_volume(tmp_path):
    process = tee(tmp_path / "log", sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)")
    assert process.stdout.readline().endswith(b" ready\n")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 128 + signal.SIGTERM  # as a shell reports a command a signal ended
    (tmp_path / "file").touch()
    unwritable = tee(tmp_path / "file" / "worker-0.log", "echo", "still runs")
    out, _ = unwritable.communicate(timeout=30)
    assert unwritable.returncode == 0
    lines = [logs.parse(raw, "w").text for raw in whole(out).splitlines()]
    assert lines[0].startswith("distrain: no copy of this log on the output volume: ") and lines[1:] == ["still runs"]


def test_the_pods_log_tee_names_where_the_command_wrote_event_files_in_the_temporary_directory(tmp_path):
    """Event files the command wrote in the pod's temporary directory go with the pod, unread by its TensorBoard: a
    last line names their directories (not the output's, nor files older than the command)."""
    scratch, output, workspace = tmp_path / "scratch", tmp_path / "scratch" / "output", tmp_path / "workspace"
    (scratch / "old").mkdir(parents=True)
    workspace.mkdir()
    (scratch / "old" / "events.out.tfevents.1.host").touch()
    os.utime(scratch / "old" / "events.out.tfevents.1.host", (0, 0))  # another run's, before this command
    event_file = "events.out.tfevents.1796064236.host.7.0"
    process = tee(tmp_path / "log", "sh", "-c", f"mkdir -p $TMPDIR/boards/train $TMPDIR/boards/validation "
                  f"$DISTRAIN_LOG_DIR && for d in $TMPDIR/boards/train $TMPDIR/boards/validation $DISTRAIN_LOG_DIR; "
                  f"do touch $d/{event_file}; done; touch $TMPDIR/boards/notes.txt",
                  env={**os.environ, "TMPDIR": str(scratch), "DISTRAIN_OUTPUT_DIR": str(output),
                       "DISTRAIN_LOG_DIR": str(output / "tensorboard")}, cwd=workspace)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    [line] = [logs.parse(raw, "w") for raw in whole(out).splitlines()]
    assert line.stderr and line.text == (
        f"distrain: TensorBoard event files written outside the job's output directory, where its TensorBoard and "
        f"metrics do not look, discarded with the pod: in {scratch}/boards/train, {scratch}/boards/validation; "
        "write them under $DISTRAIN_LOG_DIR")
    quiet = tee(tmp_path / "log", "true", env={**os.environ, "TMPDIR": str(scratch)}, cwd=workspace)
    assert not whole(quiet.communicate(timeout=30)[0])


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


FAILING = """import sys, time
print("epoch 1", flush=True)
time.sleep(0.2)
print("learning rate 10 is high", file=sys.stderr, flush=True)
time.sleep(0.2)
print("epoch 2", flush=True)
time.sleep(0.2)
raise ValueError("bad learning rate")
"""


def test_a_failed_replicas_exception_is_the_jobs_message_and_its_stderr_lines_are_marked(jupyter_server, tmp_path):
    """A local replica's stdout and stderr come through pipes of their own: its log marks the lines of stderr,
    in time order with the others, and the exception that ended it is the failed job's message, for the API
    and the CLI."""
    server = jupyter_server
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(FAILING)
    spec = {"name": "bad-lr", "code": {"path": str(code)}, "command": "python train.py"}
    assert server.rest("POST", "jobs", json=spec).status_code == 201
    stream = websocket.create_connection(f"ws{server.url[4:]}/distrain/api/jobs/bad-lr/logs/stream?replica=worker-0",
                                         header=[f"{k}: {v}" for k, v in server.headers.items()], timeout=120)
    messages = []
    while not messages or messages[-1]["type"] == "lines":
        messages.append(json.loads(stream.recv()))
    stream.close()
    job = server.rest("GET", "jobs/bad-lr").json()
    said = "replica worker-0 exited with code 1: ValueError: bad learning rate"
    assert (messages[-1]["phase"], job["phase"], job["message"]) == ("Failed", "Failed", said)
    assert "exited with code 1 (Error): ValueError: bad learning rate" in [e["message"] for e in job["events"]]
    assert f"(ReplicaFailed: {said})" in CLI(server.root, tmp_path)("get", "bad-lr").stdout
    data = "".join(m["data"] for m in messages[:-1]).encode()
    lines = [(line.text, line.stderr) for line in (logs.parse(raw, "worker-0") for raw in data.splitlines())]
    assert lines[:4] == [("epoch 1", False), ("learning rate 10 is high", True), ("epoch 2", False),
                         ("Traceback (most recent call last):", True)]
    assert lines[-1] == ("ValueError: bad learning rate", True) and all(stderr for _, stderr in lines[3:])


LAUNCHED = """import os, time
if os.environ["LOCAL_RANK"] == "1":
    raise ValueError("the learning rate 10 diverged")
time.sleep(60)
"""


def test_through_a_launcher_the_failed_jobs_message_is_its_failing_processs_exception(cli, tmp_path):
    """torchrun raises ChildFailedError once a worker it started failed, after the worker's own traceback: the job's
    message is the worker's exception (the cause), not the launcher's."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(LAUNCHED)
    spec = write_spec(code, {"name": "launched", "code": {"path": str(code)},
                             "command": "python -m torch.distributed.run --standalone --nproc_per_node 2 train.py"})
    assert cli("submit", "-f", str(spec), "--follow", check=False).returncode != 0
    job = cli.json("get", "launched")
    assert (job["phase"], job["message"]) == (
        "Failed", "replica worker-0 exited with code 1: ValueError: the learning rate 10 diverged"), job
    assert "ChildFailedError" in cli("logs", "launched").stdout  # the launcher's own, in the log
    cli("delete", "launched")


def test_a_known_failure_says_what_to_do_next(cli):
    """PyTorch moving a tensor to CUDA where there is no GPU ends "Found no NVIDIA driver": the failed job's hint
    says what to do, in its JSON and under its phase in `distrain get`; each known message has its hint, and an
    unknown failure none."""
    cli("submit", "--name", "cuda", "--follow", "--", "python", "-c", "import torch; torch.zeros(1).cuda()",
        check=False)
    job = cli.json("get", "cuda")
    if job["phase"] == "Succeeded":
        pytest.skip("this machine has a GPU")
    assert job["phase"] == "Failed" and "RuntimeError: Found no NVIDIA driver" in job["message"], job["message"]
    assert job["hint"] == hints.KNOWN_FAILURES[0][1]
    assert f"Hint:      {job['hint']}" in cli("get", "cuda").stdout
    for known, said in hints.KNOWN_FAILURES:
        assert hints.hint(f"replica worker-0 exited with code 1: Error: {known} (more)") == said
    assert hints.hint("replica worker-0 exited with code 1: ValueError: bad learning rate") is None
