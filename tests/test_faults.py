"""Races and faults, against a real `jupyter server` with the local backend: every verb at once on one job,
a full disk, a corrupt database, processes killed with SIGKILL. Each ends in a true, visible state, with
nothing left behind."""

import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter

import psutil
import pytest
import requests

from conftest import (CLI, EXAMPLES, JupyterServer, assert_nothing_left, at_once, distrain_command, kill, processes_of,
                      wait, write_spec)
from jupyter_distrain import spec as spec_
from jupyter_distrain.backends.local import LocalBackend, processes
from jupyter_distrain.errors import StorageFull
from jupyter_distrain.server.tensorboard import BOARD_PROGRAM
from jupyter_distrain.backends.local.store import RunStore, Store

pytestmark = pytest.mark.lane("node")  # its 2 minutes beside the real node's tests (conftest.lane_of)

FINISHED = {"Succeeded", "Failed", "Stopped"}


@pytest.fixture
def server(tmp_path):
    server = JupyterServer(tmp_path)
    yield server
    if server.process.poll() is None:
        server.stop()
    kill(processes_of(server.root))


def sleeper(name: str, seconds: int = 30) -> dict:
    return {"name": name, "code": {"path": str(EXAMPLES / "python")}, "command": f"sleep {seconds}"}


def test_every_verb_at_once_on_one_job_ends_consistent(server):
    """20 threads submit, stop, restart, clone, delete and read one job for 15 s: no 5xx, each answer true
    when it is given, and afterwards the store, the directories and the processes agree."""
    api, headers = f"{server.url}/distrain/api", server.headers
    requests_by_verb = {
        "submit": lambda: requests.post(f"{api}/jobs", json=sleeper("race"), headers=headers),
        "stop": lambda: requests.post(f"{api}/jobs/race/stop", headers=headers),
        "restart": lambda: requests.post(f"{api}/jobs/race/restart", headers=headers),
        "clone": lambda: requests.post(f"{api}/jobs/race/clone", json={"name": "race-clone"}, headers=headers),
        "delete": lambda: requests.delete(f"{api}/jobs/race", headers=headers),
        "get": lambda: requests.get(f"{api}/jobs/race", headers=headers),
    }
    answers, wrong = Counter(), []

    def hammer(seed: int, until: float) -> None:
        verbs = random.Random(seed)
        while time.monotonic() < until:
            verb = verbs.choice(sorted(requests_by_verb))
            response = requests_by_verb[verb]()
            answers[verb, response.status_code] += 1
            body = response.json() if response.content else None
            if response.status_code >= 500:
                wrong.append((verb, response.status_code, body))
            elif verb == "stop" and response.ok and body["phase"] not in FINISHED:
                wrong.append((verb, "answered a job still running", body["phase"]))
            elif verb == "restart" and response.ok and body["phase"] in FINISHED:
                wrong.append((verb, "answered a job not running", body["phase"]))

    at_once(hammer, count=20, seconds=15)
    assert not wrong, wrong
    for verb in requests_by_verb:  # each verb succeeded at least once
        assert any(code < 300 for v, code in answers if v == verb), answers
    assert {code for _, code in answers} <= {200, 201, 204, 404, 409}, answers

    store = Store(server.root / "jobs.sqlite")
    names = {job["name"] for job in store.jobs()}
    assert names <= {"race", "race-clone"}
    assert {p.name for p in (server.root / "jobs").iterdir()} == names  # no directory without its job
    for name in names:
        assert requests.delete(f"{api}/jobs/{name}", headers=headers).status_code == 204
    assert_nothing_left(server.root)
    assert not list((server.root / "jobs").iterdir())
    assert not list((server.root / "locks").iterdir())


def test_a_log_that_cannot_be_written_fails_the_job_and_nothing_blocks(cli, tmp_path):
    """The disk holding a run's logs is full (its log file is /dev/full): the replica, printing 100 MB, is
    neither blocked on its output nor left running; the job fails and says why."""
    flood = "python -c 'for _ in range(200000): print(500 * \"x\")'"
    cli("submit", "-f", str(write_spec(tmp_path / "job", {"name": "full", "command": "echo ok"})))
    assert cli.wait("full")["phase"] == "Succeeded"
    second_run = cli.root / "jobs" / "full" / "logs" / "2"
    second_run.mkdir()
    (second_run / "worker-0.log").symlink_to("/dev/full")
    cli("restart", "full", "-f", str(write_spec(tmp_path / "job", {"name": "full", "command": flood})))
    job = cli.wait("full", timeout=60)
    assert (job["phase"], job["reason"]) == ("Failed", "LogWriteFailed")
    assert job["message"] == "the log of worker-0 could not be written: No space left on device"
    assert_nothing_left(cli.root)


