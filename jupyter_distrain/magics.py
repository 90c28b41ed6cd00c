"""`%distrain` and `%%distrain`: launch and watch the Jupyter server's training jobs from a notebook.

    %load_ext jupyter_distrain
    %distrain submit --name fit --workers 2 -p lr=0.1 -- python train.py --lr {{ lr }}
    %distrain sweep --name lrs --vary lr=0.01,0.1 --parallelism 2 -- python train.py --lr {{ lr }}
    %distrain finetune lrs [-p epochs=10] [--as NAME]
    %%distrain [--backend kubernetes] [--dry-run]      (the cell, a distrain.yaml job spec; a sweep shows its trials)
    %distrain list | status NAME | logs NAME [-f] [--replica R] [--tail N] [--run N]
    %distrain stop NAME | delete NAME [--purge-output] | tensorboard NAME [--replica R]
    %distrain [COMMAND] --help

`%distrain` is one click group, as the `distrain` CLI is: its help, and its messages for unknown
commands and bad options, read as the CLI's. Those and every DistrainError are IPython's UsageError:
a message, no traceback. Without code in the spec or `--code`, a job runs the notebook's own code:
its git repository at the checked-out commit, else its directory, as the panel's form does.
"""

from __future__ import annotations

import getpass
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.display import IFrame, display

from . import waits
from .client import Client, Job
from .compare import text as compare_text
from .errors import DistrainError
from .flags import apply_flags, apply_sweep_flags, command_given, finetune_changes, spec_options, sweep_options
from .spec import SAFE_INTEGER, load, load_file
from .stacks import text as stacks_text
from .sweep import is_sweep
from .terminal import report_said

if TYPE_CHECKING:
    from .widgets import SweepMonitor

BACKEND = click.option("--backend", help="A backend the server enables; its default when omitted.")


@click.group(name="%distrain")
def commands() -> None:
    """Launch and watch the Jupyter server's training jobs; `%%distrain [--backend B] [--dry-run]`
    submits its cell, a distrain.yaml job spec.

    A job whose spec names no code runs the notebook's: its git repository at the checked-out
    commit, else its directory."""


@commands.command(context_settings={"allow_interspersed_args": False})
@click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False),
              help="A distrain.yaml job spec.")
@spec_options
@BACKEND
@click.argument("command", nargs=-1)
@click.pass_obj
def submit(magics: DistrainMagics, spec_file: str | None, backend: str | None, command: tuple[str, ...],
           command_text: str | None, **flags: Any) -> Job | dict | SweepMonitor:
    """Submit a job from flags and/or a spec file. COMMAND follows '--'."""
    return submit_flags(magics, spec_file, backend, command_given(command, command_text), flags)


def submit_flags(magics: DistrainMagics, spec_file: str | None, backend: str | None, command: str, flags: dict,
                 sweep: bool = False) -> Job | dict | SweepMonitor:
    """Submit the spec file's mapping (or an empty one) with the flags on top (and the sweep flags)."""
    include_changes = flags.pop("include_changes")
    raw = apply_flags(load_file(spec_file) if spec_file else {}, flags, command)
    return magics.submit(apply_sweep_flags(raw, flags) if sweep else raw,
                         Path(spec_file).resolve().parent if spec_file else Path.cwd(), backend,
                         include_changes=bool(include_changes))


@commands.command(context_settings={"allow_interspersed_args": False})
@click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False),
              help="A distrain.yaml job spec, with or without a sweep section.")
@spec_options
@sweep_options
@BACKEND
@click.argument("command", nargs=-1)
@click.pass_obj
def sweep(magics: DistrainMagics, spec_file: str | None, backend: str | None, command: tuple[str, ...],
          command_text: str | None, **flags: Any) -> Job | dict | SweepMonitor:
    """Sweep hyperparameters and watch the trials. COMMAND follows '--'."""
    return submit_flags(magics, spec_file, backend, command_given(command, command_text), flags, sweep=True)


@commands.command()
@click.argument("name")
@click.option("--as", "new_name", help="The new job's name (default: <sweep>-best).")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help="A hyperparameter to change.")
@click.pass_obj
def finetune(magics: DistrainMagics, name: str, new_name: str | None, params: tuple[str, ...]) -> Job:
    """Fine-tune a sweep's best trial, from its output."""
    return magics.client.finetune(name, **finetune_changes(new_name, params))


@commands.command(name="list")
@click.pass_obj
def list_jobs(magics: DistrainMagics) -> None:
    """Show every job of the server."""
    jobs = magics.client.jobs()
    for job in jobs:
        display(job)
    if not jobs:
        print("no jobs")


@commands.command()
@click.argument("name")
@click.pass_obj
def status(magics: DistrainMagics, name: str) -> Job:
    """Show a job and its replicas."""
    return magics.client.get(name)


@commands.command()
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Stream new lines until the job ends or restarts.")
@click.option("--replica", help="One replica, e.g. worker-0.")
@click.option("--tail", type=click.IntRange(0, SAFE_INTEGER), help="Only the last N lines.")
@click.option("--run", type=int, help="One run of the job (default: the current run).")
@click.pass_obj
def logs(magics: DistrainMagics, name: str, **options: Any) -> None:
    """Print a job's logs; interrupt the kernel to stop following."""
    try:
        for line in magics.client.logs(name, **options):
            print(line, flush=True)
    except KeyboardInterrupt:  # the kernel was interrupted: stop following, the job goes on
        print(f"(stopped following; {name} goes on)")


