"""`%distrain` and `%%distrain`: launch and watch the Jupyter server's training jobs from a notebook.

    %load_ext jupyter_distrain
    %distrain submit --name sweep --workers 2 -p lr=0.1 -- python train.py --lr {{ lr }}
    %%distrain [--backend kubernetes] [--dry-run]      (the cell is a distrain.yaml job spec)
    %distrain list | status NAME | logs NAME [-f] [--replica R] [--tail N] [--run N]
    %distrain stop NAME | delete NAME [--purge-output] | tensorboard NAME [--replica R]

Without code in the spec or `--code`, a job runs the notebook's own code: its git repository at
the checked-out commit, else its directory, as the panel's form does.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Callable

import click
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.display import IFrame, display

from .client import Client, Job
from .errors import DistrainError


def submit_command() -> click.Command:
    from .cli import spec_options

    @click.command(name="%distrain submit", context_settings={"allow_interspersed_args": False})
    @click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False),
                  help="A distrain.yaml job spec.")
    @spec_options
    @click.option("--backend", help="A backend the server enables; its default when omitted.")
    @click.argument("command", nargs=-1)
    def parse(**arguments: Any) -> dict:
        """Submit a job from flags (and/or a spec file); the command follows '--'."""
        return arguments

    return parse


NAME = click.Argument(["name"])
BACKEND = click.Option(["--backend"], help="A backend the server enables; its default when omitted.")


def parse(usage: str, args: list[str], *params: click.Parameter) -> dict | None:
    """The arguments of one action, parsed as click parses the CLI's; None when --help was shown."""
    command = click.Command(usage, params=list(params), callback=lambda **arguments: arguments)
    arguments = command.main(args, standalone_mode=False)
    return arguments if isinstance(arguments, dict) else None


@magics_class
class DistrainMagics(Magics):
    _client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client()
        return self._client

    @line_cell_magic
    @no_var_expand  # {{ placeholders }} are the job's, not IPython's to expand
    def distrain(self, line: str, cell: str | None = None) -> Any:
        """Launch and watch training jobs: see `%distrain --help`."""
        try:
            if cell is not None:
                return self._submit_cell(shlex.split(line), cell)
            action, *args = shlex.split(line) or ["--help"]
            handler: Callable | None = getattr(self, f"_{action}", None) if action.isidentifier() else None
            if handler is None:
                print(__doc__.split("\n\n")[1])
                return None
            return handler(args)
        except (DistrainError, click.ClickException) as e:
            raise UsageError(e.format_message() if isinstance(e, click.ClickException) else str(e)) from None

    def _submit(self, args: list[str]) -> Job | None:
        from .cli import apply_flags
        from .spec import load_file

        arguments = submit_command().main(args, standalone_mode=False)
        if not isinstance(arguments, dict):  # --help was shown
            return None
        spec_file, backend, command = arguments.pop("spec_file"), arguments.pop("backend"), arguments.pop("command")
        command_text = arguments.pop("command_text")
        raw = apply_flags(load_file(spec_file) if spec_file else {}, arguments, " ".join(command) or command_text or "")
        return self._send(raw, Path(spec_file).resolve().parent if spec_file else Path.cwd(), backend)

    def _submit_cell(self, args: list[str], cell: str) -> Job | dict | None:
        from .spec import load

        dry_run = click.Option(["--dry-run"], is_flag=True, help="Check everything a submit checks; start nothing.")
        arguments = parse("%%distrain", args, BACKEND, dry_run)
        return arguments and self._send(load(cell), Path.cwd(), arguments["backend"], arguments["dry_run"])

    def _send(self, raw: Any, base: Path, backend: str | None, dry_run: bool = False) -> Job | dict:
        """Submit (or check) a spec; one naming no code runs the notebook's, with notes about it once the
        server accepted the job."""
        notes = []
        if isinstance(raw, dict) and "code" not in raw:
            raw["code"], notes = self.client.code_of(Path.cwd())
        answer = self.client.submit(raw, backend=backend, dry_run=dry_run, base_dir=base)
        for note in notes:
            print(f"note: {note}")
        return answer

    def _list(self, args: list[str]) -> None:
        if parse("%distrain list", args) is None:
            return
        jobs = self.client.jobs()
        for job in jobs:
            display(job)
        if not jobs:
            print("no jobs")

    def _status(self, args: list[str]) -> Job | None:
        arguments = parse("%distrain status", args, NAME)
        return arguments and self.client.get(arguments["name"])

    def _logs(self, args: list[str]) -> None:
        arguments = parse("%distrain logs", args, NAME,
                          click.Option(["-f", "--follow"], is_flag=True,
                                       help="Stream new lines until the job ends or restarts."),
                          click.Option(["--replica"], help="One replica, e.g. worker-0."),
                          click.Option(["--tail"], type=int, help="Only the last N lines."),
                          click.Option(["--run"], type=int, help="One run of the job (default: the current run)."))
        if arguments is None:
            return
        try:
            for line in self.client.logs(**arguments):
                print(line, flush=True)
        except KeyboardInterrupt:  # the kernel was interrupted: stop following, the job goes on
            print(f"(stopped following; {arguments['name']} goes on)")

    def _stop(self, args: list[str]) -> Job | None:
        arguments = parse("%distrain stop", args, NAME)
        return arguments and self.client.stop(arguments["name"])

    def _delete(self, args: list[str]) -> None:
        arguments = parse("%distrain delete", args, NAME,
                          click.Option(["--purge-output"], is_flag=True, help="Delete its outputs too."))
        if arguments is not None:
            self.client.delete(**arguments)
            print(f"job {arguments['name']} deleted")

    def _tensorboard(self, args: list[str]) -> IFrame | None:
        arguments = parse("%distrain tensorboard", args, NAME,
                          click.Option(["--replica"], default="all", help="One replica's; the whole job's by default."))
        if arguments is None:
            return None
        self.client.get(arguments["name"])  # a clear error for an unknown job, not a frame showing one
        return IFrame(self.client.tensorboard_url(**arguments), width="100%", height=640)
