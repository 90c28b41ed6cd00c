"""The Jupyter server extension: REST, log streams and TensorBoard under <base_url>/distrain/.

Configured with traitlets, e.g. in jupyter_server_config.py:

    c.Distrain.root = "/data/distrain"
    c.Distrain.tensorboard_idle_timeout = 600
"""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_server.extension.application import ExtensionApp
from traitlets import Dict, Enum, Float, Int, Unicode, default

from ..backends.local import LocalBackend, default_root
from ..manager import JobManager
from . import handlers, logstream, tensorboard

DEFAULT_IMAGES = {
    "tensorflow": "tensorflow/tensorflow:2.16.1",
    "keras": "tensorflow/tensorflow:2.16.1",
    "pytorch": "pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime",
    "paddle": "paddlepaddle/paddle:2.6.1",
    "python": "python:3.11-slim",
}


class Distrain(ExtensionApp):
    name = "jupyter_distrain"
    description = "Launch and manage model training from JupyterLab"
    load_other_extensions = True

    backend = Enum(["local"], default_value="local", config=True,
                   help="Where jobs run: 'local' runs every replica as a process on this machine.")
    root = Unicode(config=True, help="Storage root of the local backend: job records, logs, outputs, volumes. "
                                     "Default: $DISTRAIN_HOME, else <jupyter data dir>/distrain (as the CLI).")
    default_images = Dict(DEFAULT_IMAGES, config=True,
                          help="Container image per framework, for jobs whose spec names none.")
    tensorboard_idle_timeout = Int(900, config=True,
                                   help="Seconds without a request after which a TensorBoard is stopped; 0 keeps it.")
    tensorboard_start_timeout = Float(60, config=True, help="Seconds a TensorBoard may take to start serving.")

    @default("root")
    def _default_root(self) -> str:
        return str(default_root())

    def initialize_settings(self) -> None:
        # terminals and kernels started by this server inherit it: their `distrain` sees the same jobs
        os.environ["DISTRAIN_HOME"] = self.root
        manager = JobManager(LocalBackend(Path(self.root)))
        self.tensorboards = tensorboard.TensorBoards(
            base_url=self.serverapp.base_url, idle_timeout=self.tensorboard_idle_timeout,
            start_timeout=self.tensorboard_start_timeout, job_exists=manager.exists, log=self.log,
        )
        self.settings.update(distrain_manager=manager, distrain_tensorboards=self.tensorboards,
                             distrain_watcher=logstream.LogWatcher(self.log), distrain_config=self)

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes())

    async def stop_extension(self) -> None:
        await self.tensorboards.stop()
        await self.settings["distrain_watcher"].close()


def routes() -> list[tuple]:
    """Every route of the extension, relative to the server's base URL."""
    api, job = "distrain/api", "distrain/api/jobs/(?P<name>[^/]+)"
    return [
        (f"{api}/version", handlers.VersionHandler),
        (f"{api}/jobs", handlers.JobsHandler),
        (f"{job}", handlers.JobHandler),
        (f"{job}/stop", handlers.StopHandler),
        (f"{job}/restart", handlers.RestartHandler),
        (f"{job}/clone", handlers.CloneHandler),
        (f"{job}/logs", handlers.LogsHandler),
        (f"{job}/logs/stream", logstream.LogStreamHandler),
        (f"{job}/metrics", handlers.MetricsHandler),
        (f"{api}/repo", handlers.RepoHandler),
        (f"{api}/cluster", handlers.ClusterHandler),
        (f"{api}/schema", handlers.SchemaHandler),
        (f"{api}/openapi.json", handlers.OpenAPIHandler),
        (tensorboard.ROUTE, tensorboard.TensorBoardProxyHandler),
    ]
