"""Sweeps: a job whose `sweep:` section makes trials, ordinary jobs <sweep>-1, <sweep>-2, ... each running one
point of the hyperparameters. The sweep runs no replicas of its own: its controller (`Controller`, run by the
backend where the sweep's lifecycle runs) launches the trials at most `parallelism` at a time, stops those the
early-stop rule finds clearly worse, and ends once every trial has."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import socket
import statistics
import time
from collections import Counter
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from . import reasons
from . import spec as spec_
from .errors import DistrainError, FieldError, JobNotFound, SpecError
from .policy import FINISHED, STOP_REQUESTED, Decision, Phase
from .records import EventFiles

if TYPE_CHECKING:
    import asyncio

    from .contract import Backend

MAX_TRIALS = 1000
CHART_POINTS = 200  # of each trial's metric in the sweep's table
POLL_SECONDS = 1.0  # how often the controller looks at its trials

Points = list[list[float]]  # [step, value] pairs, by step


def is_sweep(spec: dict) -> bool:
    return "sweep" in spec


def trial_name(sweep: str, number: int) -> str:
    return f"{sweep}-{number}"


def problems(sweep: dict) -> Iterator[FieldError]:
    """What the schema cannot say of a sweep section."""
    parameters = sweep["parameters"]
    if sweep["method"] == "random" and "trials" not in sweep:
        yield FieldError("sweep.trials", "is required for method random: how many points to draw")
    for name, parameter in parameters.items():
        field = f"sweep.parameters.{name}"
        if "values" in parameter:
            continue
        if sweep["method"] == "grid":
            yield FieldError(field, "a grid takes values: [...]; a range (min, max) is for method random")
        elif parameter["min"] >= parameter["max"]:
            yield FieldError(f"{field}.max", f"must be greater than min ({parameter['min']})")
        elif parameter["scale"] == "log" and parameter["min"] <= 0:
            yield FieldError(f"{field}.min", "must be greater than 0 for scale log")
        elif parameter["integer"] and max(-parameter["min"], parameter["max"]) > spec_.SAFE_INTEGER:
            yield FieldError(field, f"whole numbers are drawn between -{spec_.SAFE_INTEGER} and {spec_.SAFE_INTEGER}"
                                    ", the integers every JSON reader keeps exactly")
        elif parameter["integer"] and math.ceil(parameter["min"]) > math.floor(parameter["max"]):
            yield FieldError(field, "no whole number lies between min and max")
    if sweep["method"] == "grid" and "trials" not in sweep and all("values" in p for p in parameters.values()):
        size = math.prod(len(p["values"]) for p in parameters.values())
        if size > MAX_TRIALS:
            yield FieldError("sweep.parameters", f"the grid has {size} points; at most {MAX_TRIALS} (give fewer "
                                                 "values, or sweep.trials to take the first ones)")


def points(sweep: dict) -> list[dict]:
    """Each trial's values of the swept hyperparameters, in launch order."""
    parameters = sweep["parameters"]
    trials = int(sweep.get("trials", MAX_TRIALS))  # JSON's 2.0 is the schema's integer 2
    if sweep["method"] == "grid":
        grid = itertools.product(*(p["values"] for p in parameters.values()))
        return [dict(zip(parameters, values)) for values in itertools.islice(grid, trials)]
    rng = random.Random(sweep["seed"])
    return [{name: draw(p, rng) for name, p in parameters.items()} for _ in range(trials)]


def draw(parameter: dict, rng: random.Random) -> Any:
    if "values" in parameter:
        return rng.choice(parameter["values"])
    low, high = parameter["min"], parameter["max"]
    if parameter["scale"] == "log":
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:  # between low and high without their difference, which is past the largest float for ±1.7e308
        share = rng.random()
        value = low * (1 - share) + high * share
    return min(max(round(value), math.ceil(low)), math.floor(high)) if parameter["integer"] else value


def trial_specs(spec: dict) -> Iterator[tuple[dict, dict]]:
    """Each trial's spec, not validated (the sweep's, with its own name and hyperparameters), and its values of
    the swept hyperparameters."""
    parent = {key: value for key, value in spec.items() if key != "sweep"}
    for number, values in enumerate(points(spec["sweep"]), 1):
        yield {**parent, "name": trial_name(spec["name"], number), "trial_of": spec["name"],
               "hyperparameters": {**spec["hyperparameters"], **values}}, values


def trials(spec: dict) -> list[dict]:
    """The validated specs of the sweep's trials; SpecError naming the trial and the field of every problem
    (each once, for the first trial that has it)."""
    errors = list(problems(spec["sweep"]))
    if errors:
        raise SpecError(errors)
    specs, seen = [], set()
    for raw, values in trial_specs(spec):
        try:
            specs.append(spec_.validate(raw))
        except SpecError as e:
            shown = ", ".join(f"{key}={value!r}" for key, value in values.items())
            for error in e.errors:
                if (error.path, error.message) not in seen:
                    seen.add((error.path, error.message))
                    errors.append(FieldError(error.path, f"{error.message} (in trial {raw['name']}: {shown})"))
    if errors:
        raise SpecError(errors)
    return specs


