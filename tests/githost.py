"""A git host for tests: git's smart HTTP protocol through `git http-backend` for the repositories below its
root, optionally behind basic auth, and the other files below its root as they are (wheels for pip, say).
`python githost.py ROOT ADDRESS PORT` serves ROOT until it is killed (the real node's, in its namespace)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class GitHTTP(BaseHTTPRequestHandler):
    root: Path
    credentials: tuple[str, str] | None = None  # (user, password) that basic auth asks for

    def do_GET(self):
        self.serve()

    def do_POST(self):
        self.serve()

    def serve(self):
        user = ""
        if self.credentials:
            user = self.credentials[0]
            expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.end_headers()
                return
        path, _, query = self.path.partition("?")
        plain = (self.root / path.lstrip("/")).resolve()
        if self.command == "GET" and plain.is_file() and plain.is_relative_to(self.root.resolve()):
            self.answer(200, {"Content-Type": "application/octet-stream"}, plain.read_bytes())
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {**os.environ, "GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path,
               "QUERY_STRING": query, "REQUEST_METHOD": self.command, "REMOTE_USER": user,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body))}
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n") if ": " in line)
        self.answer(int(headers.pop("Status", "200").split()[0]), headers, payload)

    def answer(self, status: int, headers: dict, payload: bytes) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def serve(root: Path, address: str = "127.0.0.1", port: int = 0,
          credentials: tuple[str, str] | None = None) -> ThreadingHTTPServer:
    """A running git host for `root` (stop it with `shutdown()`); its port is `server_port`."""
    handler = type("Handler", (GitHTTP,), {"root": root, "credentials": credentials})
    server = ThreadingHTTPServer((address, port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
    threading.Event().wait()
