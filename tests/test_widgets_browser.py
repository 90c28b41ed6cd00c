"""The notebook widgets in a real browser (system Chromium through Playwright), in a real JupyterLab's notebook."""

import json

from playwright.sync_api import expect

from conftest import JupyterServer, assert_nothing_left
from test_panel import lab_page, screenshot

# A job's scalars, written as TensorBoard's writer writes them, without importing TensorFlow (seconds a job)
SCALARS = """\
import os, time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

os.makedirs(os.environ["DISTRAIN_LOG_DIR"], exist_ok=True)
events = open(os.path.join(os.environ["DISTRAIN_LOG_DIR"], f"events.out.tfevents.{time.time()}"), "wb")


def add_scalar(tag, value, step):
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    RecordWriter(events).write(event_pb2.Event(step=step, wall_time=time.time(), summary=summary).SerializeToString())
    events.flush()
"""

CHATTY = SCALARS + """
add_scalar("alive", 1, 0)  # a tag before "loss": the chart shows the loss still
if os.environ["DISTRAIN_INDEX"] == "1":  # a single point, drawn as a dot
    add_scalar("loss", 0.5, 0)
    raise SystemExit
ran = os.path.join(os.environ["DISTRAIN_OUTPUT_DIR"], "ran")
word = "again" if os.path.exists(ran) else "line"  # the restarted run's lines tell themselves apart
open(ran, "w").close()
for i in range(300):
    print(word, i, flush=True)
    if i % 10 == 0:
        add_scalar("loss", 1 / (i // 10 + 1), i // 10)
"""

MONITOR_CELL = """\
from jupyter_distrain import Client
from jupyter_distrain.widgets import JobMonitor
Client().submit({"name": "chatty", "code": {"path": "."}, "command": "python chatty.py",
                 "replicas": {"worker": {"count": 2}}, "tensorboard": {"enabled": True},
                 "policy": {"success": "all-workers"}})  # each run ends once worker-1 wrote its point too
JobMonitor("chatty")"""

# Whether `text`, in the log tail's <pre>, can be seen: within the tail's scroll box as it is scrolled, and the page's.
SHOWN_IN_TAIL = """(box, text) => {
    const node = box.querySelector('pre').firstChild, at = node.data.indexOf(text);
    if (at < 0) return false;
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + text.length);
    const line = range.getBoundingClientRect(), view = box.getBoundingClientRect();
    return line.top >= Math.max(view.top, 0) && line.bottom <= Math.min(view.bottom, window.innerHeight);
}"""

# Whether an SVG shape is painted where it is: the point at its middle hits it.
DRAWN = """shape => {
    const box = shape.getBoundingClientRect();
    return document.elementFromPoint(box.x + box.width / 2, box.y + box.height / 2) === shape;
}"""


def write_notebook(path, *cells: str) -> None:
    path.write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": cell}
                  for cell in cells],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5}))