def metric_points(spec: dict, scalars: dict) -> Points:
    """A trial's points of the metric (scalars.Scalars.of's answer for its tag): those of its chief's run,
    else of the first run that logged it."""
    runs = scalars["runs"]
    chief = spec_.replica_name(*spec_.chief(spec))
    run = next((name for name in sorted(runs) if name == chief or name.startswith(chief + "/")), None)
    return runs[run] if run else next(iter(runs.values()), [])


def thinned(points: Points, most: int = CHART_POINTS) -> Points:
    """At most `most` of the points, evenly spread, the last always among them."""
    if len(points) <= most:
        return points
    stride = len(points) / most
    return [points[min(len(points) - 1, round((i + 1) * stride) - 1)] for i in range(most)]


def better(goal: str) -> Callable[[float, float], bool]:
    return (lambda a, b: a < b) if goal == "minimize" else (lambda a, b: a > b)


def ranked(rows: list[dict], goal: str) -> list[dict]:
    """Trials best first by their last value of the metric; those without one last, in launch order."""
    sign = 1 if goal == "minimize" else -1
    return sorted(rows, key=lambda row: (row["value"] is None, sign * (row["value"] or 0.0)))


def value_at(points: Points, step: float) -> float | None:
    """The last value logged at or before `step`."""
    before = [value for at, value in points if at <= step]
    return before[-1] if before else None


def clearly_worse(mine: Points, others: list[Points], after_steps: int, goal: str) -> str | None:
    """The median rule: why a running trial is stopped, if its value at a step from `after_steps` on is worse
    than the median of the values at least two other trials had at that step. The step is the latest that it
    and two others reached: a trial a little ahead of the others (trials often run in step) is judged too."""
    reached = sorted((p[-1][0] for p in others if p), reverse=True)
    if not mine or len(reached) < 2:
        return None
    step = min(mine[-1][0], reached[1])
    value = value_at(mine, step)
    if step < after_steps or value is None:
        return None
    theirs = [v for v in (value_at(p, step) for p in others if p and p[-1][0] >= step) if v is not None]
    if len(theirs) < 2:
        return None
    median = statistics.median(theirs)
    if not better(goal)(median, value):
        return None
    return f"{value:.6g} at step {step:g}, worse than the median {median:.6g} of {len(theirs)} other trials"


def swept(sweep: dict, trial: dict) -> dict:
    """The trial's values of the swept hyperparameters."""
    return {key: trial["hyperparameters"][key] for key in sweep["parameters"]}


