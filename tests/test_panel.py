"""The JupyterLab panel in a real browser (system Chromium through Playwright) against a real JupyterLab."""

import json
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from conftest import EXAMPLES, REPO, JupyterServer, assert_nothing_left

ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def lab(tmp_path):
    server = JupyterServer(tmp_path, app="lab")
    yield server
    server.stop()


@pytest.fixture
def page(lab):
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{lab.url}/lab?token={lab.TOKEN}")
        page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
        yield page
        browser.close()


def open_panel(page) -> None:
    """Show the sidebar panel. JupyterLab may still be restoring its layout, which can show or hide
    side panels, and a click on the tab of a shown panel collapses it: so click until it stays shown."""
    tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-distrain-panel"]')
    panel = page.locator("#jupyter-distrain-panel")
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


def test_sidebar_lists_jobs_live_and_acts_on_them(lab, page):
    code = {"path": str(EXAMPLES / "python")}
    submit(lab, {"name": "quick", "code": code, "command": "python train.py --epochs 5"})
    submit(lab, {"name": "sleeper", "code": code, "command": "sleep 600"})

    open_panel(page)
    jobs = page.locator(".jp-distrain-jobs")
    row = lambda name: jobs.locator(f'[data-job="{name}"]')  # noqa: E731
    expect(row("quick").locator(".jp-distrain-phase")).to_have_text("Succeeded", timeout=60_000)
    expect(row("sleeper").locator(".jp-distrain-phase")).to_have_text("Running", timeout=60_000)
    expect(row("sleeper").locator(".jp-distrain-ready")).to_have_text("1/1")
    screenshot(page, "panel-jobs")

    jobs.get_by_label("Filter jobs").fill("sleep")
    expect(jobs.locator("[data-job]")).to_have_count(1)
    jobs.get_by_label("Filter jobs").fill("")

    jobs.get_by_label("Stop sleeper").click()
    expect(row("sleeper").locator(".jp-distrain-phase")).to_have_text("Stopped", timeout=60_000)
    expect(jobs.get_by_label("Stop sleeper")).to_have_count(0)

    jobs.get_by_label("Delete quick").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Delete").click()
    expect(row("quick")).to_have_count(0, timeout=30_000)
    with urllib.request.urlopen(urllib.request.Request(f"{lab.url}/distrain/api/jobs", headers=lab.headers)) as r:
        assert [job["name"] for job in json.load(r)] == ["sleeper"]
    assert_nothing_left(Path(lab.root))
