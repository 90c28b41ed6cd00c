"""Owners on the local backend: every job records who submitted it ($JUPYTERHUB_USER, else the OS user);
each owner's CLI and server list and act on their own jobs only, an admin's see everyone's. (The
Kubernetes backend's owners are tested in test_kube_owners.py.)"""

import json
import os
import sqlite3
import time

import pytest

from conftest import CLI, EXAMPLES, JupyterServer, kill, processes_of, write_spec
from jupyter_distrain import config as config_
from jupyter_distrain.backends.local import store as store_
from jupyter_distrain.backends.local import LocalBackend
from jupyter_distrain.errors import SpecError
from jupyter_distrain.manager import JobManager


def sleeper(name: str) -> dict:
    return {"name": name, "code": {"path": str(EXAMPLES / "python")}, "command": "sleep 600"}


def test_each_owner_sees_and_touches_only_their_own_jobs(tmp_path):
    root, admin_config = tmp_path / "distrain-home", tmp_path / "admin-config"
    admin_config.mkdir()
    (admin_config / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {"see_all_owners": True}}))
    alice, bob = CLI(root, tmp_path), CLI(root, tmp_path)
    alice.env["JUPYTERHUB_USER"], bob.env["JUPYTERHUB_USER"] = "alice", "bob"
    admin = CLI(root, tmp_path)
    admin.env.update(JUPYTERHUB_USER="carol", JUPYTER_CONFIG_DIR=str(admin_config))
    try:
        alice("submit", "-f", str(write_spec(tmp_path / "a", sleeper("alices"))))
        bob("submit", "-f", str(write_spec(tmp_path / "b", sleeper("bobs"))))
        bob.wait_replica("bobs", "worker-0")
        assert [(j["name"], j["owner"]) for j in alice.json("list")] == [("alices", "alice")]
        assert [(j["name"], j["owner"]) for j in bob.json("list")] == [("bobs", "bob")]
        for verb in (("get",), ("logs",), ("stop",), ("restart",), ("delete",), ("top",)):
            refused = alice(*verb, "bobs", check=False)
            assert refused.returncode == 1 and "no job named 'bobs'" in refused.stderr, (verb, refused.stderr)
        taken = alice("submit", "-f", str(write_spec(tmp_path / "b2", sleeper("bobs"))), check=False)
        assert taken.returncode == 1 and "a job named 'bobs' exists" in taken.stderr
        job = bob.json("get", "bobs")
        assert (job["phase"], job["run"], job["owner"]) == ("Running", 1, "bob")  # untouched

        listed = admin("list").stdout.splitlines()
        assert listed[0].split()[:3] == ["NAME", "OWNER", "PHASE"]
        assert sorted(line.split()[:2] for line in listed[1:]) == [["alices", "alice"], ["bobs", "bob"]]
        admin("stop", "bobs")  # an admin acts on everyone's
        assert bob.json("get", "bobs")["phase"] == "Stopped"

        server = JupyterServer(tmp_path, env={**os.environ, "JUPYTERHUB_USER": "alice"})
        try:
            assert [j["name"] for j in server.rest("GET", "jobs").json()] == ["alices"]
            cluster = server.rest("GET", "cluster").json()
            assert (cluster["owner"], cluster["see_all_owners"]) == ("alice", False)
            for method, route in (("GET", ""), ("DELETE", ""), ("POST", "/restart"), ("POST", "/stop"),
                                  ("POST", "/clone"), ("GET", "/logs"), ("GET", "/metrics")):
                answer = server.rest(method, f"jobs/bobs{route}")
                assert (answer.status_code, answer.json()) == (404, {"message": "no job named 'bobs'"}), route
        finally:
            server.stop()
        assert bob.json("get", "bobs")["phase"] == "Stopped" and admin.json("get", "bobs")["owner"] == "bob"
    finally:
        kill(processes_of(root))


def test_the_namespace_is_the_pods_own_in_a_cluster(tmp_path, monkeypatch):
    """In a pod, the service account's namespace (KubeSpawner's per-user one) is the default; explicit
    settings still win."""
    mounted = tmp_path / "namespace"
    monkeypatch.setattr(config_, "SERVICE_ACCOUNT_NAMESPACE", mounted)
    assert config_.Distrain().namespace == "default"  # not in a pod
    mounted.write_text("jupyter-alice\n")
    assert config_.Distrain().namespace == "jupyter-alice"
    assert config_.Distrain(namespace="training").namespace == "training"
    monkeypatch.setenv("DISTRAIN_NAMESPACE", "team")
    assert config_.Distrain.load().namespace == "team"


