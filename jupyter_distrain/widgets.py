"""ipywidgets for notebooks: a job form drawn from the job schema, a live job monitor and a sweep's table.

    from jupyter_distrain.widgets import JobForm, JobMonitor, SweepMonitor
    JobForm()              # fields from the schema; the server checks every change, as the panel's form
    JobMonitor("tf-demo")  # replica states, a log tail, Stop/Restart, TensorBoard; kept current while the cell is idle
    SweepMonitor("lrs")    # the trials best first, their metric charted, Stop and "Fine-tune the best"

Each talks to the Jupyter server's API through `Client`, so the jobs are the server's.
"""

from __future__ import annotations

import html
import itertools
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Iterable

import ipywidgets as w
import yaml

from . import spec as spec_
from .client import Client, Job
from .errors import DistrainError, SpecError
from .flags import volume_source
from .policy import FINISHED
from .records import value_said

LOG_TAIL_LINES = 200
STATUS_SECONDS = 1.0
# A scroll box that browsers keep at its end, the newest line, each time it is drawn anew.
LOG_TAIL_BOX = ("display:flex; flex-direction:column-reverse; overflow:auto; height:240px; line-height:1.3; "
                "border:1px solid var(--jp-border-color1, #bdbdbd); padding:2px 4px")
# Never shrunk to the box (JupyterLab's output <pre> is a scroll box of its own); long lines wrap.
LOG_TAIL_TEXT = "flex:none; margin:0; white-space:pre-wrap; overflow-wrap:anywhere"
LINK = "color:var(--jp-content-link-color); text-decoration:underline"  # JupyterLab styles links as plain text


def schema_at(schema: dict, path: str) -> dict:
    node = schema
    for key in path.split("."):
        node = spec_.resolve(node.get("properties", {}).get(key, {}), schema)
    return node


def volume_text(source: dict | None) -> str:
    if not source:
        return ""
    return source.get("host_path") or "/".join(filter(None, (source.get("volume"), source.get("path"))))


