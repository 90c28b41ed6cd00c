"""GET repo: the git state around a notebook, read within the server's root only, and git that runs nothing a
repository's configuration names, there or at a submit."""

import json
import subprocess

import test_server
from test_server import wait_phase

pytest_plugins = ["pytest_jupyter.jupyter_server"]
api = test_server.api  # the REST API of the in-process Jupyter server, as test_server calls it


async def test_repo_describes_the_notebooks_git_repository(api, jp_root_dir):
    project = jp_root_dir / "project"
    (project / "notebooks").mkdir(parents=True)
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "remote", "add", "origin", "https://alice:s3cret@git.example.com/team/model.git"], check=True)
    (project / "requirements.txt").write_text("numpy\n")
    (project / "distrain.yaml").write_text("name: model\ncommand: python train.py\n")
    (project / "notebooks" / "explore.ipynb").write_text("{}")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    for checkpoints in (project / ".ipynb_checkpoints", project / "notebooks" / ".ipynb_checkpoints"):
        checkpoints.mkdir()  # Jupyter's, not work: no warning about them
        (checkpoints / "x-checkpoint.ipynb").write_text("{}")

    code, repo = await api("GET", "repo", path="project/notebooks/explore.ipynb")
    assert code == 200, repo
    git_state = repo["git"]
    assert git_state["remotes"] == [{"name": "origin", "url": "https://git.example.com/team/model.git"}]
    assert "s3cret" not in json.dumps(repo)
    assert git_state["branch"] == "main" and len(git_state["commit"]) == 40
    assert not git_state["dirty"] and git_state["untracked"] == 0, git_state
    assert git_state["subdirectory"] == "notebooks" and git_state["upstream"] is None
    assert repo["files"]["requirements.txt"]["content"] == "numpy\n"
    assert repo["files"]["distrain.yaml"]["spec"] == {"name": "model", "command": "python train.py"}
    # the code a job from this notebook runs: the branch, pinned to its commit
    assert repo["code"] == {"git": "https://git.example.com/team/model.git", "ref": "main",
                            "commit": git_state["commit"]}
    assert [note.split(":")[0] for note in repo["notes"]] == ["Branch main has no upstream on origin",
                                                              "The command runs at the repository's top, "
                                                              f"{project}, not in notebooks/."], repo["notes"]

    (project / "requirements.txt").write_text("numpy\npandas\n")
    (project / "notebooks" / "draft.py").write_text("")
    code, repo = await api("GET", "repo", path="project")
    assert repo["git"]["dirty"] and repo["git"]["untracked"] == 1 and repo["git"]["subdirectory"] == "."
    assert repo["notes"][0].startswith("Uncommitted work (changed files and 1 untracked file) is not part of the job")

    # one commit ahead of the upstream branch
    remote = jp_root_dir.parent / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run([*git, "remote", "add", "backup", str(remote)], check=True)
    subprocess.run([*git, "push", "-q", "-u", "backup", "main"], check=True)
    subprocess.run([*git, "commit", "-q", "-am", "more"], check=True)
    code, repo = await api("GET", "repo", path="project")
    assert repo["git"]["upstream"] == "backup/main" and not repo["git"]["dirty"]
    assert repo["git"]["ahead"] == 1 and repo["git"]["behind"] == 0

    (jp_root_dir / "plain").mkdir()
    code, repo = await api("GET", "repo", path="plain")
    assert code == 200 and repo["git"] is None and repo["files"] == {"distrain.yaml": None, "requirements.txt": None}
    assert repo["code"] == {"path": str(jp_root_dir / "plain")} and "not in a git repository" in repo["notes"][0]
    assert (await api("GET", "repo", path="../outside"))[0] == 400
    assert (await api("GET", "repo", path="missing.ipynb"))[0] == 404


# Every kind of program a repository's configuration can make git run, each leaving a mark if it runs.
CONFIGURED_PROGRAMS = {
    "core.fsmonitor": "{mark}; false", "core.askPass": "{mark}; false", "credential.helper": "!{mark}; false",
    "filter.x.clean": "{mark}; cat", "filter.x.smudge": "{mark}; cat", "filter.x.process": "{mark}; false",
    "diff.x.textconv": "{mark}; cat", "diff.x.command": "{mark}; false", "merge.x.driver": "{mark}; false",
    "commit.gpgSign": "true", "gpg.program": "{mark}; false", "core.sshCommand": "{mark}; false",
}
HOOKS = ("reference-transaction", "post-index-change", "post-checkout", "pre-commit", "post-commit")