def test_jobs_stored_before_owners_gain_the_column_and_stay_everyones(tmp_path):
    database = tmp_path / "jobs.sqlite"
    with sqlite3.connect(database) as db:
        db.executescript(store_.SCHEMA.replace(",\n    owner TEXT NOT NULL DEFAULT ''", ""))
        db.execute("INSERT INTO jobs (name, backend, spec, phase, created, output_dir) VALUES "
                   "('old', 'local', '{}', 'Succeeded', 0, '/out')")
    assert "owner" not in {row[1] for row in sqlite3.connect(database).execute("PRAGMA table_info(jobs)")}
    backend = LocalBackend(tmp_path, owner="alice")
    assert [(job["name"], job["owner"]) for job in backend.store.jobs()] == [("old", "")]
    assert backend.visible(backend.row("old")) and LocalBackend(tmp_path, owner="bob").row("old")


def test_each_owners_secrets_are_their_own(tmp_path):
    """On a storage root shared by several owners, a secret is used, listed, replaced and deleted by the
    owner who stored it only; one stored before secrets had owners is everyone's."""
    alice, bob = LocalBackend(tmp_path, owner="alice"), LocalBackend(tmp_path, owner="bob")
    alice.set_credentials("alices", "alice", "s3cret", "git.example.com")
    assert alice.credentials("alices") == {"username": "alice", "password": "s3cret", "host": "git.example.com"}
    assert (alice.credential_names(), bob.credential_names()) == (["alices"], [])
    with pytest.raises(SpecError, match="no secret named 'alices' of yours"):
        bob.credentials("alices")
    with pytest.raises(SpecError, match="'alices' is another user's secret; choose another name"):
        bob.set_credentials("alices", "bob", "taken", "evil.example.com")
    bob.delete_credentials("alices")
    assert alice.credentials("alices")["password"] == "s3cret"  # untouched
    (tmp_path / "secrets" / "shared.json").write_text(json.dumps({"username": "u", "password": "p"}))
    assert bob.credentials("shared") == {"username": "u", "password": "p", "host": ""}
    alice.delete_credentials("alices")
    assert alice.credential_names() == ["shared"]


def finished(manager: JobManager, name: str) -> dict:
    """The job once it finished, as it must: succeeded."""
    deadline = time.monotonic() + 60
    while (job := manager.get(name))["finished"] is None:
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    assert job["phase"] == "Succeeded", job
    return job


def refused(manager: JobManager, **fields) -> dict[str, str]:
    """Why a dry run of a job with these fields is refused, by field."""
    with pytest.raises(SpecError) as caught:
        manager.submit({"name": "refused", "command": "true", **fields}, dry_run=True)
    return {e.path: e.message for e in caught.value.errors}


