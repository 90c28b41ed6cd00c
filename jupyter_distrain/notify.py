"""Webhooks: a job's or sweep's end and its running warnings (reasons.NOTICES) posted as JSON to the admin's URL
(c.Distrain.notify_url) and to its owner's (`distrain webhook set`), by what decides the event, so whether
or not a Jupyter server runs: the local supervisor; on Kubernetes the run's monitor and the sweep's controller.
A sweep's trials are told of through their sweep's end.

A run's hooks, {"urls": [...], "link": ...}, are fixed when it is submitted or restarted: locally in the job's
hooks.json (mode 0600), on Kubernetes in the job's Secret <job>-notify, which its monitor's environment reads.
The owner's URL is kept under the storage root (webhooks/<owner>.json, mode 0600) and never shown back whole:
such URLs often carry a token.

    POST <url>  {"id": "...", "job": "train", "kind": "job", "event": "ended", "phase": "Failed", "reason": "Hung",
                 "message": "...", "replica": null, "run": 1, "owner": "alice", "backend": "local",
                 "link": "https://hub.example.org/user/alice/lab?distrain-job=train", "time": "2026-11-27T06:00:00Z"}

`event` is "ended" or the warning's reason; `id` is the event's, the same for each try, so a receiver can tell
a retry from a new event.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import quote, urlsplit

from ._version import __version__
from .errors import FieldError, SpecError
from .private import read_private, write_private

ENDED = "ended"  # the event of a run's end (the others are reasons.NOTICES)
TRIES = 3
TIMEOUT_SECONDS = 5.0  # for each try
HOOKS_ENV = "DISTRAIN_NOTIFY"  # a Kubernetes monitor's or sweep controller's hooks, as JSON (from the job's Secret)
MAX_URL = 2048


def url_problem(url: object) -> str:
    """What is wrong with a webhook URL ("" if nothing)."""
    if not isinstance(url, str) or not url:
        return "must be an http or https URL"
    if len(url) > MAX_URL or any(c.isspace() or ord(c) < 32 for c in url):
        return f"must be an http or https URL of at most {MAX_URL} characters, without spaces"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port out of range raises)
    except ValueError as e:
        return f"is not a URL: {e}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http or https URL with a host (https://hooks.example.org/...)"
    return ""


def shown(url: str) -> str:
    """A URL as it may be shown: its scheme and host, not its path or query (where tokens are)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/..."


class OwnerWebhook:
    """The URL an owner's jobs are posted to, kept under the storage root."""

    def __init__(self, root: Path, owner: str):
        self.path = Path(root) / "webhooks" / f"{quote(owner, safe='')}.json"

    def url(self) -> str | None:
        return (read_private(self.path) or {}).get("url")

    def set(self, url: object) -> None:
        if problem := url_problem(url):
            raise SpecError([FieldError("url", problem)], subject="webhook")
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(self.path, {"url": url}, "the webhook")

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


def hooks(urls: list[str], link_base: str | None, name: str) -> dict | None:
    """A run's hooks: where its events go, and the link to the job in JupyterLab (`link_base`: where JupyterLab
    is served, e.g. https://hub.example.org/user/alice/); None with no URL."""
    urls = list(dict.fromkeys(url for url in urls if url))
    if not urls:
        return None
    link = f"{link_base.rstrip('/')}/lab?distrain-job={quote(name)}" if link_base else None
    return {"urls": urls, "link": link}


def message(job: str, kind: str, event: str, phase: str, reason: str, text: str, replica: str | None, run: int,
            owner: str, backend: str, link: str | None) -> dict:
    """What is posted for one event."""
    return {"id": str(uuid.uuid4()), "job": job, "kind": kind, "event": event, "phase": phase, "reason": reason,
            "message": text, "replica": replica or None, "run": run, "owner": owner, "backend": backend,
            "link": link, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def about(job: dict, backend: str, hooks: dict, event: str = ENDED, reason: str = "", text: str = "",
          replica: str = "") -> dict:
    """The message of an event of `job` (a record): its end, as recorded, by default."""
    from .sweep import is_sweep

    ended = event == ENDED
    return message(job["name"], "sweep" if is_sweep(job["spec"]) else "job", event, job["phase"],
                   job["reason"] if ended else reason, job["message"] if ended else text, replica, job["run"],
                   job["owner"], backend, hooks["link"])


def post(hooks: dict, body: dict) -> list[str]:
    """POST `body` to each of the hooks' URLs, trying again on a connection error, a 429 or a 5xx; what failed,
    each naming its URL as `shown` (a token in its path never reaches a log or an event)."""
    data = json.dumps(body).encode()
    failed = []
    for url in hooks["urls"]:
        for attempt in range(TRIES):
            request = urllib.request.Request(url, data, method="POST", headers={
                "Content-Type": "application/json", "User-Agent": f"jupyter-distrain/{__version__}"})
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS):
                    break
            except urllib.error.HTTPError as e:
                why, again = f"it answered {e.code}", e.code == 429 or e.code >= 500
            except (OSError, ValueError) as e:  # URLError, a timeout, a refused connection
                why, again = str(getattr(e, "reason", e)), True
            if not again or attempt == TRIES - 1:
                failed.append(f"the webhook at {shown(url)} was not told of {body['job']}'s {body['event']}: {why}")
                break
            time.sleep(2 ** attempt)
    return failed


def from_environment() -> dict | None:
    """The hooks a Kubernetes monitor or sweep controller was given (HOOKS_ENV), if any."""
    return json.loads(os.environ[HOOKS_ENV]) if os.environ.get(HOOKS_ENV) else None
