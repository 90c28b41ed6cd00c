"""A job runs the checkout as its user sees it: uncommitted edits, deletions, new files and commits not pushed
yet, captured at submit (--include-changes) without touching the user's repository."""

import filecmp
import os
import subprocess
import time

import yaml
from conftest import SHOW, JupyterServer, assert_nothing_left, git, repository_state

from jupyter_distrain import snapshot


def test_a_job_runs_the_checkout_with_its_changes_and_a_restart_the_same_snapshot(cli, checkout, tmp_path):
    before = repository_state(checkout)
    result = cli("submit", "-f", str(checkout / "distrain.yaml"), "--include-changes", "--follow")
    assert result.returncode == 0, result.stdout + result.stderr
    shown = [line.removeprefix("[worker-0] ") for line in result.stdout.splitlines() if line.startswith("[worker-0]")]
    assert shown == [".gitignore: secret.txt", "added.py: print('new')", "distrain.yaml: code:",
                     "train.py: print('edited')", "unpushed.py: print('committed, not pushed')"]
    assert repository_state(checkout) == before  # nothing written to the user's repository

    job = cli.json("get", "mine")
    taken = job["spec"]["code"]["snapshot"]
    assert job["spec"]["code"]["commit"] == taken["base"] == git(checkout, "rev-parse", "HEAD").strip()
    assert "changes_from" not in job["spec"]["code"]
    assert taken["files"] == ["A added.py", "D old.py", "M train.py"]
    assert job["provenance"]["code"] == {"git": str(tmp_path / "remote.git"), "commit": taken["base"]}
    assert job["provenance"]["snapshot"] == {key: taken[key] for key in ("sha256", "size", "files")}
    assert job["provenance"]["requirements"] is None and job["provenance"]["image"] is None

    # the stored bundle, applied to a fresh clone of the remote, gives the work tree byte for byte
    bundle = cli.root / "jobs" / "mine" / "snapshot.bundle"
    assert bundle.stat().st_size == taken["size"]
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "--quiet", "--no-checkout", str(tmp_path / "remote.git"), str(fresh))
    for argv, env in snapshot.apply(bundle, fresh, taken["commit"]):
        subprocess.run(argv, env=env, check=True)
    files = sorted(p.name for p in checkout.iterdir() if p.name not in (".git", "secret.txt"))
    assert sorted(p.name for p in fresh.iterdir() if p.name != ".git") == files
    assert filecmp.cmpfiles(checkout, fresh, files, shallow=False) == (files, [], [])

    # edited again since: a restart still runs what was submitted, as does one with an edited spec
    (checkout / "train.py").write_text("print('edited again')\n")
    cli("restart", "mine")
    job = cli.wait("mine", until=lambda j: j["run"] == 2 and j["finished"] is not None)
    assert job["phase"] == "Succeeded"
    assert "[worker-0] train.py: print('edited')" in cli("logs", "mine").stdout
    edited = tmp_path / "edited" / "distrain.yaml"
    edited.parent.mkdir()
    edited.write_text(yaml.safe_dump({**job["spec"], "command": f"{SHOW}; echo once more"}))
    cli("restart", "mine", "-f", str(edited))
    job = cli.wait("mine", until=lambda j: j["run"] == 3 and j["finished"] is not None)
    logs = cli("logs", "mine").stdout
    assert job["phase"] == "Succeeded" and "[worker-0] train.py: print('edited')" in logs and "once more" in logs
    cli("delete", "mine")
    assert not bundle.exists()
    assert_nothing_left(cli.root, timeout=0)


def test_a_snapshot_over_the_limit_is_refused_with_the_numbers_and_creates_nothing(cli, checkout):
    (checkout / "weights.bin").write_bytes(os.urandom(65 << 20))
    before = repository_state(checkout)
    result = cli("submit", "-f", str(checkout / "distrain.yaml"), "--include-changes", check=False)
    assert result.returncode != 0
    assert "code.changes_from: the snapshot of your changes is 65.0 MiB, over the 64.0 MiB a local job keeps" \
        in result.stderr, result.stderr
    assert cli.json("list") == [] and not (cli.root / "jobs").exists()
    assert repository_state(checkout) == before


def test_over_rest_a_checkout_under_the_servers_root_and_a_clone_that_carries_its_snapshot(checkout, tmp_path):
    """A clone carries the snapshot, and so does a spec copied from the job (the form's clone) that names it in
    ?snapshot_of=; a copy that does not, or names a job without that snapshot, is refused."""
    server = JupyterServer(tmp_path, root_dir=tmp_path)
    try:
        spec = yaml.safe_load((checkout / "distrain.yaml").read_text())
        spec["code"]["changes_from"] = "work"  # relative to the server's root, as the panel sends it
        answer = server.rest("POST", "jobs", json=spec)
        assert answer.status_code == 201, answer.text
        taken = answer.json()["spec"]["code"]["snapshot"]
        assert taken["checkout"] == str(checkout)
        answer = server.rest("POST", "jobs/mine/clone", json={})
        assert answer.status_code == 201, answer.text
        assert answer.json()["spec"]["code"]["snapshot"] == taken

        copy = {**answer.json()["spec"], "name": "mine-3"}
        (tmp_path / "leads-out").symlink_to(tmp_path.parent)
        for outside in ("..", str(tmp_path.parent), "leads-out", "work/../.."):  # resolved, links too
            draft = {**spec, "name": "outside", "code": {**spec["code"], "changes_from": outside}}
            verdict = server.rest("POST", "check", json=draft).json()
            assert [(e["path"], e["message"]) for e in verdict["errors"]] == [
                ("code.changes_from", f"{tmp_path.parent} is outside the server's root ({tmp_path}): name a "
                                      "checkout under it")], outside
        refused = server.rest("POST", "check", json=copy).json()["errors"]
        assert [error["path"] for error in refused] == ["code.snapshot"]
        server.rest("POST", "jobs", json={"name": "plain", "command": "true"}).raise_for_status()
        assert server.rest("POST", "check", params={"snapshot_of": "plain"}, json=copy).json()["errors"] == refused
        assert server.rest("POST", "check", params={"snapshot_of": "mine"}, json=copy).json()["errors"] == []
        answer = server.rest("POST", "jobs", params={"snapshot_of": "mine"}, json=copy)
        assert answer.status_code == 201, answer.text
        for name in ("mine", "mine-2", "mine-3"):
            while (job := server.rest("GET", f"jobs/{name}").json())["finished"] is None:
                time.sleep(0.2)
            logs = server.rest("GET", f"jobs/{name}/logs").text
            assert job["phase"] == "Succeeded" and "[worker-0] train.py: print('edited')" in logs, logs
            assert server.rest("DELETE", f"jobs/{name}").status_code == 204
        assert server.rest("DELETE", "jobs/plain").status_code == 204
        assert_nothing_left(server.root)
    finally:
        server.stop()