@commands.command()
@click.argument("name")
@click.option("--replica", help="One replica, e.g. worker-2.")
@click.option("--kept", is_flag=True, help="The stacks kept when the job hung, not now's.")
@click.pass_obj
def stacks(magics: DistrainMagics, name: str, replica: str | None, kept: bool) -> None:
    """Print where each running replica is now: its threads' stacks, the frames they share once."""
    print(stacks_text(magics.client.stacks(name, replica, kept)))


@commands.command()
@click.argument("a")
@click.argument("b")
@click.pass_obj
def diff(magics: DistrainMagics, a: str, b: str) -> None:
    """Print two jobs (or two runs of one: NAME@RUN) side by side: their ends, the spec fields, code, packages and
    image that differ, their metrics."""
    print(compare_text(magics.client.compare(a, b)))


@commands.command()
@click.option("--since", help="From when: a date or time, or a duration before now (7d). Default: this month's start.")
@click.option("--owner", help="That owner's runs alone (another owner's: an admin only).")
@click.pass_obj
def usage(magics: DistrainMagics, since: str | None, owner: str | None) -> None:
    """Print what runs used: per owner with their budget, per sweep, each run with its cost."""
    print(report_said(magics.client.usage(since, owner)))


@commands.command()
@click.argument("name")
@click.pass_obj
def why(magics: DistrainMagics, name: str) -> None:
    """Print why a job waits: what its replicas ask for against the most free on a node, its place in its queue."""
    print(waits.text(magics.client.waiting(name)))


@commands.command()
@click.argument("action", type=click.Choice(["show", "set", "test", "delete"]), default="show")
@click.pass_obj
def webhook(magics: DistrainMagics, action: str) -> None:
    """Your webhook: show it (its host), set it (the URL asked for without echo, kept out of the notebook), test or
    delete it."""
    if action == "set":
        magics.client.set_webhook(getpass.getpass("Webhook URL: "))
    elif action == "test":
        problems = magics.client.test_webhook()
        if problems:
            raise DistrainError("; ".join(problems))
    elif action == "delete":
        magics.client.delete_webhook()
    found = magics.client.webhook()
    print("delivered" if action == "test" else found["url"] or "none")


@commands.command()
@click.argument("name")
@click.pass_obj
def stop(magics: DistrainMagics, name: str) -> Job:
    """Stop a job."""
    return magics.client.stop(name)


@commands.command()
@click.argument("name")
@click.option("--purge-output", is_flag=True, help="Delete its outputs too.")
@click.pass_obj
def delete(magics: DistrainMagics, name: str, purge_output: bool) -> None:
    """Stop and delete a job."""
    magics.client.delete(name, purge_output=purge_output)
    print(f"job {name} deleted")


@commands.command()
@click.argument("name")
@click.option("--replica", default="all", help="One replica's; the whole job's by default.")
@click.pass_obj
def tensorboard(magics: DistrainMagics, name: str, replica: str) -> IFrame:
    """Show a job's TensorBoard in the notebook."""
    magics.client.get(name)  # a clear error for an unknown job, not a frame showing one
    return IFrame(magics.client.tensorboard_url(name, replica), width="100%", height=640)


@click.command(name="%%distrain")
@BACKEND
@click.option("--dry-run", is_flag=True, help="Check everything a submit checks; start nothing.")
def cell_options(**options: Any) -> dict:
    """Submit the cell, a distrain.yaml job spec."""
    return options


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
        args = shlex.split(line)
        try:
            if cell is None:
                return self._invoke(commands, args or ["--help"])
            options = self._invoke(cell_options, args)
            return options and self.submit(load(cell), Path.cwd(), **options)
        except (DistrainError, click.ClickException) as e:
            raise UsageError(message_of(e)) from None

    def _invoke(self, command: click.Command, args: list[str]) -> Any:
        """What the command returns for these arguments; None when it showed its help. (Not click's
        main(), which turns an interrupted kernel's KeyboardInterrupt into click.Abort.)"""
        try:
            with command.make_context(command.name, args, obj=self) as context:
                return command.invoke(context)
        except click.exceptions.Exit:  # --help
            return None

    def submit(self, raw: Any, base: Path, backend: str | None, dry_run: bool = False,
               include_changes: bool = False) -> Job | dict | SweepMonitor:
        """Submit (or check) a spec; one naming no code runs the notebook's, with notes about it once the
        server accepted the job (none about changes it includes). A sweep is shown by its trials (SweepMonitor)."""
        notes: list[str] = []
        if isinstance(raw, dict) and "code" not in raw:
            raw["code"], notes = self.client.code_of(Path.cwd())
        answer = self.client.submit(raw, backend=backend, dry_run=dry_run, base_dir=base,
                                    include_changes=include_changes)
        if include_changes:
            notes = [note for note in notes if "--include-changes" not in note]
        for note in notes:
            print(f"note: {note}")
        if dry_run or not is_sweep(answer["spec"]):
            return answer
        from .widgets import SweepMonitor  # ipywidgets, only once a sweep is watched

        return SweepMonitor(answer["name"], self.client)


def message_of(error: DistrainError | click.ClickException) -> str:
    """The error as the CLI says it; a usage error adds where its help is."""
    if not isinstance(error, click.ClickException):
        return str(error)
    if isinstance(error, click.UsageError) and error.ctx is not None:
        return f"{error.format_message()}\nTry '{error.ctx.command_path} --help' for help."
    return error.format_message()
