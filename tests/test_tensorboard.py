"""TensorBoard per replica through Jupyter's authenticated proxy, on a real TensorFlow job."""

import asyncio
import json
import re
import time
import urllib.request

import psutil
import pytest
from tornado.httpclient import HTTPClientError

from conftest import EXAMPLES, assert_nothing_left, processes_of

pytest_plugins = ["pytest_jupyter.jupyter_server"]

IDLE_TIMEOUT = 6


@pytest.fixture
def distrain_config(root):
    return {"root": str(root), "tensorboard_idle_timeout": IDLE_TIMEOUT}


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
    for process in processes_of(root) + tensorboards(root):
        process.kill()


def tensorboards(root) -> list[psutil.Process]:
    """TensorBoard processes (and their data servers) serving a logdir under `root`."""
    found = []
    for process in psutil.process_iter():
        try:
            cmdline = process.cmdline()
            program = "tensorboard.main" in cmdline or "tensorboard_data_server" in (cmdline or [""])[0]
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


async def test_tensorboard_per_replica_shows_the_jobs_scalars(fetch, root, jp_base_url, jp_serverapp,
                                                                http_server_client):
    spec = {"name": "tf", "framework": "tensorflow", "code": {"path": str(EXAMPLES / "tf-ps")},
            "command": "python train.py --steps 100000 --log_every 10 --log_dir {{ logdir }}",
            "replicas": {"chief": {"count": 1}, "ps": {"count": 1}, "worker": {"count": 1}},
            "tensorboard": {"enabled": True}}
    response = await fetch("distrain", "api", "jobs", method="POST", body=json.dumps(spec))
    assert response.code == 201

    chief = ("distrain", "tensorboard", "tf", "chief-0")

    async def live_loss():
        job = json.loads((await fetch("distrain", "api", "jobs", "tf")).body)
        assert job["phase"] in ("Pending", "Running"), job
        scalars = await fetch(*chief, "data", "plugin", "scalars", "scalars", run="chief-0", tag="loss")
        return scalars.code == 200 and len(json.loads(scalars.body)) >= 2

    await wait_until(live_loss)  # scalars arrive while the job is still running

    page = await fetch(*chief)
    assert page.code == 302 and page.headers["Location"].endswith("/distrain/tensorboard/tf/chief-0/")
    page = await fetch(*chief[:-1], "chief-0/")
    assert page.code == 200 and b"<tb-webapp>" in page.body

    # the page's fonts (TensorBoard names them at the site's root) are asked for under the proxy
    fonts = {url.decode() for url in re.findall(rb"""url\(\s*["']?([^)"']*font-roboto/[^)"']*)""", page.body)}
    mount = f"{jp_base_url}distrain/tensorboard/tf/chief-0/"
    assert len(fonts) > 10 and all(url.startswith(f"{mount}font-roboto/") for url in fonts), fonts
    for url in fonts:
        font = await fetch(url[len(jp_base_url):])
        assert font.code == 200 and font.headers["Content-Type"] == "font/woff2" and font.body, url

    # the replica's one run is named after it
    runs = await fetch(*chief, "data", "runs")
    assert runs.code == 200 and json.loads(runs.body) == ["chief-0"]

    # a POST with the user's login cookie: from TensorBoard's own page (this site's Origin) it passes; from
    # another site, or with no Origin and no XSRF token, it never reaches TensorBoard
    login = await http_server_client.fetch(f"{mount}data/runs?token={jp_serverapp.identity_provider.token}")
    cookies = "; ".join(c.split(";")[0] for c in login.headers.get_list("Set-Cookie"))
    assert login.code == 200 and "username-" in cookies

    async def post_with_cookie(origin):
        headers = {"Cookie": cookies, "Content-Type": "application/x-www-form-urlencoded",
                   **({"Origin": origin} if origin else {})}
        return await http_server_client.fetch(f"{mount}data/plugin/scalars/scalars_multirun", method="POST",
                                              body="tag=loss&runs=chief-0", headers=headers, raise_error=False)

    own = await post_with_cookie(f"http://{http_server_client.get_url('/').split('/')[2]}")
    assert own.code == 200 and json.loads(own.body)["chief-0"], own.body
    cross_site = await post_with_cookie("https://evil.example")  # Jupyter's own origin check answers
    assert cross_site.code == 404 and json.loads(cross_site.body) == {"message": "Not Found"}
    no_origin = await post_with_cookie(None)
    assert no_origin.code == 403 and "_xsrf" in json.loads(no_origin.body)["message"], no_origin.body

    stopped = await fetch("distrain", "api", "jobs", "tf", "stop", method="POST", body="")
    assert json.loads(stopped.body)["phase"] == "Stopped"
    logs = (await fetch("distrain", "api", "jobs", "tf", "logs", replica="chief-0")).body.decode()
    printed = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"step (\d+)/\d+ loss ([\d.]+)", logs)}
    assert len(printed) >= 2

    async def all_points():
        scalars = await fetch(*chief, "data", "plugin", "scalars", "scalars", run="chief-0", tag="loss")
        points = {step: value for _, step, value in json.loads(scalars.body)}
        return points if set(printed) <= set(points) else None

    points = await wait_until(all_points, timeout=90)
    assert {step: round(points[step], 4) for step in printed} == printed

    # one TensorBoard over the whole job: each replica is a run
    runs = await fetch("distrain", "tensorboard", "tf", "all", "data", "runs")
    assert runs.code == 200 and "chief-0" in json.loads(runs.body)
    assert len([p for p in tensorboards(root) if "tensorboard.main" in p.cmdline()]) == 2

    # idle TensorBoards stop by themselves; a new request starts one again
    await wait_until(lambda: not tensorboards(root), timeout=IDLE_TIMEOUT * 4)
    again = await fetch(*chief, "data", "plugin", "scalars", "tags")
    assert again.code == 200 and "loss" in json.loads(again.body)["chief-0"]
    assert tensorboards(root)

    # deleting the job stops its TensorBoards; nothing is left
    assert (await fetch("distrain", "api", "jobs", "tf", method="DELETE")).code == 204
    assert not tensorboards(root)
    assert not list((root / "tensorboards").iterdir())  # nor the directory naming the replica's run
    assert (await fetch(*chief[:-1], "chief-0/")).code == 404
    assert_nothing_left(root)


def test_stopping_the_server_stops_its_tensorboards(jupyter_server):
    server = jupyter_server
    spec = {"name": "quick", "code": {"path": str(EXAMPLES / "python")}, "command": "python train.py"}
    request = urllib.request.Request(f"{server.url}/distrain/api/jobs", data=json.dumps(spec).encode(),
                                     method="POST", headers=server.headers)
    assert urllib.request.urlopen(request, timeout=60).status == 201
    board = urllib.request.Request(f"{server.url}/distrain/tensorboard/quick/all/data/runs", headers=server.headers)
    assert urllib.request.urlopen(board, timeout=120).status == 200
    assert tensorboards(server.root)
    server.stop()
    assert not tensorboards(server.root)
