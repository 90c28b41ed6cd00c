"""The JupyterLab panel in a real browser (system Chromium through Playwright) against a real JupyterLab."""

import getpass
import json
import os
import platform
import re
import shutil
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from jupyter_distrain import hints

from conftest import CLI, EXAMPLES, REPO, JupyterServer, assert_nothing_left, wait
from stored import jobs_in, sweep_in
from webhooks import Receiver

ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def lab(tmp_path):
    """A real JupyterLab, whose webhooks may reach a receiver on loopback and carry links to it; the jobs a test
    leaves are deleted after it (they outlive the server), and nothing of them may remain."""
    server = JupyterServer(tmp_path, "--Distrain.webhook_allow_private=True", app="lab", public=True)
    yield server
    for job in api_get(server, "jobs"):
        request = urllib.request.Request(f"{server.url}/distrain/api/jobs/{job['name']}", method="DELETE",
                                         headers=server.headers)
        try:
            urllib.request.urlopen(request, timeout=60).close()
        except urllib.error.HTTPError as e:
            assert e.code == 404, e  # a sweep's trial, deleted with it

    server.stop()
    assert_nothing_left(server.root)


@contextmanager
def lab_page(server: JupyterServer, path: str = "lab"):
    """A browser page on the server's JupyterLab at `path`, once its splash screen is gone."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{server.url}/{path}?token={server.TOKEN}")
        page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
        yield page
        browser.close()


@pytest.fixture
def page(lab):
    with lab_page(lab) as page:
        yield page


def open_panel(page, panel_id: str = "jupyter-distrain-panel") -> None:
    """Show a side panel. JupyterLab may still be restoring its layout, which can show or hide
    side panels, and a click on the tab of a shown panel collapses it: so click until it stays shown."""
    tab = page.locator(f'.jp-SideBar .lm-TabBar-tab[data-id="{panel_id}"]')
    panel = page.locator(f"#{panel_id}")
    for _ in range(30):
        if not panel.is_visible():
            tab.click()
        page.wait_for_timeout(500)
        if panel.is_visible():
            page.wait_for_timeout(500)
            if panel.is_visible():
                return
    expect(panel).to_be_visible()


def submit(server: JupyterServer, spec: dict) -> None:
    request = urllib.request.Request(f"{server.url}/distrain/api/jobs", data=json.dumps(spec).encode(),
                                     method="POST", headers=server.headers)
    assert urllib.request.urlopen(request, timeout=60).status == 201


def screenshot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


AXE = REPO / "node_modules" / "axe-core" / "axe.min.js"  # a devDependency: installed by the extension's build


def assert_accessible(page, where: str) -> None:
    """axe-core finds no violation, of any severity, in what `where` (a CSS selector) selects on the page."""
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    violations = page.evaluate("""async where => (await axe.run(where, {resultTypes: ['violations']})).violations
        .map(v => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.map(n => n.target.join(' ')).join(', ')}`)""", where)
    assert violations == [], "\n".join(violations)


def test_sidebar_lists_jobs_live_and_acts_on_them(lab, page):
    code = {"path": str(EXAMPLES / "python")}
    submit(lab, {"name": "quick", "code": code, "command": "python train.py --epochs 5"})
    submit(lab, {"name": "sleeper", "code": code, "command": "sleep 600"})
    broken = "broken-learning-rate-experiment-number-one"
    submit(lab, {"name": broken, "code": code, "command": "python train.py --learning-rate -1"})

    # the launcher opens once JupyterLab has restored its layout, after the splash screen is gone
    expect(page.locator(".jp-LauncherCard", has_text="Training Job")).to_be_visible(timeout=60_000)
    open_panel(page)
    jobs = page.locator(".jp-distrain-jobs")
    row = lambda name: jobs.locator(f'[data-job="{name}"]')  # noqa: E731
    expect(row("quick").locator(".jp-distrain-phase")).to_have_text("Succeeded", timeout=60_000)
    expect(row("sleeper").locator(".jp-distrain-phase")).to_have_text("Running", timeout=60_000)
    expect(row("sleeper").locator(".jp-distrain-ready")).to_have_text("1/1")
    expect(jobs.locator(".jp-distrain-owner")).to_have_count(0)  # one owner's jobs
    # a failed job says why in the list; a long name wraps at its hyphens only
    expect(row(broken).locator(".jp-distrain-why")).to_contain_text("exited with code 2", timeout=60_000)
    wrapped_after = row(broken).locator(".jp-distrain-name").evaluate("""name => {
        const text = name.firstChild, range = document.createRange(), after = [];
        for (let i = 1, top = null; i < text.length; i++) {
            range.setStart(text, i); range.setEnd(text, i + 1);
            const y = range.getBoundingClientRect().top;
            if (top !== null && y > top + 1) after.push(text.data[i - 1]);
            top = y;
        }
        return after;
    }""")
    assert wrapped_after and set(wrapped_after) == {"-"}, wrapped_after
    # nothing changes now: the list's next refresh asks what changed since the version it holds, and no job
    # crosses the wire again
    with page.expect_response(lambda r: "/distrain/api/job-changes?since=" in r.url, timeout=60_000) as refreshed:
        pass
    assert {**refreshed.value.json(), "version": ""} == {"version": "", "complete": False, "jobs": [], "removed": []}
    screenshot(page, "panel-jobs")
    assert_accessible(page, "#jupyter-distrain-panel")

    jobs.get_by_label("Filter jobs").fill("sleep")
    expect(jobs.locator("[data-job]")).to_have_count(1)
    jobs.get_by_label("Filter jobs").fill("")

    jobs.get_by_label("Stop sleeper").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Stop").click()  # stop asks first
    expect(row("sleeper").locator(".jp-distrain-phase")).to_have_text("Stopped", timeout=60_000)
    expect(jobs.get_by_label("Stop sleeper")).to_have_count(0)

    jobs.get_by_label("Delete quick").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Delete").click()
    expect(row("quick")).to_have_count(0, timeout=30_000)
    with urllib.request.urlopen(urllib.request.Request(f"{lab.url}/distrain/api/jobs", headers=lab.headers)) as r:
        assert [job["name"] for job in json.load(r)] == ["sleeper", broken]
    assert_nothing_left(Path(lab.root))


def test_ten_thousand_jobs_are_drawn_a_window_at_a_time(tmp_path):
    """10,000 jobs, made in the store and not run (a sweep of 1,000 trials among them): the sidebar has only the
    rows in view in the page (and a few around), wherever it is scrolled; the filter finds one among them; the
    sweep's 1,000 trials unfold as rows of the same window, and its view's table of them is windowed too. Its
    refreshes bring only what changed: a job deleted and one made meanwhile."""
    root = tmp_path / "distrain-home"
    root.mkdir()
    jobs_in(root, 8999, workers=0)
    sweep, trials = "sweep", sweep_in(root, 1000, "sweep")  # made after the others: the list's last rows
    server = JupyterServer(tmp_path, app="lab")
    try:
        with lab_page(server) as page:
            open_panel(page)
            jobs = page.locator(".jp-distrain-jobs")
            rows, scroller = jobs.locator("[data-job]"), jobs.locator(".jp-distrain-scroller")
            expect(jobs.locator('[data-job="job-0000"]')).to_be_visible(timeout=60_000)
            assert 0 < rows.count() <= WINDOW, rows.count()
            scroller.evaluate("list => list.scrollTop = list.scrollHeight")
            expect(jobs.locator(f'[data-job="{sweep}"]')).to_be_visible()
            assert rows.count() <= WINDOW and not jobs.locator('[data-job="job-0000"]').count()

            jobs.get_by_title(f"Open {sweep}", exact=True).click()  # its view: the trials' table is windowed too
            view = page.locator(".jp-distrain-job-view", has=page.locator("h2", has_text=sweep))
            trial_rows = view.locator(".jp-distrain-trials tbody tr[data-trial]")
            expect(trial_rows.first).to_have_attribute("data-trial", trials[0], timeout=60_000)
            assert trial_rows.count() <= WINDOW, trial_rows.count()
            view.locator(".jp-distrain-trials-scroll").evaluate("table => table.scrollTop = table.scrollHeight")
            expect(view.locator(f'[data-trial="{trials[-1]}"]')).to_be_visible()
            assert trial_rows.count() <= WINDOW and not view.locator(f'[data-trial="{trials[0]}"]').count()
            view.get_by_role("columnheader", name="lr").get_by_role("button").click()
            view.get_by_role("columnheader", name="lr").get_by_role("button").click()  # the highest first
            view.locator(".jp-distrain-trials-scroll").evaluate("table => table.scrollTop = 0")
            expect(trial_rows.first).to_have_attribute("data-trial", trials[-1])

            jobs.locator(f'[data-job="{sweep}"] .jp-distrain-trials-toggle').click()
            scroller.evaluate("list => list.scrollTop = list.scrollHeight")
            expect(jobs.locator(f'[data-job="{trials[-1]}"]')).to_be_visible()
            assert rows.count() <= WINDOW
            jobs.get_by_label("Filter jobs").fill("job-4321")
            expect(rows).to_have_count(1)
            expect(jobs.locator('[data-job="job-4321"]')).to_be_visible()

            with page.expect_response(lambda response: "/job-changes?since=" in response.url) as refreshed:
                pass
            assert json.loads(refreshed.value.body())["jobs"] == []  # a refresh sends again nothing unchanged
            assert server.rest("DELETE", "jobs/job-4321").status_code == 204
            [late] = jobs_in(root, 1, workers=0, prefix="late")
            expect(rows).to_have_count(0)
            jobs.get_by_label("Filter jobs").fill("late")
            expect(jobs.locator(f'[data-job="{late}"]')).to_be_visible()
    finally:
        server.stop()


WINDOW = 60  # rows in the page at most: the sidebar shows about 15 of them


# Records each browser notification the page makes, and lets a test hide the page (as switching to another tab does).
BROWSER_NOTIFICATIONS = """
window.told = [];
const Shown = window.Notification;
window.Notification = class extends Shown {
  constructor(title, options) {
    window.told.push({title, body: (options && options.body) || ''});
    super(title, options);
  }
  static get permission() { return Shown.permission; }
  static requestPermission() { return Shown.requestPermission(); }
};
Object.defineProperty(document, 'hidden', {configurable: true, get: () => window.hiddenNow === true});
Object.defineProperty(document, 'visibilityState', {configurable: true,
                                                   get: () => window.hiddenNow ? 'hidden' : 'visible'});
window.showPage = shown => {
  window.hiddenNow = !shown;
  document.dispatchEvent(new Event('visibilitychange'));
};
"""


def test_a_job_ending_while_the_page_is_hidden_is_told_by_the_browser(lab):
    """With the browser's permission (granted here as a person grants it, asked at their first submit), a job that
    ends while the page is hidden is told of by a browser notification as well as JupyterLab's; one that ends while
    the page is shown, by JupyterLab's alone."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.grant_permissions(["notifications"], origin=lab.url)
        context.add_init_script(BROWSER_NOTIFICATIONS)
        page = context.new_page()
        page.goto(f"{lab.url}/lab?token={lab.TOKEN}")
        page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
        open_panel(page)
        jobs = page.locator("#jupyter-distrain-panel .jp-distrain-jobs")
        submit(lab, {"name": "while-away", "command": "sleep 6"})
        expect(jobs.locator('[data-job="while-away"] .jp-distrain-phase')).to_have_text("Running", timeout=30_000)
        page.evaluate("showPage(false)")
        told = lambda: page.evaluate("window.told")  # noqa: E731
        wait(told, "a browser notification", 60)
        assert told() == [{"title": "Training job while-away succeeded", "body": "Completed: worker-0 succeeded"}]
        page.evaluate("showPage(true)")
        expect(page.locator(".jp-Notification-Toast-info", has_text="while-away succeeded")).to_be_visible()

        submit(lab, {"name": "while-here", "command": "sleep 4"})
        expect(jobs.locator('[data-job="while-here"] .jp-distrain-phase')).to_have_text("Running", timeout=30_000)
        expect(page.locator(".jp-Notification-Toast-info", has_text="while-here succeeded")).to_be_visible(
            timeout=30_000)
        assert len(told()) == 1
        browser.close()


def test_a_webhook_set_in_the_panel_hears_of_a_job_and_its_link_opens_the_jobs_view(lab, page):
    """The sidebar's webhook dialog sets the URL (shown back by its host only) and sends a test event; a job's end is
    posted with the link to it in this JupyterLab, which opens the job's view. A job that failed as the product knows
    (a known message) has its hint under its reason there."""
    receiver = Receiver()
    try:
        open_panel(page)
        page.locator(".jp-distrain-webhook-button").click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text("You have none.")
        dialog.get_by_label("Webhook URL").fill(receiver.url("/T0KEN"))
        dialog.get_by_role("button", name="Save").click()
        said = dialog.locator(".jp-distrain-webhook-said")
        expect(said).to_have_text("Saved: the jobs you submit or restart from now on post to it.")
        expect(dialog).to_contain_text(f"Yours: http://127.0.0.1:{receiver.server.server_address[1]}/...")
        assert "T0KEN" not in dialog.inner_text() and dialog.get_by_label("Webhook URL").input_value() == ""
        dialog.get_by_role("button", name="Send a test").click()
        expect(said).to_have_text("A test event was delivered.")
        assert [body["event"] for _, body in receiver.posts] == ["test"]
        assert_accessible(page, ".jp-Dialog")
        screenshot(page, "webhook")
        dialog.get_by_role("button", name="Close").click()

        submit(lab, {"name": "linked", "command": "true"})
        [ended] = receiver.wait("linked", 1)
    finally:
        receiver.close()
    assert (ended["phase"], ended["link"]) == ("Succeeded", f"{lab.url}/lab?distrain-job=linked")
    page.goto(f"{ended['link']}&token={lab.TOKEN}")
    view = page.locator(".jp-distrain-job-view")
    expect(view.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Succeeded", timeout=60_000)
    assert "distrain-job" not in page.url  # once opened, a reload opens it no more

    # a failure the product knows says what to do next under its reason
    raised = "raise RuntimeError('Found no NVIDIA driver on your system')"
    submit(lab, {"name": "no-driver", "command": f'python -c "{raised}"'})
    page.goto(f"{lab.url}/lab?distrain-job=no-driver&token={lab.TOKEN}")
    view = page.get_by_role("tabpanel", name="no-driver")  # beside the first job's view, when restored open
    expect(view.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Failed", timeout=60_000)
    expect(view.locator(".jp-distrain-hint")).to_have_text(f"Hint: {hints.hint('Found no NVIDIA driver')}")


def test_a_slow_scalars_endpoint_delays_neither_the_job_list_nor_its_notices(lab, page):
    """The scalars (the list's sparklines) are read after the list is shown: with their answers held back
    longer than any wait here, a new job still shows at once, its phase moves on and its end is announced.
    A job's scalars are read once at a time, not again on each refresh while the first read waits, and a
    few jobs' at a time: the browser opens six connections to the server, for everything."""
    held = []  # the scalars requests, answered only at the end
    page.route(re.compile(r"/distrain/api/jobs/[^/?]+/scalars"), lambda route: held.append(route))
    asked = lambda: [route.request.url.split("/jobs/")[1] for route in held]  # noqa: E731
    open_panel(page)
    expect(page.locator(".jp-distrain-empty")).to_have_text("No training jobs yet.", timeout=30_000)
    submit(lab, {"name": "unhurried", "command": "sleep 600"})
    jobs = page.locator("#jupyter-distrain-panel .jp-distrain-jobs")
    phase = jobs.locator('[data-job="unhurried"] .jp-distrain-phase')
    expect(phase).to_have_text("Running", timeout=30_000)
    request = urllib.request.Request(f"{lab.url}/distrain/api/jobs/unhurried/stop", method="POST",
                                     headers=lab.headers)
    assert urllib.request.urlopen(request, timeout=60).status == 200
    expect(phase).to_have_text("Stopped", timeout=30_000)
    expect(page.locator(".jp-Notification-Toast-info", has_text="unhurried stopped")).to_be_visible(timeout=30_000)
    assert asked() == ["unhurried/scalars"]

    for n in range(5):
        submit(lab, {"name": f"quick-{n}", "command": "true"})
    expect(jobs.locator(".jp-distrain-phase", has_text="Succeeded")).to_have_count(5, timeout=30_000)
    assert len(asked()) <= 3 and len(set(asked())) == len(asked()), asked()
    for route in held:
        route.continue_()


def test_an_admins_panel_says_whose_each_job_is_and_the_form_shows_the_rules(tmp_path):
    """With c.Distrain.see_all_owners the list holds several owners' jobs, each with its owner; a user's
    own panel (the test above) shows no owner. The form shows the admin's rules under the fields they
    limit, offers the GPU types, and the server refuses beyond the rules as the person types."""
    data = tmp_path / "team-data"
    data.mkdir()
    config_dir = tmp_path / "jupyter-config"
    config_dir.mkdir()
    (config_dir / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {
        "see_all_owners": True, "allowed_host_paths": [str(data)], "allowed_images": ["registry.example.com/*"],
        "max_replicas": 3, "max_gpus_per_replica": 1, "max_gpus_per_job": 2,
        "gpu_types": {"a100": {"node_selector": {"gpu": "a100"}}}}}))
    admin = JupyterServer(tmp_path, app="lab", env={**os.environ, "JUPYTER_CONFIG_DIR": str(config_dir)})
    try:
        code = {"path": str(EXAMPLES / "python")}
        submit(admin, {"name": "mine", "code": code, "command": "true"})
        bob = CLI(admin.root, tmp_path)
        bob.env["JUPYTERHUB_USER"] = "bob"
        bob("submit", "--name", "bobs", "--code", str(EXAMPLES / "python"), "true")
        with lab_page(admin) as page:
            open_panel(page)
            jobs = page.locator(".jp-distrain-jobs")
            expect(jobs.locator('[data-job="bobs"] .jp-distrain-owner')).to_have_text("bob", timeout=30_000)
            expect(jobs.locator('[data-job="mine"] .jp-distrain-owner')).to_have_text(getpass.getuser())
            jobs.get_by_label("Filter jobs").fill("bob")
            expect(jobs.locator("[data-job]")).to_have_count(1)
            screenshot(page, "panel-owners")

            page.get_by_role("button", name="New job").click()
            form = page.locator(".jp-distrain-form")
            field = lambda path: form.locator(f'[data-field="{path}"]')  # noqa: E731
            field("name").locator("input").fill("ruled", timeout=30_000)
            field("command").locator("textarea").fill("true")
            expect(form.locator(".jp-distrain-limit", has_text="At most 3 replicas in all, 1 GPU per replica, "
                                                                "2 GPUs per job")).to_be_visible()
            expect(field("image").locator(".jp-distrain-limit")).to_have_text("Allowed here: registry.example.com/*")
            gpus = form.get_by_label("worker gpus")
            expect(gpus).to_have_attribute("max", "0")  # the admin allows 1, this machine has none
            expect(form.get_by_label("worker gpu type").locator("option")).to_have_text(["any", "a100"])
            gpus.fill("2")
            expect(form.get_by_text("worker: 2 GPUs per worker; a replica has at most 1 here")).to_be_visible(
                timeout=15_000)
            gpus.fill("")
            field("image").locator("input").fill("docker.io/library/python:3")
            expect(field("image").locator(".jp-distrain-error")).to_contain_text(
                "is not an image jobs may use here", timeout=15_000)
            field("image").locator("input").fill("registry.example.com/python:3")
            field("output").locator("select").select_option("host_path")
            host = field("output").get_by_label("Output host directory")
            expect(host).to_have_value(str(data))
            expect(field("output").locator(".jp-distrain-limit")).to_contain_text(f"Host directories allowed: {data}")
            host.fill("/etc")
            expect(field("output").locator(".jp-distrain-error")).to_contain_text(
                "'/etc' is outside the host directories jobs may mount here", timeout=15_000)
            screenshot(page, "form-limits")
            host.fill(str(data / "ruled"))
            expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=15_000)
    finally:
        admin.stop()
        assert_nothing_left(Path(admin.root))


def notebook_repo(directory: Path) -> Path:
    """A git repository (no remote) with the TensorFlow parameter-server example, its distrain.yaml
    naming no code (so the form takes the repository's), and a notebook."""
    shutil.copytree(EXAMPLES / "tf-ps", directory)
    spec = directory / "distrain.yaml"
    spec.write_text(spec.read_text().replace("code: {path: .}\n", ""))
    (directory / "train.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    for command in (["init", "-q", "-b", "main"], ["add", "."],
                    ["-c", "user.email=dev@example.invalid", "-c", "user.name=dev", "commit", "-qm", "example"]):
        subprocess.run(["git", *command], cwd=directory, check=True)
    return directory


def test_train_a_notebooks_repo_from_the_form_logs_and_tensorboard(lab, page):
    repo = notebook_repo(lab.root_dir / "project")
    warnings = []  # the browser's about the page, e.g. a sandbox that is none
    page.on("console", lambda m: warnings.append(m.text) if m.type in ("warning", "error") and "sandbox" in m.text
            else None)
    page.goto(f"{lab.url}/lab/tree/project?token={lab.TOKEN}")
    open_panel(page, "filebrowser")
    page.locator('.jp-DirListing-item[data-file-type="notebook"]').click(button="right")
    page.get_by_text("Train this notebook's repo").click()

    form = page.locator(".jp-distrain-form")
    field = lambda path: form.locator(f'[data-field="{path}"]')  # noqa: E731
    expect(field("name").locator("input")).to_have_value("tf-ps", timeout=30_000)
    expect(field("framework").locator("select")).to_have_value("tensorflow")
    expect(field("code.git").locator("input")).to_have_value(str(repo))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    expect(field("code.commit").locator("input")).to_have_value(commit)
    expect(form.locator(".jp-distrain-warning")).to_have_text(  # the server's notes, as they are
        [f"The repository has no remote: the job clones it from {repo}, which only a backend on this machine can read."])
    expect(form.locator('[data-role="worker"]').get_by_label("worker count")).to_have_value("2")
    expect(form.get_by_label("Value of steps")).to_have_value("200")

    field("name").locator("input").fill("Bad_Name")
    expect(field("name").locator(".jp-distrain-error")).to_contain_text("\"Bad_Name\" is not allowed", timeout=10_000)
    screenshot(page, "form-error")
    field("name").locator("input").fill("panel-tf")
    form.get_by_label("Value of steps").fill("600")

    # New git credentials go to the server once, then are chosen by name; the password is never shown.
    credentials = field("code.credentials")
    credentials.get_by_role("button", name="New credentials…").click()
    credentials.get_by_label("credentials name").fill("team-git")
    credentials.get_by_label("credentials username").fill("alice")
    credentials.get_by_label("credentials password").fill("pa55-only-on-the-server")
    expect(credentials.get_by_label("credentials host")).to_have_value("")  # a local repository has no host
    credentials.get_by_label("credentials host").fill("git.example.com")
    credentials.get_by_role("button", name="Store").click()
    expect(credentials.locator("select")).to_have_value("team-git")
    expect(credentials.get_by_label("credentials password")).to_have_count(0)
    stored = json.loads((lab.root / "secrets" / "team-git.json").read_text())
    assert stored == {"username": "alice", "password": "pa55-only-on-the-server", "host": "git.example.com",
                      "owner": getpass.getuser()}
    credentials.locator("select").select_option("")  # this repository is public
    expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=10_000)
    expect(field("name").locator(".jp-distrain-error")).to_have_count(0)
    screenshot(page, "form")
    assert_accessible(page, ".jp-distrain-form-widget")
    form.get_by_role("button", name="Save as distrain.yaml").click()
    expect(form.get_by_text("Saved to project/distrain.yaml")).to_be_visible()
    assert "name: panel-tf" in (repo / "distrain.yaml").read_text()
    assert commit not in (repo / "distrain.yaml").read_text()
    form.get_by_role("button", name="Submit").click()

    # Submitting opens the job's view, its logs inside.
    view = page.locator(".jp-distrain-job-view")
    expect(view.locator("h2")).to_have_text("panel-tf", timeout=30_000)
    expect(view.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Running", timeout=60_000)
    expect(view.locator("[data-replica]")).to_have_count(4)
    expect(view.locator('[data-replica="chief-0"] .jp-distrain-node')).to_have_text(platform.node())
    open_panel(page)
    in_list = page.locator('#jupyter-distrain-panel [data-job="panel-tf"] .jp-distrain-phase')
    expect(in_list).to_have_text("Running", timeout=30_000)
    logs = view.locator(".jp-distrain-logs")
    expect(logs.locator(".jp-distrain-logline", has_text="serving at").first).to_be_visible(timeout=60_000)
    expect(logs.locator(".jp-distrain-logline", has_text="step ").first).to_be_visible(timeout=120_000)
    assert view.locator(".jp-distrain-job-header .jp-distrain-phase").inner_text() == "Running"  # lines arrive live
    screenshot(page, "logs")
    assert_accessible(page, ".jp-distrain-job-logs")

    logs.get_by_label("Search the log").fill("loss")
    expect(logs.locator(".jp-distrain-logs-status")).to_contain_text("matching")
    assert all("loss" in line for line in logs.locator(".jp-distrain-logline").all_inner_texts())
    logs.get_by_label("Search the log").fill("")

    # Pausing closes the stream; resuming reopens it at its cursor: nothing lost, nothing twice.
    status = logs.locator(".jp-distrain-logs-status")
    logs.get_by_label("Pause").click()
    expect(status).to_contain_text("Paused")
    page.wait_for_timeout(2000)
    logs.get_by_label("Resume").click()
    expect(status).not_to_contain_text("Paused")
    logs.get_by_label("Search the log").fill("serving at")
    expect(status).to_contain_text("3 matching")  # ps-0, worker-0, worker-1
    logs.get_by_label("Search the log").fill("")

    page.locator('.lm-DockPanel .lm-TabBar-tab[data-id="jupyter-distrain-job-panel-tf"]').click()
    view.locator('[data-replica="chief-0"]').get_by_role("button", name="TensorBoard").click()
    board = page.frame_locator('.jp-MainAreaWidget:not(.lm-mod-hidden) iframe')
    expect(board.get_by_text("loss").first).to_be_visible(timeout=120_000)
    screenshot(page, "tensorboard")
    assert_accessible(page, ".jp-MainAreaWidget:not(.lm-mod-hidden)")  # the tab around TensorBoard's frame
    assert warnings == [], warnings

    # After a reload, the tabs come back: the TensorBoard shows its tags again.
    page.reload()
    page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
    tab = lambda widget_id: page.locator(f'.lm-DockPanel .lm-TabBar-tab[data-id="{widget_id}"]')  # noqa: E731
    expect(tab("jupyter-distrain-tensorboard-panel-tf")).to_be_visible(timeout=30_000)
    expect(tab("jupyter-distrain-tensorboard-panel-tf")).to_have_text("panel-tf/chief-0 · TensorBoard")
    label = tab("jupyter-distrain-tensorboard-panel-tf").locator(".lm-TabBar-tabLabel")
    assert label.evaluate("label => label.scrollWidth <= label.clientWidth")  # whole: there is room for it
    tab("jupyter-distrain-tensorboard-panel-tf").click()
    expect(board.get_by_text("loss").first).to_be_visible(timeout=120_000)

    tab("jupyter-distrain-job-panel-tf").click()
    expect(view.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Succeeded", timeout=300_000)
    screenshot(page, "job")
    assert_accessible(page, ".jp-distrain-job-view-widget")
    view.get_by_role("button", name="TensorBoard (all replicas)").click()  # the job's one TensorBoard tab
    expect(page.locator('.lm-DockPanel .lm-TabBar-tab[data-id^="jupyter-distrain-tensorboard-"]')).to_have_count(1)
    expect(tab("jupyter-distrain-tensorboard-panel-tf")).to_have_text("panel-tf · TensorBoard")
    tab("jupyter-distrain-job-panel-tf").click()

    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").click()
    page.locator(".lm-Menu-item", has_text="Theme").first.hover()
    page.locator(".lm-Menu-item", has_text="JupyterLab Dark").first.click()
    expect(page.locator("body[data-jp-theme-light='false']")).to_have_count(1, timeout=30_000)
    page.wait_for_timeout(1000)
    screenshot(page, "job-dark")
    assert_accessible(page, ".jp-distrain-job-view-widget")
    view.locator(".jp-distrain-job-links").get_by_role("button", name="Logs").click()  # in a tab of their own
    logs = page.locator(".jp-distrain-logs-widget .jp-distrain-logs")
    expect(logs.locator(".jp-distrain-logs-status")).to_contain_text("Succeeded", timeout=30_000)
    screenshot(page, "logs-dark")
    assert_accessible(page, ".jp-distrain-logs-widget")
    tab("jupyter-distrain-tensorboard-panel-tf").click()
    assert_accessible(page, ".jp-MainAreaWidget:not(.lm-mod-hidden)")
    open_panel(page)
    expect(in_list).to_have_text("Succeeded")
    page.locator("#jupyter-distrain-panel").get_by_role("button", name="New job").click()
    expect(field("name").locator("input")).to_have_value("panel-tf", timeout=30_000)  # the saved distrain.yaml
    screenshot(page, "form-dark")
    assert_accessible(page, ".jp-distrain-form-widget, #jupyter-distrain-panel")
    expect(form.get_by_text("The server accepts this job.")).to_have_count(0)
    expect(field("name").locator(".jp-distrain-error")).to_contain_text("exists", timeout=10_000)
    form.get_by_role("button", name="Submit").press("Enter")  # refused: the focus goes to why
    expect(field("name").locator(".jp-distrain-error")).to_be_focused()
    saved = (repo / "distrain.yaml").read_text()  # nothing of this machine
    assert "commit" not in saved and "changes_from" not in saved and str(lab.root_dir) not in saved, saved

    tab("jupyter-distrain-job-panel-tf").click()
    view.get_by_label("Delete panel-tf").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Delete").click()
    expect(view).to_have_count(0, timeout=30_000)
    with urllib.request.urlopen(urllib.request.Request(f"{lab.url}/distrain/api/jobs", headers=lab.headers)) as r:
        assert json.load(r) == []
    assert_nothing_left(Path(lab.root))


def test_the_forms_include_my_changes_runs_the_notebooks_uncommitted_edit(lab, page):
    """A repository with an edit not committed: the form says so, and with "Include my changes" the job runs
    the edit (its code.snapshot lists it), the note gone. The job view shows what ran; edited again since,
    "Reproduce" runs what ran, not the edit of now."""
    repo = lab.root_dir / "edited"
    repo.mkdir()
    (repo / "train.py").write_text("print('as committed')\n")
    (repo / "distrain.yaml").write_text("name: edited\ncommand: python train.py\n")
    (repo / "explore.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    for command in (["init", "-q", "-b", "main"], ["add", "."],
                    ["-c", "user.email=dev@example.invalid", "-c", "user.name=dev", "commit", "-qm", "first"]):
        subprocess.run(["git", *command], cwd=repo, check=True)
    (repo / "train.py").write_text("print('edited, not committed')\n")
    page.goto(f"{lab.url}/lab/tree/edited?token={lab.TOKEN}")
    open_panel(page, "filebrowser")
    page.locator('.jp-DirListing-item[data-file-type="notebook"]').click(button="right")
    page.get_by_text("Train this notebook's repo").click()

    form = page.locator(".jp-distrain-form")
    uncommitted = form.locator(".jp-distrain-warning", has_text="Uncommitted work (changed files)")
    expect(uncommitted).to_have_count(1, timeout=30_000)
    form.get_by_label(re.compile("^Include my changes")).check()
    expect(uncommitted).to_have_count(0)
    expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=10_000)
    screenshot(page, "form-include-changes")
    form.get_by_role("button", name="Submit").click()

    view = page.locator(".jp-distrain-job-view")
    expect(view.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Succeeded", timeout=60_000)
    logs = view.locator(".jp-distrain-logs")
    expect(logs.locator(".jp-distrain-logline", has_text="edited, not committed")).to_be_visible(timeout=30_000)
    assert api_get(lab, "jobs/edited")["spec"]["code"]["snapshot"]["files"] == ["M train.py"]

    open_panel(page)
    page.locator('[data-job="edited"]').get_by_title("Open edited").click()
    ran = view.locator(".jp-distrain-provenance")
    expect(ran.locator(".jp-distrain-snapshot-files")).to_have_text("M train.py")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    expect(ran).to_contain_text(f"@ {head}")
    expect(ran).to_contain_text("python train.py")
    ran.get_by_text(re.compile(r"^\d+ packages$")).click()
    expect(ran.locator(".jp-distrain-packages li", has_text=re.compile("^jupyter-distrain==", re.I))).to_have_count(1)
    screenshot(page, "job-provenance")
    (repo / "train.py").write_text("print('edited again')\n")
    ran.get_by_role("button", name="Reproduce").click()
    again = page.locator(".jp-distrain-job-view", has=page.locator("h2", has_text="edited-2"))
    expect(again.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Succeeded", timeout=60_000)
    logged = urllib.request.urlopen(urllib.request.Request(
        f"{lab.url}/distrain/api/jobs/edited-2/logs", headers=lab.headers), timeout=30).read().decode()
    assert "[worker-0] edited, not committed\n" in logged and "edited again" not in logged

    # "Clone and edit" runs the same snapshot, or takes a fresh one of the checkout
    page.locator('[data-job="edited"]').get_by_label("Clone and edit edited").click()
    clone = page.locator(".jp-distrain-form")
    expect(clone.get_by_text("The server accepts this job.")).to_be_visible(timeout=30_000)
    clone.get_by_label(re.compile("^Take my changes as they are now")).check()
    expect(clone.get_by_text("The server accepts this job.")).to_be_visible(timeout=10_000)
    clone.get_by_role("button", name="Submit").click()
    fresh = page.locator(".jp-distrain-job-view", has=page.locator("h2", has_text="edited-3"))
    expect(fresh.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Succeeded", timeout=60_000)
    assert "[worker-0] edited again\n" in urllib.request.urlopen(urllib.request.Request(
        f"{lab.url}/distrain/api/jobs/edited-3/logs", headers=lab.headers), timeout=30).read().decode()


def test_the_job_view_charts_the_loss_while_the_job_writes_it(lab, page, tmp_path):
    """A line per replica of the job's loss, its last value moving as the replica writes more; another tag
    can be chosen. The job list's sparkline moves too. How long the job is kept once finished, then until
    when."""
    from test_server import EMIT

    code = tmp_path / "emit"
    code.mkdir()
    (code / "emit.py").write_text(EMIT)
    submit(lab, {"name": "live", "code": {"path": str(code)}, "command": "python emit.py",
                 "replicas": {"worker": {"count": 2}}, "tensorboard": {"enabled": True},
                 "policy": {"ttl_after_finished": "7d"}})
    open_panel(page)
    page.locator('[data-job="live"]').get_by_title("Open live").click()
    chart = page.locator(".jp-distrain-job-view .jp-distrain-scalars")
    for replica in ("worker-0", "worker-1"):  # each waits at step 2
        expect(chart.locator(f'li[data-run="{replica}"]')).to_have_text(f"{replica}: 0.3333 at step 2",
                                                                         timeout=60_000)
    expect(chart.locator("polyline")).to_have_count(2)
    sparkline = page.locator('[data-job="live"] .jp-distrain-sparkline')  # in the job list
    expect(sparkline).to_have_text("loss0.333")
    kept = page.locator(".jp-distrain-job-view .jp-distrain-expires")
    expect(kept).to_have_text("7d once finished, then deleted with its logs; the output stays")
    screenshot(page, "job-metrics")
    (lab.root / "jobs" / "live" / "workspace" / "go").touch()  # the replicas' working directory
    expect(chart.locator('li[data-run="worker-0"]')).to_have_text("worker-0: 0.02500 at step 39", timeout=60_000)
    expect(kept).to_contain_text(re.compile(r"^until .* \(in 6d\), then deleted with its logs"), timeout=30_000)
    expect(sparkline).to_have_text("loss0.0250")
    chart.get_by_label("Metric").select_option("learning_rate")
    expect(chart.locator('li[data-run="worker-1"]')).to_have_text("worker-1: 0.5000 at step 39",
                                                                   timeout=60_000)  # it may write after worker-0
    expect(chart.get_by_role("img")).to_have_attribute("aria-label", "learning_rate from 0.5 to 0.5 over steps 0 to 39")

    # restarted, the replicas write steps 0 to 2 again: the chart and the sparkline show this run, the first
    # run's lines are dashed apart (and can be hidden)
    expect(page.locator('[data-job="live"]')).to_contain_text("Succeeded", timeout=60_000)
    request = urllib.request.Request(f"{lab.url}/distrain/api/jobs/live/restart", method="POST", headers=lab.headers)
    urllib.request.urlopen(request, timeout=60).close()
    expect(chart.locator('li[data-run="worker-1"]')).to_have_text("worker-1: 0.5000 at step 2", timeout=60_000)
    expect(chart.locator("polyline:not([data-earlier])")).to_have_count(2)
    expect(chart.locator("polyline[data-earlier]")).to_have_count(2)
    expect(sparkline).to_have_text("loss0.333")
    screenshot(page, "job-metrics-restarted")
    chart.get_by_label("Earlier runs (dashed)").uncheck()
    expect(chart.locator("polyline[data-earlier]")).to_have_count(0)
    expect(chart.get_by_role("img")).to_have_attribute("aria-label", "learning_rate from 0.5 to 0.5 over steps 0 to 2")


def test_a_150k_line_log_is_drawn_a_screenful_at_a_time(lab, page):
    lines = 150_000
    submit(lab, {"name": "chatty", "command": f"python -c \"for i in range({lines}): print('line', i)\""})
    page.locator(".jp-LauncherCard", has_text="Training Job").wait_for()
    open_panel(page)
    page.locator('[data-job="chatty"]').get_by_title("Open chatty").click()
    page.locator(".jp-distrain-job-links").get_by_role("button", name="Logs").click()
    logs = page.locator(".jp-distrain-logs-widget .jp-distrain-logs")
    logs.get_by_label("Replica").select_option("worker-0")
    expect(logs.locator(".jp-distrain-logs-status")).to_contain_text(f"all lines shown · {lines} lines",
                                                                     timeout=120_000)
    expect(logs.locator(".jp-distrain-logline").last).to_contain_text(f"line {lines - 1}")
    assert logs.locator(".jp-distrain-logline").count() < 100  # only the rows in view (and a few more) exist
    logs.get_by_label("Search the log").fill("line 12345")
    expect(logs.locator(".jp-distrain-logs-status")).to_contain_text("11 matching")  # 12345 and 123450-123459
    screenshot(page, "logs-150k")


def test_a_refused_log_stream_ends_with_the_reason_and_is_not_retried(lab, page):
    """Run 1 of a job has two workers, run 2 (restarted with an edited spec) one: a logs tab on worker-1
    follows the restart to run 2, which has no worker-1 log. The server refuses that stream before it
    opens; the tab says why and does not retry, and neither does the same tab restored after a reload."""
    spec = {"name": "pair", "command": "sleep 600", "replicas": {"worker": {"count": 2}}}
    submit(lab, spec)
    open_panel(page)
    page.locator('[data-job="pair"]').get_by_title("Open pair").click()
    view = page.locator(".jp-distrain-job-view")
    view.locator('[data-replica="worker-1"]').get_by_role("button", name="Logs").click()
    logs = page.locator(".jp-distrain-logs-widget .jp-distrain-logs")
    status = logs.locator(".jp-distrain-logs-status")
    expect(logs.get_by_label("Replica")).to_have_value("worker-1")
    expect(logs.get_by_label("Replica").locator("option")).to_have_text(  # a local job's logs: setup, then replicas
        ["All replicas", "setup", "worker-0", "worker-1"])
    expect(status).to_contain_text("Following", timeout=30_000)

    streams = []
    page.on("websocket", lambda ws: streams.append(ws.url) if "/jobs/pair/logs/stream" in ws.url
            and "replica=worker-1" in ws.url else None)  # the tab's, not the job view's
    request = urllib.request.Request(f"{lab.url}/distrain/api/jobs/pair/restart", method="POST", headers=lab.headers,
                                     data=json.dumps({**spec, "replicas": {"worker": {"count": 1}}}).encode())
    assert urllib.request.urlopen(request, timeout=60).status == 200
    refused = "job 'pair' has no replica 'worker-1'; replicas: setup, worker-0"
    expect(status).to_contain_text(f"Run 2 · {refused}", timeout=30_000)
    page.wait_for_timeout(5000)
    assert len(streams) == 1 and "run=2" in streams[0], streams

    streams.clear()
    page.reload()
    page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
    page.locator('.lm-DockPanel .lm-TabBar-tab[data-id="jupyter-distrain-logs-pair"]').click()
    expect(status).to_contain_text(refused, timeout=30_000)
    page.wait_for_timeout(5000)
    assert len(streams) == 1, streams
    request = urllib.request.Request(f"{lab.url}/distrain/api/jobs/pair", method="DELETE", headers=lab.headers)
    assert urllib.request.urlopen(request, timeout=60).status == 204
    assert_nothing_left(Path(lab.root))


def test_every_tab_comes_back_after_a_reload_and_close_all_tabs_closes_them(lab, page):
    """A new-job form for the root directory is restored too; File > Close All Tabs closes the tabs
    without an error (JupyterLab's reactive toolbar throws on a tab shown and disposed at once)."""
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    submit(lab, {"name": "idle", "command": "sleep 600", "tensorboard": {"enabled": True}})
    page.locator(".jp-LauncherCard", has_text="Training Job").click()  # a form for the file browser's root
    expect(page.locator(".jp-distrain-form")).to_be_visible(timeout=30_000)
    open_panel(page)
    page.locator('[data-job="idle"]').get_by_title("Open idle").click()
    links = page.locator(".jp-distrain-job-links")
    links.get_by_role("button", name="Logs").click()
    page.locator(".lm-DockPanel .lm-TabBar-tab", has_text="idle").first.click()
    links.get_by_role("button", name="TensorBoard (all replicas)").click()
    tabs = page.locator(".lm-DockPanel .lm-TabBar-tab")
    expect(tabs).to_have_count(4)
    labels = tabs.all_inner_texts()

    def saved_tabs() -> list[str]:  # the main area's tabs in the saved workspace
        def widgets(area: dict) -> list[str]:
            if area.get("type") == "tab-area":
                return area["widgets"]
            return [name for child in area.get("children", []) for name in widgets(child)]
        for workspace in (lab.root.parent / "lab-workspaces").glob("*"):
            try:
                layout = json.loads(workspace.read_text())["data"].get("layout-restorer:data", {})
            except json.JSONDecodeError:  # being written now
                return []
            return widgets((layout.get("main") or {}).get("dock") or {})
        return []

    deadline = time.monotonic() + 30
    while len(saved_tabs()) < 4 and time.monotonic() < deadline:  # the workspace is saved a moment later
        time.sleep(0.2)
    page.reload()
    page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
    expect(tabs).to_have_count(4, timeout=30_000)
    assert sorted(tabs.all_inner_texts()) == sorted(labels)
    tabs.first.click()  # closing it shows the next one, which closes at once
    page.locator(".lm-MenuBar-itemLabel", has_text="File").click()
    page.locator(".lm-Menu-itemLabel", has_text="Close All Tabs").click()
    expect(tabs).to_have_count(1)  # JupyterLab opens a launcher when the main area empties
    expect(tabs).to_have_text(["Launcher"])
    page.wait_for_timeout(1000)
    assert errors == []


def test_the_default_backend_setting_sends_the_forms_job_to_kubernetes(control_plane, tmp_path):
    """...to a Kueue queue the form lists; with every GPU held, its check says a worker asking for one would wait,
    before the submit; the job shows Queued with Kueue's reason (its ClusterQueue is missing), and says why it
    waits."""
    from controlplane.cluster import ADMIN, NAMESPACE, RESTRICTED
    from kubernetes import client

    kueue = ("kueue.x-k8s.io", "v1beta1", NAMESPACE, "localqueues")
    holders = [f"holds-{node}" for node in ("gpu-0", "gpu-1")]  # every GPU of the cluster, held by someone else
    with control_plane.client(ADMIN) as api:
        client.CustomObjectsApi(api).create_namespaced_custom_object(*kueue, {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
            "metadata": {"name": "waiting-room", "namespace": NAMESPACE}, "spec": {"clusterQueue": "nowhere"}})
        for holder in holders:
            client.CoreV1Api(api).create_namespaced_pod(NAMESPACE, {
                "metadata": {"name": holder}, "spec": {"nodeName": holder.removeprefix("holds-"), "containers": [
                    {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}})

    setting = tmp_path / "lab-settings" / "jupyter-distrain" / "plugin.jupyterlab-settings"
    setting.parent.mkdir(parents=True)
    setting.write_text(json.dumps({"defaultBackend": "kubernetes"}))
    server = JupyterServer(tmp_path, "--Distrain.backends=local", "--Distrain.backends=kubernetes",
                           f"--Distrain.namespace={NAMESPACE}",
                           f"--Distrain.kubeconfig={control_plane.kubeconfig(RESTRICTED)}", app="lab")
    notebook_repo(server.root_dir / "project")
    try:
        with lab_page(server, "lab/tree/project") as page:
            open_panel(page, "filebrowser")
            page.locator('.jp-DirListing-item[data-file-type="notebook"]').click(button="right")
            page.get_by_text("Train this notebook's repo").click()
            form = page.locator(".jp-distrain-form")
            backend = form.locator('[data-field="backend"] select')
            expect(backend).to_have_value("kubernetes", timeout=30_000)
            expect(backend.locator("option")).to_have_text(["local", "kubernetes"])
            queue = form.locator('[data-field="queue"] select')
            expect(queue.locator("option")).to_have_text(["none: start at once", "waiting-room"], timeout=30_000)
            queue.select_option("waiting-room")
            expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=15_000)
            form.get_by_label("worker gpus").fill("1")
            expect(form.locator(".jp-distrain-outlook")).to_have_text(
                "It would not start at once:no node has room for a worker now: it asks for 1 GPU; the most free on a "
                "node is 0 GPUs (gpu-0). It would wait (Pending) until one has", timeout=15_000)
            expect(form.get_by_text("The server accepts this job; it would wait (see above).")).to_be_visible()
            form.locator(".jp-distrain-outlook").scroll_into_view_if_needed()
            screenshot(page, "form-would-wait")
            form.get_by_role("button", name="Submit").click()
            expect(page.locator(".jp-distrain-job-header")).to_contain_text("tf-ps", timeout=30_000)
            expect(page.locator(".jp-distrain-job-header")).to_contain_text("Queued", timeout=30_000)
            expect(page.locator(".jp-distrain-job-reason")).to_contain_text(
                "Inadmissible: ClusterQueue nowhere doesn't exist", timeout=30_000)
            expect(page.locator(".jp-distrain-job-facts")).to_contain_text("Queuewaiting-room")
            expect(page.get_by_role("region", name="Why it waits")).to_have_text(
                "Kueue holds it in queue waiting-room: ClusterQueue nowhere doesn't exist.", timeout=30_000)
            screenshot(page, "kubernetes-queued-job")
            # the cluster has JobSet: its controller, not this server, enforces the job's lifecycle
            expect(page.locator(".jp-distrain-job-facts")).to_contain_text("kubernetes (engine: jobset)")
            expect(page.locator(".jp-distrain-supervision")).to_have_count(0)
            # its logs offer the replicas' logs only: a Kubernetes job has no setup log
            replicas = page.locator(".jp-distrain-job-logs").get_by_label("Replica").locator("option")
            expect(replicas).to_have_text(["All replicas", "chief-0", "ps-0", "worker-0", "worker-1"], timeout=30_000)
        request = urllib.request.Request(f"{server.url}/distrain/api/jobs/tf-ps", headers=server.headers)
        job = json.load(urllib.request.urlopen(request, timeout=30))
        assert job["backend"] == "kubernetes" and job["logs"] == ["chief-0", "ps-0", "worker-0", "worker-1"]
        assert (job["phase"], job["spec"]["queue"]) == ("Queued", "waiting-room"), job
        request = urllib.request.Request(f"{server.url}/distrain/api/jobs/tf-ps", method="DELETE",
                                         headers=server.headers)
        assert urllib.request.urlopen(request, timeout=60).status == 204
    finally:
        server.stop()
        with control_plane.client(ADMIN) as api:
            client.CustomObjectsApi(api).delete_namespaced_custom_object(*kueue, "waiting-room")
            for holder in holders:
                client.CoreV1Api(api).delete_namespaced_pod(holder, NAMESPACE, grace_period_seconds=0)


TF_CONFIG_SCRIPT = '''\
"""Reads the TF_CONFIG the job gave this replica; workers report steps, the ps serves until stopped."""
import json, os, sys, time

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
print(f"{task['type']} {task['index']} of", {role: len(hosts) for role, hosts in config["cluster"].items()},
      flush=True)
if task["type"] == "ps":
    time.sleep(600)
for step in range(int(sys.argv[1])):
    print(f"step {step} lr {sys.argv[2]}", flush=True)
    time.sleep(0.25)
'''


def empty_repo(directory: Path) -> Path:
    """A git repository with a notebook and a script, and no distrain.yaml: everything is typed."""
    directory.mkdir()
    (directory / "train.py").write_text(TF_CONFIG_SCRIPT)
    (directory / "explore.ipynb").write_text(
        json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    for command in (["init", "-q", "-b", "main"], ["add", "."],
                    ["-c", "user.email=dev@example.invalid", "-c", "user.name=dev", "commit", "-qm", "start"]):
        subprocess.run(["git", *command], cwd=directory, check=True)
    return directory


def api_get(server: JupyterServer, route: str):
    with urllib.request.urlopen(urllib.request.Request(f"{server.url}/distrain/api/{route}",
                                                       headers=server.headers), timeout=30) as r:
        return json.load(r)


def test_a_distributed_job_typed_from_nothing_then_stop_restart_clone_and_delete(lab, page):
    empty_repo(lab.root_dir / "project")
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # a draft the server refuses is an answer, not a failed request (the browser logs those in red)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "status of 400" in m.text else None)
    page.goto(f"{lab.url}/lab/tree/project?token={lab.TOKEN}")
    page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
    open_panel(page, "filebrowser")
    page.locator('.jp-DirListing-item[data-file-type="notebook"]').click(button="right")
    page.get_by_text("Train this notebook's repo").click()

    shown = lambda css: page.locator(f".jp-MainAreaWidget:not(.lm-mod-hidden) {css}")  # noqa: E731
    form = shown(".jp-distrain-form")
    field = lambda path: form.locator(f'[data-field="{path}"]')  # noqa: E731
    expect(field("name").locator("input")).to_have_value("explore", timeout=30_000)
    expect(form.locator("input, select, textarea").first).to_be_focused()  # opened ready to type in
    field("name").locator("input").fill("Journey")
    expect(field("name").locator(".jp-distrain-error")).to_contain_text("not allowed", timeout=15_000)
    field("name").locator("input").fill("journey")
    field("framework").locator("select").select_option("tensorflow")
    form.get_by_label("Distributed").check()
    expect(form.get_by_label("Distributed")).to_be_checked()
    expect(form.locator("[data-role]")).to_have_count(4)  # chief, ps, worker, evaluator
    expect(form.get_by_label("worker count")).to_have_value("2")
    # no replica at all: said (not filled in by the server's default), and Submit (Ctrl+Enter) shows why
    form.get_by_label("worker count").fill("0")
    refusal = form.locator(".jp-distrain-error", has_text="at least one replica")
    expect(refusal).to_be_visible(timeout=15_000)
    expect(form.locator(".jp-distrain-form-status")).to_have_text(re.compile(r"^Fix the .* to submit\.$"))
    page.keyboard.press("Control+Enter")
    expect(refusal).to_be_focused()
    form.get_by_label("ps count").fill("1")
    form.get_by_label("worker count").fill("")  # typed over: the rows stay
    form.get_by_label("worker count").fill("2")
    expect(form.locator("[data-role]")).to_have_count(4)
    field("command").locator("textarea").fill("python train.py 60 {{ lr }}")
    form.get_by_role("button", name="Add hyperparameter").click()
    form.get_by_label("Hyperparameter name").fill("lr")
    form.get_by_label("Value of lr").fill("0.1")
    expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=15_000)
    screenshot(page, "journey-form")
    form.get_by_role("button", name="Submit").click()

    tab = lambda job: page.locator(f'.lm-DockPanel .lm-TabBar-tab[data-id="jupyter-distrain-job-{job}"]')  # noqa: E731
    tab("journey").click()
    view = shown(".jp-distrain-job-view")
    phase = view.locator(".jp-distrain-job-header .jp-distrain-phase")
    expect(view.locator("h2")).to_have_text("journey", timeout=30_000)
    expect(view.locator("[data-replica]")).to_have_count(3)  # ps-0, worker-0, worker-1
    expect(phase).to_have_text("Running", timeout=60_000)
    expect(view.locator(".jp-distrain-job-facts")).to_contain_text("lr = 0.1")
    expect(phase).to_have_text("Succeeded", timeout=120_000)  # worker 0 done: the ps is stopped
    view.locator(".jp-distrain-job-links").get_by_role("button", name="Logs").click()
    job = api_get(lab, "jobs/journey")
    assert job["spec"]["framework"] == "tensorflow" and job["spec"]["hyperparameters"] == {"lr": 0.1}
    assert {r["name"]: r["phase"] for r in job["replicas"]}["ps-0"] == "Stopped"
    logs = shown(".jp-distrain-logs")
    status = logs.locator(".jp-distrain-logs-status")
    expect(status).to_contain_text("Job Succeeded", timeout=30_000)
    search = logs.get_by_label("Search the log")
    search.fill("worker 1 of {'ps': 1, 'worker': 2}")  # rows out of view are not drawn: look for it
    expect(logs.locator(".jp-distrain-logline")).to_have_count(1)
    search.fill("")
    screenshot(page, "journey-succeeded")

    # Restart: the open logs tab moves on to run 2, live; run 1 stays a choice away.
    tab("journey").click()
    view.get_by_label("Restart journey").click()
    expect(view.locator(".jp-distrain-job-facts dd").nth(1)).to_have_text("2", timeout=30_000)  # Run
    view.locator(".jp-distrain-job-links").get_by_role("button", name="Logs").click()
    expect(status).to_contain_text("Run 2", timeout=30_000)
    expect(status).to_contain_text("Following", timeout=30_000)
    expect(logs.locator(".jp-distrain-logline", has_text="step 1 lr 0.1").first).to_be_visible(timeout=60_000)
    screenshot(page, "journey-run-2")

    # Stop asks first; a requested stop is no error.
    tab("journey").click()
    view.get_by_label("Stop journey").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Stop journey?")
    dialog.get_by_role("button", name="Stop").click()
    expect(phase).to_have_text("Stopped", timeout=60_000)
    expect(page.locator(".jp-Notification-Toast-info", has_text="journey stopped")).to_be_visible(timeout=30_000)
    expect(page.locator(".jp-Notification-Toast-error")).to_have_count(0)
    view.locator(".jp-distrain-job-links").get_by_role("button", name="Logs").click()
    logs.get_by_label("Run").select_option("1")
    expect(status).to_contain_text("Run 1", timeout=30_000)
    expect(status).to_contain_text("all lines shown", timeout=30_000)  # run 1's stream ended: its log is whole
    search.fill("step 59 lr 0.1")
    expect(logs.locator(".jp-distrain-logline")).to_have_count(2)  # worker-0's and worker-1's last
    search.fill("")

    # "All replicas" stays in time order after looking at one replica (whose backlog comes a replica
    # at a time): the last rows drawn interleave both workers, oldest first.
    logs.get_by_label("Replica").select_option("worker-1")
    expect(status).to_contain_text("all lines shown", timeout=30_000)
    logs.get_by_label("Replica").select_option("")
    expect(status).to_contain_text("all lines shown", timeout=30_000)
    for worker in ("[worker-0]", "[worker-1]"):  # the status may still be the last replica's for a moment
        expect(logs.locator(".jp-distrain-logline", has_text=worker).first).to_be_visible(timeout=30_000)
    rows = logs.locator(".jp-distrain-logline").all_inner_texts()
    times = [row.split(" ", 2)[1] for row in rows]
    assert times == sorted(times), rows
    assert {row.split(" ", 1)[0] for row in rows} >= {"[worker-0]", "[worker-1]"}, rows

    # Clone opens the form with the job's spec (the same commit), to change before it runs.
    tab("journey").click()
    view.get_by_label("Clone and edit journey").click()
    expect(field("name").locator("input")).to_have_value("journey-2", timeout=30_000)
    expect(field("code.commit").locator("input")).to_have_value(job["spec"]["code"]["commit"])
    expect(form.get_by_label("ps count")).to_have_value("1")
    form.get_by_label("Value of lr").fill("0.01")
    expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=15_000)
    form.get_by_role("button", name="Submit").click()
    expect(tab("journey-2")).to_be_visible(timeout=30_000)  # its view, its logs inside
    clone = api_get(lab, "jobs/journey-2")
    assert clone["spec"]["hyperparameters"] == {"lr": 0.01}
    assert clone["spec"]["code"]["commit"] == job["spec"]["code"]["commit"]
    expect(logs.locator(".jp-distrain-logline", has_text="lr 0.01").first).to_be_visible(timeout=60_000)

    # A narrow window keeps what matters of the replica table in view.
    tab("journey-2").click()
    expect(phase).to_have_text("Succeeded", timeout=120_000)
    page.set_viewport_size({"width": 760, "height": 800})
    page.wait_for_timeout(500)
    for header in ("Replica", "Phase", "Exit code", "Reason"):
        box = view.locator(".jp-distrain-replicas th", has_text=header).bounding_box()
        assert box and box["x"] + box["width"] <= 760, (header, box)
    screenshot(page, "journey-760px")
    page.set_viewport_size({"width": 480, "height": 800})
    page.wait_for_timeout(500)
    assert view.locator("h2").bounding_box()["height"] < 60  # the name is not one letter a line
    facts = view.locator(".jp-distrain-job-facts dd").first.bounding_box()
    assert facts["width"] > 100, facts  # labels stack over values rather than squeeze them
    screenshot(page, "journey-480px")
    page.set_viewport_size({"width": 1280, "height": 800})

    # Delete journey with its tabs open; after a reload its logs tab says so, and does not retry forever.
    tab("journey").click()
    view.get_by_label("Delete journey").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Delete").click()
    expect(page.locator('.lm-DockPanel .lm-TabBar-tab[data-id="jupyter-distrain-job-journey"]')).to_have_count(
        0, timeout=30_000)
    streams = []
    page.on("websocket", lambda ws: streams.append(ws.url) if "/jobs/journey/logs/stream" in ws.url else None)
    page.reload()
    page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
    page.locator('.lm-DockPanel .lm-TabBar-tab[data-id="jupyter-distrain-logs-journey"]').click()
    expect(status).to_contain_text("journey no longer exists", timeout=30_000)
    page.wait_for_timeout(5000)
    assert len(streams) <= 1, streams
    screenshot(page, "journey-deleted")
    assert not errors, errors
    for name in ("journey-2",):
        request = urllib.request.Request(f"{lab.url}/distrain/api/jobs/{name}", method="DELETE", headers=lab.headers)
        assert urllib.request.urlopen(request, timeout=60).status == 204
    assert_nothing_left(Path(lab.root))


def test_a_sweeps_view_sorts_its_trials_charts_them_and_fine_tunes_the_best(lab, page, tmp_path):
    """The sweep's trials ranked by their loss as they log it, sorted by any column, a line each; "Fine-tune
    the best" opens the form with the best trial's spec resuming from its output."""
    from test_widgets_browser import GATED

    go = tmp_path / "go"
    code = tmp_path / "gated"
    code.mkdir()
    (code / "gated.py").write_text(GATED.replace("GO", repr(str(go))))
    submit(lab, {"name": "scan", "code": {"path": str(code)}, "command": "python gated.py {{ scale }}",
                 "tensorboard": {"enabled": True},
                 "sweep": {"parameters": {"scale": {"values": [3, 1, 2]}}, "parallelism": 3}})
    open_panel(page)
    sweep = page.locator('[data-job="scan"]')  # one row, its trials folded under it
    fold = sweep.locator(".jp-distrain-trials-toggle")
    expect(fold).to_have_text(re.compile(r"^3 trials: "), timeout=60_000)
    expect(page.locator("#jupyter-distrain-panel .jp-distrain-list > li")).to_have_count(1)
    fold.click()
    expect(page.locator("#jupyter-distrain-panel .jp-distrain-trial")).to_have_count(3)  # rows under it
    sweep.get_by_title("Open scan", exact=True).click()
    view = page.locator(".jp-distrain-job-view", has=page.locator("h2", has_text="scan"))
    rows = view.locator(".jp-distrain-trials tbody tr")
    expect(view.locator(".jp-distrain-scalars polyline")).to_have_count(3, timeout=60_000)  # each at step 2
    expect(view.get_by_role("button", name="Fine-tune the best")).to_be_disabled()
    go.touch()
    expect(view.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Succeeded", timeout=60_000)
    expect(rows.first).to_have_attribute("data-trial", "scan-2", timeout=30_000)  # scale 1: the lowest loss
    assert [rows.nth(i).get_attribute("data-trial") for i in range(3)] == ["scan-2", "scan-3", "scan-1"]
    expect(rows.first.locator("td").first).to_have_text("scan-2 ★")
    expect(view.locator(".jp-distrain-replicas")).to_have_count(0)  # a sweep runs no replicas of its own

    view.get_by_role("columnheader", name="scale").get_by_role("button").press("Enter")  # sorted from the keyboard
    expect(rows.first).to_have_attribute("data-trial", "scan-2")  # scale 1, 2, 3
    assert [rows.nth(i).get_attribute("data-trial") for i in range(3)] == ["scan-2", "scan-3", "scan-1"]
    view.get_by_role("columnheader", name="scale").get_by_role("button").press("Enter")  # sorted from the keyboard
    expect(rows.first).to_have_attribute("data-trial", "scan-1")  # 3, 2, 1
    view.get_by_role("columnheader", name="Trial").get_by_role("button").press("Enter")  # sorted from the keyboard
    expect(rows.first).to_have_attribute("data-trial", "scan-1")
    screenshot(page, "sweep-view")
    assert_accessible(page, ".jp-distrain-job-view-widget, #jupyter-distrain-panel")

    view.get_by_role("button", name="Fine-tune the best").click()
    form = page.locator(".jp-distrain-form")
    expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=30_000)
    expect(form.locator('[data-field="name"] input')).to_have_value("scan-best")
    form.get_by_role("button", name="Submit").click()
    tuned = page.locator(".jp-distrain-job-view", has=page.locator("h2", has_text="scan-best"))
    expect(tuned.locator(".jp-distrain-job-header .jp-distrain-phase")).to_have_text("Succeeded", timeout=60_000)
    job = api_get(lab, "jobs/scan-best")
    assert job["spec"]["resume_from"] == "job:scan-2" and job["spec"]["hyperparameters"] == {"scale": 1}
