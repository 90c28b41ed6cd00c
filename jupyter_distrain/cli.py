"""The `distrain` command line: submit, watch and manage training jobs.

A command imports what only it needs (YAML, the Kubernetes manifests) when it runs, so that `--help`
and `list` start fast."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import click

from . import logs as logs_
from . import spec as spec_
from . import sweep as sweep_
from . import terminal, waits
from .errors import DistrainError
from . import code
from .config import ENGINES, Distrain
from .flags import (apply_sweep_flags, command_given, finetune_changes, spec_options, spec_with_flags,
                    sweep_options)
from .jobjson import job_json, summary_json
from .joblist import matches
from .manager import JobManager
from .policy import FINISHED, Phase

OFFLINE_COMMANDS = ("validate", "render")  # they need no backend


class Commands(click.Group):
    """Every expected error becomes one line on stderr and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DistrainError as e:
            raise click.ClickException(str(e)) from None


@click.group(cls=Commands)
@click.option("--backend", help="Where jobs run: local or kubernetes [env DISTRAIN_BACKEND; default: c.Distrain.backend "
                                "of Jupyter's config, else local].")
@click.option("--namespace", help="The Kubernetes namespace of the jobs [env DISTRAIN_NAMESPACE; default: "
                                  "c.Distrain.namespace, else default].")
@click.option("--engine", type=click.Choice(ENGINES),
              help="What runs Kubernetes jobs [env DISTRAIN_KUBERNETES_ENGINE; default: c.Distrain.kubernetes_engine, "
                   "else auto: JobSet when the cluster has it, else Kubeflow's Training Operator for the jobs it "
                   "can run, else pods this process supervises].")
@click.pass_context
def main(ctx: click.Context, backend: str | None, namespace: str | None, engine: str | None) -> None:
    """Launch and manage training jobs, single-machine or distributed.

    Settings come from Jupyter's config files, as the Jupyter server reads them (c.Distrain.* in
    jupyter_server_config.py), then the environment, then these options."""
    config = Distrain.load(backend=backend, namespace=namespace, kubernetes_engine=engine)
    ctx.obj = config if ctx.invoked_subcommand in OFFLINE_COMMANDS else JobManager.from_config(config, [config.backend])


output_option = click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table",
                             help="Output format.")


@main.command(context_settings={"allow_interspersed_args": False})
@click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False), help="A distrain.yaml job spec.")
@spec_options
@click.option("--follow", is_flag=True, help="Stream every replica's logs and state changes until the job ends.")
@output_option
@click.argument("command", nargs=-1)
@click.pass_obj
def submit(manager: JobManager, spec_file: str | None, follow: bool, fmt: str, command: tuple[str, ...],
           command_text: str | None, **flags: Any) -> None:
    """Submit a job from a spec file and/or flags; COMMAND follows '--'."""
    raw = spec_with_flags(spec_file, flags, command_given(command, command_text))
    job = manager.submit(raw, Path(spec_file).parent if spec_file else Path.cwd())
    if fmt == "json":
        click.echo(json.dumps(job_json(job), indent=2))
    else:
        click.echo(f"job {job['name']} submitted ({len(job['replicas'])} replicas, output in {job['output_dir']})")
    if follow:
        sys.exit(follow_job(manager, job["name"]))


@main.command(name="sweep", context_settings={"allow_interspersed_args": False})
@click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False),
              help="A distrain.yaml job spec, with or without a sweep section.")
@spec_options
@sweep_options
@output_option
@click.argument("command", nargs=-1)
@click.pass_obj
def sweep_command(manager: JobManager, spec_file: str | None, fmt: str, command: tuple[str, ...],
                  command_text: str | None, **flags: Any) -> None:
    """Sweep hyperparameters: a trial (an ordinary job) per point, at most --parallelism at a time.

    distrain sweep -f distrain.yaml --vary learning_rate=0.01,0.05 --vary batch_size=32,128 --parallelism 2"""
    raw = apply_sweep_flags(spec_with_flags(spec_file, flags, command_given(command, command_text)), flags)
    job = manager.submit(raw, Path(spec_file).parent if spec_file else Path.cwd())
    if fmt == "json":
        click.echo(json.dumps(job_json(job), indent=2))
        return
    chosen = job["spec"]["sweep"]
    click.echo(f"sweep {job['name']} submitted: {len(sweep_.points(chosen))} trials, at most {chosen['parallelism']} "
               f"at a time (see 'distrain get {job['name']}')")


@main.command()
@click.argument("name")
@click.option("--as", "new_name", help="The new job's name (default: <sweep>-best).")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
              help="A hyperparameter to change, e.g. epochs=10 (more epochs from the checkpoint); repeatable.")
