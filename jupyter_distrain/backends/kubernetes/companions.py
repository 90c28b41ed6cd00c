"""What the product runs in the cluster beside a job: its run's monitor, and the namespace's janitor; the objects those
share (identities, the janitor's CronJob) are made once per process. Where one cannot run, a Warning on the job says
what goes undone."""

from __future__ import annotations

from ... import reasons
from ...errors import DistrainError
from ...policy import Event
from . import render
from .engines import NO_IMAGE
from .objects import NamespaceObjects


class Companions:
    def __init__(self, objects: NamespaceObjects):
        self.objects, self.settings = objects, objects.settings
        self.janitor_made = False  # by this process, or found made
        self.monitor_identity_made = False  # the namespace's identity of monitors (render.monitor), likewise

    def make_monitor(self, spec: dict, root_dict: dict, run: int, told: bool) -> None:
        """Make the run's monitor (render.monitor), and the namespace's identity of monitors once; a failure is a
        Warning on the job: its hangs and stragglers are then not watched, nor its webhooks `told`."""
        try:
            for obj in render.monitor(spec, self.settings, root_dict, run, told):
                if obj["kind"] == "Job":
                    self.objects.create(obj)
                elif not self.monitor_identity_made:
                    self._make_shared(obj)
            self.monitor_identity_made = True
        except DistrainError as e:
            self._warn(spec, reasons.NO_MONITOR, f"the cluster does not watch this run for hangs and stragglers, nor "
                                                 f"tell its webhooks: {e}")

    def warn_untold(self, spec: dict, hooks: dict | None) -> None:
        """A run with webhooks has no one to post its events where no monitor can run: a Warning says so."""
        if hooks and not self.settings.controller_image and "trial_of" not in spec:  # a trial's: its sweep's
            self._warn(spec, reasons.NO_MONITOR, "no one in the cluster posts this job's events to its webhooks: this "
                                                 f"server names no image for its monitor ({NO_IMAGE})")

    def make_janitor(self, spec: dict) -> None:
        """Make the namespace's janitor (render.janitor) with the first job that has a time to be kept, if
        there is an image to run it; a failure is a Warning on the job (Jupyter servers and `distrain prune`
        still delete it when its time is over)."""
        settings = self.settings
        if self.janitor_made or not (spec["policy"].get("ttl_after_finished") and settings.janitor_schedule
                                     and settings.controller_image):
            return
        try:
            for obj in render.janitor(settings):
                self._make_shared(obj)
            self.janitor_made = True
        except DistrainError as e:
            self._warn(spec, reasons.NO_JANITOR, "the cluster cannot delete this job when its time to be kept is "
                                                 f"over, only a Jupyter server can: {e}")

    def _warn(self, spec: dict, reason: str, what_goes_undone: str) -> None:
        self.objects.record(spec["name"], Event(reason, what_goes_undone, type="Warning"))

    def _make_shared(self, obj: dict) -> None:
        """Make an object the namespace's janitor or monitors share, once; a Role's rules or a CronJob's spec that
        an earlier version made are brought up to this version's."""
        if self.objects.create(obj, exists_ok=True) or obj["kind"] not in ("Role", "CronJob"):
            return
        kind, name = obj["kind"], obj["metadata"]["name"]
        change = {"rules": obj["rules"]} if kind == "Role" else {"spec": obj["spec"]}
        merge = "application/merge-patch+json"  # lists are replaced as they are
        self.objects.call(lambda: self.objects.api_for("patch", kind)(name, self.objects.ns, change,
                                                                      _content_type=merge), f"update {kind} {name}")