class JobForm(w.VBox):
    """Name, framework, command, code, replicas per role with GPUs, hyperparameters, environment, image,
    data, output and TensorBoard, with the schema's titles and choices; `spec` fields preset them. Every
    change is checked by the server (a dry run), its errors shown under their fields. Submit opens
    a JobMonitor below."""

    def __init__(self, client: Client | None = None, backend: str | None = None, **spec: Any):
        self.client = client or Client()
        self.backend = backend
        self.schema = self.client.schema()
        code, notes = (spec["code"], []) if "code" in spec else self.client.code_of(Path.cwd())
        self.base = {**spec, "code": code}
        framework = spec.get("framework", schema_at(self.schema, "framework").get("default", "python"))
        self.fields: dict[str, w.ValueWidget] = {
            "name": w.Text(spec.get("name", Path.cwd().name.lower().replace("_", "-")[:50] or "job"),
                           continuous_update=False),
            "framework": w.Dropdown(options=schema_at(self.schema, "framework")["enum"], value=framework),
            "command": w.Textarea(spec.get("command", ""), placeholder="python train.py --lr {{ lr }}",
                                  continuous_update=False),
            "code": w.Text(code.get("git") or code.get("path", ""), disabled=True),
            "hyperparameters": w.Textarea(yaml.safe_dump(spec.get("hyperparameters", {})).strip()
                                          if spec.get("hyperparameters") else "", placeholder="lr: 0.01",
                                          continuous_update=False),
            "env": w.Textarea(yaml.safe_dump(spec["env"]).strip() if spec.get("env") else "",
                              placeholder="WANDB_MODE: offline", continuous_update=False),
            "gpus": w.BoundedIntText(0, min=0, max=64),
            "image": w.Text(spec.get("image", ""), continuous_update=False,
                            placeholder="the backend's image for the framework (Kubernetes)"),
            "data": w.Text(volume_text(spec.get("data")), continuous_update=False,
                           placeholder="none, a volume (NAME or NAME/sub/dir) or an absolute path"),
            "output": w.Text(volume_text(spec.get("output")), continuous_update=False,
                             placeholder="the backend's default, a volume or an absolute path"),
            "tensorboard.enabled": w.Checkbox(bool(spec.get("tensorboard", {}).get("enabled")), indent=False),
        }
        self.counts = w.VBox()
        self.errors = {key: w.HTML() for key in [*self.fields, "replicas", ""]}
        self.status = w.HTML("".join(f"<div>note: {html.escape(n)}</div>" for n in notes))
        self.submit_button = w.Button(description="Submit", button_style="primary")
        self.submit_button.on_click(lambda _: self.submit())
        self.monitor = w.Output()
        self._draw_roles(framework)
        for widget in self.fields.values():
            widget.observe(self._changed, names="value")
        rows = [self._row(key, widget) for key, widget in self.fields.items()]
        rows.insert(4, w.VBox([w.HTML("<b>Replicas</b>"), self.counts, self.errors["replicas"]]))
        super().__init__([*rows, self.errors[""], w.HBox([self.submit_button, self.status]), self.monitor])

    def _row(self, key: str, widget: w.Widget) -> w.Widget:
        node = schema_at(self.schema, key) if key != "gpus" else {"title": "GPUs per worker"}
        label = w.HTML(f"<b title='{html.escape(node.get('description', ''))}'>"
                       f"{html.escape(node.get('title') or key.split('.')[0].capitalize())}</b>",
                       layout=w.Layout(width="160px"))
        return w.VBox([w.HBox([label, widget]), self.errors[key]])

    def _draw_roles(self, framework: str) -> None:
        roles = spec_.roles_by_framework().get(framework, ("worker",))
        boxes = []
        for role in roles:
            box = w.BoundedIntText(int(role == "worker"), min=0, max=1000, description=role,
                                   layout=w.Layout(width="200px"))
            box.observe(self._changed, names="value")
            boxes.append(box)
        self.counts.children = boxes

    def _changed(self, change: dict) -> None:
        if change["owner"] is self.fields["framework"]:
            self._draw_roles(change["new"])
        self.check()

    def spec(self) -> dict:
        """The spec the fields describe (before the server's defaults)."""
        values = {key: widget.value for key, widget in self.fields.items()}
        gpus = values["gpus"]
        replicas = {box.description: {"count": box.value, **({"resources": {"gpus": gpus}} if gpus and box.description
                                                            in ("worker", "chief", "master") else {})}
                    for box in self.counts.children if box.value}
        hyperparameters, env = (spec_.load(values[key], key) if values[key].strip() else {}
                                for key in ("hyperparameters", "env"))
        optional = {key: volume_source(values[key].strip()) for key in ("data", "output") if values[key].strip()}
        if values["image"].strip():
            optional["image"] = values["image"].strip()
        return {**self.base, "name": values["name"], "framework": values["framework"], "command": values["command"],
                "replicas": replicas, "hyperparameters": hyperparameters, "env": env,
                "tensorboard": {"enabled": values["tensorboard.enabled"]}, **optional}

    def _show(self, errors: list[tuple[str, str]]) -> None:
        shown: dict[str, list[str]] = {key: [] for key in self.errors}
        for path, message in errors:
            key = next((k for k in self.errors if k and (path == k or path.startswith(k + "."))), "")
            shown[key].append(f"{path}: {message}" if key == "" or path != key else message)
        for key, messages in shown.items():
            self.errors[key].value = "".join(f"<div style='color:var(--jp-error-color1)'>{html.escape(m)}</div>"
                                             for m in messages)

    def check(self) -> bool:
        """Ask the server whether it would accept the job; show its answer. True when it would."""
        try:
            self.client.submit(self.spec(), backend=self.backend, dry_run=True)
        except DistrainError as e:
            self._show([(f.path, f.message) for f in e.errors] if isinstance(e, SpecError) else [("", str(e))])
            return False
        self._show([])
        self.status.value = "The server accepts this job."
        return True

    def submit(self) -> Job | dict | None:
        if not self.check():
            return None
        job = self.client.submit(self.spec(), backend=self.backend)
        self.status.value = f"Submitted {html.escape(job['name'])}."
        with self.monitor:
            from IPython.display import display

            display(JobMonitor(job["name"], self.client))
        return job


