"""Where a job's replicas are now: their stacks through the REST API, the Python client, the CLI and the panel
(in a real browser, as test_panel.py), on a real PyTorch job whose third replica is late to an all-reduce."""

import fcntl
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from conftest import CLI, assert_nothing_left, kill, wait
from webhooks import Receiver, allow_private
from playwright.sync_api import expect
from test_panel import assert_accessible, lab, open_panel, page, screenshot  # noqa: F401 (lab and page are fixtures)

from jupyter_distrain.backends.kubernetes import podstacks
from jupyter_distrain.client import Client
from jupyter_distrain.errors import DistrainError
from jupyter_distrain.incluster import source, stackdump
from jupyter_distrain.backends.local.processstacks import py_spy
from jupyter_distrain.stacks import compare

pytestmark = pytest.mark.lane("node")  # its 1.5 minutes beside the real node's tests (conftest.lane_of)

LATE_TO_ALL_REDUCE = """
import subprocess
import sys
import time

# a line a second while torch loads, from a process of its own (torch's import may hold the GIL for seconds on a
# loaded machine): the job is quiet only once it waits in step()
starting = subprocess.Popen([sys.executable, "-c",
                             "import time\\nwhile True: print('starting', flush=True); time.sleep(1)"])

import torch
import torch.distributed as dist


def slow_down():
    time.sleep(600)


def step():
    if dist.get_rank() == 2:
        slow_down()
    dist.all_reduce(torch.ones(1))


dist.init_process_group("gloo")
starting.kill()
starting.wait()
print("ready", flush=True)  # the last line: then the job is quiet
step()
"""


def innermost(frames: list[dict]) -> str:
    return next((f["function"] for f in reversed(frames) if not f["native"]), "")  # "": its Python has not begun


def test_stacks_show_the_replica_late_to_an_all_reduce(lab, page, tmp_path):
    """Replicas 0 and 1 wait in the all-reduce, replica 2 in its own function: the frames they share are counted,
    replica 2 is the one that differs, native frames come with the Python ones; the CLI and the job view's "Where
    is it now?" say the same. Quiet for its policy.hang_after, the job warns and keeps the stacks of then."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(LATE_TO_ALL_REDUCE)
    client = Client(lab.url, lab.TOKEN)
    client.submit({"name": "late", "framework": "pytorch", "code": {"path": str(code)}, "command": "python train.py",
                   "replicas": {"worker": {"count": 3}}, "policy": {"hang_after": "8s"}})

    def stacks_once_waiting():
        try:
            found = client.stacks("late")
        except DistrainError:  # not running yet
            return None
        rows = {r["name"]: r for r in found["replicas"]}
        ready = all(r["frames"] for r in rows.values()) and all(
            "all_reduce" in innermost(rows[n]["frames"]) for n in ("worker-0", "worker-1"))
        return found if ready and "slow_down" in innermost(rows["worker-2"]["frames"]) else None

    found = wait(stacks_once_waiting, "replicas 0 and 1 in the all-reduce, 2 in slow_down", 120)
    rows = {r["name"]: r for r in found["replicas"]}
    assert found["differs"] == ["worker-2"]
    shared = found["shared"]
    assert shared >= 1 and len({str(r["frames"][:shared]) for r in rows.values()}) == 1
    assert [f["function"] for f in rows["worker-2"]["frames"][shared - 1:shared + 2]] == ["<module>", "step",
                                                                                          "slow_down"]
    assert any(f["native"] for f in rows["worker-0"]["frames"]), "py-spy unwinds the native frames too"
    assert all(len(r["processes"]) == 1 and r["processes"][0]["command"] == "python train.py" for r in rows.values())

    one = client.stacks("late", replica="worker-1")
    assert [r["name"] for r in one["replicas"]] == ["worker-1"] and one["differs"] == [] and one["shared"] == 0
    with pytest.raises(DistrainError, match="job 'late' has no replica 'worker-9'; replicas: worker-0, worker-1, "
                                            "worker-2"):
        client.stacks("late", replica="worker-9")

    cli = CLI(lab.root, tmp_path)
    printed = cli("stacks", "late").stdout
    assert printed.startswith("3 replicas, stacks taken at ") and "; differs: worker-2\n" in printed
    assert "worker-2  <- differs" in printed and "slow_down (" in printed
    assert cli.json("stacks", "late", "--replica", "worker-2")["replicas"][0]["name"] == "worker-2"

    open_panel(page)
    page.locator('[data-job="late"]').get_by_title("Open late").click()
    page.locator(".jp-distrain-job-links").get_by_role("button", name="Where is it now?").click()
    view = page.get_by_role("region", name="Stacks")
    try:
        expect(view.get_by_role("status")).to_contain_text("elsewhere than the others: worker-2", timeout=30_000)
    except AssertionError as e:  # what the panel was answered, as far as asking again shows it
        raise AssertionError(f"{e}\n{json.dumps(client.stacks('late'), indent=1)}") from None
    late = view.get_by_role("listitem", name="worker-2")
    expect(late).to_have_class("jp-distrain-stacks-replica jp-mod-differs")
    expect(late.locator(".jp-distrain-frames").first).to_contain_text("slow_down")
    expect(view.get_by_role("listitem", name="worker-0").locator(".jp-distrain-frames").first).to_contain_text(
        "all_reduce")
    assert view.locator(".jp-distrain-stacks-shared summary").inner_text().endswith("every replica shares")
    screenshot(page, "stacks")
    assert_accessible(page, ".jp-distrain-stacks")

    # 8 s after the last line: hung, a warning, the stacks kept; it goes on (on_hang: warn)
    hung = wait(lambda: next((e for e in client.get("late")["events"] if e["reason"] == "NoProgress"), None),
                "the NoProgress warning", 60)
    assert hung["type"] == "Warning" and hung["message"] == (
        "no replica wrote a log line or a TensorBoard step for 8s; their stacks then are kept (distrain stacks late "
        "--kept)")
    assert (client.get("late")["phase"], client.get("late")["reason"]) == ("Running", "NoProgress")
    # its owner is told, as the list shows its notice
    expect(page.locator(".jp-Notification-Toast-warning", has_text="Training job late is not progressing")) \
        .to_be_visible(timeout=30_000)
    assert [job["notice"] for job in lab.rest("GET", "jobs").json()] == [
        {"reason": "NoProgress", "message": hung["message"], "replica": "", "time": hung["time"]}]
    kept = client.stacks("late", kept=True)
    assert (kept["reason"], kept["differs"]) == ("NoProgress", ["worker-2"]), json.dumps(kept, indent=1)
    assert cli("stacks", "late", "--kept").stdout.startswith(f"NoProgress: {hung['message']}\n3 replicas, ")
    page.locator(".jp-distrain-job-links").get_by_role("button", name="Stacks when it hung").click()
    at_hang = page.get_by_role("region", name="Stacks when it hung")
    expect(at_hang.get_by_role("listitem", name="worker-2")).to_have_class("jp-distrain-stacks-replica jp-mod-differs")
    expect(at_hang).to_contain_text(hung["message"])

    client.stop("late")
    refused = lab.rest("GET", "jobs/late/stacks")
    assert (refused.status_code, refused.json()["message"]) == (
        409, "no replica of job 'late' is running: stacks are taken of running replicas")
    assert lab.rest("GET", "jobs/nothing/stacks").status_code == 404
    client.delete("late")
    assert_nothing_left(lab.root)


QUIET = """import sys, time
def wait_here(seconds):
    time.sleep(seconds)
