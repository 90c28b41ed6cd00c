"""The sidebar's job list in a real JupyterLab (system Chromium, through Playwright), with 10,000 jobs made in
the store: from the list's data received to its rows painted, beside the same list of 10 jobs; and the frames
while it is scrolled a quarter page a frame, beside the same page's frames while nothing moves. Run:
python bench/job_list_browser.py"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from harness import table
from stored import jobs_in

from conftest import JupyterServer
from test_panel import lab_page, open_panel

JOBS = 10_000

# When the page read the list's body, and when rows were first painted after it (a frame after they are in the
# page); every frame's time, to read the frames' lengths.
PROBE = """
window.received = null;
const fetched = window.fetch;
window.fetch = async (...args) => {
  const response = await fetched(...args);
  if (String(args[0].url || args[0]).includes('/distrain/api/jobs')) {
    const text = response.text.bind(response);
    response.text = async () => { const body = await text(); window.received = performance.now(); return body; };
  }
  return response;
};
window.painted = null;
new MutationObserver((_, observer) => {
  if (window.received !== null && document.querySelector('#jupyter-distrain-panel [data-job]')) {
    observer.disconnect();
    requestAnimationFrame(() => setTimeout(() => { window.painted = performance.now(); }));
  }
}).observe(document, {childList: true, subtree: true});
window.frames_ = [];
const frame = time => { window.frames_.push(time); requestAnimationFrame(frame); };
requestAnimationFrame(frame);
"""


def first_paint(jobs: int) -> tuple[float, dict]:
    """ms from the list's body read to its rows painted, the list of `jobs` jobs; with `jobs` = JOBS, the frames'
    lengths (ms) while still and while scrolled."""
    with tempfile.TemporaryDirectory(prefix="distrain-bench-") as tmp:
        jobs_in(Path(tmp) / "distrain-home", jobs, workers=0)
        server = JupyterServer(Path(tmp), app="lab")
        try:
            with lab_page(server) as page:
                held = []
                page.route("**/distrain/api/jobs", lambda route: held.append(route))  # held until the panel shows
                page.add_init_script(PROBE)
                page.reload()  # with the probe from its start
                page.locator("#jupyterlab-splash").wait_for(state="detached", timeout=120_000)
                open_panel(page)
                for route in held:
                    route.continue_()
                page.unroute("**/distrain/api/jobs")
                page.wait_for_function("window.painted !== null", timeout=120_000)
                paint = page.evaluate("window.painted - window.received")
                frames = scrolled(page) if jobs == JOBS else {}
        finally:
            server.stop()
    return paint, frames


def scrolled(page) -> dict:
    """The frames' lengths (ms) over 2 s still, then while the list is scrolled a quarter of its height a frame
    (900 frames, 15 s at 60 frames a second: about 5,000 rows)."""
    def lengths(during) -> list[float]:
        start = page.evaluate("window.frames_.length")
        during()
        times = page.evaluate(f"window.frames_.slice({start})")
        return [b - a for a, b in zip(times, times[1:])]

    still = lengths(lambda: page.wait_for_timeout(2000))
    moving = lengths(lambda: page.evaluate("""() => new Promise(done => {
        const list = document.querySelector('#jupyter-distrain-panel .jp-distrain-scroller');
        let steps = 0;
        const step = () => {
            list.scrollTop += list.clientHeight / 4;
            if (list.scrollTop + list.clientHeight >= list.scrollHeight || ++steps === 900) done();
            else requestAnimationFrame(step);
        };
        requestAnimationFrame(step);
    })"""))
    return {"still": still, "moving": moving}


def measure() -> list[tuple]:
    few, _ = first_paint(10)
    many, frames = first_paint(JOBS)
    still, moving = frames["still"], frames["moving"]
    p95 = lambda values: statistics.quantiles(values, n=20)[-1]  # noqa: E731
    long_frames = sum(length > 50 for length in moving)
    return [(f"job list, {JOBS:,} jobs: data to rows painted, ms", many, few, "the same list of 10 jobs", many / few,
             "<= 300 ms"),
            (f"job list, {JOBS:,} jobs, scrolled a quarter page a frame: p95 frame ms", p95(moving),
             p95(still), "the same page still", p95(moving) / p95(still), f"no long frame ({long_frames} over 50 ms)")]


if __name__ == "__main__":
    print(table(measure()))