def log_tail_html(lines: Iterable[str]) -> str:
    """The lines, escaped, in a scroll box that shows the last of them."""
    text = html.escape("\n".join(lines))
    return f"<div class='jp-distrain-log-tail' style='{LOG_TAIL_BOX}'><pre style='{LOG_TAIL_TEXT}'>{text}</pre></div>"


CHART_WIDTH, CHART_HEIGHT = 600, 140
CHART_COLORS = ("var(--jp-brand-color1)", "var(--jp-warn-color1)", "var(--jp-success-color1)",
                "var(--jp-error-color1)", "var(--jp-accent-color1)", "var(--jp-ui-font-color2)")


def chart_html(scalars: dict) -> str:
    """One tag of a job's scalars (Client.scalars) as the panel's chart draws it: an SVG chart of the current
    run's points (`runs`, not `earlier`), a line per run (a dot for a single point), the ranges of steps and
    values at its axes, and each run's last value; "" before there is any."""
    runs = scalars["runs"]
    if not runs:
        return ""
    tag = html.escape(scalars["tag"])
    steps = [step for points in runs.values() for step, _ in points]
    values = [value for points in runs.values() for _, value in points if value is not None] or [0.0]
    x0, x1, y0, y1 = min(steps), max(steps), min(values), max(values)
    lines, legend = [], []
    for (run, points), color in zip(runs.items(), itertools.cycle(CHART_COLORS)):
        finite = [(step, value) for step, value in points if value is not None]  # not a number: not drawn
        drawn = " ".join(f"{scaled(step, x0, x1, CHART_WIDTH):.1f},"
                         f"{CHART_HEIGHT - scaled(value, y0, y1, CHART_HEIGHT):.1f}" for step, value in finite)
        dot = len(finite) == 1
        lines.append(f"<polyline data-run='{html.escape(run)}' fill='none' stroke='{color}' "
                     f"stroke-width='{6 if dot else 1.5}' stroke-linecap='round' vector-effect='non-scaling-stroke' "
                     f"points='{f'{drawn} {drawn}' if dot else drawn}'/>")
        step, value = points[-1]
        legend.append(f"<li data-run='{html.escape(run)}'><span class='jp-distrain-chart-swatch' "
                      f"style='background: {color}'></span>{html.escape(run)}: {value_said(value)} at step {step:g}</li>")
    return (f"<div class='jp-distrain-scalars'><div class='jp-distrain-chart-frame'>"
            f"<div class='jp-distrain-chart-y'><span>{short(y1)}</span><span>{tag}</span><span>{short(y0)}</span></div>"
            f"<svg class='jp-distrain-chart' viewBox='0 0 {CHART_WIDTH} {CHART_HEIGHT}' preserveAspectRatio='none' "
            f"role='img' aria-label='{tag} from {short(y0)} to {short(y1)} over steps {x0:g} to {x1:g}' "
            f"style='width: 100%; height: {CHART_HEIGHT}px; overflow: visible'>{''.join(lines)}</svg>"
            f"<div class='jp-distrain-chart-x'><span>{x0:g}</span><span>step</span><span>{x1:g}</span></div></div>"
            f"<ul class='jp-distrain-chart-legend'>{''.join(legend)}</ul></div>")


def scaled(at: float, low: float, high: float, size: float) -> float:
    """Where `at` lies on an axis of `size` from `low` to `high`: its middle when they are one value."""
    return (at - low) / (high - low) * size if high > low else size / 2


