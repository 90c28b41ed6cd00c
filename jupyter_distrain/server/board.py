"""This server's TensorBoard process (`python -m jupyter_distrain.server.board` with TensorBoard's flags):
TensorBoard's app, served by tornado with HTTP/1.1 keep-alive, so the proxy sends every request on a
connection it keeps (TensorBoard's own server closes each connection after one answer). The app runs on
threads, as under TensorBoard's own server. It answers only requests that carry the secret its environment
holds (incluster/tensorboard.py's SECRET_VARIABLE), which only this user can read: any other user of the machine can
connect to its port, not read a job's scalars."""

from __future__ import annotations

import asyncio
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from absl import app
from tensorboard import default, main_lib, program
from tensorboard.plugins import base_plugin
from tornado import httpserver, netutil, wsgi

from ..incluster.tensorboard import SECRET_VARIABLE, requiring_secret  # a cluster's board's guard too

THREADS = 8


class KeepAliveServer(program.TensorBoardServer):
    def __init__(self, wsgi_app, flags):
        self.flags = flags
        self.app = wsgi.WSGIContainer(requiring_secret(os.environ[SECRET_VARIABLE], wsgi_app),
                                      executor=ThreadPoolExecutor(THREADS))
        self.sockets = netutil.bind_sockets(flags.port, flags.host)  # now: a port in use fails the start

    def serve_forever(self) -> None:
        async def serve() -> None:
            server = httpserver.HTTPServer(self.app, xheaders=False)
            server.add_sockets(self.sockets)
            await asyncio.Event().wait()

        asyncio.run(serve())

    def get_url(self) -> str:
        return f"http://{self.flags.host}:{self.flags.port}{self.flags.path_prefix}/"


def main() -> None:
    """As `python -m tensorboard.main`, on this server."""
    main_lib.global_init()
    board = program.TensorBoard(plugins=default.get_plugins(), server_class=KeepAliveServer)
    try:
        app.run(board.main, flags_parser=board.configure)
    except base_plugin.FlagsError as e:
        sys.exit(f"Error: {e}")


if __name__ == "__main__":
    main()
