"""The program of a job's log reader pod (`python /opt/distrain/logreader DIR PORT`), which serves, read-only, the
log files the job's replicas wrote to its output volume, DIR/<run>/<replica>.log: `GET /<run>/` lists a
run's files (a JSON list), `GET /<run>/<replica>.log` sends one, each only to a request carrying the secret of
the pod's environment (SECRET_VARIABLE, in SECRET_HEADER), so no other pod reads them; `GET /` answers the readiness
probe, and tells nothing. Symbolic links are not followed. Standard library only: it may run in the job's image."""

import hmac
import json
import os
import re
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME = re.compile(r"[a-z]+-[0-9]+\.log")  # a replica's log file
SECRET_HEADER, SECRET_VARIABLE = "X-Distrain-Reader-Secret", "DISTRAIN_READER_SECRET"


class Handler(BaseHTTPRequestHandler):
    root, secret = "", b""  # main's

    def do_GET(self):
        run, _, name = self.path.strip("/").partition("/")
        if not run:
            return self.send(b"ok", "text/plain")
        if not hmac.compare_digest(self.headers.get(SECRET_HEADER, "").encode(), self.secret):
            return self.send_error(403)
        directory = os.path.join(self.root, run)
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


def main():
    Handler.root, Handler.secret = sys.argv[1], os.environ[SECRET_VARIABLE].encode()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # as the pod's first process, it has no default action
    ThreadingHTTPServer(("", int(sys.argv[2])), Handler).serve_forever()


if __name__ == "__main__":
    main()
