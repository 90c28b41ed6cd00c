"""Log latency: from a replica printing a line to a client receiving it.

The same log file is followed two ways in the same run: the extension's websocket stream and
`tail -F` (GNU tail, inotify). Both read the file the supervisor writes, so the ratio shows what
the server adds. Run: python bench/log_latency.py [lines]
"""

import asyncio
import json
import statistics
import sys
import time

from harness import HEADERS, Server, percentile, table
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

EMIT = """
import sys, time
time.sleep(3)  # let both readers attach
for i in range(int(sys.argv[1])):
    print(repr(time.time()), flush=True)
    time.sleep(0.02)
"""


async def follow_stream(server: Server, name: str, lines: int) -> list[float]:
    url = f"{server.api}/jobs/{name}/logs/stream?replica=worker-0".replace("http", "ws", 1)
    ws = await websocket_connect(HTTPRequest(url, headers=HEADERS))
    latencies = []
    while len(latencies) < lines and (raw := await ws.read_message()) is not None:
        now = time.time()
        message = json.loads(raw)
        if message["type"] == "lines":
            latencies += [(now - float(line.split(" ", 1)[1])) * 1000 for line in message["data"].splitlines()]
    ws.close()
    return latencies


async def follow_tail(path, lines: int) -> list[float]:
    tail = await asyncio.create_subprocess_exec("tail", "-n", "+1", "-F", str(path), stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    latencies = []
    while len(latencies) < lines:
        line = await tail.stdout.readline()
        latencies.append((time.time() - float(line.decode().split(" ", 1)[1])) * 1000)
    tail.kill()
    await tail.wait()
    return latencies


async def measure(lines: int = 300) -> list[tuple]:
    with Server() as server:
        (server.code / "emit.py").write_text(EMIT)
        log = server.root / "jobs" / "latency" / "logs" / "1" / "worker-0.log"
        await asyncio.to_thread(server.submit, "latency", f"python emit.py {lines}")
        while not log.exists():  # tail -F polls once a second for a file that does not exist yet
            await asyncio.sleep(0.05)
        tail = asyncio.ensure_future(follow_tail(log, lines))
        stream = await follow_stream(server, "latency", lines)
        tailed = await tail
    rows = []
    for name, ours, theirs, goal in (("p50", statistics.median(stream), statistics.median(tailed), "<= 5 ms"),
                                     ("p99", percentile(stream, 99), percentile(tailed, 99), "<= 20 ms")):
        rows.append((f"log line, replica print to websocket: {name} ms", ours, theirs, "tail -F", ours / theirs, goal))
    return rows


if __name__ == "__main__":
    print(table(asyncio.run(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 300))))