print("ready", flush=True)
wait_here(float(sys.argv[1]))
while True:
    print("again", flush=True)
    time.sleep(0.5)
"""


def test_a_quiet_job_fails_as_hung_with_on_hang_fail_and_one_that_speaks_again_is_no_longer_hung(cli, tmp_path):
    """The owner's webhook hears of each hang once (NoProgress), then of the end (Hung)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "quiet.py").write_text(QUIET)
    receiver = Receiver()
    allow_private(cli)
    cli("webhook", "set", input=receiver.url() + "\n")
    cli("submit", "--name", "stuck", "--workers", "2", "--code", str(code), "--hang-after", "2s", "--on-hang",
        "fail", "--", "python", "quiet.py", "600")
    cli("submit", "--name", "pause", "--code", str(code), "--hang-after", "2s", "--", "python", "quiet.py", "8")
    stuck = cli.wait("stuck")
    assert (stuck["phase"], stuck["reason"]) == ("Failed", "Hung"), stuck
    assert stuck["message"] == ("no replica wrote a log line or a TensorBoard step for 2s; their stacks then are "
                                "kept (distrain stacks stuck --kept)")
    kept = cli.json("stacks", "stuck", "--kept")
    assert [[f["function"] for f in r["frames"] if not f["native"]] for r in kept["replicas"]] == [
        ["<module>", "wait_here"]] * 2 and kept["shared"] >= 2

    paused = cli.wait("pause", until=lambda job: job["reason"] == "NoProgress")
    assert paused["phase"] == "Running"
    cli.wait("pause", until=lambda job: job["reason"] == "" and job["phase"] == "Running")
    assert "again" in cli("logs", "pause").stdout
    assert [e["reason"] for e in cli.json("get", "pause")["events"]].count("NoProgress") == 1  # one quiet spell
    assert cli.json("stacks", "pause", "--kept")["reason"] == "NoProgress"  # kept with the run

    told = receiver.wait("stuck", 2)
    assert receiver.events("stuck") == [("NoProgress", "Running", "NoProgress", None),
                                        ("ended", "Failed", "Hung", None)]
    assert told[0]["message"] == told[1]["message"] == stuck["message"]
    cli("stop", "pause")
    receiver.wait("pause", 2)
    assert receiver.events("pause") == [("NoProgress", "Running", "NoProgress", None), ("ended", "Stopped", "Stopped",
                                                                                         None)]
    receiver.close()


