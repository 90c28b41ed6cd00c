"""How the `distrain` command line shows jobs in a terminal: tables, a job's page, its log lines."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

import click

from .eta import said
from .logs import LogLine
from .policy import running, shown_reason
from .records import value_said

PHASE_COLORS = {"Succeeded": "green", "Failed": "red", "Running": "blue", "Pending": "yellow", "Stopped": "magenta"}


def jobs_table(jobs: list[dict]) -> None:
    """Jobs as JSON (jobjson.summary_json), a row each, with an owner's column where they are not all one's."""
    rows = [(j["name"], j["phase"], running(j), dash(said(j.get("progress"))), age(j["created"]), j["backend"],
             shown_reason(j)) for j in jobs]
    if len({j["owner"] for j in jobs}) > 1:  # everyone's jobs (c.Distrain.see_all_owners): whose each is
        table(("NAME", "OWNER", "PHASE", "RUNNING", "PROGRESS", "AGE", "BACKEND", "REASON"),
              [(row[0], job["owner"], *row[1:]) for row, job in zip(rows, jobs)])
        return
    table(("NAME", "PHASE", "RUNNING", "PROGRESS", "AGE", "BACKEND", "REASON"), rows)


def show_job(job: dict, waits: str, logged: dict) -> None:
    """A job as JSON (jobjson.job_json, a sweep's with its "trials"): what it is and did, why it waits (`waits`),
    what it ran, the last values it `logged` (manager.scalars), its replicas or trials, its recent events."""
    click.echo(f"Name:      {job['name']}")
    detail = ": ".join(filter(None, (shown_reason(job), job["message"])))
    click.echo(f"Phase:     {click.style(job['phase'], fg=PHASE_COLORS.get(job['phase']))}"
               + (f"  ({detail})" if detail else ""))
    if job["hint"]:
        click.echo(f"Hint:      {job['hint']}")
    if waits:
        click.echo(f"Waits:     {waits}")
    if job.get("progress"):
        click.echo(f"Progress:  {said(job['progress'])}")
    if job["exit_code"] is not None:
        click.echo(f"Exit code: {job['exit_code']}")
    click.echo(f"Backend:   {job['backend']}" + (f"  (engine: {job['engine']})" if job.get("engine") else ""))
    click.echo(f"Owner:     {job['owner'] or '-'}")
    if job.get("supervision"):
        click.echo(f"Note:      {click.style('this job is ' + job['supervision'], fg='yellow')}")
    click.echo(f"Output:    {job['output_dir']}")
    click.echo(f"Created:   {job['created']}   Started: {job['started'] or '-'}   Finished: {job['finished'] or '-'}")
    if job["usage"]["wall_seconds"] is not None:
        click.echo(f"Used:      {used_said(job['usage'])}")
    for label, value in [*provenance_lines(job["provenance"]), ("Metric", last_values(logged))]:
        if value:
            click.echo(f"{label + ':':<11}{value}")
    click.echo("")
    if job.get("trials"):
        trials_table(job["trials"])
    else:
        rates = logged.get("rates", {})
        table(("REPLICA", "PHASE", "EXIT", "REASON", "ADDRESS", "RESTARTS", "STARTED", "FINISHED", "STEPS/S",
               "PROGRESS"),
              [(r["name"], r["phase"], dash(r["exit_code"]), r["reason"], dash(r["address"]), r["restarts"],
                dash(r["started"]), dash(r["finished"]), f"{rates[r['name']]:.3g}" if r["name"] in rates else "-",
                dash(said(r.get("progress")))) for r in job["replicas"]])
    click.echo("\nEvents:")
    for e in job["events"]:
        click.echo(f"  {e['time']}  {e['type']:<7}  {e['replica'] or '-':<12} {e['reason']}: {e['message']}")


def trials_table(trials: dict) -> None:
    """A sweep's trials, best first (the best that succeeded marked *), a column per swept hyperparameter."""
    rows = trials["trials"]
    names = list(rows[0]["hyperparameters"]) if rows else []
    tag = trials["metric"]["tag"] or "metric"
    table(("TRIAL", "PHASE", *(n.upper() for n in names), f"{tag.upper()} ({trials['metric']['goal'][:3]})", "STEP"),
          [(row["name"] + (" *" if row["name"] == trials["best"] else ""), row["phase"] or "Waiting",
            *(row["hyperparameters"][n] for n in names),
            "-" if row["value"] is None else f"{row['value']:.6g}", "-" if row["step"] is None else f"{row['step']:g}")
           for row in rows])


def last_values(found: dict) -> str:
    """The last point of the job's main scalar in each run: "loss: worker-0 0.0392 (step 3), ..."; "" if none."""
    last = [(run, *points[-1]) for run, points in found.get("runs", {}).items()]
    if not last:
        return ""
    return f"{found['tag']}: " + ", ".join(f"{run} {value_said(value)} (step {step:g})" for run, step, value in last)


def provenance_lines(provenance: dict) -> Iterator[tuple[str, str]]:
    """What ran, a line each (every package is in `get -o json`)."""
    source, taken = provenance["code"] or {}, provenance["snapshot"]
    if "git" in source:
        yield "Code", f"{source['git']} @ {source['commit']}"
    elif "path" in source:
        yield "Code", source["path"]
    if taken:
        yield "Changes", f"snapshot {taken['sha256'][:12]}: " + ", ".join(taken["files"])
    yield "Command", provenance["command"]
    if provenance["python"]:
        yield "Python", f"{provenance['python']}, {len(provenance['packages'])} packages"
    if provenance["requirements"] is not None:
        yield "Installed", " ".join(provenance["requirements"]) or "nothing new (requirements.txt is satisfied)"
    if provenance["image"]:
        yield "Image", ", ".join(provenance["image_digests"]) or provenance["image"]


def used_said(usage: dict) -> str:
    """A run's usage (usage.of_job) in a line: what is not known is left out."""
    said = [f"{usage['wall_seconds']:.1f} s"]
    if usage["cpu_seconds"] is not None:
        said.append(f"{usage['cpu_seconds']:.1f} CPU-s")
    if usage["peak_memory"] is not None:
        said.append(f"peak {human_bytes(usage['peak_memory'])}")
    if usage["gpu_hours"]:
        said.append(f"{usage['gpu_hours']:.3g} GPU-hours")
    if usage.get("cost") is not None:
        said.append(f"cost {usage['cost']:.2f}")
    return ", ".join(said)


def report_said(report: dict) -> str:
    """A usage report (accounting.Accounts.report) as `distrain usage` prints it: each owner's sums and budget,
    each sweep's, then each run."""
    currency = f" {report['currency']}" if report["currency"] else ""
    lines = [f"Since {report['since']}:"]
    for owner in report["owners"]:
        budget = owner.get("budget")
        lines.append(f"  {owner['owner'] or '(no owner)'}: {owner['runs']} runs, {owner['gpu_hours']:.3g} GPU-hours, "
                     f"{owner['cpu_hours']:.3g} CPU-hours"
                     + (f", cost {owner['cost']:.2f}{currency}" if owner["cost"] is not None else "")
                     + (f"; budget {budget['gpu_hours']:g} GPU-hours this month, {budget['used']:.3g} used, "
                        f"{budget['left']:.3g} left" if budget else ""))
    for sweep in report["sweeps"]:
        lines.append(f"  sweep {sweep['sweep']}: {sweep['runs']} trials' runs, {sweep['gpu_hours']:.3g} GPU-hours"
                     + (f", cost {sweep['cost']:.2f}{currency}" if sweep["cost"] is not None else ""))
    rows = [(run["job"], str(run["run"]), run["owner"], run["phase"], run["started"] or "", used_said(run))
            for run in report["runs"]]
    return "\n".join([*lines, "", *table_lines(("JOB", "RUN", "OWNER", "PHASE", "STARTED", "USED"), rows)] if rows
                     else [*lines, "  no runs"])


def format_line(line: LogLine, prefix: bool, timestamps: bool) -> str:
    head = f"{line.time} " if timestamps else ""
    if prefix:
        head += click.style(f"[{line.replica}] ", fg="cyan" if line.replica == "setup" else "bright_black")
    return head + line.text


def table(headers: tuple[str, ...], rows: list[tuple]) -> None:
    for line in table_lines(headers, rows):
        click.echo(line)


def table_lines(headers: tuple[str, ...], rows: list[tuple]) -> list[str]:
    cells = [tuple(map(str, headers))] + [tuple(map(str, row)) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells]


def age(created: str) -> str:
    seconds = int((datetime.now(timezone.utc) - datetime.fromisoformat(created)).total_seconds())
    return str(timedelta(seconds=seconds)) if seconds < 86400 else f"{seconds // 86400}d"


def dash(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f}{unit}"
        n /= 1024
    return f"{n:.1f}TiB"


def metrics_table(metrics: list[dict]) -> None:
    """Each replica's use of CPU, memory and GPU (manager.metrics)."""
    table(("REPLICA", "PHASE", "CPU%", "MEMORY", "GPU%", "GPU-MEM(MiB)"),
          [(m["replica"], m["phase"], dash(m["cpu_percent"]), human_bytes(m["memory_bytes"]),
            dash(m["gpu_utilization"]), dash(m["gpu_memory_mib"])) for m in metrics])
    for why in dict.fromkeys(m["unknown"] for m in metrics if m.get("unknown")):
        print(f"Not known: {why}")
