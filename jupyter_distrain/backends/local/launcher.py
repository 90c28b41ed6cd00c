"""How the backend starts a job's detached supervisor: through the launcher a long-lived process keeps ready
(daemon.serve), or, without one, from a new interpreter."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from ...notify import RunEvent

SUPERVISOR = [sys.executable, "-m", "jupyter_distrain.backends.local.daemon"]
LAUNCH_SECONDS = 60  # the most a job's supervisor may take to start


class Launcher:
    def __init__(self, root: Path):
        self.root = root
        self.process: subprocess.Popen | None = None  # while a long-lived process uses the backend
        self.exchanging = threading.Lock()  # one exchange with the launcher at a time

    def keep_ready(self) -> None:
        """Start the launcher, which ends with this process (or `close`)."""
        self.process = subprocess.Popen([*SUPERVISOR, "--root", str(self.root), "--launcher"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        env=self._env(), start_new_session=True)

    def close(self) -> None:
        if self.process:
            self.process.communicate()  # its input closed, it exits

    def launch(self, name: str) -> str:
        """Start the job's supervisor, which keeps running after this process exits: through the launcher, or
        (without one, or if it is gone) from a new interpreter. "" once it is started, else what went wrong."""
        message = self._launched(name)
        if message is None:
            result = subprocess.run([*SUPERVISOR, "--root", str(self.root), name], stdin=subprocess.DEVNULL,
                                    capture_output=True, text=True, timeout=LAUNCH_SECONDS, env=self._env())
            message = result.stderr.strip()[-2000:] or f"exit code {result.returncode}" if result.returncode else ""
        return message

    def tell(self, hooks: dict, event: RunEvent, log: Path) -> None:
        """Post a run's event from a detached process of its own (daemon.tell), which writes what went wrong to
        `log`: a process that is about to exit (the CLI, after a read that found a run's end) does not wait."""
        with open(log, "ab") as errors:
            teller = subprocess.Popen([*SUPERVISOR, "--root", str(self.root), "--tell"], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=errors, env=self._env(),
                                      start_new_session=True)
        assert teller.stdin  # a pipe
        with teller.stdin:
            teller.stdin.write(json.dumps({"hooks": hooks, "event": asdict(event)}).encode())

    def _launched(self, name: str) -> str | None:
        """What the launcher says of starting the job's supervisor ("" once started); None without one."""
        with self.exchanging:
            if not self.process:
                return None
            ask, answers = self.process.stdin, self.process.stdout
            assert ask and answers  # pipes
            try:
                ask.write(name + "\n")
                ask.flush()
                answer = answers.readline() if select.select([answers], [], [], LAUNCH_SECONDS)[0] else ""
            except OSError:
                answer = ""
            if answer:
                return json.loads(answer)
            self.process.kill()  # gone, or broken: every later launch starts an interpreter
            self.process.wait()
            self.process = None
            return None

    def _env(self) -> dict[str, str]:
        return {**os.environ, "DISTRAIN_HOME": str(self.root)}  # replicas' `distrain` commands see these jobs
