"""The job list with 1,000 jobs of 5 replicas each: on the local backend, `GET jobs` beside reading every
job's rows from SQLite directly, and what a panel asking again with nothing changed moves (its
If-None-Match); with a team's 10,000 jobs, `GET jobs` beside Jupyter's own listing of 10,000 files; on the
Kubernetes backend (a real control plane, tests/controlplane), `GET jobs` beside listing the jobs' ConfigMaps
from the API server; a sweep's table of 1,000 trials, read again and followed by its view.
Run: python bench/job_list.py [requests]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from harness import HEADERS, Server, control_plane, table
from stored import jobs_in, sweep_in  # tests/stored.py (harness puts tests/ on the path)

from jupyter_distrain.backends.local.store import Store

JOBS = 1000


def get(url: str, headers: dict) -> tuple[float, int, str]:
    """(ms, body bytes, ETag) of one GET; a 304 has no body."""
    began = time.perf_counter()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={**HEADERS, **headers}), timeout=60) as r:
            body, etag = r.read(), r.headers.get("ETag", "")
    except urllib.error.HTTPError as e:
        if e.code != 304:
            raise
        body, etag = b"", headers.get("If-None-Match", "")
    return (time.perf_counter() - began) * 1000, len(body), etag


def measure(requests: int = 30) -> list[tuple]:
    with Server() as server:
        jobs_in(server.root, JOBS)
        url = f"{server.api}/jobs"
        get(url, {})  # warm
        fetched = [get(url, {}) for _ in range(requests)]
        etag = fetched[-1][2]
        again = [get(url, {"If-None-Match": etag}) for _ in range(requests)] if etag else []
        full = sum(get(f"{url}/{job['name']}", {})[1] for job in server.request("GET", "jobs"))  # each by itself
        store = Store(server.root / "jobs.sqlite")
        direct = []
        for _ in range(requests):
            began = time.perf_counter()
            store.jobs()
            direct.append((time.perf_counter() - began) * 1000)
        store.close()
    p50 = statistics.median(ms for ms, _, _ in fetched)
    sqlite = statistics.median(direct)
    size = fetched[-1][1]
    unchanged = statistics.median(size for _, size, _ in again) if again else size
    return [(f"`GET jobs`, {JOBS} jobs: p50 ms", p50, sqlite, "SQLite rows read directly", p50 / sqlite, "<= 50 ms"),
            (f"`GET jobs`, {JOBS} jobs: bytes", size, full, "every job's own record (GET jobs/{name})", size / full,
             "no full specs or events"),
            ("`GET jobs` again, nothing changed: bytes", unchanged, size, "the whole list", unchanged / size,
             "almost none")]


def measure_team(requests: int = 10, jobs: int = 10_000) -> list[tuple]:
    """`GET jobs` with a team's `jobs` (one replica each) beside Jupyter's own listing of a directory of as many
    files (`GET /api/contents/DIR`, without their content), from the same server; the panel's refresh of that list
    (`GET job-changes?since=`) with nothing changed beside `GET jobs`."""
    with Server() as server:
        jobs_in(server.root, jobs, workers=0)
        files = Path(server.tmp.name) / "files"
        files.mkdir()
        for i in range(jobs):
            (files / f"notebook-{i:05d}.ipynb").write_text("{}")
        listing = f"{server.url}/api/contents/files?content=1"
        get(f"{server.api}/jobs", {}), get(listing, {})  # warm
        ours = [get(f"{server.api}/jobs", {}) for _ in range(requests)]
        jupyters = [get(listing, {})[0] for _ in range(requests)]
        version = server.request("GET", "job-changes")["version"]
        refreshes = [get(f"{server.api}/job-changes?since={version}", {}) for _ in range(requests)]
    p50, ours_size, contents = statistics.median(ms for ms, _, _ in ours), ours[-1][1], statistics.median(jupyters)
    refresh, size = statistics.median(ms for ms, _, _ in refreshes), refreshes[-1][1]
    return [(f"`GET jobs`, {jobs:,} jobs: p50 ms", p50, contents, f"Jupyter's listing of {jobs:,} files", p50 / contents,
             "<= 1"),
            (f"the panel's refresh of {jobs:,} jobs, nothing changed: p50 ms", refresh, p50, "`GET jobs`", refresh / p50,
             "< 1"),
            (f"the panel's refresh of {jobs:,} jobs, nothing changed: bytes", size, ours_size, "`GET jobs`",
             size / ours_size, "almost none")]


def measure_sweep_view(requests: int = 10, trials: int = 1000, points: int = 200) -> list[tuple]:
    """A finished sweep's table of `trials` trials, each with `points` steps of its metric: `GET trials` read
    again (finished trials' metrics kept) beside its first read (every trial's event files); the view's refresh
    (`trials?since=`) with nothing changed beside the table read whole."""
    with Server() as server:
        sweep_in(server.root, trials, "sweep", points)
        url = f"{server.api}/jobs/sweep/trials"
        first = get(url, {})[0]
        whole = [get(url, {}) for _ in range(requests)]
        version = server.request("GET", "jobs/sweep/trials?since=")["version"]
        refreshes = [get(f"{url}?since={version}", {}) for _ in range(requests)]
    again, size = statistics.median(ms for ms, _, _ in whole), whole[-1][1]
    refresh, sent = statistics.median(ms for ms, _, _ in refreshes), refreshes[-1][1]
    view = f"a sweep's table, {trials:,} trials of {points} points"
    return [(f"{view}: `GET trials` again, ms", again, first, "its first read (every trial's event files)",
             again / first, "< 1"),
            (f"{view}: the view's refresh, nothing changed, p50 ms", refresh, again, "`GET trials` whole",
             refresh / again, "< 1"),
            (f"{view}: the view's refresh, nothing changed, bytes", sent, size, "`GET trials` whole", sent / size,
             "almost none")]


def measure_kubernetes(requests: int = 30) -> list[tuple]:
    from controlplane.cluster import ADMIN, NAMESPACE
    from kubernetes import client

    with control_plane() as plane, plane.client(ADMIN) as api:
        core = client.CoreV1Api(api)
        for root in finished_roots(NAMESPACE):
            core.create_namespaced_config_map(NAMESPACE, root)
        with Server("--Distrain.backend=kubernetes", f"--Distrain.namespace={NAMESPACE}",
                    f"--Distrain.kubeconfig={plane.kubeconfig(ADMIN)}") as server:
            assert len(server.request("GET", "jobs")) == JOBS  # and the cache is filled
            fetched = [get(f"{server.api}/jobs", {})[0] for _ in range(requests)]
        direct = []
        for _ in range(requests):
            began = time.perf_counter()
            core.list_namespaced_config_map(NAMESPACE, _preload_content=False).read()
            direct.append((time.perf_counter() - began) * 1000)
    p50, listing = statistics.median(fetched), statistics.median(direct)
    return [(f"`GET jobs`, Kubernetes, {JOBS} jobs: p50 ms", p50, listing, "the API server's list of their ConfigMaps",
             p50 / listing, "<= 50 ms")]


def finished_roots(namespace: str):
    """The ConfigMaps of `JOBS` finished 5-replica jobs, as the Kubernetes backend records them."""
    from jupyter_distrain import spec as spec_
    from jupyter_distrain.backends.kubernetes import render
    from jupyter_distrain.backends.kubernetes.state import new_status
    from jupyter_distrain.config import Distrain

    settings, now = Distrain(namespace=namespace), time.time()
    for i in range(JOBS):
        spec = spec_.validate({"name": f"job-{i:04d}", "framework": "tensorflow", "command": "python train.py",
                               "code": {"git": "https://example.com/models.git", "ref": "main", "commit": "0" * 40},
                               "replicas": {"chief": {}, "worker": {"count": 4}}})
        status = new_status(spec)
        status.update(phase="Succeeded", reason="Completed", exit_code=0, started=now, finished=now)
        for replica in status["replicas"].values():
            replica.update(phase="Succeeded", exit_code=0, started=now, finished=now)
        root = render.root(spec, settings, "jobset")
        root["data"]["status.json"] = json.dumps(status)
        yield root


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    print(table(measure(count) + measure_team() + measure_sweep_view() + measure_kubernetes(count)))
