"""The panel's log view in a real browser (as test_panel.py, whose fixtures it uses): the lines a replica wrote
to stderr marked, long lines scrolled sideways or wrapped, the list scrolled from the keyboard; a job's log of
millions of lines opened from its end and searched on the server."""

from conftest import JupyterServer
from playwright.sync_api import expect
from stored import logs_in
from test_panel import lab, page  # noqa: F401 (fixtures)
from test_panel import assert_accessible, lab_page, open_panel, screenshot, submit

SCRIPT = """import sys, time
for i in range(100):
    print("line", i)
print("learning rate 10 is high", file=sys.stderr)
time.sleep(0.2)  # read before the next line: the two outputs come through pipes of their own
print("long", "x" * 600, "end")
"""

# Wrapped, the long line's row is as high as its text, right below the row before it, and the list ends with it.
ROWS_FIT = """() => {
    const long = [...document.querySelectorAll('.jp-distrain-logs-widget .jp-distrain-logline')].find(row => row.textContent.includes(' end'));
    const above = long && long.previousElementSibling;
    return Boolean(long && above && long.offsetHeight > 3 * 18 && long.offsetHeight === long.scrollHeight
        && above.offsetTop + above.offsetHeight === long.offsetTop
        && long.offsetTop + long.offsetHeight === long.parentElement.offsetHeight);
}"""


def test_stderr_lines_are_marked_long_lines_wrap_when_asked_and_the_keyboard_scrolls_the_log(lab, page, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(SCRIPT)
    submit(lab, {"name": "noisy", "code": {"path": str(code)}, "command": "python train.py"})
    open_panel(page)
    page.locator('[data-job="noisy"]').get_by_title("Open noisy").click()
    links = page.locator(".jp-distrain-job-links")
    links.get_by_role("button", name="Logs").click()
    logs = page.locator(".jp-distrain-logs-widget .jp-distrain-logs")
    logs.get_by_label("Replica").select_option("worker-0")
    expect(logs.locator(".jp-distrain-logs-status")).to_contain_text("all lines shown · 102 lines", timeout=60_000)

    # stderr: its own colour, the theme's for errors, and a mark that is not a colour alone
    stderr = logs.locator(".jp-distrain-logline-stderr")
    expect(stderr).to_have_count(1)
    expect(stderr).to_contain_text("learning rate 10 is high")
    expect(stderr.get_by_role("img", name="stderr")).to_have_count(1)
    def style(row) -> list[str]:  # its colour and its left border's
        return row.evaluate("row => [getComputedStyle(row).color, getComputedStyle(row).borderLeftColor]")

    error = page.evaluate("""() => { const probe = document.body.appendChild(document.createElement('span'));
        probe.style.color = 'var(--jp-error-color1)'; const color = getComputedStyle(probe).color; probe.remove();
        return color; }""")
    assert style(stderr) == [error, error]
    assert style(logs.locator(".jp-distrain-logline", has_text="line 99"))[0] != error

    # not wrapped: one row high, the list scrolls sideways
    scroller = logs.get_by_role("region", name="Log lines")
    long = logs.locator(".jp-distrain-logline", has_text=" end")
    assert long.bounding_box()["height"] == 18
    assert scroller.evaluate("list => list.scrollWidth > list.clientWidth")
    wrap = logs.get_by_role("button", name="Wrap")
    wrap.click()
    expect(wrap).to_have_attribute("aria-pressed", "true")
    page.wait_for_function(ROWS_FIT, timeout=10_000)
    assert scroller.evaluate("list => list.scrollWidth <= list.clientWidth")
    screenshot(page, "logs-wrapped")

    # focusable (not every browser focuses a scrolling element by itself), and focused, the keyboard scrolls it
    expect(scroller).to_have_attribute("tabindex", "0")
    scroller.focus()
    expect(scroller).to_be_focused()
    at_end = scroller.evaluate("list => list.scrollTop")
    assert at_end > 0
    page.keyboard.press("PageUp")
    page.wait_for_function("end => document.activeElement.scrollTop < end", arg=at_end)
    page.keyboard.press("Home")
    expect(logs.locator(".jp-distrain-logline", has_text="line 0").first).to_be_in_viewport()

    # the choice stays for the session: the tab opened again wraps
    page.locator('.lm-DockPanel .lm-TabBar-tab[data-id="jupyter-distrain-logs-noisy"] .lm-TabBar-tabCloseIcon').click()
    links.get_by_role("button", name="Logs").click()
    expect(logs.get_by_role("button", name="Wrap")).to_have_attribute("aria-pressed", "true")
    page.wait_for_function(ROWS_FIT, timeout=30_000)


def test_a_job_of_64_replicas_logging_100000_lines_each_opens_at_once_and_is_searched_on_the_server(tmp_path):
    """Its logs (6.4 million lines, 400 MB) written as the supervisor writes them: the job view's log streams each
    replica's last lines (the 200,000 it holds, shared), not 6.4 million from the first; Enter searches the whole
    log on the server, which finds a line of every replica that the view does not hold, and a hit opens its
    replica's log at its line, after the lines before it."""
    root = tmp_path / "distrain-home"
    root.mkdir()
    name, replicas = logs_in(root, 64, 100_000)
    server = JupyterServer(tmp_path, app="lab")
    try:
        with lab_page(server) as page:
            open_panel(page)
            page.locator(f'[data-job="{name}"]').get_by_title(f"Open {name}").click()
            view = page.locator(".jp-distrain-job-view", has=page.locator("h2", has_text=name))
            logs = view.locator(".jp-distrain-logs")
            status = logs.locator(".jp-distrain-logs-status")
            held = 64 * (200_000 // 65)  # each replica's share of the lines held (the job's set-up log counts)
            expect(status).to_contain_text(f"Job Succeeded · {held} lines (from its last lines", timeout=60_000)

            logs.get_by_label("Search the log").fill("step 77777 ")
            expect(status).to_contain_text("· 0 matching")  # not among the lines held
            logs.get_by_label("Search the log").press("Enter")
            hits = logs.get_by_role("region", name="Hits in the whole log")
            expect(hits.get_by_role("status")).to_have_text("64 lines of the whole log hold “step 77777 ”")
            # the hit at the foot of the job's view, its log's lines below the fold
            chosen = hits.get_by_role("button", name=f"[worker-17] ").filter(has_text="step 77777 ")
            chosen.evaluate("button => button.scrollIntoView({block: 'end'})")
            chosen.click()
            expect(logs.get_by_label("Replica")).to_have_value("worker-17")
            hit = logs.locator(".jp-distrain-logline-hit")
            expect(hit).to_contain_text("worker-17 step 77777 loss")
            expect(hit).to_be_in_viewport()
            expect(logs.locator(".jp-distrain-logline", has_text="worker-17 step 77776 ")).to_be_visible()
            assert_accessible(page, ".jp-distrain-job-view-widget")
    finally:
        server.stop()
