"""The program a Kubernetes job's TensorBoard pod runs (`python -c <this file> --logdir ...`): TensorBoard,
answering only requests that carry the job's board secret (its Secret, in the pod's environment), so another
pod of the namespace reaches the port and reads nothing; the Jupyter server, which reads the Secret, adds it
on its way through the API server's service proxy. Readiness is asked at PROBE_PATH, which tells nothing.
That proxy rewrites links in HTML and fails on a Content-Encoding it does not know; TensorBoard marks its
pages `identity`, so that header goes. Standard library and TensorBoard only: it runs in the job's image, not
where this package is installed. The local board (server/board.py) imports its guard."""

import hmac
import os
import sys

SECRET_HEADER, SECRET_VARIABLE = "X-Distrain-Board-Secret", "DISTRAIN_BOARD_SECRET"
SECRET_ENVIRON = "HTTP_" + SECRET_HEADER.upper().replace("-", "_")  # the header, as WSGI names it
PROBE_PATH = "/distrain-ready"


def requiring_secret(secret, wsgi_app):
    """`wsgi_app`, answering a request without `secret` (in SECRET_HEADER) with a 403."""
    def guarded(environ, start_response):
        if not hmac.compare_digest(environ.get(SECRET_ENVIRON, "").encode(), secret.encode()):
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"this TensorBoard answers its Jupyter server only\n"]
        return wsgi_app(environ, start_response)

    return guarded


def answering_probes(wsgi_app):
    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") == PROBE_PATH:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ready\n"]
        return wsgi_app(environ, start_response)

    return wrapped


def plain_pages(wsgi_app):
    def wrapped(environ, start_response):
        def start(status, headers, exc_info=None):
            kept = [(k, v) for k, v in headers if (k.lower(), v) != ("content-encoding", "identity")]
            return start_response(status, kept, exc_info)

        return wsgi_app(environ, start)

    return wrapped


def main():
    from tensorboard import program

    class Server(program.WerkzeugServer):
        def __init__(self, wsgi_app, flags):
            guarded = requiring_secret(os.environ[SECRET_VARIABLE], plain_pages(wsgi_app))
            super().__init__(answering_probes(guarded), flags)

    board = program.TensorBoard(server_class=Server)
    board.configure(sys.argv)
    sys.exit(board.main())


if __name__ == "__main__":
    main()
