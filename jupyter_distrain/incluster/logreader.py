"""The program of a job's log reader pod (`python -c <this file> DIR PORT`), which serves, read-only, the
log files the job's replicas wrote to its output volume, DIR/<run>/<replica>.log: `GET /<run>/` lists a
run's files (a JSON list), `GET /<run>/<replica>.log` sends one, `GET /` answers the readiness probe.
Symbolic links are not followed. Standard library only: it runs in the job's image."""

import json
import os
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT, PORT = sys.argv[1], int(sys.argv[2])
NAME = re.compile(r"[a-z]+-[0-9]+\.log")  # a replica's log file


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        run, _, name = self.path.strip("/").partition("/")
        if not run:
            return self.send(b"ok", "text/plain")
        directory = os.path.join(ROOT, run)
        if not run.isdigit() or os.path.islink(directory):
            return self.send_error(404)
        if not name:
            found = sorted(n for n in os.listdir(directory) if NAME.fullmatch(n)) if os.path.isdir(directory) else []
            return self.send(json.dumps(found).encode(), "application/json")
        path = os.path.join(directory, name)
        if not NAME.fullmatch(name) or os.path.islink(path) or not os.path.isfile(path):
            return self.send_error(404)
        with open(path, "rb") as f:
            left = os.fstat(f.fileno()).st_size  # the file may grow: send what Content-Length promises
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(left))
            self.end_headers()
            while left > 0 and (chunk := f.read(min(left, 64 * 1024))):
                self.wfile.write(chunk)
                left -= len(chunk)

    def send(self, body, content_type):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer(("", PORT), Handler).serve_forever()
