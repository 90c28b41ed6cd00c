"""The Jupyter server extension: REST, log streams and TensorBoard under <base_url>/distrain/.

Configured with traitlets, e.g. in jupyter_server_config.py:

    c.Distrain.root = "/data/distrain"
    c.Distrain.tensorboard_idle_timeout = 600
    c.Distrain.backends = ["local", "kubernetes"]   # the panel offers both; `backend` is the default
    c.Distrain.namespace = "training"
"""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_server.extension.application import ExtensionApp
from traitlets import Dict, Enum, Float, Int, List, Unicode, default

from ..backends import BACKENDS, open_backend
from ..backends.local import LocalBackend, default_root
from ..backends.manifests import DEFAULT_IMAGES
from ..manager import JobManager
from . import handlers, logstream, tensorboard


class Distrain(ExtensionApp):
    name = "jupyter_distrain"
    description = "Launch and manage model training from JupyterLab"
    load_other_extensions = True

    backend = Enum(list(BACKENDS), default_value="local", config=True,
                   help="The default backend: 'local' runs every replica as a process on this machine; "
                        "'kubernetes' as a pod in `namespace` (see the README for the RBAC it needs).")
    backends = List(Enum(list(BACKENDS)), config=True,
                    help="Every backend jobs may be submitted to (POST jobs?backend=...). Default: [backend].")
    namespace = Unicode("default", config=True, help="The Kubernetes namespace of the jobs.")
    kubeconfig = Unicode(config=True, help="A kubeconfig file for the Kubernetes backend. Default: $KUBECONFIG, "
                                           "~/.kube/config, or the pod's service account inside a cluster.")
    output_claim = Unicode("distrain-outputs", config=True,
                           help="The PersistentVolumeClaim that keeps a Kubernetes job's /output when its spec "
                                "names no output volume.")
    git_image = Unicode("alpine/git:2.47.2", config=True, help="Image of the init container that fetches the code.")
    root = Unicode(config=True, help="Storage root: the local backend's job records, logs, outputs and volumes; the copied "
                                     "logs of Kubernetes jobs. "
                                     "Default: $DISTRAIN_HOME, else <jupyter data dir>/distrain (as the CLI).")
    default_images = Dict(DEFAULT_IMAGES, config=True,
                          help="Container image per framework, for jobs whose spec names none.")
    tensorboard_idle_timeout = Int(900, config=True,
                                   help="Seconds without a request after which a TensorBoard is stopped; 0 keeps it.")
    tensorboard_start_timeout = Float(60, config=True, help="Seconds a TensorBoard may take to start serving.")

    @default("root")
    def _default_root(self) -> str:
        return str(default_root())

    controller = None

    @property
    def enabled(self) -> list[str]:
        return list(dict.fromkeys([self.backend, *self.backends]))

    def initialize_settings(self) -> None:
        # terminals and kernels started by this server inherit it: their `distrain` sees the same jobs
        os.environ.update(DISTRAIN_HOME=self.root, DISTRAIN_BACKEND=self.backend, DISTRAIN_NAMESPACE=self.namespace)
        if self.kubeconfig:
            os.environ["KUBECONFIG"] = self.kubeconfig
        backends = {"local": LocalBackend(Path(self.root))} if "local" in self.enabled else {}
        if "kubernetes" in self.enabled:
            from ..backends.kube import Controller

            backends["kubernetes"] = open_backend(
                "kubernetes", Path(self.root), self.namespace, self.kubeconfig or None, images=self.default_images,
                git_image=self.git_image, output_claim=self.output_claim)
            self.controller = Controller(backends["kubernetes"], self.log)
        manager = JobManager(backends, default=self.backend)
        self.tensorboards = tensorboard.TensorBoards(
            base_url=self.serverapp.base_url, idle_timeout=self.tensorboard_idle_timeout,
            start_timeout=self.tensorboard_start_timeout, job_exists=manager.exists, log=self.log,
            runs_root=Path(self.root) / "tensorboards",
        )
        self.settings.update(distrain_manager=manager, distrain_tensorboards=self.tensorboards,
                             distrain_watcher=logstream.LogWatcher(self.log), distrain_config=self)

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes())

    async def stop_extension(self) -> None:
        if self.controller:
            self.controller.stop()
        await self.tensorboards.stop()
        await self.settings["distrain_watcher"].close()


def routes() -> list[tuple]:
    """Every route of the extension, relative to the server's base URL."""
    api, job = "distrain/api", "distrain/api/jobs/(?P<name>[^/]+)"
    return [
        (f"{api}/version", handlers.VersionHandler),
        (f"{api}/jobs", handlers.JobsHandler),
        (f"{api}/check", handlers.CheckHandler),
        (f"{job}", handlers.JobHandler),
        (f"{job}/stop", handlers.StopHandler),
        (f"{job}/restart", handlers.RestartHandler),
        (f"{job}/clone", handlers.CloneHandler),
        (f"{job}/logs", handlers.LogsHandler),
        (f"{job}/logs/stream", logstream.LogStreamHandler),
        (f"{job}/metrics", handlers.MetricsHandler),
        (f"{api}/repo", handlers.RepoHandler),
        (f"{api}/cluster", handlers.ClusterHandler),
        (f"{api}/secrets", handlers.SecretsHandler),
        (f"{api}/secrets/(?P<name>[^/]+)", handlers.SecretHandler),
        (f"{api}/schema", handlers.SchemaHandler),
        (f"{api}/openapi.json", handlers.OpenAPIHandler),
        (tensorboard.ROUTE, tensorboard.TensorBoardProxyHandler),
    ]
