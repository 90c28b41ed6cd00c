"""The supervisor of one local job: it prepares the code, runs every replica, applies the lifecycle policy and
leaves nothing behind, in a detached process of its own (daemon.py). The run's setup (its code and requirements)
is run_setup.py's; this module runs the replicas and applies the lifecycle policy.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING


from ... import reasons, sweep
from ...clusterenv import REPLICA_SITE, Dirs, replica_command, replica_env
from ...logs import LogWriter, last_error, mark_ended, pump
from ...notify import RunEvent
from ...policy import (FINISHED, STOP_REQUESTED, Decision, Event, Phase, Replica, deadline_exceeded, decide, ending,
                       restart_event)
from ...progress import PACE_CHECK_SECONDS, Quiet, Stragglers, hung_message, last_written, several
from ...spec import gpus, replica_name, replicas
from . import processes, processstacks, venvs
from .accounted import AccountedProcess, Used
from .backend import STOP_GRACE_SECONDS, LocalBackend
from .run_setup import RunSetup, SetupFailed, discarded_message, outside_message, outside_output, written_since
from .store import RunStore

if TYPE_CHECKING:
    from ...scalars import Scalars

DRAIN_SECONDS = 5.0  # how long to wait for output of a finished replica's leftover children
MEMORY_LOOK_SECONDS = 2.0  # how often the replicas' memory high-water marks are noted


@dataclass
class Running:
    """A replica's process, the pipes its stdout and stderr come through and the log pumps reading them."""

    process: AccountedProcess
    outputs: list[asyncio.ReadTransport]
    pump: asyncio.Future


