"""The new-job form in a real browser (as test_panel.py, whose fixtures it uses): what it starts from, the roles
and GPUs it offers, and what code a restart, a clone and a fine-tune run."""

import json
import re
import subprocess
import time

from playwright.sync_api import expect
from test_panel import api_get, lab, open_panel, page, screenshot, submit  # noqa: F401 (lab and page are fixtures)
from test_widgets_browser import GATED

TRAIN = "import os\nprint('event files in', os.environ['DISTRAIN_LOG_DIR'])\n"


def git(repo, *args: str) -> str:
    command = ["git", "-c", "user.email=dev@example.invalid", "-c", "user.name=dev", *args]
    return subprocess.run(command, cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def train_notebooks_repo(page) -> None:
    open_panel(page, "filebrowser")
    page.locator('.jp-DirListing-item[data-file-type="notebook"]').click(button="right")
    page.get_by_text("Train this notebook's repo").click()


def test_the_form_remembers_offers_the_frameworks_roles_and_the_gpus_there_are_and_says_what_code_runs(
        lab, page, tmp_path):
    repo = lab.root_dir / "project"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN)
    (repo / "explore.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "start")
    gated = tmp_path / "gated"
    gated.mkdir()
    (tmp_path / "go").touch()  # its trial runs to its end
    (gated / "gated.py").write_text(GATED.replace("GO", repr(str(tmp_path / "go"))))
    submit(lab, {"name": "scan", "framework": "pytorch", "code": {"path": str(gated)},
                 "replicas": {"master": {"count": 1}}, "command": "python gated.py {{ scale }}",
                 "tensorboard": {"enabled": True}, "sweep": {"parameters": {"scale": {"values": [1]}}}})

    page.goto(f"{lab.url}/lab/tree/project?token={lab.TOKEN}")
    page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
    train_notebooks_repo(page)
    form = page.locator(".jp-MainAreaWidget:not(.lm-mod-hidden) .jp-distrain-form")
    field = lambda path: form.locator(f'[data-field="{path}"]')  # noqa: E731
    roles = lambda: form.locator("[data-role]").evaluate_all("rows => rows.map(row => row.dataset.role)")  # noqa: E731
    expect(field("name").locator("input")).to_have_value("explore", timeout=30_000)
    # the code writes to DISTRAIN_LOG_DIR: TensorBoard is on
    expect(field("tensorboard.enabled").locator("input")).to_be_checked()
    # PyTorch's single replica is its master
    field("framework").locator("select").select_option("pytorch")
    expect(form.locator("[data-role]")).to_have_count(1)
    assert roles() == ["master"]

    # this machine has no GPU: the field says so and takes none; a GPU asked for is refused in its row
    table = form.locator(".jp-distrain-replicas-form")
    expect(table.locator("th", has_text="GPUs each")).to_contain_text("(none on this backend)")
    gpus = form.get_by_label("master gpus")
    expect(gpus).to_have_attribute("max", "0")
    expect(gpus).to_have_attribute("placeholder", "none on this backend")
    gpus.fill("1")
    refusal = table.locator(".jp-distrain-replica-errors [role=alert]")
    expect(refusal).to_contain_text("master: 1 GPUs requested (1 master x 1); this machine has 0", timeout=15_000)
    assert table.locator('[data-role="master"] + tr.jp-distrain-replica-errors').count() == 1  # right under it
    expect(gpus).to_have_attribute("aria-invalid", "true")
    expect(refusal).to_be_in_viewport()
    screenshot(page, "form-no-gpus")
    gpus.fill("")
    expect(refusal).to_have_count(0, timeout=15_000)

    form.get_by_label("Distributed").check()
    assert roles() == ["master", "worker"]
    expect(form.get_by_label("worker count")).to_have_value("2")
    field("command").locator("textarea").fill("python train.py")
    # which hyperparameter says its steps, under "more": one the job has not is refused under the field
    form.locator("summary", has_text="and more").click()
    steps = field("progress.steps").locator("input")
    steps.fill("iterations")
    expect(field("progress.steps").get_by_role("alert")).to_have_text(
        "names no hyperparameter: 'iterations'; the job's: none", timeout=15_000)
    steps.fill("")
    expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=15_000)
    form.get_by_role("button", name="Submit").click()
    expect(page.locator(".jp-distrain-job-view h2")).to_have_text("explore", timeout=30_000)
    first = api_get(lab, "jobs/explore")["spec"]["code"]["commit"]
    for n in (1, 2):
        (repo / "train.py").write_text(f"{TRAIN}print('commit {n}')\n")
        git(repo, "commit", "-qam", f"commit {n}")
    head = git(repo, "rev-parse", "HEAD")

    # the next form for this repository starts from that job, on the checkout of now
    train_notebooks_repo(page)
    expect(field("name").locator("input")).to_have_value("explore-2", timeout=30_000)
    expect(form.locator(".jp-distrain-prefilled")).to_contain_text("Filled in from explore")
    expect(field("framework").locator("select")).to_have_value("pytorch")
    assert roles() == ["master", "worker"]
    expect(form.get_by_label("worker count")).to_have_value("2")
    expect(field("tensorboard.enabled").locator("input")).to_be_checked()
    expect(field("code.commit").locator("input")).to_have_value(head)
    screenshot(page, "form-prefilled")

    # a clone asks: the same commit, or main as it is now
    open_panel(page)
    jobs = page.locator("#jupyter-distrain-panel .jp-distrain-jobs")
    expect(jobs.locator('[data-job="explore"] .jp-distrain-phase')).to_have_text("Succeeded", timeout=60_000)
    jobs.get_by_label("Clone and edit explore", exact=True).click()
    choice = form.get_by_role("radiogroup", name="Code the job runs")
    same = choice.get_by_label(f"Same commit as explore: {first[:7]}")
    expect(same).to_be_checked(timeout=30_000)
    now = choice.get_by_label(f"main as it is now: {head[:7]}, 2 commits newer")
    expect(now).to_be_visible(timeout=15_000)
    screenshot(page, "clone-code-choice")
    now.check()
    expect(field("code.commit").locator("input")).to_have_value("")
    same.check()
    expect(field("code.commit").locator("input")).to_have_value(first)
    ref = field("code.ref").locator("input")
    ref.fill("")
    ref.fill("main")  # the ref typed again: unpinned, for the server to pin at submit
    expect(field("code.commit").locator("input")).to_have_value("")
    expect(now).to_be_checked()
    expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=15_000)
    form.get_by_role("button", name="Submit").click()
    expect(page.locator(".jp-distrain-job-view h2", has_text="explore-2")).to_have_count(1, timeout=30_000)
    assert api_get(lab, "jobs/explore-2")["spec"]["code"]["commit"] == head

    # a restart names the commit and how far behind main it is, and can run main as it is now
    open_panel(page)
    jobs.get_by_label("Restart explore", exact=True).click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text(f"explore ran commit {first[:7]}, 2 commits behind main (now {head[:7]}).")
    screenshot(page, "restart-behind")
    dialog.get_by_role("button", name="Restart on main as it is now").click()
    deadline = time.monotonic() + 60  # the list says Succeeded of run 1 until the restart is made
    while (restarted := api_get(lab, "jobs/explore"))["run"] < 2 or restarted["phase"] != "Succeeded":
        assert time.monotonic() < deadline, restarted
        time.sleep(0.2)
    assert restarted["spec"]["code"]["commit"] == head

    # a fine-tune shows what it resumes from first, and the roles its trial ran; its directory runs as it is
    page.locator('[data-job="scan"]').get_by_title("Open scan").click()
    view = page.locator(".jp-distrain-job-view", has=page.locator("h2", has_text="scan"))
    view.get_by_role("button", name="Fine-tune the best").click(timeout=60_000)
    expect(field("name").locator("input")).to_have_value("scan-best", timeout=30_000)
    resume = field("resume_from").locator("input")
    expect(resume).to_have_value("job:scan-1")
    expect(resume).to_be_in_viewport()
    assert form.locator("input, select, textarea").first.get_attribute("value") == "job:scan-1"
    assert roles() == ["master"]
    expect(form.locator(".jp-distrain-warning")).to_have_text(
        [f"scan-1 ran the files of {gated}; this job runs them as they are when it starts: a directory is not pinned "
         "to a commit."])
    screenshot(page, "finetune-resume-from")
    open_panel(page)
    jobs.locator('[data-job="scan"] .jp-distrain-trials-toggle').click()
    jobs.get_by_label("Restart scan-1").click()
    expect(dialog).to_contain_text(re.compile(f"scan-1 runs the files of {gated} as they are when its run starts"))
    dialog.get_by_role("button", name="Cancel").click()