def test_a_daemon_a_replica_double_forks_ends_with_its_job(cli, tmp_path):
    daemon = ("python -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              "        time.sleep(600)\n    os._exit(0)\nos.wait()'")
    cli("submit", "-f", str(write_spec(tmp_path / "job", {"name": "daemon", "command": daemon})))
    assert cli.wait("daemon")["phase"] == "Succeeded"
    assert_nothing_left(cli.root)


def test_a_killed_server_takes_its_tensorboard_and_its_launcher_along(server):
    api, headers = f"{server.url}/distrain/api", server.headers
    launchers = server.launchers()
    assert len(launchers) == 1
    assert requests.post(f"{api}/jobs", json=sleeper("watched"), headers=headers).status_code == 201
    assert launchers[0].is_running()  # the job started through it: a failed exchange ends it
    board = f"{server.url}/distrain/tensorboard/watched/all/"
    assert requests.get(board, headers=headers, timeout=120).status_code == 200
    boards = [p for p in processes_of(server.root) if BOARD_PROGRAM in p.cmdline()]
    assert len(boards) == 1
    server.process.kill()
    server.process.wait()
    assert not psutil.wait_procs(boards + launchers, timeout=10)[1]


def test_a_server_whose_launcher_died_starts_jobs_from_a_new_interpreter(server):
    for launcher in server.launchers():
        launcher.kill()
    api, headers = f"{server.url}/distrain/api", server.headers
    assert requests.post(f"{api}/jobs", json=sleeper("cold", 1), headers=headers).status_code == 201
    deadline = time.monotonic() + 60
    while (job := requests.get(f"{api}/jobs/cold", headers=headers).json())["phase"] != "Succeeded":
        assert time.monotonic() < deadline and job["phase"] not in FINISHED, job
        time.sleep(0.2)
    server.stop()
    assert_nothing_left(server.root)


def test_deleting_the_job_that_filled_the_disk_frees_it(tmp_path):
    """The storage root on a disk of its own (16 MiB of tmpfs, mounted in a mount namespace of this test's,
    where the CLI and the job's supervisor run) that the job's output fills: a secret is refused with the disk
    named, reading the job still works, and `delete --purge-output` frees the space and leaves nothing."""
    disk, home = tmp_path / "disk", tmp_path / "disk" / "home"
    disk.mkdir()
    distrain = " ".join(distrain_command())
    settled = ('import json, sys; job = json.load(sys.stdin); assert job["provenance"]["packages"]; '
               'print(job["output_dir"])')
    script = f"""
        mount -t tmpfs -o size=16m tmpfs {disk}
        export DISTRAIN_HOME={home}
        {distrain} submit --name filler -- \
            'cd "$DISTRAIN_OUTPUT_DIR"; until [ -e fill ]; do sleep 0.1; done; cat /dev/zero > zeros; sleep 600'
        # the run settled first (what it runs on recorded), so nothing of the job's frees space once the disk is full
        until output=$({distrain} get filler -o json | {sys.executable} -c "$SETTLED" 2>/dev/null); do sleep 0.2; done
        touch "$output/fill"
        while [ "$(df --output=avail {disk} | tail -1)" -gt 0 ]; do sleep 0.2; done
        echo "full: $(df --output=pcent {disk} | tail -1)"
        {distrain} secret set login --username u --password p --host git.example.com; echo "secret: $?"
        {distrain} get filler >/dev/null; echo "get: $?"
        {distrain} delete filler --purge-output; echo "delete: $?"
        echo "used: $(df --output=used {disk} | tail -1)"
        {distrain} list
        umount {disk}
    """
    done = subprocess.run(["unshare", "--mount", "bash", "-c", script], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "SETTLED": settled})
    lines = done.stdout.splitlines()
    assert "full: 100%" in [line.strip() for line in lines], done.stdout + done.stderr
    assert f"Error: secret 'login' was not stored: the disk holding {home / 'secrets'} is full" in done.stderr
    assert ["secret: 1", "get: 0", "job filler deleted", "delete: 0"] == [
        line for line in lines if line.startswith(("secret:", "get:", "job filler deleted", "delete:"))], done.stdout
    used = next(int(line.split()[1]) for line in lines if line.startswith("used:"))
    assert used < 1024 and "filler" not in lines[-1] and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert not processes_of(home)