class Supervisor:
    def __init__(self, backend: LocalBackend, name: str):
        self.backend = backend
        self.name = name
        self.job = backend.row(name)
        self.store = RunStore(backend.store, self.job["run"])  # its writes: this run's only
        self.spec = self.job["spec"]
        self.states = {replica_name(r, i): Replica(r, i, Phase.PENDING) for r, i in replicas(self.spec)}
        self.running: dict[str, Running] = {}
        self.stop_requested = asyncio.Event()
        self.fault: Decision | None = None  # what ends the job when a log cannot be written
        self.used: dict[str, Used] = {}  # each replica's use of CPU and memory in this run (used_by)
        self.held_event_files: set[str] = set()  # those the replicas' processes held open (used_by)
        self.addresses: dict[str, list[str]] = {}
        self.devices: dict[str, str] = {}  # replica -> its CUDA_VISIBLE_DEVICES, kept across restarts
        self.deadline: float | None = None
        self.shown = ("", "")  # the running job's reason and message, as recorded
        self.workspace = backend.workspace(name)
        self.replicas_started: float | None = None  # when, once they have: what is written after is the job's
        self.quiet = Quiet.of(self.spec)  # policy.hang_after's watch
        self.stragglers = Stragglers()
        self.event_files: Scalars | None = None  # the replicas' event files, read as they grow (for their paces)
        self.links: list[Path] = []  # data.link_as and output.link_as
        self.env_dir: Path | None = None  # the job's own packages (requirements.txt), once installed
        self.log_dir = backend.log_dir(name, self.job["run"])  # this run's
        self.hooks = backend.hooks(name)  # the run's webhooks, if any
        # `python` in a command is the interpreter that runs jupyter-distrain, with its packages.
        self.env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in processes.TERMINATING:
            loop.add_signal_handler(sig, self.stop_requested.set)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, processes.TERMINATING)
        if self.backend.row(self.name)["stop_requested"]:
            self.stop_requested.set()
        try:
            decision = await self.lifecycle()
        except SetupFailed as e:
            decision = Decision(Phase.FAILED, reasons.SETUP_FAILED, str(e))
        except Exception as e:  # never leave the job looking alive
            traceback.print_exc()
            decision = Decision(Phase.FAILED, reasons.SUPERVISOR_ERROR, f"{type(e).__name__}: {e}")
        why = "stopped by request" if decision.phase == Phase.STOPPED else f"job {decision.phase.value.lower()}"
        await self.stop_all(why, succeeded=decision.phase == Phase.SUCCEEDED)
        if self.replicas_started is not None:  # said before the working copy goes
            written = await asyncio.to_thread(written_since, self.workspace, self.replicas_started)
            if written:
                self.event(reasons.WORKSPACE_DISCARDED, discarded_message(written), type="Warning")
        if outside := outside_output(self.held_event_files, [Path(self.job["output_dir"]), self.workspace]):
            self.event(reasons.EVENT_FILES_OUTSIDE, outside_message(outside), type="Warning")
        shutil.rmtree(self.workspace, ignore_errors=True)
        for link in self.links:  # beside the workspace
            link.unlink(missing_ok=True)
        self.finish(decision)
        await asyncio.to_thread(self.backend.notifier.wait)  # its end and warnings posted, or failed to be

    async def lifecycle(self) -> Decision:
        if not await self.until_stopped(self.set_up()):
            return Decision(Phase.STOPPED, reasons.STOPPED, "stopped by request before it started")
        await self.start_replicas()
        recording = asyncio.ensure_future(self.record_environment())  # it takes longer than starting them
        looking = asyncio.ensure_future(self.look_at_memory())
        try:
            return await self.watch()
        finally:
            looking.cancel()
            await recording

    async def look_at_memory(self) -> None:
        """Note the running replicas' memory high-water marks now and then (accounted.AccountedProcess.look)."""
        def look() -> None:
            for running in list(self.running.values()):
                running.process.look()

        while True:
            await asyncio.to_thread(look)
            await asyncio.sleep(MEMORY_LOOK_SECONDS)

    async def record_environment(self) -> None:
        self.store.update_job(self.name, environment=json.dumps(await asyncio.to_thread(venvs.describe, self.env_dir)))

    async def until_stopped(self, coroutine) -> bool:
        """Run `coroutine` unless a stop is requested first (then cancel it); True if it completed."""
        task = asyncio.ensure_future(coroutine)
        stopper = asyncio.ensure_future(self.stop_requested.wait())
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if task.done():
            task.result()
            return True
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return False

    async def set_up(self) -> None:
        """The run's code and requirements in its workspace (run_setup.py)."""
        self.store.update_job(self.name, phase=str(Phase.PENDING), reason=reasons.PREPARING, message="preparing the code")
        shutil.rmtree(self.workspace, ignore_errors=True)
        setup = RunSetup(self.workspace, LogWriter(self.log_dir / "setup.log"), self.event)
        try:
            await setup.check_out(self.spec.get("code", {}), self.backend.credentials,
                                  self.backend.snapshot_file(self.name))
            self.env_dir, self.env = await setup.install_requirements(self.backend.root, self.env)
            if errors := self.backend.storage_errors(self.spec, self.job["owner"]):  # links made since the submit
                raise SetupFailed("; ".join(map(str, errors)))
            self.links = setup.link(self.spec, {"data": self.backend.input_dir(self.spec),
                                                "output": self.backend.output_of(self.spec)})
        finally:
            setup.log.close()

    # running the replicas
    async def start_replicas(self) -> None:
        ports = iter(processes.replica_ports(len(self.states)))
        for state in self.states.values():
            self.addresses.setdefault(state.role, []).append(f"127.0.0.1:{next(ports)}")
        free = iter(str(g["index"]) for g in processes.gpus())
        for name, state in self.states.items():
            self.devices[name] = ",".join(next(free) for _ in range(gpus(self.spec, state.role)))
        if self.spec["policy"].get("deadline_seconds"):
            self.deadline = time.monotonic() + self.spec["policy"]["deadline_seconds"]
        started = self.replicas_started = time.time()
        for name in self.states:
            await self.start_replica(name)
        # only now: a job is never Running while one of its replicas is still Pending
        self.store.update_job(self.name, phase=str(Phase.RUNNING), reason="", message="", started=started)

    async def start_replica(self, name: str) -> None:
        state = self.states[name]
        role, index = state.role, state.index
        output = self.backend.output_of(self.spec)
        inputs = self.backend.input_dir(self.spec)
        output.mkdir(parents=True, exist_ok=True)
        inputs.mkdir(parents=True, exist_ok=True)
        resume = self.spec.get("resume_from")
        logdir = str(self.backend.event_files(self.spec, name))
        dirs = Dirs(
            input=str(inputs),
            output=str(output),
            logdir=logdir,
            resume_from=str(self.backend.resume_path(resume, self.job["owner"])) if resume else None,
        )
        own = replica_env(self.spec, self.addresses, role, index, dirs)
        env = {**self.env, **own, "CUDA_VISIBLE_DEVICES": self.devices[name]}
        # the job's PYTHONPATH adds to the server environment's, which holds the packages the job installed
        python_path = [str(REPLICA_SITE), *filter(None, [own.get("PYTHONPATH"), self.env.get("PYTHONPATH")])]
        env["PYTHONPATH"] = os.pathsep.join(python_path)
        # The output pipes are this process's own, not the subprocess transport's: the transport's wait() would
        # wait for its pipes too, and a daemon the replica leaves behind may hold them open forever.
        pipes = [os.pipe(), os.pipe()]  # stdout, stderr: each line's log says which it came through
        try:
            process = AccountedProcess(replica_command(self.spec, role, own), self.workspace, env, pipes[0][1],
                                       pipes[1][1])
        finally:
            for _, writable in pipes:
                os.close(writable)
        transports, pumps = [], []
        for stderr, (readable, _) in zip((False, True), pipes):
            stream = asyncio.StreamReader()
            transport, _ = await asyncio.get_running_loop().connect_read_pipe(
                partial(asyncio.StreamReaderProtocol, stream), open(readable, "rb", buffering=0))
            writer = LogWriter(self.log_dir / f"{name}.log", stderr=stderr)
            transports.append(transport)
            pumps.append(pump(stream, writer, lambda error: self.log_failed(name, error)))
        self.running[name] = Running(process, transports, asyncio.gather(*pumps))
        self.states[name] = replace(state, phase=Phase.RUNNING, exit_code=None, error="", started=True)
        self.store.update_replica(
            self.name, name, phase=str(Phase.RUNNING), reason="", exit_code=None, pid=process.pid,
            pid_started=processes.started_at(process.pid), address=self.addresses[role][index], started=time.time(),
            finished=None, restarts=state.restarts,
        )
        self.event(reasons.STARTED, f"started pid {process.pid} at {self.addresses[role][index]}", replica=name)

    def log_failed(self, replica: str, error: OSError) -> None:
        """A replica's log cannot be written: the job fails (its output is still read, so nothing blocks)."""
        if self.fault is None:
            self.fault = Decision(Phase.FAILED, reasons.LOG_WRITE_FAILED, f"the log of {replica} could not be written: "
                                  f"{error.strerror or error}", stop_others=True)
            self.stop_requested.set()

    async def watch(self) -> Decision:
        """Wait for replicas to exit and apply the policy until the job ends."""
        hang_check = time.monotonic() + (self.quiet.hang_after if self.quiet else 0)
        # paces only where there are others to be slower than
        pace_check = time.monotonic() + PACE_CHECK_SECONDS if several(self.spec) else None
        while True:
            exits = {asyncio.ensure_future(r.process.wait()): name for name, r in self.running.items()}
            stop = asyncio.ensure_future(self.stop_requested.wait())
            wakes = [self.deadline, hang_check if self.quiet else None, pace_check]
            timeout = min((max(0.0, t - time.monotonic()) for t in wakes if t is not None), default=None)
            done, _ = await asyncio.wait({*exits, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for task in [*exits, stop]:
                if task not in done:
                    task.cancel()
            if stop in done:
                return self.fault or STOP_REQUESTED
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return deadline_exceeded(self.spec)
            if not done:
                if pace_check is not None and time.monotonic() >= pace_check:
                    await self.check_pace()
                    pace_check = time.monotonic() + PACE_CHECK_SECONDS
                if self.quiet and time.monotonic() >= hang_check:
                    ended, hang_check = await self.check_progress()
                    if ended:
                        return ended
                continue
            for task in done:
                await self.record_exit(exits[task])
            decision = decide(self.spec, list(self.states.values()))
            if decision.phase in FINISHED:
                return decision
            if (decision.reason, decision.message) != self.shown:  # e.g. training done, the evaluator not yet
                self.shown = (decision.reason, decision.message)
                self.store.update_job(self.name, reason=decision.reason, message=decision.message)
                if decision.reason:
                    self.event(decision.reason, decision.message)
            for name in decision.restart:
                state = self.states[name]
                self.states[name] = replace(state, restarts=state.restarts + 1)
                self.record(restart_event(state))
                await self.start_replica(name)

    # hangs: no replica wrote a log line or a TensorBoard step for policy.hang_after
    async def check_progress(self) -> tuple[Decision | None, float]:
        """Once the job has been quiet for hang_after: a NoProgress warning (the job's reason while it lasts) and
        the running replicas' stacks kept with the run; on_hang fail ends the job. Returns that end, if any, and
        when (time.monotonic) to look again."""
        assert self.quiet is not None
        last = await asyncio.to_thread(last_written, self.log_dir, self.backend.output_of(self.spec),
                                       self.replicas_started or 0.0)
        change, wait = self.quiet.update(last, time.time())
        if change == "resumed":
            self.store.update_job(self.name, reason=self.shown[0], message=self.shown[1])
        if change != "hung":
            return None, time.monotonic() + wait
        taken = await asyncio.to_thread(processstacks.take, {name: r.process.pid for name, r in self.running.items()},
                                        self.backend.stack_locks())
        message = hung_message(self.spec)
        processstacks.keep(self.log_dir, {**taken, "reason": reasons.NO_PROGRESS, "message": message})
        fails = self.spec["policy"]["on_hang"] == "fail"
        if not fails:  # the job's reason before its warning: whoever reads the warning finds the job hung
            self.store.update_job(self.name, reason=reasons.NO_PROGRESS, message=message)
        self.event(reasons.NO_PROGRESS, message, type="Warning")
        if fails:
            return Decision(Phase.FAILED, reasons.HUNG, message, stop_others=True), time.monotonic() + wait
        return None, time.monotonic() + wait

    async def check_pace(self) -> None:
        """A Straggler warning for each running replica whose steps per second, from its event files, stayed under
        STRAGGLER_RATIO of the others' median for STRAGGLER_SECONDS."""
        if self.event_files is None:
            from ...scalars import Scalars  # TensorBoard's protos: only for a job of several replicas

            self.event_files = Scalars()
        logged = await asyncio.to_thread(self.event_files.of, self.backend.tensorboard(self.spec), None,
                                         self.replicas_started)
        paces = {name: rate for name, rate in logged["rates"].items() if name in self.running}
        for warning in self.stragglers.warnings(paces, time.monotonic()):
            self.record(warning)

    async def record_exit(self, name: str) -> None:
        running = self.running.pop(name)
        code = exit_code(await running.process.wait())
        await self.reap(running)
        phase = Phase.SUCCEEDED if code == 0 else Phase.FAILED
        reason = exit_reason(code)
        error = await asyncio.to_thread(last_error, self.log_dir / f"{name}.log") if code else ""
        self.ended(name, running, phase, code, reason, error)

    def ended(self, name: str, running: Running, phase: Phase, code: int, reason: str, error: str | None = None
              ) -> None:
        """Record the replica's end: its state (its `error`, if given), its row with what it used, and an event (a
        stopped replica's says why: its `reason`)."""
        state = self.states[name]
        self.states[name] = replace(state, phase=phase, exit_code=code, error=state.error if error is None else error)
        self.store.update_replica(self.name, name, phase=str(phase), exit_code=code, reason=reason,
                                  finished=time.time(), **self.used_by(name, running))
        if phase == Phase.STOPPED:
            self.event(reasons.STOPPED, reason, replica=name)
        else:
            self.event(str(phase), f"exited with code {code} ({reason})" + (f": {error}" if error else ""),
                       replica=name, type="Normal" if code == 0 else "Warning")

    def used_by(self, name: str, running: Running) -> dict:
        """What the replica used in this run so far: its processes' CPU seconds, summed over its restarts, and
        the largest resident set of any of them. The event files they held open are noted for the run's end."""
        self.used[name] = self.used.get(name, Used()) + running.process.used
        self.held_event_files |= running.process.event_files
        return asdict(self.used[name])

    async def reap(self, running: Running) -> None:
        """After the replica's main process exited: kill what it left in its group, drain its output."""
        processes.signal_group(running.process.pid, signal.SIGKILL)
        try:
            await asyncio.wait_for(asyncio.shield(running.pump), DRAIN_SECONDS)
        except asyncio.TimeoutError:  # a process outside the group holds the output open
            running.pump.cancel()
            for output in running.outputs:
                output.close()

    async def stop_all(self, why: str, succeeded: bool = False) -> None:
        """SIGTERM every remaining replica's process group, SIGKILL after the grace period. Once the job
        `succeeded`, a replica that exits 0 meanwhile (ending by itself, or so on SIGTERM) succeeded too."""
        if not self.running:
            return
        await processes.stop_groups([r.process for r in self.running.values()], STOP_GRACE_SECONDS)
        for name, running in list(self.running.items()):
            self.running.pop(name)
            await self.reap(running)
            code = exit_code(await running.process.wait())
            if succeeded and code == 0:
                self.ended(name, running, Phase.SUCCEEDED, code, exit_reason(code))
            else:
                self.ended(name, running, Phase.STOPPED, code, why)

    def finish(self, decision: Decision) -> None:
        """Record the job's end (replicas never started are marked stopped), then wake the run's followers."""
        end = ending(decision, list(self.states.values()), time.time())
        with self.store.transaction():  # the job's end is seen whole, and nothing is written after it
            for name, fields in end.replicas.items():
                self.store.update_replica(self.name, name, **fields)
            self.store.update_job(self.name, **end.job)
            self.record(end.event)
            recorded = self.backend.row(self.name)  # as recorded: a restart may follow at once
        mark_ended(self.log_dir)
        if recorded["run"] == self.store.run:  # not restarted meanwhile (a stop that gave up on this supervisor)
            self.backend.notifier.tell(self.hooks, RunEvent.of(recorded, self.backend.name))

    def event(self, reason: str, message: str, replica: str = "", type: str = "Normal") -> None:
        self.record(Event(reason, message, replica, type))

    def record(self, event: Event) -> None:
        self.store.add_event(self.name, event.reason, event.message, replica=event.replica, type=event.type)
        if event.reason in reasons.NOTICES:
            self.backend.notifier.tell(self.hooks, RunEvent.of(self.backend.row(self.name), self.backend.name, event))


class SweepSupervisor(Supervisor):
    """Runs a sweep: its controller (sweep.Controller) in place of replicas, acting for the sweep's owner, its
    trials' event files read here; what it does goes to the sweep's events and its log."""

    async def lifecycle(self) -> Decision:
        self.store.update_job(self.name, phase=str(Phase.RUNNING), reason="", message="", started=time.time())
        trials = LocalBackend(self.backend.root, owner=self.job["owner"] or None)
        log = LogWriter(self.log_dir / "sweep.log")

        def say(reason: str, message: str) -> None:
            self.event(reason, message)
            log.line(message)

        def show(progress: str) -> None:
            self.store.update_job(self.name, message=progress)

        try:
            return await sweep.Controller(trials, self.spec, trials.event_files, say, show).run(self.stop_requested)
        finally:
            log.close()
            trials.store.close()


def exit_code(returncode: int) -> int:
    """Shell convention, as Kubernetes reports it: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def exit_reason(code: int) -> str:
    if code == 0:
        return "Completed"
    if code > 128:
        try:
            return f"Killed by {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    return "Error"
