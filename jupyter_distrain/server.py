"""The Jupyter server extension: routes under <base_url>/distrain/, behind Jupyter's authentication."""

from __future__ import annotations

import json

import tornado
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from . import __version__


class VersionHandler(APIHandler):
    @tornado.web.authenticated
    def get(self) -> None:
        self.finish(json.dumps({"version": __version__}))


def setup_handlers(server_app) -> None:
    web_app = server_app.web_app
    base = url_path_join(web_app.settings["base_url"], "distrain", "api")
    web_app.add_handlers(".*$", [(url_path_join(base, "version"), VersionHandler)])
