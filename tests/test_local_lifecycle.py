"""The local backend through the real `distrain` CLI: real processes, real lifecycle, nothing left behind."""

import importlib.metadata
import json
import platform
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from conftest import assert_nothing_left, own_outputs, processes_of, write_spec, write_wheel

import jupyter_distrain
from jupyter_distrain.backends.local import venvs
from jupyter_distrain.backends.local.processes import replica_ports
from jupyter_distrain.backends.local.store import Store

SLEEPER = "python -c 'import time; print(\"up\", flush=True); time.sleep(600)'"


def test_chief_exit_code_fails_job_and_stops_everything(cli, tmp_path):
    spec = {
        "name": "chief-fails",
        "framework": "tensorflow",
        "command": f'if [ "$DISTRAIN_ROLE" = chief ]; then sleep 1; echo bad >&2; exit 3; else {SLEEPER}; fi',
        "replicas": {"chief": {"count": 1}, "ps": {"count": 1}, "worker": {"count": 2}},
    }
    path = write_spec(tmp_path / "job", spec)
    out = cli("submit", "-f", str(path))
    assert "chief-fails submitted" in out.stdout
    job = cli.wait("chief-fails")
    assert job["phase"] == "Failed"
    assert job["exit_code"] == 3
    assert job["reason"] == "ReplicaFailed"
    replicas = {r["name"]: r for r in job["replicas"]}
    assert replicas["chief-0"]["phase"] == "Failed"
    assert replicas["chief-0"]["exit_code"] == 3
    assert replicas["chief-0"]["reason"] == "Error"
    for name in ("ps-0", "worker-0", "worker-1"):
        assert replicas[name]["phase"] == "Stopped", replicas[name]
        assert replicas[name]["exit_code"] == 128 + signal.SIGTERM
    assert_nothing_left(cli.root, timeout=0)
    assert "bad" in cli("logs", "chief-fails", "--replica", "chief-0").stdout
    got = cli("get", "chief-fails")
    assert "Exit code: 3" in got.stdout


def test_success_stops_parameter_servers(cli, tmp_path):
    spec = {
        "name": "ps-job",
        "framework": "tensorflow",
        "command": f'case "$DISTRAIN_ROLE" in chief) echo "$TF_CONFIG";; *) {SLEEPER};; esac',
        "replicas": {"chief": {"count": 1}, "ps": {"count": 2}, "worker": {"count": 1}},
    }
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    job = cli.wait("ps-job")
    assert job["phase"] == "Succeeded" and job["exit_code"] == 0
    phases = {r["name"]: r["phase"] for r in job["replicas"]}
    assert phases == {"chief-0": "Succeeded", "ps-0": "Stopped", "ps-1": "Stopped", "worker-0": "Stopped"}
    assert {r["node"] for r in job["replicas"]} == {platform.node()}  # every replica ran on this machine
    tf_config = json.loads(cli("logs", "ps-job", "-r", "chief-0").stdout)
    addresses = {r["name"]: r["address"] for r in job["replicas"]}
    assert tf_config == {
        "cluster": {"chief": [addresses["chief-0"]], "ps": [addresses["ps-0"], addresses["ps-1"]],
                    "worker": [addresses["worker-0"]]},
        "task": {"type": "chief", "index": 0},
        "environment": "cloud",
    }
    assert_nothing_left(cli.root, timeout=0)


def test_stop_leaves_no_process_or_port(cli, tmp_path):
    # A replica that ignores SIGTERM and leaves a grandchild behind: both must go.
    stubborn = "trap '' TERM; sleep 600 & python -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(); print(\"listening\", flush=True); time.sleep(600)'"
    spec = {"name": "long", "framework": "custom", "command": stubborn,
            "replicas": {"chief": {"count": 1}, "worker": {"count": 2}}}
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    for replica in ("chief-0", "worker-0", "worker-1"):
        cli.wait_replica("long", replica)
    deadline = time.monotonic() + 30
    while cli("logs", "long").stdout.count("listening") < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [p.pid for p in processes_of(cli.root)]
    ports = [c for p in processes_of(cli.root) for c in p.net_connections() if c.status == psutil.CONN_LISTEN]
    assert len(ports) == 3
    started = time.monotonic()
    out = cli("stop", "long")
    assert "long stopped" in out.stdout
    job = cli.json("get", "long")
    assert job["phase"] == "Stopped"
    assert {(r["phase"], r["reason"]) for r in job["replicas"]} == {("Stopped", "stopped by request")}
    assert all(r["exit_code"] == 128 + signal.SIGKILL for r in job["replicas"])  # TERM was ignored
    assert time.monotonic() - started < 30
    assert "Phase:     Stopped  (stopped by request)\n" in cli("get", "long").stdout  # not "Stopped: Stopped"
    assert cli("list").stdout.splitlines()[1].split()[-1] == "local"  # no reason repeating the phase
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert_nothing_left(cli.root, timeout=0)