def short(value: float) -> str:
    """A value in three significant digits, without trailing zeros."""
    rounded = float(f"{value:.3g}")
    return str(int(rounded)) if rounded.is_integer() else str(rounded)


class JobMonitor(w.VBox):
    """One job, kept current by background threads while the cell is idle: its phase and why, its replicas, its
    loss (its first scalar with "loss" in the tag) charted, the last lines of its logs (streamed, drawn once a
    second), Stop while it runs and Restart once it has finished, and a link to its TensorBoard."""

    def __init__(self, name: str, client: Client | None = None, tail: int = LOG_TAIL_LINES):
        self.client = client or Client()
        self.name = name
        self.tail = tail
        self.header = w.HTML()
        self.replicas = w.HTML()
        self.chart = w.HTML()
        self.log_tail = w.HTML(log_tail_html([]))
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop")
        self.stop_button.on_click(lambda _: self.stop())
        self.restart_button = w.Button(description="Restart", icon="refresh")
        self.restart_button.on_click(lambda _: self.restart())
        url = html.escape(self.client.tensorboard_url(name))
        self.tensorboard = w.HTML(f"<a href='{url}' target='_blank' style='{LINK}' "
                                  "title='Its TensorBoard, in a new browser tab'>TensorBoard</a>")
        self.lock = threading.Lock()  # the log thread appends, the status thread draws
        self._show(self.client.get(name))
        self._chart()
        super().__init__([self.header, self.replicas,
                          w.HBox([self.stop_button, self.restart_button, self.tensorboard]), self.chart, self.log_tail])
        self._follow()

    @property
    def phase(self) -> str:
        return self.job["phase"]

    def _show(self, job: Job) -> None:
        self.job = job
        self.header.value = job.summary_html()
        self.replicas.value = job.replicas_html()
        finished = job["phase"] in FINISHED
        self.stop_button.layout.display = "none" if finished else None
        self.restart_button.layout.display = None if finished else "none"
        self.tensorboard.layout.display = None if job["spec"]["tensorboard"]["enabled"] else "none"

    def _follow(self) -> None:
        """Follow the job's current run: its logs from their start, and its state until the run and its logs end
        (or a restart follows the next run)."""
        self.lines: deque[str] = deque(maxlen=self.tail)
        self.logs = threading.Thread(target=self._follow_logs, args=(self.lines,), daemon=True,
                                     name=f"distrain-logs-{self.name}")
        self.logs.start()
        threading.Thread(target=self._follow_status, args=(self.logs,), daemon=True,
                         name=f"distrain-monitor-{self.name}").start()

    def _follow_status(self, logs: threading.Thread) -> None:
        """Once a second: the job's state, and the log tail if it grew; until the job and its logs end."""
        while logs is self.logs and (logs.is_alive() or self.job["phase"] not in FINISHED):
            logs.join(STATUS_SECONDS)
            try:
                self._show(self.client.get(self.name))
            except DistrainError as e:  # e.g. deleted elsewhere
                self.header.value = f"<b>{html.escape(self.name)}</b>: {html.escape(str(e))}"
                return
            self._chart()
            with self.lock:
                tail = log_tail_html(self.lines)
            if tail != self.log_tail.value:
                self.log_tail.value = tail

    def _chart(self) -> None:
        try:
            drawn = chart_html(self.client.scalars(self.name))
        except DistrainError:  # its TensorBoard (Kubernetes) does not answer: the chart stays as it was
            return
        if drawn != self.chart.value:
            self.chart.value = drawn

    def _follow_logs(self, lines: deque[str]) -> None:
        try:
            for line in self.client.logs(self.name, tail=self.tail, follow=True):
                with self.lock:
                    lines.append(line)
        except DistrainError as e:
            with self.lock:
                lines.append(f"({e})")

    def stop(self) -> Job:
        job = self.client.stop(self.name)
        self._show(job)
        return job

    def restart(self) -> Job:
        """Run the job again, and follow its new run."""
        job = self.client.restart(self.name)
        self._show(job)
        self._follow()
        return job


