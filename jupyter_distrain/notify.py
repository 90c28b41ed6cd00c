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

Who may be posted to is decided here, for every poster: an http or https URL without credentials, whose host
is not, and does not resolve to, a loopback, private, link-local or other non-public address, unless the admin
allows these (c.Distrain.webhook_allow_private, which the run's hooks carry as "allow_private": true). A post
goes to the address its host was checked at (no second DNS look-up), or through the environment's proxy
(http_proxy, https_proxy, no_proxy), which then decides; it follows no redirect, and is tried again only on a
connection error, a 429 or a 5xx.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import re
import socket
import ssl
import time
import unicodedata
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from ._version import __version__
from .errors import FieldError, SpecError
from .private import read_private, write_private

ENDED = "ended"  # the event of a run's end (the others are reasons.NOTICES)
TRIES = 3
TIMEOUT_SECONDS = 5.0  # for each try
HOOKS_ENV = "DISTRAIN_NOTIFY"  # a Kubernetes monitor's or sweep controller's hooks, as JSON (from the job's Secret)
MAX_URL = 2048
NOT_DELIVERED = "not delivered"  # all a test post says: no status or error, which would tell of internal hosts
HOST = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")  # a host name, once IDNA-encoded
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
ALLOWED = ("allowed: http and https URLs of public hosts (the admin can allow private addresses with "
           "c.Distrain.webhook_allow_private)")


class Refused(ValueError):
    """A webhook URL that may not be posted to."""


def public(address: str) -> bool:
    """Whether an IP address may be posted to without c.Distrain.webhook_allow_private: a global one, not
    multicast or reserved, nor an IPv6 one carrying an IPv4 address that is not (IPv4-mapped, 6to4, NAT64)."""
    ip = ipaddress.ip_address(address.partition("%")[0])
    inner: list[ipaddress.IPv4Address | None] = []
    if isinstance(ip, ipaddress.IPv6Address):
        inner = [ip.ipv4_mapped, ip.sixtofour, ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in NAT64 else None]
    return all(a.is_global and not (a.is_multicast or a.is_reserved or getattr(a, "is_site_local", False))
               for a in [ip, *filter(None, inner)])


def checked(url: object, allow_private: bool) -> str:
    """`url` as it is kept and posted to (its host in ASCII, its path and query percent-encoded, no fragment);
    Refused, saying what is wrong with it, if it may not be. A host name is checked when posting (`addresses`);
    here, unless `allow_private`, an address written in the URL (in any of the forms resolvers read: 2130706433,
    0, [::ffff:127.0.0.1]) and localhost."""
    if not isinstance(url, str) or not url:
        raise Refused("must be an http or https URL")
    if len(url) > MAX_URL or any(c.isspace() or unicodedata.category(c).startswith("C") for c in url):
        raise Refused(f"must be an http or https URL of at most {MAX_URL} characters, without spaces, control "
                      "characters or invalid Unicode")
    try:
        parts = urlsplit(url)
        port = parts.port  # a port out of range raises
    except ValueError as e:
        raise Refused(f"is not a URL: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("must be an http or https URL with a host (https://hooks.example.org/...)")
    if "@" in parts.netloc:
        raise Refused("must not carry a user name or password (user:password@); a token may be in its path")
    host = parts.hostname
    if ":" not in host:  # a name, or an IPv4 address; an IPv6 one urlsplit checked
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            host = ""
        if not HOST.fullmatch(host):
            raise Refused("must have a valid host name (internationalised names are encoded as IDNA)")
    if not allow_private and not literal_public(host):
        raise Refused(f"must not have a loopback, private or other non-public address as its host; {ALLOWED}")
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    safe = "/%:@!$&'()*+,;=~"
    return urlunsplit((parts.scheme, netloc, quote(parts.path, safe=safe), quote(parts.query, safe=safe + "?"), ""))


def literal_public(host: str) -> bool:
    """Whether `host` (ASCII) is neither localhost nor an address that is not `public`; a name is, until resolved."""
    if host.rstrip(".") == "localhost" or host.rstrip(".").endswith(".localhost"):
        return False
    try:
        found = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)  # an address, in any form: no DNS
    except socket.gaierror:
        return ":" not in host  # a name (an IPv6 address that does not parse is refused)
    return all(public(str(info[4][0])) for info in found)


def shown(url: str) -> str:
    """A URL as it may be shown: its scheme and host (in ASCII), not its path or query (where tokens are)."""
    try:
        parts = urlsplit(checked(url, allow_private=True))
    except Refused:
        return "(an invalid URL)"
    return f"{parts.scheme}://{parts.netloc}/..."


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


def addresses(host: str, port: int, allow_private: bool) -> list[str]:
    """The addresses `host` resolves to, which a post connects to; Refused if one is not `public`, unless
    `allow_private`."""
    found = list(dict.fromkeys(str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)))
    if not allow_private and (private := [a for a in found if not public(a)]):
        raise Refused(f"its host resolves to a non-public address ({private[0]}); {ALLOWED}")
    return found


class Vetted(http.client.HTTPConnection):
    """An HTTP connection to one of the `addresses` its host was checked at, not to what a second DNS look-up
    would answer (DNS rebinding); over TLS (`tls`) it checks the certificate of the host's name."""

    def __init__(self, host: str, port: int, found: list[str], tls: ssl.SSLContext | None = None):
        super().__init__(host, port, timeout=TIMEOUT_SECONDS)
        self.found, self.tls = found, tls

    def connect(self) -> None:
        error = OSError(f"{self.host} has no address")
        for address in self.found:
            try:
                sock = socket.create_connection((address, self.port), self.timeout)
                break
            except OSError as e:
                error = e
        else:
            raise error
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host) if self.tls else sock


