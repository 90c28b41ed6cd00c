"""The Jupyter server extension: REST, log streams and TensorBoard under <base_url>/distrain/, configured
as c.Distrain.* (see jupyter_distrain.config)."""

from __future__ import annotations

import functools
import logging
import os
import time
from pathlib import Path

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import PeriodicCallback

from ..config import Distrain
from ..errors import DistrainError
from ..jobjson import summary_json
from ..joblist import ListChanges, TrialChanges
from ..manager import JobManager
from . import handlers, logstream, tensorboard
from .base import in_thread


class DistrainExtension(ExtensionApp):
    name = "jupyter_distrain"
    description = "Launch and manage model training from JupyterLab"
    load_other_extensions = True
    classes = [Distrain]

    def initialize_settings(self) -> None:
        config = Distrain(parent=self)
        assert self.serverapp is not None  # an extension is initialized by its server
        # terminals and kernels started by this server inherit these: their `distrain` sees the same jobs
        os.environ.update(DISTRAIN_HOME=config.root, DISTRAIN_BACKEND=config.backend)
        manager = JobManager.from_config(config, checkouts_under=Path(self.serverapp.root_dir).expanduser())
        manager.start(self.log)
        self.expiry = PeriodicCallback(functools.partial(expire, manager, self.log), config.ttl_check_interval * 1000)
        self.expiry.start()
        self.tensorboards = tensorboard.TensorBoards(
            manager, idle_timeout=config.tensorboard_idle_timeout, start_timeout=config.tensorboard_start_timeout,
            log=self.log, runs_root=Path(config.root) / "tensorboards",
        )
        self.settings.update(distrain_manager=manager, distrain_list=ListChanges(manager.listed, summary_json),
                             distrain_trials=TrialChanges(manager.trials), distrain_config=config,
                             distrain_tensorboards=self.tensorboards, distrain_watcher=logstream.LogWatcher(self.log))

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes())

    async def stop_extension(self) -> None:
        self.expiry.stop()
        self.settings["distrain_manager"].close()
        await self.tensorboards.stop()
        await self.settings["distrain_watcher"].close()


async def expire(manager: JobManager, log: logging.Logger) -> None:
    """Delete the jobs past their time to be kept once finished (policy.ttl_after_finished); outputs stay."""
    try:
        outcomes = await in_thread(lambda: list(manager.delete_expired(time.time())))
    except DistrainError as e:
        log.warning("distrain: cannot look for jobs past their time to be kept: %s", e)
        return
    for job, error in outcomes:
        if error is None:
            log.info("distrain: deleted %s, past its time to be kept once finished", job["name"])
        else:
            log.warning("distrain: cannot delete %s, past its time to be kept: %s", job["name"], error)


def routes() -> list[tuple]:
    """Every route of the extension, relative to the server's base URL."""
    api, job = "distrain/api", "distrain/api/jobs/(?P<name>[^/]+)"
    return [
        (f"{api}/version", handlers.VersionHandler),
        (f"{api}/jobs", handlers.JobsHandler),
        (f"{api}/job-changes", handlers.JobChangesHandler),
        (f"{api}/check", handlers.CheckHandler),
        (f"{api}/usage", handlers.UsageHandler),
        (f"{api}/jobs/compare", handlers.CompareHandler),  # before a job's: no job is named compare (the schema)
        (f"{job}", handlers.JobHandler),
        (f"{job}/stop", handlers.StopHandler),
        (f"{job}/restart", handlers.RestartHandler),
        (f"{job}/clone", handlers.CloneHandler),
        (f"{job}/code", handlers.CodeHandler),
        (f"{job}/logs", handlers.LogsHandler),
        (f"{job}/logs/search", handlers.LogSearchHandler),
        (f"{job}/logs/stream", logstream.LogStreamHandler),
        (f"{job}/metrics", handlers.MetricsHandler),
        (f"{job}/stacks", handlers.StacksHandler),
        (f"{job}/waiting", handlers.WaitingHandler),
        (f"{job}/scalars", handlers.ScalarsHandler),
        (f"{job}/trials", handlers.TrialsHandler),
        (f"{job}/finetune", handlers.FinetuneHandler),
        (f"{api}/repo", handlers.RepoHandler),
        (f"{api}/cluster", handlers.ClusterHandler),
        (f"{api}/secrets", handlers.SecretsHandler),
        (f"{api}/secrets/(?P<name>[^/]+)", handlers.SecretHandler),
        (f"{api}/webhook", handlers.WebhookHandler),
        (f"{api}/schema", handlers.SchemaHandler),
        (f"{api}/openapi.json", handlers.OpenAPIHandler),
        (tensorboard.ROUTE, tensorboard.TensorBoardProxyHandler),
    ]