def test_invalid_specs_create_nothing(cli, tmp_path):
    cases = {
        "Bad_Name": ({"name": "Bad_Name", "command": "true"}, ["name:", "lowercase letters"]),
        "negative": ({"name": "neg", "command": "true", "replicas": {"worker": {"count": -2}}},
                     ["replicas.worker.count:", "between 0 and 64"]),
        "framework": ({"name": "fw", "framework": "caffe", "command": "true"},
                      ["framework:", "tensorflow, keras, pytorch, paddle, python, custom"]),
        "ssh": ({"name": "ssh", "command": "true", "code": {"git": "git@github.com:org/repo.git"}},
                ["code.git:", "http:// or https:// URL"]),
        "hostile": ({"name": "hostile", "command": "train {{ lr }}", "hyperparameters": {"lr": "1\nrm -rf ~"}},
                    ["hyperparameters.lr:", "without control characters"]),
        "quoted": ({"name": "quoted", "command": "train '{{ lr }}'", "hyperparameters": {"lr": 1}},
                   ["command:", "inside single quotes"]),
        "role": ({"name": "role", "framework": "pytorch", "command": "true", "replicas": {"ps": {"count": 1}}},
                 ["replicas:", "allowed: master, worker"]),
        "queue": ({"name": "queued", "command": "true", "queue": "team"},
                  ["queue:", "only the Kubernetes backend queues jobs"]),
    }
    for label, (spec, expected) in cases.items():
        result = cli("submit", "-f", str(write_spec(tmp_path / label, spec)), check=False)
        assert result.returncode == 1, (label, result.stdout, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        for text in expected:
            assert text in result.stderr, (label, result.stderr)
    # every error at once
    spec = {"name": "X", "framework": "caffe", "command": "true", "replicas": {"worker": {"count": -1}}}
    result = cli("submit", "-f", str(write_spec(tmp_path / "many", spec)), check=False)
    assert all(f in result.stderr for f in ("name:", "framework:", "replicas.worker.count:"))
    assert cli.json("list") == []
    assert not (cli.root / "jobs").exists() or not list((cli.root / "jobs").iterdir())
    assert processes_of(cli.root) == []


def test_hostile_hyperparameter_arrives_literally(cli, tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"$(touch {marker}); `touch {marker}` && touch {marker} ' \" \\"
    spec = {"name": "quoting", "command": "python -c 'import sys; print(repr(sys.argv[1:]))' {{ value }} {{ n }}",
            "hyperparameters": {"value": hostile, "n": 0.001}}
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    assert cli.wait("quoting")["phase"] == "Succeeded"
    assert cli("logs", "quoting").stdout.strip().endswith(repr([hostile, "0.001"]))
    assert not marker.exists()


def test_flags_submit_and_follow(cli, tmp_path):
    result = cli("submit", "--name", "flags", "--framework", "pytorch", "--master", "--workers", "2",
                 "-p", "epochs=3", "--success-policy", "all-workers", "--follow", "--",
                 "python", "-c", 'import os, sys; print(os.environ["RANK"], os.environ["WORLD_SIZE"], sys.argv[1:])',
                 "{{ epochs }}", "two words")
    assert result.returncode == 0
    assert "[master-0] 0 3 ['3', 'two words']" in result.stdout  # the words after '--' as given
    assert "[worker-1] 2 3 ['3', 'two words']" in result.stdout
    assert "job flags Succeeded" in result.stderr
    job = cli.json("get", "flags")
    assert job["spec"]["hyperparameters"] == {"epochs": 3}
    assert [(r["role"], r["index"]) for r in job["replicas"]] == [("master", 0), ("worker", 0), ("worker", 1)]


def test_env_flags_reach_the_job_and_the_roles_replicas(cli, tmp_path):
    """--env for every replica and --env ROLE:... for a role's, placeholders replaced; the job's PYTHONPATH comes
    after the replicas' site directory, before the server environment's."""
    code = tmp_path / "code"
    (code / "src").mkdir(parents=True)
    (code / "src" / "helper.py").write_text("WHO = 'the helper'\n")
    result = cli("submit", "--name", "envs", "--framework", "pytorch", "--master", "--workers", "2", "--code",
                 str(code), "-p", "lr=0.5", "--env", "PYTHONPATH=src", "--env", "NOTE=lr {{ lr }}", "--env",
                 "worker:NOTE=worker {{ index }}", "--success-policy", "all-workers", "--follow", "--", "python", "-c",
                 "import os, helper; print(helper.WHO, os.environ['NOTE'], os.environ['PYTHONPATH'])")
    lines = {line.split("] ")[0][1:]: line.split("] ", 1)[1] for line in result.stdout.splitlines()
             if line.startswith("[")}
    site = str(Path(jupyter_distrain.__file__).parent / "replica_site")
    assert lines["master-0"].startswith(f"the helper lr 0.5 {site}:src"), result.stdout
    assert lines["worker-1"].startswith(f"the helper worker 1 {site}:src"), result.stdout
    assert cli.json("get", "envs")["spec"]["replicas"]["worker"]["env"] == {"NOTE": "worker {{ index }}"}


def test_a_replica_exiting_0_as_its_succeeded_job_stops_it_succeeded(cli):
    """The master succeeds; the workers are stopped: one ends so on SIGTERM (exit 0) and shows Succeeded, the
    other is killed by it (143) and shows Stopped."""
    script = ('if [ "$DISTRAIN_ROLE" = master ]; then sleep 1; exit 0; fi; '
              'if [ "$DISTRAIN_INDEX" = 0 ]; then trap "exit 0" TERM; fi; sleep 60 & wait')
    cli("submit", "--name", "ending", "--framework", "pytorch", "--master", "--workers", "2", "--follow", "--",
        script)
    job = cli.json("get", "ending")
    assert job["phase"] == "Succeeded" and {r["name"]: (r["phase"], r["exit_code"]) for r in job["replicas"]} == {
        "master-0": ("Succeeded", 0), "worker-0": ("Succeeded", 0), "worker-1": ("Stopped", 143)}, job["replicas"]


def test_code_whose_directory_holds_the_jobs_storage_is_copied_without_it(cli, tmp_path):
    """The code's directory may hold the storage root (DISTRAIN_HOME inside a project, here tmp_path/distrain-home):
    the copy leaves out the directory holding the job's own working copy, which it would copy into itself."""
    (tmp_path / "train.py").write_text("import os; print(sorted(os.listdir('.')))\n")
    printed = cli("submit", "--name", "inside", "--code", str(tmp_path), "--follow", "--", "python", "train.py")
    assert "['train.py', 'work']" in printed.stdout, printed.stdout
    assert cli.json("get", "inside")["phase"] == "Succeeded"


def test_files_written_next_to_the_code_are_named_before_they_go(cli, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("import os\nopen('snapshot.pt', 'wb').write(bytes(2048))\n"
                                   "os.makedirs('runs', exist_ok=True)\nopen('runs/notes.txt', 'w').write('hi')\n")
    cli("submit", "--name", "scribbles", "--code", str(code), "--follow", "--", "python", "train.py")
    events = [e for e in cli.json("get", "scribbles")["events"] if e["reason"] == "WorkspaceDiscarded"]
    assert [(e["type"], e["message"]) for e in events] == [("Warning", (
        "2 files written next to the code, discarded with its working copy: snapshot.pt (2,048 bytes), "
        "runs/notes.txt (2 bytes); write what you keep under $DISTRAIN_OUTPUT_DIR"))]


def test_a_file_name_forges_no_line_where_events_are_shown(cli, tmp_path):
    """Control characters in an event's message (here a file name's, in WorkspaceDiscarded) are escaped: `distrain
    get` prints no line the job made up."""
    code = tmp_path / "code"
    code.mkdir()
    name = "notes\n  2030-01-01T00:00:00Z  Normal   -            Succeeded: forged\r\x1b[2K\u2028"
    (code / "train.py").write_text(f"open({name!r}, 'w').write('hi')\n")
    cli("submit", "--name", "forger", "--code", str(code), "--follow", "--", "python", "train.py")
    shown = cli("get", "forger").stdout
    assert not [line for line in shown.splitlines() if line.lstrip().startswith("2030")], shown
    [event] = [e for e in cli.json("get", "forger")["events"] if e["reason"] == "WorkspaceDiscarded"]
    assert "notes\\n  2030-01-01T00:00:00Z  Normal   -            Succeeded: forged\\r\\x1b[2K\\u2028 (2 bytes)" in \
        event["message"]


def test_data_and_output_are_linked_where_the_code_expects_them(cli, tmp_path):
    """link_as: ../data beside the working copy, checkpoints inside it; what goes through the link is not reported
    as discarded, and no link is left. A path the code has already is refused when the run is set up."""
    code, data, output = tmp_path / "code", tmp_path / "data", tmp_path / "kept"
    code.mkdir()
    data.mkdir()
    (data / "rows.txt").write_text("1 2 3\n")
    spec = {"name": "linked", "code": {"path": str(code)}, "command": "cat ../data/rows.txt && echo w > checkpoints/w.txt",
            "data": {"host_path": str(data), "link_as": "../data"},
            "output": {"host_path": str(output), "link_as": "checkpoints"}}
    cli("submit", "-f", str(write_spec(tmp_path / "spec", spec)))
    job = cli.wait("linked")
    assert job["phase"] == "Succeeded" and cli("logs", "linked").stdout == "[worker-0] 1 2 3\n"
    assert (output / "checkpoints").exists() is False and (output / "w.txt").read_text() == "w\n"
    assert not [e for e in job["events"] if e["reason"] == "WorkspaceDiscarded"]
    assert not (cli.root / "jobs" / "linked" / "data").is_symlink()

    (code / "data").mkdir()
    cli("submit", "-f", str(write_spec(tmp_path / "spec", {**spec, "name": "clash",
                                                            "data": {"host_path": str(data), "link_as": "data"}})))
    job = cli.wait("clash")
    assert (job["phase"], job["reason"]) == ("Failed", "SetupFailed")
    assert "data.link_as: data is there already" in job["message"]

    outside = tmp_path / "outside"  # a link in the code does not take link_as out of the working copy
    outside.mkdir()
    (code / "sub").symlink_to(outside, target_is_directory=True)
    cli("submit", "-f", str(write_spec(tmp_path / "spec", {**spec, "name": "escape", "output": {
        "host_path": str(output), "link_as": "sub/deeper/checkpoints"}})))
    job = cli.wait("escape")
    assert (job["phase"], job["reason"]) == ("Failed", "SetupFailed")
    assert "output.link_as: sub/deeper/checkpoints goes through sub, a link in the code" in job["message"]
    assert not list(outside.iterdir())


def test_the_words_after_the_double_dash_run_as_typed(cli):
    """Quoted as the shell needs them; one word is a command line (as --command's text)."""
    result = cli("submit", "--name", "hello", "--follow", "--", "python", "-c", "print('hello')")
    assert "[worker-0] hello" in result.stdout
    result = cli("submit", "--name", "line", "--follow", "--", "echo one && echo two")
    assert "[worker-0] one" in result.stdout and "[worker-0] two" in result.stdout


def test_follow_exit_status_mirrors_failure(cli):
    result = cli("submit", "--name", "fails", "--follow", "--command", "echo about to fail; exit 7", check=False)
    assert result.returncode == 7
    assert "[worker-0] about to fail" in result.stdout
    assert "job fails Failed" in result.stderr


def test_persisted_state_logs_and_vanished_supervisor(cli, tmp_path):
    spec = {"name": "survivor", "framework": "custom", "command": f"echo hello from $DISTRAIN_REPLICA; {SLEEPER}",
            "replicas": {"chief": {"count": 1}, "worker": {"count": 1}}}
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    cli.wait_replica("survivor", "worker-0")
    deadline = time.monotonic() + 20
    while cli("logs", "survivor").stdout.count("up") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    # a brand-new process (another CLI call, a fresh interpreter) sees the job and its logs
    logs = cli("logs", "survivor").stdout
    assert "[chief-0] hello from chief-0" in logs and "[worker-0] hello from worker-0" in logs
    # the job keeps running with no CLI attached; then its supervisor (the inner process) dies without a trace
    store = Store(cli.root / "jobs.sqlite")
    [inner] = psutil.Process(store.job("survivor")["supervisor_pid"]).children()
    inner.kill()
    assert_nothing_left(cli.root)  # the outer one ends the replicas and records the end: no one reads the job
    assert (store.job("survivor")["phase"], store.job("survivor")["reason"]) == ("Failed", "SupervisorVanished")
    job = cli.json("get", "survivor")
    assert job["phase"] == "Failed" and job["reason"] == "SupervisorVanished"
    assert {r["phase"] for r in job["replicas"]} == {"Lost"}
    assert "hello from chief-0" in cli("logs", "survivor").stdout  # logs outlive the processes


def test_restart_with_edited_spec_and_delete(cli, tmp_path):
    spec = {"name": "again", "command": "echo run {{ n }} > $OUTPUT_DIR/run-{{ n }}.txt; echo run {{ n }}",
            "hyperparameters": {"n": 1}}
    path = write_spec(tmp_path / "job", spec)
    cli("submit", "-f", str(path))
    first = cli.wait("again")
    assert first["phase"] == "Succeeded" and first["run"] == 1
    duplicate = cli("submit", "-f", str(path), check=False)
    assert duplicate.returncode == 1 and "exists" in duplicate.stderr
    spec["hyperparameters"]["n"] = 2
    write_spec(tmp_path / "job", spec)
    cli("restart", "again", "-f", str(path))
    second = cli.wait("again")
    assert second["run"] == 2 and second["spec"]["hyperparameters"]["n"] == 2
    output = Path(second["output_dir"])
    assert (output / "run-1.txt").exists() and (output / "run-2.txt").read_text() == "run 2\n"
    # each run keeps its own logs: the current run's by default, an earlier one's with --run
    assert cli("logs", "again").stdout == "[worker-0] run 2\n"
    assert cli("logs", "again", "--run", "1").stdout == "[worker-0] run 1\n"
    assert cli("logs", "again", "--run", "1", "--follow").stdout == "[worker-0] run 1\n"  # an ended run: at once
    logs = cli.root / "jobs" / "again" / "logs"
    assert sorted(str(p.relative_to(logs)) for p in logs.rglob("*.log")) == \
        ["1/setup.log", "1/worker-0.log", "2/setup.log", "2/worker-0.log"]
    for run in ("0", "3"):
        refused = cli("logs", "again", "--run", run, check=False)
        assert refused.returncode == 1 and f"job 'again' has no run {run}; runs: 1 to 2" in refused.stderr
    # delete keeps outputs unless asked
    cli("delete", "again")
    assert cli.json("list") == [] and output.exists()
    missing = cli("get", "again", check=False)
    assert missing.returncode == 1 and "no job named 'again'" in missing.stderr
    cli("submit", "-f", str(path))
    cli.wait("again")
    cli("delete", "again", "--purge-output")
    assert not output.exists()
    assert not (cli.root / "jobs" / "again").exists()


def test_purging_an_output_deletes_nothing_outside_its_place(cli, tmp_path):
    """--purge-output deletes a job's own output only: not a path that reaches outside the storage root
    through `..` or a symbolic link, not a whole volume or its owner's directory. The root itself is no
    job's output at all."""
    victim = tmp_path / "victim"
    (victim / "precious").mkdir(parents=True)
    cli.root.mkdir(parents=True, exist_ok=True)
    (cli.root / "link").symlink_to(victim)
    volume = cli.root / "volumes" / "shared"
    (volume / "other-job").mkdir(parents=True)
    into_root = cli("submit", "-f", str(write_spec(tmp_path / "root", {
        "name": "root", "command": "true", "output": {"host_path": str(cli.root)}})), check=False)
    assert into_root.returncode == 1 and f"is inside distrain's own storage ({cli.root})" in into_root.stderr
    for name, output in (("dots", {"host_path": str(cli.root / ".." / "victim")}),
                         ("link", {"host_path": str(cli.root / "link")})):
        cli("submit", "-f", str(write_spec(tmp_path / name, {"name": name, "command": "true", "output": output})))
        cli.wait(name)
        cli("delete", name, "--purge-output")
    whole = cli("submit", "-f", str(write_spec(tmp_path / "volume", {  # the owner's whole directory: no output
        "name": "volume", "command": "true", "output": {"volume": "shared", "path": "."}})), check=False)
    assert whole.returncode == 1 and "output.path: '.' is not one directory name" in whole.stderr
    assert (victim / "precious").is_dir() and (volume / "other-job").is_dir()
    assert (cli.root / "link").is_symlink()
    assert cli.root.stat().st_mode & 0o777 == 0o700  # made 0755 above; the storage root is the user's alone


def test_delete_running_job_stops_it(cli, tmp_path):
    spec = {"name": "doomed", "command": SLEEPER}
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    cli.wait_replica("doomed", "worker-0")
    cli("delete", "doomed")
    assert_nothing_left(cli.root, timeout=0)
    assert cli.json("list") == []


def test_git_code_pinned_at_submit(cli, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "train.py").write_text("print('version one')\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    spec = {"name": "from-git", "code": {"git": str(repo), "ref": "main"}, "command": "python train.py"}
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    job = cli.json("get", "from-git")
    assert job["spec"]["code"]["commit"] == sha
    (repo / "train.py").write_text("print('version two')\n")  # a later commit must not change the job
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    assert cli.wait("from-git")["phase"] == "Succeeded"
    cli("restart", "from-git")
    assert cli.wait("from-git")["run"] == 2
    assert [cli("logs", "from-git", "--run", run).stdout.count("version one") for run in ("1", "2")] == [1, 1]
    bad = {"name": "bad-ref", "code": {"git": str(repo), "ref": "nope"}, "command": "true"}
    result = cli("submit", "-f", str(write_spec(tmp_path / "bad", bad)), check=False)
    assert result.returncode == 1 and "code.ref: no branch or tag 'nope'" in result.stderr
    assert [j["name"] for j in cli.json("list")] == ["from-git"]


def test_code_flag_takes_a_local_git_repository_at_a_ref(cli, tmp_path):
    repo, bare = tmp_path / "repo", tmp_path / "model.git"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    for branch in ("main", "v2"):
        subprocess.run([*git, "checkout", "-qB", branch], check=True)
        (repo / "train.py").write_text(f"print('on {branch}')\n")
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", branch], check=True)
    subprocess.run([*git, "push", "-q", str(bare), "main", "v2"], check=True)
    (repo / "train.py").write_text("print('uncommitted')\n")

    submitted = {  # name: --code and --ref, what the job's code is, what it prints
        "bare-v2": (["--code", str(bare), "--ref", "v2"], {"git": str(bare), "ref": "v2"}, "on v2"),
        "bare-head": (["--code", "../model.git"], {"git": str(bare), "ref": "HEAD"}, "on main"),
        "tree-main": (["--code", str(repo), "--ref", "main"], {"git": str(repo), "ref": "main"}, "on main"),
        "tree-copy": (["--code", str(repo)], {"path": str(repo)}, "uncommitted"),
    }
    for name, (flags, _, _) in submitted.items():
        cli("submit", "--name", name, *flags, "--", "python", "train.py")
    for name, (_, code, printed) in submitted.items():
        job = cli.wait(name)
        assert job["phase"] == "Succeeded" and cli("logs", name, "-r", "worker-0").stdout == printed + "\n", name
        assert {key: job["spec"]["code"][key] for key in code} == code


def test_requirements_installed_before_the_command(cli, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    wheel = write_wheel(code, "distrain_probe", "VALUE = 42\n")
    (code / "requirements.txt").write_text(f"# the probe package\n./{wheel.name}\n")
    spec = {"name": "reqs", "code": {"path": "../code"},
            "command": "python -c 'import distrain_probe; print(\"probe\", distrain_probe.VALUE)'"}
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    job = cli.wait("reqs")
    assert job["phase"] == "Succeeded", cli("logs", "reqs").stdout
    logs = cli("logs", "reqs").stdout
    assert "[worker-0] probe 42" in logs
    assert "[setup] " in logs and "distrain-probe" in logs.lower().replace("_", "-")
    with pytest.raises(ImportError):
        __import__("distrain_probe")  # installed in the job's environment only


def test_requirements_beyond_the_index_get_an_environment_of_their_own(cli, tmp_path):
    """Two jobs' code with the same requirements.txt, which takes a package from a directory of wheels beside
    the code (-f): each job runs its own wheel, never the other's environment."""
    requirements = "--no-index\n--find-links ./wheels\ndistrain-probe\n"
    for name, value in (("first", 1), ("second", 2)):
        code = tmp_path / name
        (code / "wheels").mkdir(parents=True)
        write_wheel(code / "wheels", "distrain_probe", f"VALUE = {value}\n")
        (code / "requirements.txt").write_text(requirements)
        spec = {"name": name, "code": {"path": f"../{name}"},
                "command": "python -c 'import distrain_probe; print(\"probe\", distrain_probe.VALUE)'"}
        cli("submit", "-f", str(write_spec(tmp_path / f"{name}-job", spec)))
        job = cli.wait(name)
        logs = cli("logs", name).stdout
        assert job["phase"] == "Succeeded" and f"[worker-0] probe {value}" in logs, logs
        assert "Reusing" not in {e["reason"] for e in job["events"]}
    assert not (cli.root / "envs").exists() or not any((cli.root / "envs").iterdir())


def test_an_option_anywhere_on_a_line_makes_the_environment_the_jobs_own(tmp_path):
    """Only requirements the package index alone answers share an environment (by their text's hash): an option
    (a word starting with -) anywhere on a line, which may name another index, gives the job its own."""
    root, workspace = tmp_path / "root", tmp_path / "code"
    for text in ("numpy==1.26.4  # pinned", "requests>=2 ; python_version >= '3.8'", "torch[cuda] ~= 2.1\nsix"):
        assert venvs.location(root, workspace, text).parent == root / "envs", text
    for text in ("numpy==1.26 --index-url=http://elsewhere/simple", "requests>=2 --find-links=/tmp/x",
                 "six --extra-index-url http://x", "numpy ; python_version > '3' --index-url http://x",
                 "six\t--no-index", "numpy\n-r other.txt"):
        assert venvs.location(root, workspace, text) == workspace / ".distrain-venv", text


def test_a_job_pins_its_own_versions_in_an_environment_reused_by_the_next(cli, tmp_path):
    """requirements.txt pins an older numpy than the server's: the job sees its own, with the server's torch
    working on it, from `python` and from the server's torchrun alike. A second job with the same requirements
    reuses that environment instead of building one."""
    import numpy
    pinned = "1.26.4"
    assert numpy.__version__ != pinned
    code = tmp_path / "code"
    code.mkdir()
    (code / "requirements.txt").write_text(f"numpy=={pinned}  # what this training was validated with\n")
    (code / "probe.py").write_text("import numpy, torch\n"
                                   "print('numpy', numpy.__version__, 'sum', torch.from_numpy(numpy.arange(4.0)).sum().item())\n")
    events = {}
    for name, command in (("pinned", "python probe.py"), ("pinned-again", "torchrun --standalone probe.py")):
        spec = write_spec(tmp_path / name, {"name": name, "code": {"path": "../code"}, "command": command})
        cli("submit", "-f", str(spec))
        job = cli.wait(name, timeout=300)
        logs = cli("logs", name).stdout
        assert job["phase"] == "Succeeded", logs
        assert f"[worker-0] numpy {pinned} sum 6.0" in logs
        events[name] = {e["reason"]: e["message"] for e in job["events"]}
        # what ran: the version installed for requirements.txt, among every package the job could import
        ran = job["provenance"]
        assert (ran["command"], ran["python"], ran["requirements"]) == (command, platform.python_version(),
                                                                        [f"numpy=={pinned}"])
        assert {f"numpy=={pinned}", f"torch=={importlib.metadata.version('torch')}"} <= set(ran["packages"])
        assert f"numpy=={numpy.__version__}" not in ran["packages"]
        assert f"Installed: numpy=={pinned}\n" in cli("get", name).stdout
    assert "Installing" in events["pinned"] and "Reusing" not in events["pinned"]
    assert "Installing" not in events["pinned-again"] and str(cli.root / "envs") in events["pinned-again"]["Reusing"]
    assert_nothing_left(cli.root, timeout=0)


def test_a_job_waits_for_its_evaluator_and_says_so(cli, tmp_path):
    """The training succeeds first: the job runs on, Evaluating, until the evaluator ends too."""
    go = tmp_path / "go"
    spec = {"name": "evaluated", "framework": "tensorflow", "replicas": {"worker": {}, "evaluator": {}},
            "command": f'[ "$DISTRAIN_ROLE" = worker ] || while [ ! -e {go} ]; do sleep 0.1; done'}
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    job = cli.wait("evaluated", until=lambda j: j["reason"] == "Evaluating" or j["finished"] is not None)
    assert (job["phase"], job["message"]) == ("Running", "training succeeded; waiting for evaluator-0")
    assert {r["name"]: r["phase"] for r in job["replicas"]} == {"worker-0": "Succeeded", "evaluator-0": "Running"}
    job = cli.wait("evaluated", until=lambda j: j["provenance"].get("packages") or j["finished"] is not None)
    assert job["phase"] == "Running" and job["provenance"]["python"] == platform.python_version()  # known as it runs
    go.touch()
    job = cli.wait("evaluated")
    assert (job["phase"], job["message"]) == ("Succeeded", "worker-0 and evaluator-0 succeeded")
    assert "Evaluating" in [e["reason"] for e in job["events"]]


def test_prune_deletes_only_what_it_says(cli):
    """Jobs that finished before --older-than (in a --phase, if given) go with their logs; the others and
    every output stay; --dry-run deletes nothing."""
    for name, command in (("old-failed", "exit 1"), ("old-done", "true"), ("new-failed", "exit 1")):
        cli("submit", "--name", name, "--", command)
        cli.wait(name)
    week_ago = time.time() - 8 * 86400
    for name in ("old-failed", "old-done"):
        Store(cli.root / "jobs.sqlite").update_job(name, finished=week_ago)
    names = lambda: {job["name"] for job in cli.json("list")}  # noqa: E731
    assert cli("prune", "--older-than", "7d", "--phase", "Failed", "--dry-run").stdout == \
        "would delete old-failed (Failed, finished 8d ago)\n"
    assert names() == {"old-failed", "old-done", "new-failed"}
    assert cli("prune", "--older-than", "1w", "--phase", "Failed").stdout == \
        "deleted old-failed (Failed, finished 8d ago)\n"
    assert names() == {"old-done", "new-failed"} and (own_outputs(cli.root) / "old-failed").is_dir()
    assert not (cli.root / "jobs" / "old-failed").exists()
    assert cli("prune", "--older-than", "6d12h").stdout == "deleted old-done (Succeeded, finished 8d ago)\n"
    assert cli("prune", "--older-than", "7d").stdout == "no job finished that long ago\n"
    refused = cli("prune", "--older-than", "7 days", check=False)
    assert refused.returncode == 2 and "'7 days' is not a duration such as 30m, 12h, 7d or 2w" in refused.stderr
    assert names() == {"new-failed"}


def test_each_replica_port_comes_with_the_next_one():
    """A replica may serve on the port after its own (Paddle's gloo store does): no other replica gets it."""
    ports = replica_ports(50)
    assert len(set(ports)) == 50 and not set(ports) & {port + 1 for port in ports}


def test_restart_policy_and_deadline(cli, tmp_path):
    counter = tmp_path / "attempts"
    spec = {"name": "flaky", "command": f"echo x >> {counter}; [ $(wc -l < {counter}) -ge 3 ]",
            "policy": {"restart": "on-failure", "max_restarts": 5}}
    cli("submit", "-f", str(write_spec(tmp_path / "flaky", spec)))
    job = cli.wait("flaky")
    assert job["phase"] == "Succeeded"
    assert job["replicas"][0]["restarts"] == 2
    assert [e["reason"] for e in job["events"]].count("Restarting") == 2

    spec = {"name": "slow", "command": SLEEPER, "policy": {"deadline_seconds": 2}}
    cli("submit", "-f", str(write_spec(tmp_path / "slow", spec)))
    job = cli.wait("slow", timeout=60)
    assert job["phase"] == "Failed" and job["reason"] == "DeadlineExceeded"


def test_log_filters(cli, tmp_path):
    # all-workers: the chief succeeding first must not stop the worker before it has printed its lines
    spec = {"name": "chatty", "framework": "custom", "command": "for i in $(seq 1 50); do echo $DISTRAIN_REPLICA line $i; done",
            "replicas": {"chief": {"count": 1}, "worker": {"count": 1}}, "policy": {"success": "all-workers"}}
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    cli.wait("chatty")
    everything = cli("logs", "chatty").stdout.splitlines()
    assert len(everything) == 100
    tail = cli("logs", "chatty", "--replica", "worker-0", "--tail", "3").stdout.splitlines()
    assert tail == ["worker-0 line 48", "worker-0 line 49", "worker-0 line 50"]
    assert len(cli("logs", "chatty", "--tail", "5").stdout.splitlines()) == 5
    stamped = cli("logs", "chatty", "--timestamps", "--tail", "1").stdout
    assert stamped[:4].isdigit() and "Z [" in stamped
    assert cli("logs", "chatty", "--since", "1h").stdout.count("line") == 100
    assert cli("logs", "chatty", "--since", "2099-01-01T00:00:00Z").stdout == ""
    unknown = cli("logs", "chatty", "--replica", "ps-0", check=False)
    assert unknown.returncode == 1 and "replicas: setup, chief-0, worker-0" in unknown.stderr


def test_top_reports_usage(cli, tmp_path):
    spec = {"name": "busy", "command": "python -c 'import time; x = bytearray(64 << 20); t = time.time()\nwhile time.time() - t < 600: pass'"}
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    cli.wait_replica("busy", "worker-0")
    time.sleep(1)
    out = cli("top", "busy").stdout.splitlines()
    assert out[0].split()[:4] == ["REPLICA", "PHASE", "CPU%", "MEMORY"]
    row = out[1].split()
    assert row[0] == "worker-0" and float(row[2]) > 20 and row[3].endswith("MiB") and float(row[3][:-3]) >= 64


def test_gpu_request_beyond_this_machine_is_refused(cli, tmp_path):
    from jupyter_distrain.backends.local import processes

    have = len(processes.gpus())
    spec = {"name": "gpus", "command": "true", "replicas": {"worker": {"count": 2, "resources": {"gpus": have + 1}}}}
    result = cli("submit", "-f", str(write_spec(tmp_path / "job", spec)), check=False)
    assert result.returncode == 1
    assert f"{2 * (have + 1)} GPUs requested (2 worker x {have + 1}); this machine has {have}" in result.stderr
    assert cli.json("list") == []


def test_prune_without_older_than_deletes_the_jobs_past_their_time_to_be_kept(cli, tmp_path):
    """policy.ttl_after_finished: the job shows when it goes; `prune` deletes it once that time has come, with
    its logs, and keeps its output; a job naming no time stays."""
    for name, policy in (("forever", {}), ("brief", {"ttl_after_finished": "10s"})):
        spec = {"name": name, "command": "echo result > $DISTRAIN_OUTPUT_DIR/result.txt", "policy": policy}
        cli("submit", "-f", str(write_spec(tmp_path / name, spec)))
        cli.wait(name)
    brief = cli.json("get", "brief")
    assert cli("prune").stdout == "no job is past its time to be kept\n"  # a few CLI calls into its 10 s
    finished, expires = (datetime.fromisoformat(brief[key]).timestamp() for key in ("finished", "expires"))
    assert expires - finished == 10 and cli.json("get", "forever")["expires"] is None
    assert {job["name"]: job["expires"] for job in cli.json("list")} == {"brief": brief["expires"], "forever": None}
    time.sleep(max(0.0, expires + 1 - time.time()))  # the times shown are whole seconds, cut short
    assert cli("prune", "--dry-run").stdout.startswith("would delete brief (Succeeded, finished")
    assert cli("prune").stdout.startswith("deleted brief (Succeeded, finished")
    assert [job["name"] for job in cli.json("list")] == ["forever"]
    assert (Path(brief["output_dir"]) / "result.txt").read_text() == "result\n"
    assert not (cli.root / "jobs" / "brief").exists()