class VettedTLS(Vetted):
    default_port = 443  # for the Host header


def send(url: str, data: bytes, allow_private: bool) -> int:
    """POST `data` to `url` (as `checked`) once, through the environment's proxy for it if there is one (which then
    resolves the host, and decides where this machine's posts may go); the answer's status."""
    parts = urlsplit(url)
    host, tls = parts.hostname or "", parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    proxy = urllib.request.getproxies().get(parts.scheme)
    connection: http.client.HTTPConnection
    if proxy and not urllib.request.proxy_bypass(host):
        through = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        address = (through.hostname or "", through.port or 80)
        if tls:  # TLS with the host itself, through the proxy's tunnel
            connection = http.client.HTTPSConnection(*address, timeout=TIMEOUT_SECONDS,
                                                     context=ssl.create_default_context())
            connection.set_tunnel(host, port)
        else:
            connection, target = http.client.HTTPConnection(*address, timeout=TIMEOUT_SECONDS), url
    else:
        found = addresses(host, port, allow_private)
        connection = VettedTLS(host, port, found, ssl.create_default_context()) if tls else Vetted(host, port, found)
    try:
        connection.request("POST", target, data, headers={
            "Content-Type": "application/json", "User-Agent": f"jupyter-distrain/{__version__}"})
        return connection.getresponse().status  # its body is not read
    finally:
        connection.close()


def post(hooks: dict, body: dict, tries: int = TRIES) -> list[str]:
    """POST `body` to each of the hooks' URLs, trying again on a connection error, a 429 or a 5xx; what failed,
    each naming its URL as `shown` (a token in its path never reaches a log or an event)."""
    data = json.dumps(body).encode()
    allow_private = hooks.get("allow_private") is True
    failed = []
    for url in hooks["urls"]:
        for attempt in range(tries):
            try:
                status = send(checked(url, allow_private=True), data, allow_private)  # its addresses checked there
                if 200 <= status < 300:
                    break
                why, again = f"it answered {status}", status == 429 or status >= 500
                if 300 <= status < 400:
                    why += " (redirects are not followed)"
            except Refused as e:
                why, again = str(e), False
            except (OSError, http.client.HTTPException) as e:  # a refused connection, a timeout, no such host
                why, again = str(e) or type(e).__name__, True
            if not again or attempt == tries - 1:
                failed.append(f"the webhook at {shown(url)} was not told of {body['job']}'s {body['event']}: {why}")
                break
            time.sleep(2 ** attempt)
    return failed


def from_environment() -> dict | None:
    """The hooks a Kubernetes monitor or sweep controller was given (HOOKS_ENV), if any."""
    return json.loads(os.environ[HOOKS_ENV]) if os.environ.get(HOOKS_ENV) else None
