"""The job list with 1,000 jobs of 5 replicas each: `GET jobs` beside reading every job's rows from
SQLite directly, in the same run, and what a panel asking again with nothing changed moves (its
If-None-Match). Run: python bench/job_list.py [requests]
"""

from __future__ import annotations

import statistics
import sys
import time
import urllib.error
import urllib.request

from harness import HEADERS, Server, jobs_in, table

from jupyter_distrain.store import Store

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
            (f"`GET jobs`, {JOBS} jobs: bytes", size, size, "the same list", 1.0, "no full specs or events"),
            ("`GET jobs` again, nothing changed: bytes", unchanged, size, "the whole list", unchanged / size,
             "almost none")]


if __name__ == "__main__":
    print(table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 30)))