@output_option
@click.pass_obj
def finetune(manager: JobManager, name: str, new_name: str | None, params: tuple[str, ...], fmt: str) -> None:
    """Fine-tune a sweep's best trial: a new job from its spec that resumes from its output."""
    job = manager.finetune(name, finetune_changes(new_name, params))
    if fmt == "json":
        click.echo(json.dumps(job_json(job), indent=2))
    else:
        click.echo(f"job {job['name']} submitted, resuming from the output of {job['spec']['resume_from'][4:]}")


@main.command(name="list")
@click.argument("words", nargs=-1)
@output_option
@click.pass_obj
def list_jobs(manager: JobManager, words: tuple[str, ...], fmt: str) -> None:
    """List every job, or those whose name, phase, backend or owner holds each of WORDS."""
    jobs = [summary_json(job) for job in manager.listed() if matches(job, " ".join(words))]
    if fmt == "json":
        click.echo(json.dumps(jobs, indent=2))
        return
    terminal.jobs_table(jobs)


@main.command()
@click.argument("name")
@output_option
@click.pass_obj
def get(manager: JobManager, name: str, fmt: str) -> None:
    """Show a job: its replicas, exit codes, reasons and recent events (a sweep: its trials)."""
    job = job_json(manager.view(name))
    trials = manager.trials(name) if "sweep" in job["spec"] else None
    if trials:
        job["trials"] = trials
    if fmt == "json":
        click.echo(json.dumps(job, indent=2))
        return
    waiting = manager.waiting(name) if job["phase"] in (Phase.QUEUED, Phase.PENDING) else {}
    terminal.show_job(job, str(waiting["sentence"]) if waiting.get("waiting") else "",
                      {} if trials else logged_scalars(manager, name))


def logged_scalars(manager: JobManager, name: str) -> dict:
    """What the job logged (manager.scalars), {} where it cannot be read (no TensorBoard, or it does not answer)."""
    try:
        return manager.scalars(name)
    except DistrainError:
        return {}


@main.command()
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends or restarts.")
@click.option("-r", "--replica", help="Only this replica, e.g. worker-0 (default: all, interleaved).")
@click.option("-t", "--tail", type=click.IntRange(0, spec_.SAFE_INTEGER), help="Only the last N lines.")
@click.option("--since", help="Only lines newer than a duration (30s, 5m, 2h) or an RFC 3339 time.")
@click.option("--timestamps", is_flag=True, help="Show each line's time.")
@click.option("--run", type=int, help="One run of the job: 1, then one more per restart (default: the current run).")
@click.pass_obj
def logs(manager: JobManager, name: str, follow: bool, replica: str | None, tail: int | None, since: str | None,
         timestamps: bool, run: int | None) -> None:
    """Print a job's logs (of one run: each restart begins a new one)."""
    lines = manager.logs(name, replica=replica, tail=tail, since=parse_since(since), follow=follow, run=run)
    for line in lines:
        click.echo(terminal.format_line(line, prefix=replica is None, timestamps=timestamps))


@main.command()
@click.argument("name")
@click.pass_obj
def top(manager: JobManager, name: str) -> None:
    """CPU, memory and GPU use of each replica."""
    terminal.metrics_table(manager.metrics(name))


@main.command()
@click.argument("name")
@click.option("-r", "--replica", help="Only this replica, e.g. worker-2 (default: every running one).")
@click.option("--kept", is_flag=True, help="The stacks kept when the job hung (policy.hang_after), not now's.")
@output_option
@click.pass_obj
def stacks(manager: JobManager, name: str, replica: str | None, kept: bool, fmt: str) -> None:
    """Where each running replica is now: its Python threads' stacks (native frames too where py-spy can unwind
    them), taken at once; the frames every replica shares are shown once, a replica elsewhere than most is marked."""
    from .stacks import text

    found = manager.stacks(name, replica, kept)
    click.echo(json.dumps(found, indent=2) if fmt == "json" else text(found))


@main.command()
@click.argument("a")
@click.argument("b")
@output_option
@click.pass_obj
def diff(manager: JobManager, a: str, b: str, fmt: str) -> None:
    """Two jobs side by side, or two runs of one (NAME@RUN: train@1 train@2): how each ended, the fields of their
    specs that differ, the diff of their code (each one's commit with its snapshot of changes), the packages and
    image that differ, each metric's last values."""
    from .compare import compare, text

    found = compare(manager, a, b)
    click.echo(json.dumps(found, indent=2) if fmt == "json" else text(found))


@main.command()
@click.option("--since", help="From when: a date or time (2026-11-01, 2026-11-01T09:00Z) or a duration before now "
                              "(7d, 12h). Default: this month's start.")
