"""What every route of the extension shares (REST, log stream, TensorBoard proxy): its one access rule,
errors as JSON, strict query parameters, and the threads the job manager's blocking calls run on."""

from __future__ import annotations

import asyncio
import functools
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import ensure_async
from tornado import web

from .. import spec as spec_
from ..errors import DistrainError

AUTH_RESOURCE = "distrain"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
JUPYTER_QUERY = frozenset({"token", "_xsrf"})  # Jupyter's own authentication parameters
# the job manager's calls run on threads of their own, more than the Kubernetes backend lets wait on its API
# server at once (kubernetes/apiclient.py's MAX_WAITING): a stalled API server leaves threads to what its watch cache and the
# local backend answer
THREADS = ThreadPoolExecutor(32, thread_name_prefix="distrain")


async def in_thread(function: Callable, *args: Any, **kwargs: Any) -> Any:
    """`function(*args, **kwargs)` on one of THREADS, off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(THREADS, functools.partial(function, *args, **kwargs))


async def authorize(handler: JupyterHandler) -> None:
    """The one access rule of every distrain route (REST, log stream, TensorBoard proxy):
    a Jupyter user, authorized to read (GET) or write (anything else) the 'distrain' resource."""
    user = handler.current_user
    if not user:
        raise web.HTTPError(403, "authentication required")
    action = "read" if handler.request.method in READ_METHODS else "write"
    if not await ensure_async(handler.authorizer.is_authorized(handler, user, action, AUTH_RESOURCE)):
        raise web.HTTPError(403, f"not allowed to {action} {AUTH_RESOURCE}")


def check_query(handler: JupyterHandler, allowed: tuple[str, ...]) -> None:
    """Refuse unknown query parameters (a typo like ?tial=10 must not pass silently)."""
    unknown = sorted(set(handler.request.query_arguments) - set(allowed) - JUPYTER_QUERY)
    if unknown:
        allowed_text = ", ".join(allowed) or "none"
        raise ApiError(400, {"message": f"unknown query parameter {unknown[0]!r}; allowed: {allowed_text}"})


def is_whole_number(text: str) -> bool:
    """Whether `text` is a whole number from 0 to spec.SAFE_INTEGER, in ASCII digits ('²' is a digit to
    str.isdigit; a 5,000-digit number is too long for int())."""
    return text.isascii() and text.isdigit() and len(text) <= 16 and int(text) <= spec_.SAFE_INTEGER


def whole_number(name: str, value: str) -> int:
    """A query value that must be a whole number (is_whole_number)."""
    if not is_whole_number(value):
        raise ApiError(400, {"message": f"query parameter {name!r} must be a whole number from 0 to "
                                        f"{spec_.SAFE_INTEGER}, not {value[:40]!r}"})
    return int(value)


def strict_json(value: Any) -> str:
    """JSON every reader accepts: a NaN or Infinity is an error here, never a token sent to a browser."""
    return json.dumps(value, allow_nan=False)


class ApiError(web.HTTPError):
    """An HTTP error whose JSON body is given whole (e.g. every failing field of a spec)."""

    def __init__(self, status: int, body: dict):
        super().__init__(status, body["message"].replace("%", "%%"))
        self.body = body


async def call(method: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run a blocking job-manager call off the event loop; domain errors become 4xx replies."""
    try:
        return await in_thread(method, *args, **kwargs)
    except DistrainError as e:
        raise ApiError(e.status, e.to_json()) from None


class JsonErrors(web.RequestHandler):
    """Errors are JSON with a message (and, for specs, every failing field), on every route."""

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(error, ApiError):
            body = error.body
        elif isinstance(error, web.HTTPError) and error.log_message:
            body = {"message": error.log_message % error.args if error.args else error.log_message}
        else:
            body = {"message": self._reason}
        if status_code == 405:  # RFC 9110: say which methods are allowed
            self.set_header("Allow", ", ".join(
                m for m in self.SUPPORTED_METHODS if getattr(type(self), m.lower()) is not getattr(
                    web.RequestHandler, m.lower())))
        self.set_header("Content-Type", "application/json")
        self.finish(strict_json(body))