def test_a_private_file_the_disk_cannot_take_leaves_the_one_before_whole(tmp_path):
    """A webhook's or secret's file replaced on a full disk (a small tmpfs in this test's own mount namespace):
    StorageFull naming the directory, and the file before it still there, whole; no partial file left beside it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = f"""
import sys
from pathlib import Path
from jupyter_distrain.errors import StorageFull
from jupyter_distrain.private import read_private, write_private
path = Path({str(disk)!r}) / "hooks.json"
write_private(path, {{"url": "https://before.example.org/"}}, "the webhook")
with open(path.parent / "pad", "wb", buffering=0) as pad:  # the rest of the disk
    try:
        while True:
            pad.write(bytes(4096))
    except OSError:
        pass
try:
    write_private(path, {{"url": "https://after.example.org/" + "x" * 8192}}, "the webhook")
except StorageFull as e:
    print(e)
print(read_private(path), sorted(p.name for p in path.parent.iterdir()))
"""
    done = subprocess.run(["unshare", "--mount", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$1" && "$2" -c "$3"',
                           "sh", disk, sys.executable, script], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == [
        f"the webhook was not stored: the disk holding {disk} is full",
        "{'url': 'https://before.example.org/'} ['hooks.json', 'pad']"], done.stdout + done.stderr


def test_an_old_runs_supervisor_writes_nothing_over_the_next_run(tmp_path):
    """A supervisor left running when its job was restarted (a stop that gave up) writes through its run's hold
    on the store: nothing of its job's phase, its replicas or events lands once the job is on another run."""
    store = Store(tmp_path / "jobs.sqlite")
    store.insert_job("again", "local", {"name": "again"}, str(tmp_path), [("worker", 0)], "ann")
    old = RunStore(store, 1)
    old.update_job("again", phase="Running")
    store.reset_job("again", {"name": "again"}, str(tmp_path), [("worker", 0)], {"run": 1})
    new = RunStore(store, 2)
    with old.transaction():
        old.update_replica("again", "worker-0", phase="Failed", exit_code=1)
        old.update_job("again", phase="Failed", reason="ReplicaFailed")
        old.add_event("again", "ReplicaFailed", "of the run before")
    new.update_replica("again", "worker-0", phase="Running")
    new.add_event("again", "Started", "of this run")
    job = store.job("again")
    assert (job["run"], job["phase"], job["reason"], [r["phase"] for r in job["replicas"]]) == (
        2, "Pending", "", ["Running"])
    assert [e["message"] for e in store.events("again")] == ["of this run"]


def test_a_full_database_refuses_clearly_and_works_again_once_there_is_room(tmp_path):
    """SQLite's page limit stands in for a full disk: the write is refused with StorageFull (507, the path
    named), nothing half-made, and once there is room again the same connection writes."""
    store = Store(tmp_path / "jobs.sqlite")
    pages = store._run("PRAGMA page_count")[0][0]
    store._run(f"PRAGMA max_page_count = {pages}")
    big = {"command": "x" * 100_000}
    with pytest.raises(StorageFull, match="jobs.sqlite.*full") as refused:
        store.insert_job("big", "local", big, "/out", [("worker", i) for i in range(50)], "alice")
    assert refused.value.status == 507
    assert store.jobs() == []
    store._run("PRAGMA max_page_count = 1073741823")  # space freed
    store.insert_job("big", "local", big, "/out", [("worker", 0)], "alice")
    assert [job["name"] for job in store.jobs()] == ["big"]