def test_the_job_monitor_shows_the_newest_log_line_and_charts_the_loss(tmp_path):
    lab = JupyterServer(tmp_path, app="lab")
    write_notebook(lab.root_dir / "monitor.ipynb", MONITOR_CELL)
    (lab.root_dir / "chatty.py").write_text(CHATTY)
    try:
        with lab_page(lab, "lab/tree/monitor.ipynb") as page:
            # a cell run before the kernel is connected is dropped: wait for the status bar's idle kernel
            expect(page.get_by_role("button", name="Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
            page.locator(".jp-Notebook .jp-Cell .cm-content").first.click()
            page.keyboard.press("Shift+Enter")

            monitor = page.locator(".jp-OutputArea-output .widget-vbox").first
            expect(monitor.locator("b", has_text="Succeeded")).to_be_visible(timeout=120_000)
            tail = monitor.locator(".jp-distrain-log-tail")
            expect(tail).to_contain_text("[worker-0] line 299", timeout=30_000)
            tail.scroll_into_view_if_needed()  # scrolls the notebook, not the tail's own box
            assert tail.evaluate("box => box.scrollHeight > box.clientHeight")  # more lines than it shows
            assert tail.evaluate(SHOWN_IN_TAIL, "[worker-0] line 299")
            assert not tail.evaluate(SHOWN_IN_TAIL, "[worker-0] line 100")  # the oldest line of the tail
            chart = monitor.locator(".jp-distrain-scalars")  # the loss the job wrote to its event files
            expect(chart.locator("li[data-run='worker-0']")).to_have_text("worker-0: 0.03333 at step 29",
                                                                       timeout=30_000)
            expect(chart.locator("polyline[data-run='worker-0']")).to_have_count(1)
            dot = chart.locator("polyline[data-run='worker-1']")  # its single point
            dot.scroll_into_view_if_needed()
            assert dot.evaluate(DRAWN)
            expect(chart.locator(".jp-distrain-chart-x span")).to_have_text(["0", "step", "29"])  # its axes' ranges
            expect(chart.locator(".jp-distrain-chart-y span")).to_have_text(["1", "loss", "0.0333"])

            # finished: why, what can be done now, and its TensorBoard, opened in a tab of its own
            expect(monitor).to_contain_text("Succeeded: Completed: all workers succeeded")
            expect(monitor.get_by_role("button", name="Stop")).to_be_hidden()
            board = monitor.get_by_role("link", name="TensorBoard")
            expect(board).to_have_attribute("target", "_blank")
            assert board.evaluate("a => getComputedStyle(a).textDecorationLine") == "underline"  # seen as a link
            # (the proxy's TensorBoard, started at the first request, is the server tests'; its page is stubbed here)
            page.context.route(f"{lab.url}/distrain/tensorboard/**", lambda route: route.fulfill(
                content_type="text/html", body="<title>TensorBoard</title>"))
            with page.context.expect_page() as opened:
                board.click()
            assert opened.value.url == f"{lab.url}/distrain/tensorboard/chatty/all/"
            screenshot(page, "monitor-widget")
            monitor.get_by_role("button", name="Restart").click()
            expect(tail).to_contain_text("[worker-0] again 299", timeout=60_000)  # the new run's lines, followed
            expect(tail).not_to_contain_text("line 299")
            expect(monitor.get_by_role("button", name="Restart")).to_be_visible(timeout=30_000)  # ended again
            expect(chart.locator("polyline")).to_have_count(2)  # this run's, not the earlier run's too
    finally:
        lab.stop()  # and its kernel, which has the jobs' DISTRAIN_HOME
    assert_nothing_left(lab.root)


GATED = SCALARS + """
import pathlib, sys

for step in range(6):
    add_scalar("loss", float(sys.argv[1]) / (step + 1), step)
    while step == 2 and not pathlib.Path(GO).exists():  # the test sees the trials running, then lets them end
        time.sleep(0.05)
"""

SWEEP_CELL = """\
from jupyter_distrain.widgets import JobForm
%load_ext jupyter_distrain
JobForm(name="drawn")"""

SWEEP_MAGIC = """\
%distrain sweep --name scales --code . --tensorboard --vary scale=2,1 --parallelism 2 -- python gated.py {{ scale }}"""


def test_the_form_and_a_sweeps_table_draw_and_follow_the_trials_in_the_notebook(tmp_path):
    lab = JupyterServer(tmp_path, app="lab")
    go = lab.root_dir / "go"
    write_notebook(lab.root_dir / "sweep.ipynb", SWEEP_CELL, SWEEP_MAGIC)
    (lab.root_dir / "gated.py").write_text(GATED.replace("GO", repr(str(go))))
    try:
        with lab_page(lab, "lab/tree/sweep.ipynb") as page:
            expect(page.get_by_role("button", name="Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
            page.locator(".jp-Notebook .jp-Cell .cm-content").first.click()
            page.keyboard.press("Shift+Enter")
            form = page.locator(".jp-Notebook .jp-Cell").nth(0).locator(".jp-OutputArea-output .widget-vbox").first
            expect(form.get_by_role("textbox").first).to_have_value("drawn", timeout=60_000)  # the schema's fields
            expect(form.get_by_role("combobox").first).to_have_value("python")
            expect(form.get_by_role("button", name="Submit")).to_be_visible()
            page.keyboard.press("Shift+Enter")  # the sweep cell, now the active one

            monitor = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea-output .widget-vbox")
            table = monitor.locator(".jp-distrain-trials")
            for trial in ("scales-1", "scales-2"):  # both running, each charted as it logs its loss
                expect(table.locator(f"tr[data-trial='{trial}'] td").nth(1)).to_have_text("Running", timeout=120_000)
                expect(monitor.locator(f"li[data-run='{trial}']")).to_contain_text("at step 2", timeout=60_000)
            expect(monitor.get_by_role("button", name="Fine-tune the best")).to_be_disabled()
            screenshot(page, "sweep-widget-running")

            go.touch()
            expect(table.locator("tbody tr").first).to_have_attribute("data-trial", "scales-2", timeout=60_000)
            expect(table.locator("tbody tr").first.locator("td").first).to_have_text("scales-2 ★", timeout=60_000)
            expect(table.locator("tr[data-trial='scales-2'] td").nth(3)).to_have_text("0.1667")  # 1 / 6 at step 5
            expect(table.locator("tr[data-trial='scales-1'] td").nth(3)).to_have_text("0.3333")
            expect(monitor.get_by_role("button", name="Stop")).to_be_hidden(timeout=30_000)  # the sweep has ended
            monitor.get_by_role("button", name="Fine-tune the best").click()
            expect(monitor).to_contain_text("Fine-tuning scales-2 as scales-best")
            screenshot(page, "sweep-widget")
    finally:
        lab.stop()
    assert_nothing_left(lab.root)
