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
a retry from a new event. `link` is c.Distrain.public_url's, null without it (never the address a request came
from, which its sender chooses).

Who may be posted to, and the post itself: outbound.py.
"""

from __future__ import annotations

import atexit
import http.client
import json
import logging
import os
import queue
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import quote

from .errors import FieldError, NotFound, SpecError
from .outbound import TRY_SECONDS, Refused, checked, send, shown
from .policy import Event
from .private import read_private, write_private
from .sweep import is_sweep

ENDED = "ended"  # the event of a run's end (the others are reasons.NOTICES)
TRIES = 3
DEADLINE_SECONDS = 15.0  # the most an event's posts take, every URL and try included
HOOKS_ENV = "DISTRAIN_NOTIFY"  # a Kubernetes monitor's or sweep controller's hooks, as JSON (from the job's Secret)
NOT_DELIVERED = "not delivered"  # all a test post says: no status or error, which would tell of internal hosts


class OwnerWebhook:
    """The URL an owner's jobs are posted to, kept under the storage root."""

    def __init__(self, root: Path, owner: str):
        self.path = Path(root) / "webhooks" / f"{quote(owner, safe='')}.json"

    def url(self) -> str | None:
        return (read_private(self.path) or {}).get("url")

    def set(self, url: object, allow_private: bool) -> None:
        try:
            url = checked(url, allow_private)
        except Refused as e:
            raise SpecError([FieldError("url", str(e))], subject="webhook") from None
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(self.path, {"url": url}, "the webhook")

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


def hooks(urls: list[str], public_url: str | None, name: str, allow_private: bool = False) -> dict | None:
    """A run's hooks: where its events go, the link to the job in JupyterLab (`public_url`: where JupyterLab is
    served, e.g. https://hub.example.org/user/alice/; none without it), and whether private addresses may be
    posted to (only when the admin allows it); None with no URL."""
    urls = list(dict.fromkeys(url for url in urls if url))
    if not urls:
        return None
    link = f"{public_url.rstrip('/')}/lab?distrain-job={quote(name)}" if public_url else None
    return {"urls": urls, "link": link, **({"allow_private": True} if allow_private else {})}


class Webhooks:
    """The admin's webhook and each owner's own (set, shown, tested, deleted by its owner), as a manager acting for
    `config.owner` uses them."""

    def __init__(self, config: Any):
        """`config`: the Distrain settings (root, owner, notify_url, public_url, webhook_allow_private)."""
        self.config = config
        self.own = OwnerWebhook(Path(config.root), config.owner)

    def of_job(self, name: str, owner: str) -> dict | None:
        """Where the events of job `name` of `owner` are posted (see hooks)."""
        own = OwnerWebhook(Path(self.config.root), owner).url()
        return hooks([self.config.notify_url, own or ""], self.config.public_url, name,
                     self.config.webhook_allow_private)

    def shown(self) -> dict:
        """This owner's webhook as it may be shown (its host, not its path), and whether the admin's is set."""
        url = self.own.url()
        return {"url": shown(url) if url else None, "admin": bool(self.config.notify_url)}

    def set(self, url: object) -> None:
        """Post this owner's jobs' events to `url` from their next submit or restart on."""
        self.own.set(url, self.config.webhook_allow_private)

    def delete(self) -> None:
        self.own.delete()

    def test(self, backend: str) -> list[str]:
        """Post a test event to this owner's webhook, once: [] if it was delivered, else NOT_DELIVERED alone (no
        status or error, which would tell what answers at internal addresses)."""
        url = self.own.url()
        if url is None:
            raise NotFound("no webhook is set: set one first ('distrain webhook set')")
        body = RunEvent("", 0, "test", self.config.owner, backend, "", event="test",
                        message="a test from jupyter-distrain").body(self.config.public_url or None)
        return [NOT_DELIVERED] if post({"urls": [url], "allow_private": self.config.webhook_allow_private}, body,
                                       tries=1) else []


