"""A private repository over HTTP with basic auth: the password reaches git and nothing else."""

import functools
import json
import subprocess
import time
from pathlib import Path

import githost
import pytest
from conftest import assert_nothing_left, write_spec

from jupyter_distrain import git

USER, PASSWORD = "alice", "s3cr3t-Pa55word"


@pytest.fixture
def private_repo(tmp_path):
    work = tmp_path / "src"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    (work / "train.py").write_text("print('trained from the private repo')\n")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    served = tmp_path / "served"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(served / "repo.git")], check=True)
    server = githost.serve(served, credentials=(USER, PASSWORD))
    yield f"http://127.0.0.1:{server.server_port}/repo.git"
    server.shutdown()


def test_private_repo_with_stored_credentials(cli, tmp_path, private_repo):
    spec = {"name": "private", "code": {"git": private_repo, "ref": "main"}, "command": "python train.py"}
    refused = cli("submit", "-f", str(write_spec(tmp_path / "open", spec)), check=False)
    assert refused.returncode == 1 and "code.git: cannot read the repository" in refused.stderr
    assert cli.json("list") == []

    host = private_repo.split("/")[2]
    stored = cli("secret", "set", "repo-creds", "--username", USER, "--host", host, input=f"{PASSWORD}\n")
    assert PASSWORD not in stored.stdout + stored.stderr
    secret_file = cli.root / "secrets" / "repo-creds.json"
    assert secret_file.stat().st_mode & 0o777 == 0o600

    spec["code"]["credentials"] = "repo-creds"
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    job = cli.wait("private")
    logs = cli("logs", "private").stdout
    assert job["phase"] == "Succeeded", logs
    assert "[worker-0] trained from the private repo" in logs
    shown = cli("get", "private", "-o", "json").stdout + cli("get", "private").stdout + logs
    assert PASSWORD not in shown
    for path in cli.root.rglob("*"):
        if path.is_file() and path != secret_file:
            assert PASSWORD.encode() not in path.read_bytes(), path


def test_the_users_own_git_credential_helper_still_reads_a_private_repository(cli, tmp_path, private_repo):
    """What reaches a remote (pinning the ref, the job's clone) keeps the credential helpers of the user's own
    git configuration: only a git run inside a repository, whose configuration may be anyone's, has them off."""
    host = private_repo.split("/")[2]
    store = tmp_path / "git-credentials"
    store.write_text(f"http://{USER}:{PASSWORD}@{host}\n")
    (tmp_path / "gitconfig").write_text(f"[credential]\n\thelper = store --file {store}\n")
    cli.env["GIT_CONFIG_GLOBAL"] = str(tmp_path / "gitconfig")
    spec = {"name": "helped", "code": {"git": private_repo, "ref": "main"}, "command": "python train.py"}
    cli("submit", "-f", str(write_spec(tmp_path / "job", spec)))
    job = cli.wait("helped")
    logs = cli("logs", "helped").stdout
    assert job["phase"] == "Succeeded" and "[worker-0] trained from the private repo" in logs, logs