def test_replicas_differ_only_where_most_are_elsewhere():
    def replica(name, *functions):
        return {"name": name, "frames": [{"function": f, "file": "t.py", "line": 1, "native": False}
                                         for f in functions]}

    three = [replica("w-0", "main", "wait"), replica("w-1", "main", "wait"), replica("w-2", "main", "late")]
    assert compare(three) == {"shared": 1, "differs": ["w-2"]}
    assert compare(three[1:]) == {"shared": 1, "differs": []}  # one each: no majority
    assert compare(three[:2]) == {"shared": 2, "differs": []}
    assert compare([*three, {"name": "w-3", "frames": []}]) == {"shared": 1, "differs": ["w-2"]}  # no stack: not compared


def test_the_pods_stack_program_dumps_the_python_processes_below_its_root(tmp_path):
    """incluster/stackdump.py as pods/exec runs it in a replica's container (podstacks.py), here with this
    machine's py-spy: the Python processes below ROOT, a launcher before the process it started, not ROOT itself
    nor a process that is not Python."""
    (tmp_path / "child.py").write_text("import time\ndef wait_here():\n    time.sleep(600)\nwait_here()\n")
    launcher = f"import subprocess, sys\nsubprocess.run([sys.executable, {str(tmp_path / 'child.py')!r}])\n"
    root = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.run(['sh', '-c', "
                             f"'sleep 600 & exec \"$0\" -c \"$1\"', sys.executable, {launcher!r}])"])
    try:
        def below():
            found = [p for p in psutil.Process(root.pid).children(recursive=True) if "python" in p.name()]
            return len(found) == 2 and found

        wait(below, "the launcher and its child")
        printed = subprocess.run([sys.executable, "-c", source("stackdump"), py_spy(), str(root.pid)],
                                 capture_output=True, text=True, check=True).stdout
        launched, child = podstacks.dumped(printed, "", {"status": "Success"})
        assert launched["command"].startswith(f"{sys.executable} -c import subprocess")
        assert child["command"] == f"{sys.executable} {tmp_path / 'child.py'}" and not child["error"]
        [main] = [t for t in child["threads"] if t["id"] == child["pid"]]
        assert [f["function"] for f in main["frames"] if not f["native"]] == ["<module>", "wait_here"]
    finally:
        kill(psutil.Process(root.pid).children(recursive=True))
        root.kill()
        root.wait()
    # what a pod's exec may answer instead: a status's message, stderr's last line, or what is not JSON
    assert podstacks.dumped("", "", {"status": "Failure", "message": "command terminated"}) == "command terminated"
    assert podstacks.dumped("", "Traceback...\nPermissionError: denied\n", {}) == "PermissionError: denied"
    assert podstacks.dumped("Warning: x\n[]", "", {"status": "Success"}) == \
        "the stack dump printed what is not JSON: 'Warning: x\\n[]'"


def test_dumps_of_one_process_at_once_take_turns_and_leave_it_running(tmp_path, monkeypatch):
    """Two py-spy dumps of one process at once fail as often as not (py-spy 0.4.3: "Failed to get stack traces"),
    and a dump then falls back to Python's frames alone, or to none: the hang's dump and a user's, or the monitor's
    and a server's, take turns on a lock file of the process in the user's own directory, which goes with the
    dump. Another user's lock in the shared temporary directory holds up nothing, and one held too long is passed."""
    (tmp_path / "wait.py").write_text("import time\ndef wait_here():\n    time.sleep(600)\nwait_here()\n")
    process = subprocess.Popen([sys.executable, str(tmp_path / "wait.py")])
    locks, planted = tmp_path / "locks", Path(tempfile.gettempdir()) / f"distrain-stacks-{process.pid}.lock"
    locks.mkdir(mode=0o700)
    try:
        def dump(_=None):
            return stackdump.dump_or_error(py_spy(), process.pid, str(locks))

        wait(lambda: "wait_here" in str(dump()), "its interpreter started")
        with open(planted, "w") as held:  # where the lock was before: anyone could hold it, forever
            fcntl.flock(held, fcntl.LOCK_EX)
            with ThreadPoolExecutor(4) as pool:
                dumped = list(pool.map(dump, range(4), timeout=4 * 2 * stackdump.DUMP_SECONDS))
        assert [d["error"] for d in dumped] == [""] * 4 and process.poll() is None
        native = [any(f["native"] for t in d["threads"] for f in t["frames"]) for d in dumped]
        assert native == [True] * 4, "each dump unwound its native frames, at its first try"
        assert not list(locks.iterdir())

        with open(locks / f"{process.pid}.lock", "w") as held:  # a dump that never ends
            fcntl.flock(held, fcntl.LOCK_EX)
            monkeypatch.setattr(stackdump, "LOCK_SECONDS", 0.5)
            assert dump()["error"] == "", "past the wait, a dump goes on unlocked"
    finally:
        planted.unlink(missing_ok=True)
        process.kill()
        process.wait()