def test_on_a_shared_root_each_owner_writes_reads_resumes_and_purges_only_their_own(tmp_path):
    """Two owners on one storage root (and one volume): each job's output lands in its owner's own directory
    whatever path its spec names; reading, resuming from or purging another owner's is refused unless the
    admin lets outputs be read; the rest of a volume is everyone's data."""
    root = tmp_path / "home"
    shared = root / "volumes" / "shared"
    (shared / "datasets").mkdir(parents=True)

    def manager(owner: str, **settings) -> JobManager:
        return JobManager.from_config(config_.Distrain(root=str(root), owner=owner, **settings))

    alice, bob, carol = manager("alice"), manager("bob@example.org"), manager("carol", see_all_owners=True)
    writes = "echo $DISTRAIN_JOB > $DISTRAIN_OUTPUT_DIR/result"
    try:
        alices = {"aj": {}, "av": {"output": {"volume": "shared"}}}
        for name, fields in alices.items():
            alice.submit({"name": name, "command": writes, **fields})
        assert finished(alice, "aj")["output_dir"] == str(root / "outputs" / "owners" / "alice" / "aj")
        assert finished(alice, "av")["output_dir"] == str(shared / "owners" / "alice" / "av")
        bob.submit({"name": "bout", "command": writes, "output": {"volume": "shared", "path": "av"}})
        bobs = shared / "owners" / "bob%40example.org" / "av"
        assert finished(bob, "bout")["output_dir"] == str(bobs) and (bobs / "result").read_text() == "bout\n"
        bob.delete("bout", purge_output=True)
        assert not bobs.exists() and (shared / "owners" / "alice" / "av" / "result").read_text() == "av\n"

        alices_output = root / "outputs" / "owners" / "alice" / "aj"
        assert refused(bob, data={"volume": "shared"}) == {
            "data.volume": f"{shared} holds other owners' outputs (in owners/): name a directory of the volume, "
                           "or your own outputs (owners/bob%40example.org/...)"}
        assert refused(bob, data={"volume": "shared", "path": "owners/alice"}) == {
            "data.path": f"{shared / 'owners' / 'alice'} is another owner's output directory"}
        assert refused(bob, data={"host_path": str(alices_output)}) == {
            "data.host_path": f"{alices_output} is another owner's output directory"}
        assert refused(bob, resume_from=str(alices_output)) == {
            "resume_from": f"{alices_output} is another owner's output directory"}
        assert refused(bob, resume_from="job:aj") == {
            "resume_from": f"nothing to resume from at {root / 'outputs' / 'owners' / 'bob%40example.org' / 'aj'}"}
        assert refused(bob, output={"host_path": str(alices_output)}) == {
            "output.host_path": f"{alices_output} is not inside your own directory of the volume "
                                f"({root / 'outputs' / 'owners' / 'bob%40example.org'})"}
        assert refused(bob, output={"host_path": str(root / "jobs")}) == {
            "output.host_path": f"{root / 'jobs'} is inside distrain's own storage ({root})"}
        assert bob.submit({"name": "reads", "command": "true", "data": {"volume": "shared", "path": "datasets"}},
                          dry_run=True)
        bob.submit({"name": "plant", "command": "cd $DISTRAIN_OUTPUT_DIR && ln -s ../../alice/av link && "
                                                "ln -s ../alice/av ../link && mkdir sub",
                    "output": {"volume": "shared", "path": "plant"}})  # links to alice's, in bob's own directory
        finished(bob, "plant")
        assert refused(bob, output={"volume": "shared", "path": "link"}) == {
            "output.path": f"leads to {shared / 'owners' / 'alice' / 'av'} through a link, outside your own "
                           f"directory of the volume ({shared / 'owners' / 'bob%40example.org'})"}
        assert refused(bob, output={"volume": "shared", "path": "plant/link"}) == {
            "output.path": "'plant/link' is not one directory name: an output is never inside another's (see "
                           "docs/owners.md)"}
        assert refused(bob, data={"volume": "shared", "path": "owners/bob%40example.org/link"}) == {
            "data.path": f"{shared / 'owners' / 'alice' / 'av'} is another owner's output directory"}
        assert refused(bob, data={"volume": "shared", "path": "owners/bob%40example.org/plant/link"}) == {
            "data.path": f"{shared / 'owners' / 'alice' / 'av'} is another owner's output directory"}
        assert refused(bob, data={"volume": "shared", "path": "owners/bob%40example.org/plant/sub"}) == {
            "data.path": f"{shared / 'owners' / 'bob%40example.org' / 'plant' / 'sub'} is inside the output directory "
                         "owners/bob%40example.org/plant: name that directory, and the rest in the command (a link a "
                         "job made in its output could lead a pod's mount anywhere in the volume)"}
        reader = manager("bob@example.org", read_others_outputs=True)  # the admin lets outputs be read
        for fields in ({"data": {"volume": "shared"}}, {"resume_from": str(alices_output)}):
            assert reader.submit({"name": "reads", "command": "true", **fields}, dry_run=True)

        alice.submit({"name": "again", "command": "cat $DISTRAIN_RESUME_FROM/result", "resume_from": "job:aj"})
        finished(alice, "again")
        assert [line.text for line in alice.logs("again")] == ["aj"]
        carol.delete("aj", purge_output=True)  # an admin purges the job's own output, in its owner's directory
        assert not alices_output.exists() and (root / "outputs" / "owners" / "alice").is_dir()
    finally:
        kill(processes_of(root))
