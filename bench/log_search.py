"""A job's logs at scale: 64 replicas of 100,000 lines each (6.4 million lines, about 400 MB), written in the
store as the supervisor writes them. The log view opening (its stream from each replica's last lines, as the
panel asks it, until the end message) beside the panel before it (the stream from every replica's first line);
the server's search (`GET logs/search`) beside GNU grep counting the same files' matches (`grep -F -i -c`).
Run: python bench/log_search.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import time
import urllib.parse

from harness import HEADERS, Server, table
from stored import logs_in  # tests/stored.py (harness puts tests/ on the path)
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

REPLICAS, LINES = 64, 100_000
HELD = 200_000  # the lines the panel's log view holds, shared by the job's logs (src/logstream.ts)


async def stream(server: Server, name: str, tail: int | None) -> tuple[int, float]:
    """(lines, ms from connecting to the end message) of the job's log stream, from each replica's last `tail`
    lines, or from the first."""
    query = f"?tail={tail}" if tail is not None else ""
    url = f"{server.api}/jobs/{name}/logs/stream{query}".replace("http", "ws", 1)
    began = time.perf_counter()
    ws = await websocket_connect(HTTPRequest(url, headers=HEADERS, request_timeout=600), max_message_size=1 << 24)
    lines = 0
    while (raw := await ws.read_message()) is not None:
        message = json.loads(raw)
        if message["type"] == "lines":
            lines += message["data"].count("\n")
    return lines, (time.perf_counter() - began) * 1000


def search(server: Server, name: str, query: str) -> tuple[float, int]:
    """(ms, hits) of the server's search."""
    began = time.perf_counter()
    found = server.request("GET", f"jobs/{name}/logs/search?q={urllib.parse.quote(query)}")
    return (time.perf_counter() - began) * 1000, len(found["hits"])


def grep(server: Server, name: str, query: str) -> float:
    files = sorted(str(path) for path in (server.root / "jobs" / name / "logs" / "1").glob("*.log"))
    began = time.perf_counter()
    # its counts read (to /dev/null, GNU grep stops at the first match)
    subprocess.run(["grep", "-F", "-i", "-c", "--", query, *files], capture_output=True, check=False)
    return (time.perf_counter() - began) * 1000


def measure(searches: int = 5) -> list[tuple]:
    with Server() as server:
        name, _ = logs_in(server.root, REPLICAS, LINES)
        tail = HELD // (REPLICAS + 1)  # the set-up log has its share
        lines, opened = asyncio.run(stream(server, name, tail))
        _, whole = asyncio.run(stream(server, name, None))
        rows = [(f"the log view opening, {REPLICAS} replicas x {LINES:,} lines: ms to the end ({lines:,} lines)",
                 opened, whole, "the stream from each replica's first line (the panel before)", opened / whole,
                 "< 0.1")]
        for query, what in (("no line says this", "words in no line"), ("4242424242", "digits in no line"),
                            ("loss", "a word in every line")):
            ours = statistics.median(search(server, name, query)[0] for _ in range(searches))
            theirs = statistics.median(grep(server, name, query) for _ in range(searches))
            rows.append((f"search of {REPLICAS * LINES:,} lines, {what}: p50 ms to the first hits", ours, theirs,
                         "grep -F -i -c over the same files", ours / theirs, "first hits < 1 s"))
    return rows


if __name__ == "__main__":
    print(table(measure()))
