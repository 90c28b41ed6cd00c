"""The flags that describe a job spec, shared by the `distrain` CLI and the `%distrain` magics: their click
options, and how they are layered over a spec mapping."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

from . import code
from . import spec as spec_


def spec_options(command):
    """The flags that build or change a job spec (shared with the %distrain submit magic)."""
    for option in reversed([
        click.option("--name", help="Job name (lowercase letters, digits, hyphens)."),
        click.option("--framework", type=click.Choice(spec_.schema()["properties"]["framework"]["enum"])),
        click.option("--chief", is_flag=True, default=None, help="Add a chief (TensorFlow)."),
        click.option("--master", is_flag=True, default=None, help="Add a master (PyTorch)."),
        click.option("--ps", type=int, help="Number of parameter servers."),
        click.option("--workers", type=int, help="Number of workers."),
        click.option("--evaluator", type=int, help="Number of evaluators."),
        click.option("--gpus", type=int, help="GPUs per worker (and per chief or master)."),
        click.option("--cpu", help="CPU cores per replica, e.g. 2 or 500m."),
        click.option("--memory", help="Memory per replica, e.g. 4Gi."),
        click.option("--data", help="Input data mounted read-only: a volume name (NAME or NAME/sub/dir) or an "
                                    "absolute host path."),
        click.option("--output-to", "output_to", help="Where outputs are kept: a volume name or an absolute host path."),
        click.option("--code", "code_source", help="A git URL, a local git repository (bare, or with --ref) "
                                                   "or a local directory."),
        click.option("--ref", help="Git branch, tag or commit (with a git --code)."),
        click.option("--credentials", help="Name of a stored git secret (see 'distrain secret set')."),
        click.option("--include-changes", is_flag=True, default=None,
                     help="Run the checkout's uncommitted changes and unpushed commits too (the checkout: a local "
                          "git --code, else the spec file's directory, else the current one)."),
        click.option("--image", help="Container image (Kubernetes)."),
        click.option("--command", "command_text",
                     help="The command line, as the shell reads it (or give its words after '--', as you would "
                          "type them to run it)."),
        click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
                     help="A hyperparameter; repeatable."),
        click.option("-e", "--env", "env", multiple=True, metavar="[ROLE:]NAME=VALUE",
                     help="An environment variable of every replica, or of ROLE's ({{ name }} placeholders as in "
                          "the command); repeatable."),
        click.option("--tensorboard/--no-tensorboard", default=None, help="Write and serve TensorBoard logs."),
        click.option("--logdir", help="TensorBoard log directory, relative to the output directory."),
        click.option("--resume-from", help="A checkpoint path, or job:NAME for an earlier job's output."),
        click.option("--success-policy", type=click.Choice(["chief", "all-workers"]),
                     help="The job succeeds when the chief succeeds, or when every worker does."),
        click.option("--hang-after", metavar="DURATION",
                     help="Hung after this long without a log line or a TensorBoard step (90s, 20m, 2h): a "
                          "NoProgress warning, its stacks kept."),
        click.option("--on-hang", type=click.Choice(["warn", "fail"]),
                     help="fail: a hung job also stops, Failed (default: warn only)."),
    ]):
        command = option(command)
    return command


def sweep_options(command):
    """The flags that make a spec a sweep (shared with the %distrain sweep magic)."""
    for option in reversed([
        click.option("--vary", "varied", multiple=True, metavar="KEY=V1,V2,...",
                     help="A hyperparameter to sweep and its values (YAML scalars); repeatable."),
        click.option("--method", type=click.Choice(["grid", "random"]),
                     help="grid: every combination, in order (default); random: --trials points drawn with --seed."),
        click.option("--trials", type=int, help="How many trials (random: required; grid: the first this many)."),
        click.option("--parallelism", type=int, help="The most trials running at once (default 1)."),
        click.option("--metric", help='The scalar trials are ranked by (default: the first tag with "loss" in its '
                                      'name).'),
        click.option("--maximize", is_flag=True, default=None, help="Higher is better (default: lower)."),
        click.option("--early-stop-after", type=int, metavar="STEPS",
                     help="Stop a trial worse than the median of the others at the same step, from STEPS on."),
        click.option("--seed", type=int, help="random: the seed the points are drawn with."),
    ]):
        command = option(command)
    return command


def command_given(words: tuple[str, ...], command_text: str | None) -> str:
    """The command: the words after '--', quoted so that the shell splits it into the same words again (each
    {{ name }} placeholder kept, also one the shell split into "{{", name and "}}"); one word after '--' is a
    command line as it stands (as --command's text is)."""
    if len(words) < 2:
        return "".join(words) or command_text or ""
    merged: list[str] = []
    for word in words:
        if len(merged) >= 2 and word == "}}" and merged[-2] == "{{":
            merged[-2:] = [f"{{{{ {merged[-1]} }}}}"]
        else:
            merged.append(word)
    return " ".join(_quoted(word) for word in merged)


def _quoted(word: str) -> str:
    """A word as the shell reads it back, its placeholders left bare (the job quotes their values)."""
    parts, last = [], 0
    for match in spec_.PLACEHOLDER.finditer(word):
        parts += [shlex.quote(word[last:match.start()]) if match.start() > last else "", match.group(0)]
        last = match.end()
    if last < len(word) or not word:
        parts.append(shlex.quote(word[last:]))
    return "".join(parts)


def spec_with_flags(spec_file: str | None, flags: dict, command: str) -> dict:
    """The spec file's mapping (or an empty one) with the flags on top."""
    raw = spec_.load_file(spec_file) if spec_file else {}
    if not isinstance(raw, dict):
        raise click.ClickException("the spec file must hold a mapping of fields")
    include_changes = flags.pop("include_changes")
    raw = apply_flags(raw, flags, command)
    return with_changes(raw, flags["code_source"]) if include_changes else raw


def apply_flags(raw: dict, flags: dict, command: str) -> dict:
    """Layer command-line flags over a spec mapping."""
    raw = dict(raw)
    simple = {"name": "name", "framework": "framework", "image": "image", "resume_from": "resume_from"}
    for flag, field in simple.items():
        if flags[flag] is not None:
            raw[field] = flags[flag]
    if command:
        raw["command"] = command
    replicas = {role: dict(r) if isinstance(r, dict) else r for role, r in (raw.get("replicas") or {}).items()}
    for role, flag in (("ps", "ps"), ("worker", "workers"), ("evaluator", "evaluator")):
        if flags[flag] is not None:
            replicas.setdefault(role, {})["count"] = flags[flag]
    for role in ("chief", "master"):
        if flags[role]:
            replicas.setdefault(role, {})["count"] = 1
    for role, replica in replicas.items():
        if not isinstance(replica, dict):
            continue
        resources = dict(replica.get("resources") or {})
        for key in ("cpu", "memory"):
            if flags[key] is not None:
                resources[key] = flags[key]
        if flags["gpus"] is not None and role in ("worker", "chief", "master"):
            resources["gpus"] = flags["gpus"]
        if resources:
            replica["resources"] = resources
    if replicas:
        raw["replicas"] = replicas
    for flag, field in (("data", "data"), ("output_to", "output")):
        if flags[flag]:
            raw[field] = volume_source(flags[flag])
    if flags["code_source"]:
        raw["code"] = code_source(flags["code_source"], flags["ref"])
    if flags["ref"] or flags["credentials"]:
        code = dict(raw.get("code") or {})
        code.update({k: flags[k] for k in ("ref", "credentials") if flags[k]})
        raw["code"] = code
    if flags["params"]:
        known = raw.get("hyperparameters")
        raw["hyperparameters"] = {**(known if isinstance(known, dict) else {}), **hyperparameters(flags["params"])}
    tensorboard = dict(raw.get("tensorboard") or {})
    if flags["tensorboard"] is not None:
        tensorboard["enabled"] = flags["tensorboard"]
    if flags["logdir"]:
        tensorboard.update(enabled=True, logdir=flags["logdir"])
    if tensorboard:
        raw["tensorboard"] = tensorboard
    for flag, field in (("success_policy", "success"), ("hang_after", "hang_after"), ("on_hang", "on_hang")):
        if flags[flag]:
            raw["policy"] = {**(raw.get("policy") or {}), field: flags[flag]}
    return with_env(raw, flags["env"])


def with_env(raw: dict, items: tuple[str, ...]) -> dict:
    """--env [ROLE:]NAME=VALUE flags over the spec's env, or its role's (the value as given: a string)."""
    for item in items:
        target, sep, value = item.partition("=")
        role, _, name = target.rpartition(":")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE or ROLE:NAME=VALUE", param_hint="--env")
        if role:
            replicas = raw["replicas"] = _mapping(raw.get("replicas"))
            replica = replicas[role] = _mapping(replicas.get(role))
            replica["env"] = {**_mapping(replica.get("env")), name: value}
        else:
            raw["env"] = {**_mapping(raw.get("env")), name: value}
    return raw


def _mapping(value: object) -> dict:
    """A copy of a spec's mapping to change (an empty one where it holds something else: validation says so)."""
    return dict(value) if isinstance(value, dict) else {}


def apply_sweep_flags(raw: dict, flags: dict) -> dict:
    """Layer the sweep flags over a spec mapping's sweep section (made if there is none)."""
    section = dict(raw["sweep"]) if isinstance(raw.get("sweep"), dict) else {}
    parameters = dict(section["parameters"]) if isinstance(section.get("parameters"), dict) else {}
    for item in flags["varied"]:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise click.BadParameter(f"{item!r} is not KEY=V1,V2,...", param_hint="--vary")
        parameters[key] = {"values": [spec_.load(v, f"sweep.parameters.{key}") for v in values.split(",")]}
    if not parameters:
        raise click.UsageError("nothing to sweep: give --vary KEY=V1,V2,... or a spec with a sweep section")
    section["parameters"] = parameters
    section.update({key: flags[key] for key in ("method", "trials", "seed", "parallelism") if flags[key] is not None})
    if flags["metric"] or flags["maximize"]:
        metric = section["metric"] if isinstance(section.get("metric"), dict) else {}
        section["metric"] = {**metric, **({"tag": flags["metric"]} if flags["metric"] else {}),
                             **({"goal": "maximize"} if flags["maximize"] else {})}
    if flags["early_stop_after"] is not None:
        section["early_stop"] = {"after_steps": flags["early_stop_after"]}
    return {**raw, "sweep": section}


def finetune_changes(new_name: str | None, params: tuple[str, ...]) -> dict:
    """A fine-tune's --as and -p flags, as the fields it changes."""
    return {**({"name": new_name} if new_name else {}), **({"hyperparameters": hyperparameters(params)} if params else {})}


def hyperparameters(params: tuple[str, ...]) -> dict:
    """-p KEY=VALUE flags as hyperparameters (each value a YAML scalar)."""
    values = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--param")
        values[key] = spec_.load(value, f"hyperparameters.{key}") if value else ""
    return values


def with_changes(raw: dict, code_source: str | None) -> dict:
    """--include-changes: the job runs the checkout's changes too; the checkout is a local git --code, else the
    spec file's directory, else the current one."""
    code = raw.get("code")
    if not isinstance(code, dict) or not isinstance(code.get("git"), str):
        raise click.BadParameter("the job's code must be a git repository (--code or code.git)",
                                 param_hint="--include-changes")
    local = code_source and not re.match(r"^[a-z][a-z0-9+.-]*://", code_source)
    return {**raw, "code": {**code, "changes_from": code["git"] if local else "."}}


def code_source(source: str, ref: str | None) -> dict:
    """--code as a spec's code: a git URL; a local git repository, bare or given with --ref, by its
    absolute path; else a directory."""
    if re.match(r"^[a-z][a-z0-9+.-]*://|^git@", source):
        return {"git": source}
    path = Path(source)
    if code.is_bare_repository(path) or (ref and code.is_work_tree(path)):
        return {"git": str(path.resolve())}
    return {"path": source}


def volume_source(value: str) -> dict:
    """--data or --output-to as a spec's data or output: a host path, or a volume (NAME or NAME/sub/dir)."""
    if value.startswith("/"):
        return {"host_path": value}
    volume, _, sub = value.partition("/")
    return {"volume": volume, "path": sub} if sub else {"volume": volume}
