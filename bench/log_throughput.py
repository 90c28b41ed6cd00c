"""Log throughput under a flood: a replica prints lines as fast as it can.

Measured in one run: (a) live, the stream's delivery rate against the replica's write rate;
(b) catch-up, streaming the finished log from the start against reading the file directly.
Run: python bench/log_throughput.py [lines]
"""

import asyncio
import json
import sys
import time

from harness import HEADERS, Server, table
from tornado.websocket import websocket_connect
from tornado.httpclient import HTTPRequest

FLOOD = "import sys\nfor i in range(int(sys.argv[1])): sys.stdout.write('%08d %s\\n' % (i, 'x' * 90))\n"


async def stream_all(server: Server, name: str) -> tuple[int, float, float]:
    """(lines, seconds from connecting to the end message)."""
    url = f"{server.api}/jobs/{name}/logs/stream?replica=worker-0".replace("http", "ws", 1)
    began = time.monotonic()
    ws = await websocket_connect(HTTPRequest(url, headers=HEADERS, request_timeout=600),
                                 max_message_size=1 << 24)
    lines = 0
    while (raw := await ws.read_message()) is not None:
        message = json.loads(raw)
        if message["type"] == "lines":
            lines += message["data"].count("\n")
    return lines, time.monotonic() - began


def read_file(path) -> tuple[int, float]:
    began = time.monotonic()
    with open(path, "rb") as f:
        lines = sum(1 for _ in f)
    return lines, time.monotonic() - began


def stamps(path) -> float:
    """Seconds between the first and the last line the supervisor wrote."""
    from datetime import datetime

    with open(path, "rb") as f:
        first = f.readline()[:27].decode()
        f.seek(-200, 2)
        last = f.read().splitlines()[-1][:27].decode()
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()  # noqa: E731
    return parse(last) - parse(first)


async def measure(count: int = 500_000) -> list[tuple]:
    with Server() as server:
        (server.code / "flood.py").write_text(FLOOD)
        await asyncio.to_thread(server.submit, "flood", f"python flood.py {count}")
        live_lines, live_seconds = await stream_all(server, "flood")
        log = server.root / "jobs" / "flood" / "logs" / "1" / "worker-0.log"
        written_seconds = stamps(log)
        size = log.stat().st_size
        again_lines, again_seconds = await stream_all(server, "flood")
        file_lines, file_seconds = await asyncio.to_thread(read_file, log)
    assert live_lines == again_lines == file_lines == count, (live_lines, again_lines, file_lines)
    what = f"log flood of {count:,} lines ({size / 2**20:.0f} MiB)"
    return [(f"{what}, live: lines/s", count / live_seconds, count / written_seconds, "the replica's writing",
             written_seconds / live_seconds, "as today"),
            (f"{what}, catching up: lines/s", count / again_seconds, count / file_seconds, "reading the file",
             file_seconds / again_seconds, "as today")]


if __name__ == "__main__":
    print(table(asyncio.run(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 500_000))))
