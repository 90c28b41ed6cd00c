"""TensorBoard through Jupyter's authenticated proxy: one board for every local job, on real TensorFlow jobs."""

import asyncio
import json
import re
import time
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil
import pytest
import requests
from tornado.httpclient import HTTPClientError

from conftest import EXAMPLES, assert_nothing_left, kill, processes_of, write_scalars

from jupyter_distrain.server.tensorboard import BOARD_PROGRAM

pytestmark = pytest.mark.lane("node")  # its minute beside the real node's tests (conftest.lane_of)

pytest_plugins = ["pytest_jupyter.jupyter_server"]

IDLE_TIMEOUT = 6


@pytest.fixture
def distrain_config(root):
    return {"root": str(root), "tensorboard_idle_timeout": IDLE_TIMEOUT}


@pytest.fixture
def jp_server_config(jp_server_config):
    """As JupyterHub's servers are: no page of theirs may be framed, unless it says otherwise."""
    jp_server_config["ServerApp"]["tornado_settings"] = {"headers": {
        "Content-Security-Policy": "frame-ancestors 'none'; report-uri /csp"}}
    return jp_server_config


@pytest.fixture
def fetch(jp_fetch, root):
    async def call(*parts, method="GET", body=None, **params):
        try:
            response = await jp_fetch(*parts, method=method, params=params, body=body, follow_redirects=False,
                                      request_timeout=120)
        except HTTPClientError as e:
            response = e.response
        return response

    yield call
    kill(processes_of(root) + tensorboards(root))


def tensorboards(root) -> list[psutil.Process]:
    """TensorBoard processes (and their data servers) serving a logdir under `root`."""
    found = []
    for process in psutil.process_iter():
        try:
            cmdline = process.cmdline()
            program = BOARD_PROGRAM in cmdline or "tensorboard_data_server" in (cmdline or [""])[0]
            if program and str(root) in " ".join(cmdline):
                found.append(process)
        except psutil.Error:
            continue
    return found