@click.option("--owner", help="That owner's runs alone (another owner's: an admin only).")
@output_option
@click.pass_obj
def usage(manager: JobManager, since: str | None, owner: str | None, fmt: str) -> None:
    """What runs used (GPU-hours, CPU-hours, cost at the admin's prices), deleted jobs' included: per owner with
    their budget, per sweep, and each run."""
    found = manager.accounts.report(since, owner)
    click.echo(json.dumps(found, indent=2) if fmt == "json" else terminal.report_said(found))


@main.command()
@click.argument("name")
@output_option
@click.pass_obj
def why(manager: JobManager, name: str, fmt: str) -> None:
    """Why a job waits: for each replica no node can take, what it asks for against the most free on a node; for a
    job in a Kueue queue, Kueue's reason and the job's place in the queue."""
    found = manager.waiting(name)
    click.echo(json.dumps(found, indent=2) if fmt == "json" else waits.text(found))


@main.command()
@click.argument("name")
@click.pass_obj
def stop(manager: JobManager, name: str) -> None:
    """Stop a job: SIGTERM to every replica, SIGKILL after a grace period."""
    job = manager.stop(name)
    click.echo(f"job {name} {job['phase'].lower()}")


@main.command()
@click.argument("name")
@click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False), help="An edited spec.")
@click.option("--follow", is_flag=True, help="Stream logs and state changes until the job ends.")
@click.pass_obj
def restart(manager: JobManager, name: str, spec_file: str | None, follow: bool) -> None:
    """Run a job again, from its spec or an edited one."""
    raw = spec_.load_file(spec_file) if spec_file else None
    manager.restart(name, raw, Path(spec_file).parent if spec_file else None)
    click.echo(f"job {name} restarted")
    if follow:
        sys.exit(follow_job(manager, name))


@main.command()
@click.argument("name")
@click.option("--purge-output", is_flag=True, help="Also delete the job's output directory.")
@click.pass_obj
def delete(manager: JobManager, name: str, purge_output: bool) -> None:
    """Stop and delete a job and its logs (outputs are kept unless --purge-output)."""
    manager.delete(name, purge_output=purge_output)
    click.echo(f"job {name} deleted")


def duration(text: str) -> float:
    """Seconds in "90m", "12h", "7d", "2w" (or a sum: "1d12h")."""
    seconds = spec_.duration_seconds(text)
    if seconds is None:
        raise click.BadParameter(f"{text!r} is not a duration such as 30m, 12h, 7d or 2w")
    return seconds


@main.command()
@click.option("--older-than", type=duration,
              help="How long ago the jobs finished: 30m, 12h, 7d, 2w. Without it: the jobs whose "
                   "policy.ttl_after_finished (or the server's default) is over.")
@click.option("--phase", "phases", multiple=True, type=click.Choice([str(p) for p in sorted(FINISHED)]),
              help="Only jobs that ended so; repeatable.")
@click.option("--purge-output", is_flag=True, help="Also delete their output directories.")
@click.option("--dry-run", is_flag=True, help="Say what would be deleted, and delete nothing.")
@click.pass_obj
def prune(manager: JobManager, older_than: float | None, phases: tuple[str, ...], purge_output: bool,
          dry_run: bool) -> None:
    """Delete the jobs (and their logs) that finished before --older-than, else those kept long enough after
    they finished (policy.ttl_after_finished); running jobs stay."""
    now = time.time()
    if older_than is None and not dry_run:
        outcomes = manager.delete_expired(now, phases, purge_output)
    else:
        jobs = manager.expired(now, phases) if older_than is None else manager.finished_before(now - older_than, phases)
        outcomes = ((job, None) for job in jobs) if dry_run else manager.delete_each(jobs, purge_output)
    found = False
    for job, error in outcomes:
        if error is not None:
            raise error
        found = True
        finished = datetime.fromtimestamp(cast(float, job["finished"]), timezone.utc).isoformat()
        click.echo(f"{'would delete' if dry_run else 'deleted'} {job['name']} ({job['phase']}, finished "
                   f"{terminal.age(finished)} ago)")
    if not found:
        click.echo("no job finished that long ago" if older_than is not None else "no job is past its time to be kept")


@main.command()
@click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False), required=True)
def validate(spec_file: str) -> None:
    """Check a spec file and print it with defaults filled in."""
    import yaml

    click.echo(yaml.safe_dump(spec_.validate(spec_.load_file(spec_file)), sort_keys=False), nl=False)


