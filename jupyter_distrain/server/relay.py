"""An HTTP/1.1 relay from a request handler to a TensorBoard (the local board, or a cluster's): the request is
sent on with tornado's own HTTP/1.1 connection, kept open for the next request to the same board, and the
answer written back as it arrives."""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Awaitable
from urllib.parse import SplitResult

from tornado import httputil, web
from tornado.http1connection import HTTP1Connection, HTTP1ConnectionParameters
from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import is_valid_ip
from tornado.tcpclient import TCPClient

WHOLE_BODY_BYTES = 1 << 20  # an answer up to this size is relayed at once, a larger one chunk by chunk
CONNECT_SECONDS = 10
ANSWER_SECONDS = 300  # for a board's whole answer: one timer per request, rather than tornado's two
UPSTREAM = HTTP1ConnectionParameters(max_body_size=1 << 40)  # no limit: a large answer is relayed chunk by chunk
IDLE_PER_SERVER = 16  # connections kept open to one board between requests
# kept here: hop-by-hop headers, and Jupyter's credentials (the cluster gets its own)
REQUEST_HEADERS_KEPT = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
                                  "trailer", "transfer-encoding", "upgrade", "host", "content-length", "cookie",
                                  "authorization", "x-xsrftoken", "x-csrftoken"})
# kept here: hop-by-hop headers, and Server (Jupyter's own stands)
RESPONSE_HEADERS_KEPT = frozenset({"connection", "keep-alive", "proxy-authenticate", "trailer",
                                   "transfer-encoding", "upgrade", "content-length", "server"})


class Connections:
    """Open connections to the boards between requests, by server (scheme://host:port)."""

    def __init__(self) -> None:
        self.idle: dict[str, list[IOStream]] = {}

    def take(self, server: str) -> IOStream | None:
        streams = self.idle.get(server, [])
        while streams:
            stream = streams.pop()
            if not stream.closed():
                return stream
        return None

    def keep(self, server: str, stream: IOStream) -> None:
        streams = self.idle.setdefault(server, [])
        if len(streams) < IDLE_PER_SERVER:
            streams.append(stream)
        else:
            stream.close()

    def drop(self, server: str | None = None) -> None:
        """Close the connections to `server` (default: to every one)."""
        for key in [key for key in self.idle if server in (None, key)]:
            for stream in self.idle.pop(key):
                stream.close()


async def relay(handler: web.RequestHandler, mount: str, connections: Connections, url: SplitResult, path: str,
                extra: dict, tls: ssl.SSLContext | None) -> Answer:
    """Send the handler's request on to `url`'s server as `path` (with the `extra` headers) and write its answer
    as it comes, on a connection kept from an earlier request if there is one (tried again on a new one if that
    was closed before it answered). `mount`: where the server's root is reached through the handler. An HTML
    page is held, not written (Answer.page); the handler finishes."""
    request = handler.request
    headers = httputil.HTTPHeaders()
    for name, value in request.headers.get_all():
        if name.lower() not in REQUEST_HEADERS_KEPT:
            headers.add(name, value)
    headers.update(extra, Host=url.netloc)
    if request.body:
        headers["Content-Length"] = str(len(request.body))
    server = f"{url.scheme}://{url.netloc}"
    answer = Answer(handler, mount)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ANSWER_SECONDS
    while True:
        stream = connections.take(server)
        kept = stream is not None
        if stream is None:
            stream = await asyncio.wait_for(connect(url, tls), CONNECT_SECONDS)
        timer = loop.call_at(deadline, stream.close)  # then reading it fails: a 502
        try:
            upstream = HTTP1Connection(stream, is_client=True, params=UPSTREAM)
            await upstream.write_headers(httputil.RequestStartLine(request.method, path, "HTTP/1.1"),
                                         headers, request.body or None)
            upstream.finish()
            complete = await upstream.read_response(answer)
        except StreamClosedError:
            stream.close()
            if kept and not answer.started and loop.time() < deadline:
                continue
            raise
        except BaseException:
            stream.close()
            raise
        finally:
            timer.cancel()
        if complete and answer.reusable and not stream.closed():
            connections.keep(server, stream)
        else:
            stream.close()
        break
    if not answer.started:
        raise httputil.HTTPInputError("no answer")
    return answer


class Answer(httputil.HTTPMessageDelegate):
    """A TensorBoard's answer, written to the browser as it arrives; only a page is held, for the handler to point
    its fonts under the proxy."""

    def __init__(self, handler: web.RequestHandler, mount: str):
        self.handler = handler
        self.mount = mount
        self.page: list[bytes] | None = None
        self.chunked = False  # sent on chunk by chunk (a large answer), rather than at once
        self.started = False  # its headers came
        self.reusable = False  # the server keeps the connection open after it

    def headers_received(self, start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
                         headers: httputil.HTTPHeaders) -> None:
        assert isinstance(start_line, httputil.ResponseStartLine)
        self.started = True
        self.reusable = start_line.version == "HTTP/1.1" and headers.get("Connection", "").lower() != "close"
        handler = self.handler
        handler.set_status(start_line.code, start_line.reason)
        handler.clear_header("Content-Type")
        for name, value in headers.get_all():
            if name.lower() == "location" and value.startswith("/"):  # TensorBoard serves at its root
                value = self.mount + value
            if name.lower() not in RESPONSE_HEADERS_KEPT:
                handler.add_header(name, value)
        if headers.get("Content-Type", "").startswith("text/html") and \
                headers.get("Content-Encoding", "identity") == "identity":
            self.page = []
        length = headers.get("Content-Length")
        self.chunked = length is None or int(length) > WHOLE_BODY_BYTES

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        if self.page is not None:
            self.page.append(chunk)
            return None
        self.handler.write(chunk)
        return self.handler.flush() if self.chunked else None  # the next chunk is read once this one is sent


async def connect(url: SplitResult, tls: ssl.SSLContext | None) -> IOStream:
    """A connection to the URL's server: TLS for https (`tls`, else the system's authorities)."""
    assert url.hostname is not None
    secure = url.scheme == "https"
    tls = (tls or ssl.create_default_context()) if secure else None
    port = url.port or (443 if secure else 80)
    if not is_valid_ip(url.hostname):
        return await TCPClient().connect(url.hostname, port, ssl_options=tls)
    stream = IOStream(socket.socket(socket.AF_INET6 if ":" in url.hostname else socket.AF_INET))
    await stream.connect((url.hostname, port))  # an address: nothing to resolve
    return await stream.start_tls(False, tls, url.hostname) if tls else stream
