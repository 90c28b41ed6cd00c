"""The new-job form's environment variables and link_as in a real browser (as test_panel.py, whose fixtures it
uses): rows for every replica and for a role, a placeholder in a value, a name distrain sets refused in its row,
the data's directory linked into the working copy; the job runs with them and a clone shows them again."""

import re
import urllib.request

from playwright.sync_api import expect
from test_panel import api_get, assert_accessible, empty_repo, lab, page, screenshot  # noqa: F401 (fixtures)
from test_panel_form import train_notebooks_repo

COMMAND = ("python -c \"import os; print('greeting', os.environ['GREETING'], '|', os.environ['NOTE'], '|', "
           "open('data/input.txt').read())\"")


def test_env_rows_for_all_replicas_and_a_role_a_refused_name_and_link_as_reach_the_job(lab, page, tmp_path):
    empty_repo(lab.root_dir / "project")
    data = tmp_path / "data"
    data.mkdir()
    (data / "input.txt").write_text("the input")
    page.goto(f"{lab.url}/lab/tree/project?token={lab.TOKEN}")
    page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
    train_notebooks_repo(page)
    form = page.locator(".jp-MainAreaWidget:not(.lm-mod-hidden) .jp-distrain-form")
    field = lambda path: form.locator(f'[data-field="{path}"]')  # noqa: E731
    expect(field("name").locator("input")).to_have_value("explore", timeout=30_000)
    field("name").locator("input").fill("envy")
    field("command").locator("textarea").fill(COMMAND)
    section = form.locator("fieldset", has=page.locator("legend", has_text=re.compile("^Environment$")))
    expect(section.locator(".jp-distrain-env-row")).to_have_count(0)  # none until added; the spec has no env

    # one variable for every replica, one for the worker with a placeholder; a new row's name is focused
    add = section.get_by_role("button", name="Add variable")
    add.click()
    expect(section.get_by_label("Variable name")).to_be_focused()
    page.keyboard.type("GREETING")
    section.get_by_label("Value of GREETING").fill("hello world")
    add.click()
    section.get_by_label("Variable name").last.fill("NOTE")
    expect(section.get_by_label("For NOTE").locator("option")).to_have_text(["All replicas", "worker"])
    section.get_by_label("For NOTE").select_option("worker")
    section.get_by_label("Value of NOTE for worker").fill("from {{ job }}")

    # the data: a host directory, linked as data in the working copy; Link as only once there is one
    expect(field("data.link_as")).to_have_count(0)
    field("data").locator("select").select_option("host_path")
    form.get_by_label("Input data host directory").fill(str(data))
    link = form.get_by_label("Input data: link as")
    expect(link).to_have_attribute("aria-describedby", re.compile(".+"))
    expect(field("data.link_as").locator(".jp-distrain-help")).to_contain_text("relative to its working copy")
    link.fill("../../data")
    expect(field("data.link_as").locator(".jp-distrain-error")).to_contain_text("not allowed", timeout=15_000)
    link.fill("data")
    expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=15_000)

    # a name distrain sets: refused in its row, for every replica and for a role; Submit is refused too
    add.click()
    section.get_by_label("Variable name").last.fill("DISTRAIN_JOB")
    section.get_by_label("Value of DISTRAIN_JOB").fill("mine")
    row = section.locator('[data-env="DISTRAIN_JOB"]')
    refusal = row.locator(".jp-distrain-error")
    expect(refusal).to_contain_text("DISTRAIN_JOB is set by distrain", timeout=15_000)
    expect(row.get_by_label("Variable name")).to_have_attribute("aria-invalid", "true")
    expect(form.locator(".jp-distrain-form-status")).to_have_text("Fix the error above to submit.")
    page.keyboard.press("Control+Enter")  # Submit, aria-disabled: refused, the focus on why
    expect(refusal).to_be_focused()
    section.get_by_label("For DISTRAIN_JOB").select_option("worker")
    expect(section.locator('[data-env="worker.DISTRAIN_JOB"] .jp-distrain-error')).to_contain_text(
        "set by distrain", timeout=15_000)
    expect(section.locator(".jp-distrain-error")).to_have_count(1)  # in its row only, not the replicas table's too
    expect(form.locator(".jp-distrain-replica-errors")).to_have_count(0)
    screenshot(page, "form-env")
    assert_accessible(page, ".jp-MainAreaWidget:not(.lm-mod-hidden) .jp-distrain-form")
    assert api_get(lab, "jobs") == []
    section.get_by_role("button", name="Remove DISTRAIN_JOB for worker").click()
    expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=15_000)
    form.get_by_role("button", name="Submit").click()

    view = page.locator(".jp-MainAreaWidget:not(.lm-mod-hidden) .jp-distrain-job-view")
    expect(view.locator("h2")).to_have_text("envy", timeout=30_000)
    spec = api_get(lab, "jobs/envy")["spec"]
    assert spec["env"] == {"GREETING": "hello world"}
    assert spec["replicas"]["worker"]["env"] == {"NOTE": "from {{ job }}"}
    assert spec["data"] == {"host_path": str(data), "link_as": "data"}
    expect(view.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Succeeded", timeout=60_000)
    request = urllib.request.Request(f"{lab.url}/distrain/api/jobs/envy/logs", headers=lab.headers)
    with urllib.request.urlopen(request, timeout=30) as r:
        log = r.read().decode()
    assert "greeting hello world | from envy | the input" in log, log

    # a clone fills the rows and the link; a single replica's rows follow it to PyTorch's master
    view.get_by_label("Clone and edit envy").click()
    expect(field("name").locator("input")).to_have_value("envy-2", timeout=30_000)
    expect(section.get_by_label("Value of GREETING")).to_have_value("hello world")
    expect(section.get_by_label("For NOTE")).to_have_value("worker")
    expect(section.get_by_label("Value of NOTE for worker")).to_have_value("from {{ job }}")
    expect(form.get_by_label("Input data: link as")).to_have_value("data")
    field("framework").locator("select").select_option("pytorch")
    expect(section.get_by_label("For NOTE")).to_have_value("master")
    form.get_by_label("Distributed").check()
    expect(section.get_by_label("For NOTE").locator("option")).to_have_text(["All replicas", "master", "worker"])
    # a role the next framework has not: its row stays, said unsent, and is not sent
    field("framework").locator("select").select_option("python")
    expect(section.get_by_label("For NOTE")).to_have_value("master")
    expect(section.get_by_label("For NOTE")).to_have_accessible_description(re.compile("no master now: not sent"))
    expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=15_000)
    assert_accessible(page, ".jp-MainAreaWidget:not(.lm-mod-hidden) .jp-distrain-form")