def write_session(logdir: Path, trial: str, values: dict) -> None:
    """Record the trial's swept values in `logdir` as TensorBoard's HParams dashboard reads them: a session
    whose metrics are the scalars of the runs below it (the trial's replicas). Written record by record, as
    TensorBoard's EventFileWriter would, without the TensorFlow it loads where it is installed (500 MB)."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.hparams import summary_v2
    from tensorboard.summary.writer.record_writer import RecordWriter

    shown = {key: value if isinstance(value, (bool, int, float, str)) else json.dumps(value)
             for key, value in values.items()}
    now = time.time()
    path = logdir / f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}.hparams"
    with path.open("wb") as file:
        writer = RecordWriter(file)
        writer.write(event_pb2.Event(wall_time=now, file_version="brain.Event:2").SerializeToString())
        writer.write(event_pb2.Event(wall_time=now, summary=summary_v2.hparams_pb(shown, trial_id=trial))
                     .SerializeToString())


class Controller:
    """Runs a sweep on `backend` (acting for the sweep's owner): launches its trials, stops those clearly worse
    and, asked to stop, those running. `logdir(spec)` is where a job's event files are, as this process sees
    them; `say(reason, message)` records what the controller did, `show(progress)` where the trials stand.

    The sweep's own event files directory holds a link to each trial's, whose top holds the trial's HParams
    session, so one TensorBoard of the sweep shows every trial and their hyperparameters. Trials that exist
    already (this controller replaces one that stopped) are taken over, not launched again."""

    def __init__(self, backend: Backend, spec: dict, logdir: Callable[[dict], Path],
                 say: Callable[[str, str], None], show: Callable[[str], None]):
        from .scalars import Scalars  # TensorBoard's protos: not for every importer of this module

        self.backend, self.logdir, self.say, self.show = backend, logdir, say, show
        self.name, self.sweep, self.board = spec["name"], spec["sweep"], logdir(spec)
        self.trials = trials(spec)
        self.by_name = {trial["name"]: trial for trial in self.trials}
        self.bundle = backend.snapshot(spec["name"])
        self.event_files = Scalars()
        self.phases: dict[str, str] = {}  # launched trial: its phase when last seen

    async def run(self, stop: asyncio.Event) -> Decision:
        """Until every trial has finished, or `stop` is set (then the running trials are stopped)."""
        import asyncio  # only a controller needs it: not for every importer of this module (the CLI)

        await asyncio.to_thread(self.take_over)
        waiting, shown = (trial for trial in self.trials if trial["name"] not in self.phases), ""
        try:
            while True:
                await asyncio.to_thread(self.observe)
                if stop.is_set():
                    return STOP_REQUESTED
                await self.stop_clearly_worse()
                launching = time.monotonic() + POLL_SECONDS  # then the progress shown and a stop seen, between them
                while len(self.running()) < self.sweep["parallelism"] and time.monotonic() < launching and \
                        (trial := next(waiting, None)):
                    await asyncio.to_thread(self.launch, trial)
                if len(self.phases) == len(self.trials) and not self.running():
                    return self.ending()
                if (progress := self.progress()) != shown:
                    self.show(shown := progress)
                if time.monotonic() >= launching:  # more to launch at once
                    continue
                try:
                    await asyncio.wait_for(stop.wait(), POLL_SECONDS)
                except asyncio.TimeoutError:
                    pass
        finally:  # a trial deleted meanwhile is gone already
            await asyncio.gather(*(asyncio.to_thread(self.backend.stop, name) for name in self.running()),
                                 return_exceptions=True)

    def take_over(self) -> None:
        """Count as launched the trials that exist already."""
        for name in {job["name"] for job in self.backend.list()} & self.by_name.keys():
            with suppress(JobNotFound):
                job = self.backend.get(name, events=0)
                if job["spec"].get("trial_of") == self.name:
                    self.phases[name] = job["phase"]

    def observe(self) -> None:
        jobs = {job["name"]: job["phase"] for job in self.backend.list()}
        self.phases.update({name: jobs.get(name, str(Phase.LOST)) for name in self.phases})

    def running(self) -> list[str]:
        return [name for name, phase in self.phases.items() if phase not in FINISHED]

    def launch(self, trial: dict) -> None:
        values = swept(self.sweep, trial)
        shown = ", ".join(f"{key}={value!r}" for key, value in values.items())
        try:
            self.phases[trial["name"]] = self.backend.submit(trial, self.bundle)["phase"]
        except DistrainError as e:  # e.g. a job of that name was made meanwhile: the others go on
            self.phases[trial["name"]] = str(Phase.FAILED)
            self.say(reasons.TRIAL_NOT_LAUNCHED, f"{trial['name']} ({shown}): {e}")
            return
        self.say(reasons.LAUNCHED, f"{trial['name']}: {shown}")
        self.show_on_board(trial, values)

    def show_on_board(self, trial: dict, values: dict) -> None:
        """The trial's HParams session at the top of its event files, and a link to them in the sweep's."""
        logdir = self.logdir(trial)
        logdir.mkdir(parents=True, exist_ok=True)
        write_session(logdir, trial["name"], values)
        self.board.mkdir(parents=True, exist_ok=True)
        with suppress(FileExistsError):  # relative: it resolves wherever the volume is mounted
            (self.board / trial["name"]).symlink_to(os.path.relpath(logdir, self.board), target_is_directory=True)

    def metric(self, trial: dict) -> Points:
        files = EventFiles.around(self.logdir(trial), trial["tensorboard"]["logdir"])
        return metric_points(trial, self.event_files.of(files, self.sweep["metric"].get("tag")))

    async def stop_clearly_worse(self) -> None:
        import asyncio

        rule = self.sweep.get("early_stop")
        if rule is None:
            return
        curves = {name: await asyncio.to_thread(self.metric, self.by_name[name]) for name in self.phases}
        for name in self.running():
            others = [points for other, points in curves.items() if other != name]
            why = clearly_worse(curves[name], others, rule["after_steps"], self.goal)
            if why:
                self.say(reasons.EARLY_STOPPED, f"{name}: {why}")
                self.phases[name] = (await asyncio.to_thread(self.backend.stop, name))["phase"]

    @property
    def goal(self) -> str:
        return self.sweep["metric"]["goal"]

    def ending(self) -> Decision:
        done = self.progress()  # none waiting, none running
        if str(Phase.SUCCEEDED) in self.phases.values():
            return Decision(Phase.SUCCEEDED, reasons.COMPLETED, f"every trial has finished: {done}")
        return Decision(Phase.FAILED, reasons.TRIALS_FAILED, f"no trial succeeded: {done}")

    def progress(self) -> str:
        """The trials' phases, for the sweep's message while it runs."""
        counts = Counter(self.phases.values())
        waiting = len(self.trials) - len(self.phases)
        parts = [f"{count} {phase.lower()}" for phase, count in sorted(counts.items())]
        return ", ".join(parts + ([f"{waiting} waiting"] if waiting else []))
