"""TensorBoard through the extension's proxy, beside the same TensorBoard reached directly and through
plain jupyter-server-proxy, in the same run.

A real job writes 1,000 scalars with TensorFlow; wrk (Debian's package) then asks for a small response
(the scalar tags) and a larger one (the scalars themselves) at 1 and 8 connections, the three routes
taking turns so drift on a noisy machine hits each. Requests carry Jupyter's login cookie, as a
TensorBoard tab's do (the browser sends it; a token is for API clients, and Jupyter signs a new cookie for
every request it authenticates by token).

The floor of any proxy inside Jupyter is Jupyter's own request path: its `GET /api/status`, authenticated
and answered from memory, is measured too, beside what the proxy may add to a small response at 1
connection to stay at 0.8x direct. Run: python bench/tensorboard_proxy.py [seconds]
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
import urllib.request
from urllib.parse import quote

import psutil
from harness import HEADERS, Server, table

from jupyter_distrain.server.tensorboard import BOARD_PROGRAM

WRITE = """
import os, tensorflow as tf
writer = tf.summary.create_file_writer(os.environ["DISTRAIN_LOG_DIR"])
with writer.as_default():
    for step in range(1000):
        tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
writer.close()
"""
ROUNDS = 3
LOAD = {1: "-t1 -c1", 8: "-t2 -c8"}
ROUTES = ("direct", "distrain", "jupyter-server-proxy")


def wrk(url: str, connections: int, seconds: float, cookie: str) -> tuple[float, float]:
    """(requests per second, p50 latency in ms) of wrk's keep-alive load on `url`."""
    out = subprocess.run(["wrk", *LOAD[connections].split(), f"-d{seconds:g}s", "--latency", "-H", f"Cookie: {cookie}",
                          url], capture_output=True, text=True, check=True).stdout
    if re.search(r"Non-2xx or 3xx responses", out):
        raise RuntimeError(f"errors from {url}:\n{out}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])
    value, unit = re.search(r"\s50%\s+([\d.]+)(us|ms|s)\b", out).groups()
    return rate, float(value) * {"us": 0.001, "ms": 1, "s": 1000}[unit]


def board(root) -> tuple[int, str]:
    """(port, path prefix) of the TensorBoard this server started."""
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if BOARD_PROGRAM in cmdline and str(root) in " ".join(cmdline):
            prefix = cmdline[cmdline.index("--path_prefix") + 1] if "--path_prefix" in cmdline else ""
            return int(cmdline[cmdline.index("--port") + 1]), prefix
    raise RuntimeError("no TensorBoard running")


def get(url: str) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=HEADERS), timeout=120) as response:
        return response.read()


def login_cookie(url: str) -> str:
    """The cookie Jupyter gives for a request it authenticates by token."""
    with urllib.request.urlopen(urllib.request.Request(url, headers=HEADERS), timeout=120) as response:
        return "; ".join(cookie.split(";")[0] for cookie in response.headers.get_all("Set-Cookie"))


def measure(seconds: float) -> list[tuple]:
    if not shutil.which("wrk"):
        sys.exit("wrk is needed: apt-get install wrk")
    with Server("--ServerApp.jpserver_extensions=jupyter_server_proxy=True") as server:
        (server.code / "write.py").write_text(WRITE)
        server.submit("scalars", "python write.py")
        assert server.wait("scalars")["phase"] == "Succeeded"
        mount = f"{server.url}/distrain/tensorboard/scalars/worker-0"
        run = next(name for name in json.loads(get(f"{mount}/data/runs")) if "worker-0" in name)
        port, prefix = board(server.root)
        bases = {"direct": f"http://127.0.0.1:{port}{prefix}", "distrain": mount,
                 "jupyter-server-proxy": f"{server.url}/proxy/{port}{prefix}"}
        paths = {"small": "/data/plugin/scalars/tags", "large": f"/data/plugin/scalars/scalars?run={quote(run)}&tag=loss"}
        for base in bases.values():
            assert b'"loss"' in get(base + paths["small"]), base
        cookie = login_cookie(f"{server.url}/api/status")
        results: dict[tuple, list] = {}
        jupyter = []
        for _ in range(ROUNDS):
            for size, path in paths.items():
                for connections in LOAD:
                    for route, base in bases.items():
                        results.setdefault((size, connections, route), []).append(
                            wrk(base + path, connections, seconds, cookie))
            jupyter.append(wrk(f"{server.url}/api/status", 1, seconds, cookie)[0])
    rows = []
    for size in paths:
        for connections in LOAD:
            median = {route: (statistics.median(r for r, _ in results[size, connections, route]),
                              statistics.median(ms for _, ms in results[size, connections, route])) for route in ROUTES}
            (direct_rate, direct_ms), (rate, ms), (jsp_rate, _) = (median[route] for route in ROUTES)
            what = f"TensorBoard {size} response, {connections} connection{'s' if connections > 1 else ''}"
            rows.append((f"{what}: requests/s", rate, direct_rate, "direct", rate / direct_rate,
                         ">= 0.95" if size == "large" else ">= 0.8"))
            rows.append((f"{what}: requests/s", rate, jsp_rate, "jupyter-server-proxy", rate / jsp_rate, ">= 1"))
            rows.append((f"{what}: p50 ms", ms, direct_ms, "direct", ms / direct_ms,
                         f"<= direct + 1 ms ({(direct_ms + 1) / direct_ms:.2f})"))
    jupyter_ms = 1000 / statistics.median(jupyter)
    direct_ms = 1000 / statistics.median(rate for rate, _ in results["small", 1, "direct"])
    allowed_ms = direct_ms / 0.8 - direct_ms
    rows.append(("Jupyter's own `GET /api/status`, 1 connection: ms per request", jupyter_ms, allowed_ms,
                 "what a proxy may add to a small response at 0.8x direct", jupyter_ms / allowed_ms,
                 "(the floor of a proxy in Jupyter)"))
    return rows


if __name__ == "__main__":
    print(table(measure(float(sys.argv[1]) if len(sys.argv) > 1 else 3)))