@dataclass(frozen=True)
class RunEvent:
    """What is posted of a run: its end (`event` ENDED) or a warning (`event` the warning's reason), with the job's
    phase, reason and message as recorded with it. Made where the event is recorded: a post says what was recorded
    then, however late it goes."""

    job: str
    run: int
    kind: str  # "job" or "sweep"
    owner: str
    backend: str
    phase: str
    event: str = ENDED
    reason: str = ""
    message: str = ""
    replica: str | None = None
    time: float = field(default_factory=time.time)

    @classmethod
    def of(cls, job: Mapping[str, Any], backend: str, warning: Event | None = None) -> RunEvent:
        """The end of `job` (a record), as it records it, or `warning` of it."""
        ended = cls(job["name"], job["run"], "sweep" if is_sweep(job["spec"]) else "job", job["owner"], backend,
                    job["phase"], ENDED, job["reason"], job["message"])
        if warning is None:
            return ended
        return replace(ended, event=warning.reason, reason=warning.reason, message=warning.message,
                       replica=warning.replica or None)

    def body(self, link: str | None) -> dict:
        """What is posted, its `id` the same for each try."""
        return {"id": str(uuid.uuid4()), "job": self.job, "kind": self.kind, "event": self.event,
                "phase": self.phase, "reason": self.reason, "message": self.message, "replica": self.replica,
                "run": self.run, "owner": self.owner, "backend": self.backend, "link": link,
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.time))}


class Notifier:
    """Posts run events to their hooks on a thread of its own, in the order told, so that whatever tells of one (a
    supervisor's watch, a read that found a run's end, a monitor) never waits on a receiver, and no receiver can
    make it fail. `failed(event, problem)` is told of each post that failed. A process waits for its told events
    (`wait`) before it exits: at its exit by itself, or where it ends with os._exit."""

    def __init__(self, failed: Callable[[RunEvent, str], None]):
        self.failed = failed
        self.told: queue.Queue[tuple[dict, RunEvent]] = queue.Queue()
        self.poster: threading.Thread | None = None
        self.starting = threading.Lock()

    def tell(self, hooks: dict | None, event: RunEvent) -> None:
        if not hooks:
            return
        with self.starting:
            if self.poster is None:
                self.poster = threading.Thread(target=self._post_told, name="webhooks", daemon=True)
                self.poster.start()
                atexit.register(self.wait)
        self.told.put((hooks, event))

    def wait(self) -> None:
        """Until each event told is posted, or has failed: at most DEADLINE_SECONDS each."""
        self.told.join()

    def _post_told(self) -> None:
        while True:
            hooks, event = self.told.get()
            try:
                for problem in post(hooks, event.body(hooks["link"])):
                    self.failed(event, problem)
            except Exception:  # the failure could not be recorded (a full disk, the cluster unreachable)
                logging.getLogger(__name__).exception("a webhook's failure could not be recorded")
            finally:
                self.told.task_done()


def post(hooks: dict, body: dict, tries: int = TRIES) -> list[str]:
    """POST `body` to each of the hooks' URLs at once, each tried again on a connection error, a 429 or a 5xx,
    all within DEADLINE_SECONDS; what failed, each naming its URL as `shown` (a token in its path never reaches a
    log or an event)."""
    data, deadline = json.dumps(body).encode(), time.monotonic() + DEADLINE_SECONDS
    allow_private = hooks.get("allow_private") is True
    what = f"{body['job']}'s {body['event']}"
    with ThreadPoolExecutor(len(hooks["urls"])) as posting:
        failed = posting.map(lambda url: deliver(url, data, allow_private, tries, deadline, what), hooks["urls"])
    return [problem for problem in failed if problem]


def deliver(url: str, data: bytes, allow_private: bool, tries: int, deadline: float, what: str) -> str | None:
    """Post `data` to `url`, trying again where that may help and a whole try fits before `deadline`; why it
    failed, if it did."""
    for attempt in range(tries):
        try:
            status = send(checked(url, allow_private=True), data, allow_private)  # its addresses checked there
            if 200 <= status < 300:
                return None
            why, again = f"it answered {status}", status == 429 or status >= 500
            if 300 <= status < 400:
                why += " (redirects are not followed)"
        except Refused as e:
            why, again = str(e), False
        except OSError as e:  # a refused connection, a timeout, no such host
            why, again = str(e) or type(e).__name__, True
        except http.client.HTTPException as e:
            why, again = f"its answer is not HTTP ({type(e).__name__})", True
        except Exception as e:  # whatever else a receiver's answer makes of the post: it fails, nothing more
            why, again = f"{type(e).__name__}: {e}", False
        pause = 2 ** attempt
        if not again or attempt == tries - 1 or time.monotonic() + pause + TRY_SECONDS > deadline:
            break
        time.sleep(pause)
    return f"the webhook at {shown(url)} was not told of {what}: {why}"


def from_environment() -> dict | None:
    """The hooks a Kubernetes monitor or sweep controller was given (HOOKS_ENV), if any."""
    return json.loads(os.environ[HOOKS_ENV]) if os.environ.get(HOOKS_ENV) else None