def test_credentials_stored_over_rest_are_never_read_back(jupyter_server, private_repo):
    host = private_repo.split("/")[2]
    put = functools.partial(jupyter_server.rest, "PUT")
    refused = [
        put("secrets/Bad_Name", json={"username": USER, "password": PASSWORD, "host": host}),
        put("secrets/repo-creds", json={"username": USER, "host": host}),
        put("secrets/repo-creds", json=[USER, PASSWORD]),
        put("secrets/repo-creds", json={"username": USER, "password": PASSWORD}),
        put("secrets/repo-creds", json={"username": USER, "password": PASSWORD, "host": "https://example.com/"}),
        put("secrets/repo-creds", json={"username": USER, "password": f"{PASSWORD}\nhost=evil", "host": host}),
        put("secrets/repo-creds", json=None),
        put("secrets/repo-creds", data=b"null"),
    ]
    assert [r.status_code for r in refused] == [400] * 8
    assert [e["path"] for e in refused[0].json()["errors"]] == ["name"]
    assert refused[1].json() == {"message": "invalid credentials",
                                 "errors": [{"path": "password", "message": "must be a non-empty string"}]}
    assert [e["path"] for r in refused[3:6] for e in r.json()["errors"]] == ["host", "host", "password"]
    assert "without newlines" in refused[5].json()["errors"][0]["message"] and PASSWORD not in refused[5].text
    assert refused[7].json() == {"message": "the request body must be a JSON object {...}, not null"}
    assert jupyter_server.rest("GET", "secrets").json() == []

    stored = put("secrets/repo-creds", json={"username": USER, "password": PASSWORD, "host": host})
    assert (stored.status_code, stored.text) == (204, "")
    assert jupyter_server.rest("GET", "secrets").json() == [{"name": "repo-creds"}]
    secret_file = jupyter_server.root / "secrets" / "repo-creds.json"
    assert secret_file.stat().st_mode & 0o777 == 0o600

    spec = {"name": "private", "code": {"git": private_repo, "ref": "main", "credentials": "repo-creds"},
            "command": "python train.py"}
    created = jupyter_server.rest("POST", "jobs", json=spec)
    assert created.status_code == 201, created.text
    deadline = time.monotonic() + 120
    while (job := jupyter_server.rest("GET", "jobs/private")).json()["phase"] not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, job.text
        time.sleep(0.3)
    logs = jupyter_server.rest("GET", "jobs/private/logs").text
    assert job.json()["phase"] == "Succeeded" and "trained from the private repo" in logs, logs
    assert PASSWORD not in created.text + job.text + logs
    for path in [*jupyter_server.root.rglob("*"), Path(jupyter_server.log.name)]:
        if path.is_file() and path != secret_file:
            assert PASSWORD.encode() not in path.read_bytes(), path

    assert jupyter_server.rest("DELETE", "jobs/private").status_code == 204
    assert jupyter_server.rest("DELETE", "secrets/repo-creds").status_code == 204
    assert not secret_file.exists()
    assert jupyter_server.rest("DELETE", "secrets/repo-creds").status_code == 404
    assert_nothing_left(jupyter_server.root)


def test_a_secret_goes_only_to_the_host_it_was_stored_for(cli, tmp_path, private_repo):
    """A spec naming a stored secret with code.git on another host is refused before anything is made (so
    no request reaches that host with it), as is a secret stored before secrets had a host; and git's own
    requests get the password only from the secret's host (a redirect to another asks again: no answer)."""
    host = private_repo.split("/")[2]
    cli("secret", "set", "repo-creds", "--username", USER, "--host", "git.example.com", input=f"{PASSWORD}\n")
    spec = {"name": "private", "code": {"git": private_repo, "ref": "main", "credentials": "repo-creds"},
            "command": "python train.py"}
    refused = cli("submit", "-f", str(write_spec(tmp_path / "job", spec)), check=False)
    assert refused.returncode == 1 and (f"code.credentials: secret 'repo-creds' is for git.example.com, not for "
                                        f"{host} (code.git)") in refused.stderr, refused.stderr
    (cli.root / "secrets" / "repo-creds.json").write_text(json.dumps({"username": USER, "password": PASSWORD}))
    refused = cli("submit", "-f", str(write_spec(tmp_path / "job", spec)), check=False)
    assert "secret 'repo-creds' names no host" in refused.stderr
    assert cli.json("list") == []

    argv, env = git.command("credential", "fill", credentials={"username": USER, "password": PASSWORD, "host": host})
    for asked, answered in ((host, True), ("elsewhere.example.com", False)):
        filled = subprocess.run(argv, input=f"protocol=http\nhost={asked}\n\n", env=env, capture_output=True,
                                text=True)
        assert (PASSWORD in filled.stdout) == answered, filled
