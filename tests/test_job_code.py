"""The code a job runs, said before it runs again: GET jobs/{name}/code (its commit next to what its ref names
now), a restart on the ref as it is now, and the newest job of a repository, which a new job's form starts from
(GET repo)."""

import json
import subprocess

import test_server
from jupyter_distrain.repo import same_code
from test_server import wait_phase

pytest_plugins = ["pytest_jupyter.jupyter_server"]
api = test_server.api  # the REST API of the in-process Jupyter server, as test_server calls it


def commit(repo, text: str) -> str:
    """Commit train.py printing `text`; the new commit."""
    (repo / "train.py").write_text(f"print({text!r})\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", text], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


async def test_a_job_says_how_far_behind_its_branch_it_is_and_restarts_on_the_branch_of_now(api, jp_root_dir):
    project = jp_root_dir / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(project)], check=True)
    first = commit(project, "first")
    spec = {"name": "pinned", "code": {"git": str(project), "ref": "main"}, "command": "python train.py"}
    assert (await api("POST", "jobs", spec))[0] == 201
    await wait_phase(api, "pinned")
    code, now = await api("GET", "jobs/pinned/code")
    assert code == 200 and now == {"git": str(project), "ref": "main", "commit": first, "snapshot": None,
                                   "head": first, "behind": 0, "unreachable": None}

    commit(project, "second")
    head = commit(project, "third")
    now = (await api("GET", "jobs/pinned/code"))[1]
    assert (now["commit"], now["head"], now["behind"]) == (first, head, 2)
    code, job = await api("POST", "jobs/pinned/restart")
    assert code == 200 and job["spec"]["code"]["commit"] == first  # the same code, as a restart runs
    await wait_phase(api, "pinned")
    code, job = await api("POST", "jobs/pinned/restart", repin="true")
    assert code == 200 and job["spec"]["code"]["commit"] == head and job["run"] == 3
    await wait_phase(api, "pinned")
    assert (await api("GET", "jobs/pinned/logs"))[1] == "[worker-0] third\n"
    assert (await api("GET", "jobs/pinned/code"))[1]["behind"] == 0

    project.rename(jp_root_dir / "moved")
    now = (await api("GET", "jobs/pinned/code"))[1]
    assert now["head"] is None and now["behind"] is None and "cannot read the repository" in now["unreachable"]
    (jp_root_dir / "files").mkdir()
    spec = {"name": "files", "code": {"path": "files"}, "command": "true"}
    assert (await api("POST", "jobs", spec))[0] == 201
    assert (await api("GET", "jobs/files/code"))[1] == {"path": str(jp_root_dir / "files")}
    assert (await api("POST", "jobs/files/restart", repin="true"))[0] == 200  # a directory has nothing to pin
    assert (await api("GET", "jobs/nowhere/code"))[0] == 404
    await wait_phase(api, "files")


async def test_a_repositorys_newest_job_and_whether_its_code_writes_event_files(api, jp_root_dir):
    project = jp_root_dir / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(project)], check=True)
    (project / "explore.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4}))
    commit(project, "no event files")
    repo = (await api("GET", "repo", path="project/explore.ipynb"))[1]
    assert repo["last_job"] is None and repo["writes_event_files"] is False

    (project / "board.py").write_text("import os\nlogs = os.environ['DISTRAIN_LOG_DIR']\n")
    commit(project, "event files")
    setup = {"framework": "pytorch", "command": "python train.py", "hyperparameters": {"lr": 0.1},
             "replicas": {"master": {"count": 1}, "worker": {"count": 2}}}
    for name, code in (("older", {"git": "./project", "ref": "main"}), ("newest", {"git": str(project), "ref": "main"}),
                       ("elsewhere", {"path": "."})):  # another code: not this repository's
        created = await api("POST", "jobs", {"name": name, "code": code, **setup})
        assert created[0] == 201, created
    repo = (await api("GET", "repo", path="project/explore.ipynb"))[1]
    assert repo["writes_event_files"] is True
    last = repo["last_job"]
    assert (last["name"], last["backend"], last["next_name"]) == ("newest", "local", "newest-2")
    assert {role: replica["count"] for role, replica in last["spec"]["replicas"].items()} == {"master": 1, "worker": 2}
    assert last["spec"]["hyperparameters"] == {"lr": 0.1}
    (jp_root_dir / "plain").mkdir()
    (jp_root_dir / "plain" / "train.sh").write_text("python fit.py --logdir {{logdir}}\n")
    repo = (await api("GET", "repo", path="plain"))[1]
    assert repo["writes_event_files"] is True and repo["last_job"] is None  # "elsewhere" ran the root
    for name in ("older", "newest", "elsewhere"):
        await wait_phase(api, name)
    # a repository is the same whatever credentials or trailing .git its URL has
    assert same_code({"git": "https://me:token@git.example.com/team/model.git/", "ref": "v1"},
                     {"git": "https://git.example.com/team/model", "ref": "main", "commit": "0" * 40})
    assert not same_code({"git": "https://git.example.com/team/model"}, {"git": "https://git.example.com/team/other"})
    assert not same_code(None, {"path": "/"})


async def test_gpus_beyond_this_machine_are_refused_on_the_roles_asking_for_them(api):
    spec = {"name": "gpus", "framework": "pytorch", "command": "true",
            "replicas": {"master": {"count": 1, "resources": {"gpus": 8}}, "worker": {"count": 1}}}
    verdict = (await api("POST", "check", spec))[1]
    assert [error["path"] for error in verdict["errors"]] == ["replicas.master.resources.gpus"]
    assert "8 GPUs requested (1 master x 8); this machine has" in verdict["errors"][0]["message"]