@main.command()
@click.option("-f", "--file", "spec_file", type=click.Path(exists=True, dir_okay=False), required=True)
@click.pass_obj
def render(settings: Distrain, spec_file: str) -> None:
    """Print the Kubernetes objects of a job, as YAML, without a cluster (like `helm template`).

    The objects are those of the engine --engine names; "auto" renders the JobSet, as a cluster that has
    JobSet gets. The git ref is pinned to its commit (with code.changes_from, the snapshot is taken, in a
    Secret) and the admin's rules apply, as a submit would. Objects that a submit makes the job's ConfigMap
    own (garbage collection) carry no ownerReferences here: the ConfigMap's uid is unknown."""
    import yaml

    from . import snapshot
    from .backends.kubernetes import podspec
    from .backends.kubernetes import render
    from .rules import AdminRules

    rules = AdminRules.from_config(settings, podspec.HOST_PATHS_BY_DEFAULT)
    spec = code.resolve(rules.apply(spec_.validate(spec_.load_file(spec_file))), Path(spec_file).parent)
    spec, bundle = snapshot.pin(spec)
    engine = "jobset" if settings.kubernetes_engine == "auto" else settings.kubernetes_engine
    click.echo(yaml.safe_dump_all(render.render(spec, settings, engine, bundle), sort_keys=False), nl=False)


@main.group()
def secret() -> None:
    """Git credentials for private repositories (stored with mode 0600, never printed)."""


@secret.command(name="set")
@click.argument("name")
@click.option("--username", required=True)
@click.password_option("--password", confirmation_prompt=False, help="Read from a hidden prompt or stdin.")
@click.option("--host", required=True, help="The git server it is for (e.g. github.com); never sent to another.")
@click.pass_obj
def secret_set(manager: JobManager, name: str, username: str, password: str, host: str) -> None:
    """Store a username and password as NAME, for code.credentials of repositories on HOST."""
    manager.set_credentials(name, username, password, host)
    click.echo(f"secret {name} stored")


@secret.command(name="list")
@click.pass_obj
def secret_list(manager: JobManager) -> None:
    """The names of the stored secrets."""
    for name in manager.credential_names():
        click.echo(name)


@secret.command(name="delete")
@click.argument("name")
@click.pass_obj
def secret_delete(manager: JobManager, name: str) -> None:
    """Delete the secret NAME."""
    manager.delete_credentials(name)
    click.echo(f"secret {name} deleted")


@main.group()
def webhook() -> None:
    """Your webhook: your jobs' and sweeps' ends and warnings posted to a URL (kept with mode 0600)."""


@webhook.command(name="set")
@click.option("--url", prompt="Webhook URL", hide_input=True, help="Read from a hidden prompt or stdin.")
@click.pass_obj
def webhook_set(manager: JobManager, url: str) -> None:
    """Post the events of the jobs you submit or restart from now on to URL."""
    manager.webhooks.set(url)
    click.echo("webhook set")


@webhook.command(name="show")
@click.pass_obj
def webhook_show(manager: JobManager) -> None:
    """Your webhook's host (not its path, which may hold a token), and whether the admin's is set."""
    found = manager.webhooks.shown()
    click.echo(found["url"] or "none")
    if found["admin"]:
        click.echo("(every job's events also go to the admin's webhook)")


@webhook.command(name="test")
@click.pass_obj
def webhook_test(manager: JobManager) -> None:
    """Post a test event to your webhook, once: it says whether it was delivered, nothing more."""
    problems = manager.webhooks.test(manager.default)
    if problems:
        raise DistrainError("; ".join(problems))
    click.echo("delivered")


@webhook.command(name="delete")
@click.pass_obj
def webhook_delete(manager: JobManager) -> None:
    """Post nothing more to your webhook (jobs submitted before keep it until they are restarted)."""
    manager.webhooks.delete()
    click.echo("webhook deleted")


def follow_job(manager: JobManager, name: str) -> int:
    """Print logs and state changes as they happen (like `riseml train`); the exit status mirrors the job."""
    shown: set[tuple] = set()

    def finished() -> bool:
        job = manager.get(name)
        for event in job["events"]:
            key = tuple(event.values())
            if key not in shown:
                shown.add(key)
                who = f"[{event['replica']}] " if event["replica"] else ""
                click.secho(f"--> {who}{event['reason']}: {event['message']}", fg="cyan", err=True)
        return job["phase"] in FINISHED

    for line in manager.logs(name, follow=True, finished=finished):
        click.echo(terminal.format_line(line, prefix=True, timestamps=False))
    job = manager.get(name)
    click.secho(f"job {name} {job['phase']}", fg=terminal.PHASE_COLORS.get(job["phase"]), err=True)
    return 0 if job["phase"] == "Succeeded" else (job["exit_code"] or 1)


def parse_since(value: str | None) -> str | None:
    try:
        return logs_.parse_since(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--since") from None


if __name__ == "__main__":
    main()