async def wait_until(condition, timeout=120, interval=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        await asyncio.sleep(interval)
    raise AssertionError("timed out")


def boards(root) -> list[psutil.Process]:
    return [p for p in tensorboards(root) if BOARD_PROGRAM in p.cmdline()]


CHIEF = ("distrain", "tensorboard", "tf", "chief-0")  # the page of the job's chief


async def test_one_tensorboard_shows_every_jobs_scalars_each_page_its_own_runs(fetch, root, jp_base_url, jp_serverapp,
                                                                               http_server_client, tmp_path):
    spec = {"name": "tf", "framework": "tensorflow", "code": {"path": str(EXAMPLES / "tf-ps")},
            "command": "python train.py --steps 100000 --log_every 10 --log_dir {{ logdir }}",
            "replicas": {"chief": {"count": 1}, "ps": {"count": 1}, "worker": {"count": 1}},
            "tensorboard": {"enabled": True}}
    response = await fetch("distrain", "api", "jobs", method="POST", body=json.dumps(spec))
    assert response.code == 201

    async def live_loss():
        job = json.loads((await fetch("distrain", "api", "jobs", "tf")).body)
        assert job["phase"] in ("Pending", "Running"), job
        scalars = await fetch(*CHIEF, "data", "plugin", "scalars", "scalars", run="tf/chief-0", tag="loss")
        return scalars.code == 200 and len(json.loads(scalars.body)) >= 2

    await wait_until(live_loss)  # scalars arrive while the job is still running
    mount = f"{jp_base_url}distrain/tensorboard/tf/chief-0/"
    await pages_show_their_runs_with_fonts_under_the_proxy(fetch, jp_base_url, mount)
    board_without_the_secret_shows_nothing(root)
    await posts_reach_the_board_from_this_site_only(http_server_client, jp_serverapp, mount)
    await the_board_shows_every_loss_the_job_logged(fetch, root)
    await another_job_joins_the_running_board(fetch, root, tmp_path)
    await the_board_stops_when_idle_and_with_its_last_job(fetch, root)
    assert_nothing_left(root)


async def pages_show_their_runs_with_fonts_under_the_proxy(fetch, jp_base_url, mount):
    """The replica's page is the board showing the replica's runs (each named <job>/<replica>[/...]), which this
    site's pages may frame; its fonts (TensorBoard names them at the site's root) are asked for under the proxy."""
    for path in (CHIEF, (*CHIEF[:-1], "chief-0/")):
        page = await fetch(*path)
        location = urlsplit(page.headers["Location"])
        assert page.code == 302 and location.path == mount, page.headers
        assert parse_qs(location.query) == {"runFilter": ["^tf/chief-0(/|$)"]}
    page = await fetch(*CHIEF[:-1], "chief-0/", runFilter="^tf/chief-0(/|$)")
    assert page.code == 200 and b"<tb-webapp>" in page.body
    # JupyterLab frames it: the server's policy, but for that
    assert page.headers.get_list("Content-Security-Policy")[0] == "frame-ancestors 'self'; report-uri /csp"
    whole = await fetch("distrain", "tensorboard", "tf", "all/")
    assert whole.code == 302 and parse_qs(urlsplit(whole.headers["Location"]).query) == {"runFilter": ["^tf(/|$)"]}

    fonts = {url.decode() for url in re.findall(rb"""url\(\s*["']?([^)"']*font-roboto/[^)"']*)""", page.body)}
    assert len(fonts) > 10 and all(url.startswith(f"{mount}font-roboto/") for url in fonts), fonts
    for url in fonts:
        font = await fetch(url[len(jp_base_url):])
        assert font.code == 200 and font.headers["Content-Type"] == "font/woff2" and font.body, url

    runs = await fetch(*CHIEF, "data", "runs")
    assert runs.code == 200 and "tf/chief-0" in json.loads(runs.body), runs.body
    assert len(runs.headers.get_list("Server")) == 1, runs.headers  # Jupyter's, not also the board's behind it


def board_without_the_secret_shows_nothing(root):
    """The board's port is open to anyone on this machine; without the server's secret it shows nothing."""
    (board,) = boards(root)
    port = board.cmdline()[board.cmdline().index("--port") + 1]
    for secret in ({}, {"X-Distrain-Board-Secret": "guessed"}):
        direct = requests.get(f"http://127.0.0.1:{port}/data/runs", headers=secret, timeout=10)
        assert (direct.status_code, direct.text) == (403, "this TensorBoard answers its Jupyter server only\n")
    assert "DISTRAIN_BOARD_SECRET" not in " ".join(board.cmdline())


async def posts_reach_the_board_from_this_site_only(http_server_client, jp_serverapp, mount):
    """A POST with the user's login cookie: from TensorBoard's own page (this site's Origin, or the browser's
    `Sec-Fetch-Site: same-origin`) it passes; from another site, or with neither and no XSRF token, it never
    reaches TensorBoard."""
    login = await http_server_client.fetch(f"{mount}data/runs?token={jp_serverapp.identity_provider.token}")
    cookies = "; ".join(c.split(";")[0] for c in login.headers.get_list("Set-Cookie"))
    assert login.code == 200 and "username-" in cookies

    async def post_with_cookie(origin, **fetch_site):
        headers = {"Cookie": cookies, "Content-Type": "application/x-www-form-urlencoded",
                   **({"Origin": origin} if origin else {}), **{"Sec-Fetch-Site": v for v in fetch_site.values()}}
        return await http_server_client.fetch(f"{mount}data/plugin/scalars/scalars_multirun", method="POST",
                                              body="tag=loss&runs=tf/chief-0", headers=headers, raise_error=False)

    own = await post_with_cookie(f"http://{http_server_client.get_url('/').split('/')[2]}")
    assert own.code == 200 and json.loads(own.body)["tf/chief-0"], own.body
    cross_site = await post_with_cookie("https://evil.example")  # Jupyter's own origin check answers
    assert cross_site.code == 404 and json.loads(cross_site.body) == {"message": "Not Found"}
    assert (await post_with_cookie(None, site="same-origin")).code == 200
    for no_origin in (await post_with_cookie(None), await post_with_cookie(None, site="cross-site")):
        assert no_origin.code == 403 and "_xsrf" in json.loads(no_origin.body)["message"], no_origin.body


async def the_board_shows_every_loss_the_job_logged(fetch, root):
    """Once the job is stopped, every loss its chief printed is on the board, and on the whole job's page; the
    proxy keeps its connections to the board open, so requests one after another open no new one."""
    stopped = await fetch("distrain", "api", "jobs", "tf", "stop", method="POST", body="")
    assert json.loads(stopped.body)["phase"] == "Stopped"
    logs = (await fetch("distrain", "api", "jobs", "tf", "logs", replica="chief-0")).body.decode()
    printed = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"step (\d+)/\d+ loss ([\d.]+)", logs)}
    assert len(printed) >= 2

    async def all_points():
        scalars = await fetch(*CHIEF, "data", "plugin", "scalars", "scalars", run="tf/chief-0", tag="loss")
        points = {step: value for _, step, value in json.loads(scalars.body)}
        return points if set(printed) <= set(points) else None

    points = await wait_until(all_points, timeout=90)
    assert {step: round(points[step], 4) for step in printed} == printed

    runs = await fetch("distrain", "tensorboard", "tf", "all", "data", "runs")
    assert runs.code == 200 and "tf/chief-0" in json.loads(runs.body)
    [board] = boards(root)
    port = int(board.cmdline()[board.cmdline().index("--port") + 1])
    kept = lambda: {c.laddr for c in psutil.Process().net_connections()  # noqa: E731
                    if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED}
    before = kept()
    for _ in range(5):
        assert (await fetch(*CHIEF, "data", "runs")).code == 200
    assert before and kept() == before


