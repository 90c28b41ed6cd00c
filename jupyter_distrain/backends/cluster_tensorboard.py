"""The program a Kubernetes job's TensorBoard pod runs (`python -c <this file> --logdir ...`): TensorBoard,
with its pages made passable by the API server's service proxy. That proxy rewrites links in HTML and
fails on a Content-Encoding it does not know; TensorBoard marks its pages `identity`, so that header goes.
Standard library and TensorBoard only: it runs in the job's image, not where this package is installed."""

import sys

from tensorboard import program


def plain_pages(app):
    def wrapped(environ, start_response):
        def start(status, headers, exc_info=None):
            kept = [(k, v) for k, v in headers if (k.lower(), v) != ("content-encoding", "identity")]
            return start_response(status, kept, exc_info)

        return app(environ, start)

    return wrapped


class Server(program.WerkzeugServer):
    def __init__(self, wsgi_app, flags):
        super().__init__(plain_pages(wsgi_app), flags)


board = program.TensorBoard(server_class=Server)
board.configure(sys.argv)
sys.exit(board.main())
