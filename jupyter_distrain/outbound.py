"""Posts to the URLs users and admins give (webhooks). Who may be posted to is decided here, for every poster: an
http or https URL without credentials, whose host is not, and does not resolve to, a loopback, private, link-local
or other non-public address, unless the admin allows these (c.Distrain.webhook_allow_private, which the run's hooks
carry as "allow_private": true). A post goes to the address its host was checked at (no second DNS look-up), or
through the environment's proxy (http_proxy, https_proxy, no_proxy), which then decides; it follows no redirect.
"""

from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
import threading
import unicodedata
import urllib.request
from contextlib import suppress
from urllib.parse import quote, urlsplit, urlunsplit

from ._version import __version__

TRY_SECONDS = 5.0  # the most one post takes whole: connecting, sending and its answer's status and headers
MAX_URL = 2048
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

    def __init__(self, host: str, port: int, found: list[str], timeout: float, tls: ssl.SSLContext | None = None):
        super().__init__(host, port, timeout=timeout)
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


def send(url: str, data: bytes, allow_private: bool, seconds: float = TRY_SECONDS) -> int:
    """POST `data` to `url` (as `checked`) once, through the environment's proxy for it if there is one (which then
    resolves the host, and decides where this machine's posts may go); the answer's status. TimeoutError if the
    answer's status and headers have not come whole within `seconds` (a receiver may send them a byte at a time)."""
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
            connection = http.client.HTTPSConnection(*address, timeout=seconds, context=ssl.create_default_context())
            connection.set_tunnel(host, port)
        else:
            connection, target = http.client.HTTPConnection(*address, timeout=seconds), url
    else:
        found = addresses(host, port, allow_private)
        connection = (VettedTLS(host, port, found, seconds, ssl.create_default_context()) if tls
                      else Vetted(host, port, found, seconds))
    deadline = Deadline(connection, seconds)
    try:
        connection.request("POST", target, data, headers={
            "Content-Type": "application/json", "User-Agent": f"jupyter-distrain/{__version__}"})
        status = connection.getresponse().status  # its body is not read
    except (OSError, http.client.HTTPException):
        if not deadline.passed.is_set():
            raise
    finally:
        deadline.cancel()
        connection.close()
    if deadline.passed.is_set():  # cut short: what was read of the answer may end anywhere
        raise TimeoutError(f"no answer within {seconds:g} s")
    return status


class Deadline:
    """Shuts a connection's socket once `seconds` have passed, so that whatever reads from it returns at once."""

    def __init__(self, connection: http.client.HTTPConnection, seconds: float):
        self.passed = threading.Event()
        self.timer = threading.Timer(seconds, self._cut, [connection])
        self.timer.start()

    def _cut(self, connection: http.client.HTTPConnection) -> None:
        self.passed.set()
        with suppress(OSError, AttributeError):  # closed meanwhile
            connection.sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self.timer.cancel()