def test_a_corrupt_database_is_named_on_every_route_and_the_server_still_stops(tmp_path):
    root = tmp_path / "distrain-home"
    root.mkdir(mode=0o700)
    (root / "jobs.sqlite").write_bytes(b"this is not a database\n" * 1000)
    server = JupyterServer(tmp_path)
    try:
        for route in ("jobs", "jobs/anything", "cluster"):
            answer = requests.get(f"{server.url}/distrain/api/{route}", headers=server.headers)
            assert answer.status_code == 503, route
            assert answer.json()["message"] == (f"the local backend cannot be used: the job database {root}/jobs.sqlite "
                                                "cannot be used: file is not a database")
    finally:
        server.process.terminate()
        assert server.process.wait(60) == 0
        server.log.close()
    assert b"Traceback" not in (tmp_path / "jupyter-server.log").read_bytes()
    listed = CLI(root, tmp_path)("list", check=False)
    assert listed.returncode == 1 and "Traceback" not in listed.stderr
    assert "the job database" in listed.stderr and "file is not a database" in listed.stderr


def test_a_server_killed_in_the_middle_of_a_change_leaves_everything_agreeing(tmp_path):
    """The server is killed with SIGKILL while a stop, a restart, a delete (each waiting out the grace
    period of a job that ignores SIGTERM) and a submit are under way; a new server on the same root then
    shows a state the store, the directories and the processes agree on: a job that is not finished has its
    supervisor, a finished one no processes, no directory lacks its job; and everything can be deleted
    without leftovers."""
    server = JupyterServer(tmp_path)
    submit = lambda name: requests.post(f"{server.url}/distrain/api/jobs", headers=server.headers,  # noqa: E731
                                        json={**sleeper(name), "command": "trap '' TERM; echo ignoring TERM; sleep 60"})
    for verb in ("stop", "restart", "delete", "submit"):
        if verb == "submit":
            request = lambda: submit("newcomer")  # noqa: E731
        else:  # on a running job: each waits out its grace period
            jobs = requests.get(f"{server.url}/distrain/api/jobs", headers=server.headers).json()
            if not jobs:
                assert submit("victim").status_code == 201
            elif jobs[0]["phase"] in FINISHED or Store(server.root / "jobs.sqlite").job("victim")["stop_requested"]:
                # a stop the killed server began goes on in the supervisor and may end at any moment: run afresh
                assert requests.post(f"{server.url}/distrain/api/jobs/victim/restart", headers=server.headers).ok
            wait_running(server, "victim")
            method, route = ("DELETE", "") if verb == "delete" else ("POST", f"/{verb}")
            request = lambda: requests.request(method, f"{server.url}/distrain/api/jobs/victim{route}",  # noqa: E731
                                               headers=server.headers)
        cut = []
        caller = threading.Thread(target=lambda: cut.append(raises(requests.ConnectionError, request)))
        caller.start()
        time.sleep(0.5 if verb != "submit" else 0.1)
        server.process.kill()
        server.process.wait()
        server.log.close()
        caller.join()
        assert cut == [True] or verb == "submit", verb  # a submit may be through already
        server = JupyterServer(tmp_path)
        jobs = requests.get(f"{server.url}/distrain/api/jobs", headers=server.headers).json()
        store = Store(server.root / "jobs.sqlite")
        for job in jobs:
            stored = store.job(job["name"])
            if job["phase"] not in FINISHED:
                assert processes.alive(stored["supervisor_pid"], stored["supervisor_started"]), (verb, job)
            else:  # its supervisor's last moments may still be under way
                assert_nothing_left_of(server.root, job["name"])
        assert {p.name for p in (server.root / "jobs").iterdir()} <= {job["name"] for job in jobs}, verb
    for job in requests.get(f"{server.url}/distrain/api/jobs", headers=server.headers).json():
        assert requests.delete(f"{server.url}/distrain/api/jobs/{job['name']}", headers=server.headers).ok
    server.stop()
    assert_nothing_left(server.root)
    assert not list((server.root / "jobs").iterdir()) and not list((server.root / "locks").iterdir())


