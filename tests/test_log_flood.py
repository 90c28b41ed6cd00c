"""A replica flooding its log, a client that stops reading: the server's memory stays bounded,
other requests are served, and every line still arrives once, in order."""

import asyncio
import json

import psutil
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

from conftest import assert_nothing_left

LINES = 500_000
FLOOD = f"python -c \"import sys; [sys.stdout.write('%07d %s\\n' % (i, 'x' * 90)) for i in range({LINES})]\""


def test_flooding_replica_and_stalled_client(jupyter_server, tmp_path):
    server = jupyter_server
    api = f"{server.url}/distrain/api"
    (tmp_path / "code").mkdir()
    spec = {"name": "flood", "code": {"path": str(tmp_path / "code")}, "command": FLOOD}
    server_process = psutil.Process(server.process.pid)

    async def scenario():
        http = AsyncHTTPClient()
        response = await http.fetch(f"{api}/jobs", method="POST", body=json.dumps(spec), headers=server.headers)
        assert response.code == 201
        baseline = server_process.memory_info().rss
        url = api.replace("http", "ws", 1) + "/jobs/flood/logs/stream?replica=worker-0"
        ws = await websocket_connect(HTTPRequest(url, headers=server.headers))
        first = json.loads(await ws.read_message())
        assert first["type"] == "lines"

        # the client reads nothing more while the replica writes its whole flood
        peak, answered = baseline, 0
        log = server.root / "jobs" / "flood" / "logs" / "1" / "worker-0.log"
        while True:
            job = json.loads((await http.fetch(f"{api}/jobs/flood", headers=server.headers)).body)
            answered += 1
            peak = max(peak, server_process.memory_info().rss)
            if job["phase"] != "Running" and job["phase"] != "Pending":
                break
            await asyncio.sleep(0.2)
        assert job["phase"] == "Succeeded", job
        written = log.stat().st_size
        assert written > 50 * 2**20 and answered >= 3
        assert peak - baseline < 30 * 2**20, f"server grew by {(peak - baseline) / 2**20:.0f} MiB"

        # then it reads on: every line once, in order, then the end
        numbers, messages = [], [first]
        while (raw := await ws.read_message()) is not None:
            messages.append(json.loads(raw))
        for message in messages:
            if message["type"] == "lines":
                numbers += [int(line.split(" ", 2)[1]) for line in message["data"].splitlines()]
        assert messages[-1] == {"type": "end", "phase": "Succeeded", "run": 1}
        assert numbers == list(range(LINES))
        assert messages[-2]["offset"] == written
        http.close()

    asyncio.run(scenario())
    assert_nothing_left(server.root)