async def test_a_repositorys_own_config_never_runs_programs(api, jp_root_dir, tmp_path):
    """GET repo, a submit's pinning, the snapshot of uncommitted changes and the job itself run git in a
    directory others may write: no program its configuration names for git to run (filters, diff and merge
    drivers, the file system monitor, hooks, password prompts, credential helpers, signing) runs, even for
    files edited so recently that git hashes them again (racily clean)."""
    project = jp_root_dir / "shared"
    project.mkdir()
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (project / "train.py").write_text("print('hi')\n")
    (project / ".gitattributes").write_text("* filter=x diff=x merge=x\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "train"], check=True)
    marks = tmp_path / "ran"
    marks.mkdir()
    for key, program in CONFIGURED_PROGRAMS.items():
        subprocess.run([*git, "config", key, program.format(mark=f"touch {marks}/{key}")], check=True)
    for hook in HOOKS:
        (project / ".git" / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {marks}/{hook}\n")
        (project / ".git" / "hooks" / hook).chmod(0o755)
    (project / "train.py").write_text("print('changed')\n")  # racily clean: as new as the index
    (project / "new.py").write_text("print('new')\n")

    code, repo = await api("GET", "repo", path="shared")
    assert code == 200 and repo["git"]["dirty"] and repo["code"]["commit"], repo
    checked = await api("POST", "jobs", {"name": "pinned", "command": "python train.py",
                                         "code": {"git": str(project), "ref": "main"}}, dry_run="true")
    assert checked[0] == 200 and checked[1]["code"]["commit"] == repo["code"]["commit"], checked
    changes = {"name": "changes", "command": "python train.py && python new.py",
               "code": {"git": "./shared", "ref": "main", "changes_from": "shared"}}
    assert (await api("POST", "check", changes))[1]["errors"] == []
    code, job = await api("POST", "jobs", changes)
    assert code == 201, job
    assert (await wait_phase(api, "changes"))["phase"] == "Succeeded"
    assert (await api("GET", "jobs/changes/logs"))[1] == "[worker-0] changed\n[worker-0] new\n"
    assert sorted(path.name for path in marks.iterdir()) == []


async def test_a_repository_reaching_outside_the_root_is_not_read(api, jp_root_dir, tmp_path, monkeypatch):
    """A work tree (core.worktree) or a git directory (a .git file) outside the server's root, or a repository
    around the root, is not read: the form gets the directory as it is and a note saying why. GIT_DIR in
    the server's environment does not redirect git either."""
    outside = tmp_path / "elsewhere"
    subprocess.run(["git", "init", "-q", str(outside)], check=True)
    (outside / "secret.txt").write_text("not yours\n")
    worktree = jp_root_dir / "worktree"
    subprocess.run(["git", "init", "-q", str(worktree)], check=True)
    subprocess.run(["git", "-C", str(worktree), "config", "core.worktree", str(outside)], check=True)
    gitfile = jp_root_dir / "gitfile"
    gitfile.mkdir()
    (gitfile / ".git").write_text(f"gitdir: {outside / '.git'}\n")
    for path in ("worktree", "gitfile"):
        code, repo = await api("GET", "repo", path=path)
        assert code == 200 and repo["git"] is None and repo["code"] == {"path": str(jp_root_dir / path)}, repo
        assert "lies outside the server's root" in repo["notes"][0] and str(outside) in repo["notes"][0]
    subprocess.run(["git", "init", "-q", str(jp_root_dir.parent)], check=True)  # a repository around the root
    plain = jp_root_dir / "plain"
    plain.mkdir()
    monkeypatch.setenv("GIT_DIR", str(outside / ".git"))
    code, repo = await api("GET", "repo", path="plain")
    assert code == 200 and repo["git"] is None and "not in a git repository" in repo["notes"][0], repo


async def test_repo_files_are_read_within_the_root_and_without_yaml_aliases(api, jp_root_dir):
    """A repository's distrain.yaml of nested aliases (a few hundred bytes that expand to gigabytes) is not
    expanded, and a requirements.txt linked to a file outside the server's root is not read."""
    project = jp_root_dir / "hostile"
    project.mkdir()
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(9)]
    (project / "distrain.yaml").write_text("\n".join(levels) + "\n")
    (project / "requirements.txt").symlink_to("/etc/passwd")
    code, repo = await api("GET", "repo", path="hostile")
    assert code == 200, repo
    assert repo["files"]["distrain.yaml"]["spec"] is None and repo["files"]["requirements.txt"] is None
