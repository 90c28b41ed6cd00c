"""The panel's log view in a real browser (as test_panel.py, whose fixtures it uses): the lines a replica wrote
to stderr marked, long lines scrolled sideways or wrapped, the list scrolled from the keyboard."""

from playwright.sync_api import expect
from test_panel import lab, open_panel, page, screenshot, submit  # noqa: F401 (lab and page are fixtures)

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