def wait_running(server: JupyterServer, name: str) -> None:
    """Until the job runs and its command ignores SIGTERM (it says so once its trap is set)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = requests.get(f"{server.url}/distrain/api/jobs/{name}", headers=server.headers).json()
        logs = requests.get(f"{server.url}/distrain/api/jobs/{name}/logs", headers=server.headers).text
        if job["phase"] == "Running" and "ignoring TERM" in logs:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} is {job['phase']}")


def raises(error: type[Exception], call) -> bool:
    try:
        call()
    except error:
        return True
    return False


def assert_nothing_left_of(root, job: str, timeout: float = 10) -> None:
    def of_job(process: psutil.Process) -> bool:
        try:
            return process.environ().get("DISTRAIN_JOB") == job
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout
    while (left := [p for p in processes_of(root) if of_job(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, job


def test_a_run_whose_starter_died_before_its_supervisor_is_not_left_pending(tmp_path):
    """A process killed between recording a run and starting its supervisor leaves a job with no supervisor;
    while a starter holds the job's lock it is Pending, and once none does, the next look ends it."""
    backend = LocalBackend(tmp_path)
    spec = spec_.validate(sleeper("orphan"))
    backend.store.insert_job("orphan", "local", spec, str(backend.output_dir(spec, backend.owner)),
                             spec_.replicas(spec), backend.owner)
    with backend.changing("orphan"):  # its starter, alive
        assert LocalBackend(tmp_path).get("orphan")["phase"] == "Pending"
    job = LocalBackend(tmp_path).get("orphan")
    assert (job["phase"], job["reason"]) == ("Failed", "LaunchInterrupted")
    assert [(r["phase"], r["reason"]) for r in job["replicas"]] == [("Stopped", "NeverStarted")]


def test_a_list_kept_between_reads_shows_every_write_and_a_vanished_supervisor(tmp_path):
    """A server's backend lists again only what changed in the store: a job another process submitted is
    listed, and one whose supervisor vanished (which writes nothing) is listed as ended."""
    kept, other = LocalBackend(tmp_path), LocalBackend(tmp_path)  # the server's, and a CLI's
    assert kept.list() == []
    other.submit(spec_.validate(sleeper("orphan", 600)))
    wait(lambda: [job["phase"] for job in kept.list()] == ["Running"], "the job listed as running", 60)
    assert kept.list() == kept.list() and kept.list() is not kept.list()  # the same jobs, a list of its own
    outer = psutil.Process(kept.row("orphan")["supervisor_pid"])
    [inner] = outer.children()
    outer.kill()
    inner.kill()
    outer.wait(10)
    inner.wait(10)
    [job] = kept.list()
    assert (job["phase"], job["reason"]) == ("Failed", "SupervisorVanished")
    kill(processes_of(tmp_path))
    assert_nothing_left(tmp_path)


def test_a_job_read_before_its_launch_or_its_restart_never_ends_the_run_going_now(tmp_path):
    """A reader that saw the job before its supervisor started, or saw an earlier run's supervisor, now ended,
    and only then looks for them (as every `get` and `list` does, with no lock) leaves the run now going alone."""
    backend = LocalBackend(tmp_path)
    spec = spec_.validate(sleeper("busy"))
    backend.store.insert_job("busy", "local", spec, str(backend.output_dir(spec, backend.owner)),
                             spec_.replicas(spec), backend.owner)
    unlaunched = backend.row("busy")  # read between recording a run and starting its supervisor

    def running() -> bool:  # the job's phase, its replica's, what it runs on: the row read next is the run's, settled
        job = backend.get("busy")
        return job["phase"] == job["replicas"][0]["phase"] == "Running" and bool(job["environment"])

    backend.restart("busy")
    wait(running, "the first run's replica started", 60)
    first = backend.row("busy")
    backend.restart("busy")
    wait(running, "the second run's replica started", 60)
    going = backend.row("busy")
    for stale in (unlaunched, first):
        assert backend.end_if_vanished(stale) == going
    assert processes.alive(going["replicas"][0]["pid"], going["replicas"][0]["pid_started"])
    backend.delete("busy")
    assert_nothing_left(tmp_path)


def test_a_lock_file_a_killed_submitter_left_goes_when_a_server_starts(tmp_path):
    """A submitter killed before its job was recorded leaves the job's lock file; a server starting removes
    it, but not one a live submitter holds."""
    backend = LocalBackend(tmp_path)
    with backend.changing("submitting"):
        (tmp_path / "locks" / "abandoned").touch()
        LocalBackend(tmp_path).start(logging.getLogger("test"))
        assert [p.name for p in (tmp_path / "locks").iterdir()] == ["submitting"]
    assert not list((tmp_path / "locks").iterdir())