EMIT = """
import os, sys, types
sys.modules["tensorboard.compat.notf"] = types.ModuleType("notf")  # TensorBoard's own switch: no TensorFlow import
from tensorboard.summary import Writer

# the replica's own directory, and one of the code's choosing (as Keras' callback in TensorFlow's tutorial)
for directory in (os.environ["DISTRAIN_LOG_DIR"], os.path.join(os.environ["DISTRAIN_OUTPUT_DIR"], "somewhere", "log")):
    writer = Writer(directory)
    for step, value in enumerate([0.5, 0.75]):
        writer.add_scalar("accuracy", value, step)
    writer.close()
"""


async def another_job_joins_the_running_board(fetch, root, tmp_path):
    """Another job joins the running board: its runs are there at the first request, those of its replica and
    those it wrote elsewhere in its output directory, named by their path there, as in its scalars; event files
    written later in a new directory join too. The board is in use meanwhile (the first job's page asks), so it
    stays."""
    [board] = boards(root)
    code = tmp_path / "more"
    code.mkdir()
    (code / "emit.py").write_text(EMIT)
    spec = {"name": "more", "code": {"path": str(code)}, "tensorboard": {"enabled": True}, "command": "python emit.py"}
    assert (await fetch("distrain", "api", "jobs", method="POST", body=json.dumps(spec))).code == 201

    async def in_use_until(done):
        assert (await fetch(*CHIEF, "data", "runs")).code == 200
        return await done()

    async def succeeded():
        return json.loads((await fetch("distrain", "api", "jobs", "more")).body)["phase"] == "Succeeded"

    await wait_until(lambda: in_use_until(succeeded))
    runs = json.loads((await fetch("distrain", "tensorboard", "more", "worker-0", "data", "runs")).body)
    assert {"more/worker-0", "more/somewhere/log", "tf/chief-0"} <= set(runs), runs
    scalars = json.loads((await fetch("distrain", "api", "jobs", "more", "scalars")).body)
    assert scalars["tag"] == "accuracy" and scalars["runs"] == {"somewhere/log": [[0, 0.5], [1, 0.75]],
                                                                "worker-0": [[0, 0.5], [1, 0.75]]}
    tags = await fetch("distrain", "tensorboard", "more", "all", "data", "plugin", "scalars", "tags")
    assert "accuracy" in json.loads(tags.body)["more/somewhere/log"]

    output = Path(json.loads((await fetch("distrain", "api", "jobs", "more")).body)["output_dir"])
    # on a thread: this loop serves the board's requests while TensorBoard's writer is imported and writes
    writing = asyncio.ensure_future(asyncio.to_thread(write_scalars, output / "later" / "log", "loss", [0.25]))

    async def later():
        runs = await fetch("distrain", "tensorboard", "more", "all", "data", "runs")
        return writing.done() and "more/later/log" in json.loads(runs.body)

    await wait_until(lambda: in_use_until(later), timeout=60)
    writing.result()
    assert boards(root) == [board]


async def the_board_stops_when_idle_and_with_its_last_job(fetch, root):
    """The idle board stops by itself; a request starts it again, and the other job joins it again. Deleting a
    job takes it off the board; deleting its last one stops the board."""
    await wait_until(lambda: not tensorboards(root), timeout=IDLE_TIMEOUT * 4)
    again = await fetch(*CHIEF, "data", "plugin", "scalars", "tags")
    assert again.code == 200 and "loss" in json.loads(again.body)["tf/chief-0"]
    more = await fetch("distrain", "tensorboard", "more", "all", "data", "plugin", "scalars", "tags")
    assert more.code == 200 and "accuracy" in json.loads(more.body)["more/worker-0"]
    [board] = boards(root)

    assert (await fetch("distrain", "api", "jobs", "more", method="DELETE")).code == 204
    assert boards(root) == [board] and [link.name for link in (root / "tensorboards").glob("*/*")] == ["tf"]
    assert (await fetch("distrain", "tensorboard", "more", "all", "data", "runs")).code == 404
    assert (await fetch("distrain", "api", "jobs", "tf", method="DELETE")).code == 204
    assert not tensorboards(root)
    assert not list((root / "tensorboards").iterdir())  # nor the directory of links
    assert (await fetch(*CHIEF[:-1], "chief-0/")).code == 404


def test_stopping_the_server_stops_its_tensorboards(jupyter_server):
    server = jupyter_server
    spec = {"name": "quick", "code": {"path": str(EXAMPLES / "python")}, "command": "python train.py"}
    assert server.rest("POST", "jobs", json=spec).status_code == 201
    board = urllib.request.Request(f"{server.url}/distrain/tensorboard/quick/all/data/runs", headers=server.headers)
    assert urllib.request.urlopen(board, timeout=120).status == 200
    assert tensorboards(server.root)
    server.stop()
    assert not tensorboards(server.root)