TRIAL_CELL = "padding: 2px 10px; text-align: left"


def trials_html(trials: dict) -> str:
    """A sweep's trials (Client.trials) as a table, best first, the best that succeeded starred."""
    rows = trials["trials"]
    names = list(rows[0]["hyperparameters"]) if rows else []
    metric = trials["metric"]
    heads = ["trial", "phase", *names, f"{metric['tag'] or 'metric'} ({metric['goal']})", "step"]

    def cells(row: dict) -> list[str]:
        star = " ★" if row["name"] == trials["best"] else ""
        value = "-" if row["value"] is None else f"{row['value']:.4g}"
        step = "-" if row["step"] is None else f"{row['step']:g}"
        return [row["name"] + star, row["phase"] or "Waiting", *(str(row["hyperparameters"][n]) for n in names),
                value, step]

    head = "".join(f"<th style='{TRIAL_CELL}'>{html.escape(h)}</th>" for h in heads)
    body = "".join(f"<tr data-trial='{html.escape(row['name'])}'>"
                   + "".join(f"<td style='{TRIAL_CELL}'>{html.escape(cell)}</td>" for cell in cells(row)) + "</tr>"
                   for row in rows)
    return f"<table class='jp-distrain-trials'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class SweepMonitor(w.VBox):
    """A sweep, kept current by a background thread while the cell is idle: its phase, its trials best first
    (trials_html), every trial's metric charted, Stop while it runs, and "Fine-tune the best" once a trial
    succeeded."""

    def __init__(self, name: str, client: Client | None = None):
        self.client = client or Client()
        self.name = name
        self.header, self.table, self.chart, self.note = w.HTML(), w.HTML(), w.HTML(), w.HTML()
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop")
        self.stop_button.on_click(lambda _: self._show(self.client.stop(self.name)))
        self.finetune_button = w.Button(description="Fine-tune the best", icon="forward", disabled=True,
                                        layout=w.Layout(width="auto"))
        self.finetune_button.on_click(lambda _: self._finetune_clicked())
        self._show(self.client.get(name))
        super().__init__([self.header, w.HBox([self.stop_button, self.finetune_button]), self.table, self.chart,
                          self.note])
        threading.Thread(target=self._follow, daemon=True, name=f"distrain-sweep-{name}").start()

    def _show(self, job: Job) -> None:
        self.job = job
        self.header.value = job.summary_html()
        self.stop_button.layout.display = "none" if job["phase"] in FINISHED else None
        self.trials = self.client.trials(self.name)
        self.table.value = trials_html(self.trials)
        by_number = sorted(self.trials["trials"], key=lambda row: row["number"])  # a trial keeps its line's color
        runs = {row["name"]: row["points"] for row in by_number if row["points"]}
        self.chart.value = chart_html({"tag": self.trials["metric"]["tag"], "runs": runs})
        self.finetune_button.disabled = self.trials["best"] is None

    def _follow(self) -> None:
        """Once a second, until the sweep has finished (and once more then)."""
        while self.job["phase"] not in FINISHED:
            time.sleep(STATUS_SECONDS)
            try:
                self._show(self.client.get(self.name))
            except DistrainError as e:  # e.g. deleted elsewhere
                self.header.value = f"<b>{html.escape(self.name)}</b>: {html.escape(str(e))}"
                return

    def finetune(self, **changes: Any) -> Job:
        """Fine-tune the best trial (Client.finetune); the new job is named below the table."""
        job = self.client.finetune(self.name, **changes)
        self.note.value = f"Fine-tuning {html.escape(self.trials['best'] or '')} as <b>{html.escape(job['name'])}</b>"
        return job

    def _finetune_clicked(self) -> None:
        try:
            self.finetune()
        except DistrainError as e:
            self.note.value = html.escape(str(e))
