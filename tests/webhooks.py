"""A webhook's receiver for the tests: a loopback HTTP server keeping every POST it is sent. As a program,
`python webhooks.py HOST PORT FILE` (in the real node's network namespace, where pods reach it) appends each POST's
body to FILE as a line of JSON. Webhooks reach loopback only where the admin allows private addresses
(`allow_private`)."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """Answers each POST to any path with `status` (and `headers`) and keeps it: (path, body); every request, a
    POST or a GET, is in `requests` (method, path). `host`: the address it listens at (loopback, or the real node's
    inside its network namespace, where it runs in a process there). With `hold`, a POST is answered only once it
    is set."""

    def __init__(self, status: int = 204, host: str = "127.0.0.1", port: int = 0, kept=None,
                 headers: dict | None = None, hold: threading.Event | None = None):
        self.posts: list[tuple[str, dict]] = []
        self.requests: list[tuple[str, str]] = []
        self.status = status
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received.requests.append(("POST", self.path))
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                received.posts.append((self.path, body))
                if kept:
                    with open(kept, "a") as f:
                        f.write(json.dumps(body) + "\n")
                if hold:
                    hold.wait()
                self.answer()

            def do_GET(self) -> None:  # a redirected POST becomes a GET, where redirects are followed
                received.requests.append(("GET", self.path))
                self.answer()

            def answer(self) -> None:
                self.send_response(received.status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}{path}"

    def events(self, job: str) -> list[tuple]:
        """(event, phase, reason, replica) of each POST about `job`, in order."""
        return [(b["event"], b["phase"], b["reason"], b["replica"]) for _, b in self.posts if b["job"] == job]

    def wait(self, job: str, count: int, timeout: float = 60) -> list[dict]:
        """The bodies of the POSTs about `job` once there are `count`; then a moment to see no other come."""
        deadline = time.monotonic() + timeout
        while len(self.events(job)) < count:
            assert time.monotonic() < deadline, f"{len(self.events(job))} POSTs about {job}, not {count}: {self.posts}"
            time.sleep(0.1)
        time.sleep(1.0)
        bodies = [b for _, b in self.posts if b["job"] == job]
        assert len(bodies) == count, f"more POSTs about {job} than {count}: {bodies}"
        return bodies

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Misbehaving:
    """A receiver that reads each request and answers `answer` (bytes), then, with `drip`, one byte more every half
    second for as long as the poster listens; `connections` counts the posts it got."""

    def __init__(self, answer: bytes, drip: bool = False):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.connections = 0
        self.answer, self.drip = answer, drip
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}{path}"

    def _serve(self) -> None:
        with suppress(OSError):  # closed
            while True:
                connection, _ = self.server.accept()
                self.connections += 1
                threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection, suppress(OSError):  # the poster hung up
            asked = b""
            while b"\r\n\r\n" not in asked:
                asked += connection.recv(65536)
            connection.sendall(self.answer)
            while self.drip:
                time.sleep(0.5)
                connection.sendall(b"x")

    def close(self) -> None:
        self.drip = False
        self.server.close()


def allow_private(cli) -> None:
    """Let the jobs `cli` submits post to a Receiver, on loopback: c.Distrain.webhook_allow_private in a Jupyter
    config of its own, as an administrator sets it."""
    config = cli.root.parent / "webhooks-config"
    config.mkdir(exist_ok=True)
    (config / "jupyter_server_config.json").write_text(json.dumps({"Distrain": {"webhook_allow_private": True}}))
    cli.env["JUPYTER_CONFIG_DIR"] = str(config)


if __name__ == "__main__":
    Receiver(host=sys.argv[1], port=int(sys.argv[2]), kept=sys.argv[3]).thread.join()
