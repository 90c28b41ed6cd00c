"""The API client every Kubernetes call goes through. A request that names no timeout of its own (all but
watches, followed logs and log readers, which are long by design) gets the configured one, to connect and
between bytes of the answer; at most MAX_WAITING such requests wait on the API server at once, so a stalled
server holds a bounded number of threads and answers from the watch cache keep coming. A server that does
not answer is a KubeError (504; 503 when too many already wait), as a refusal is one, in this one place."""

from __future__ import annotations

import os
import threading
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client import rest
from urllib3.exceptions import HTTPError
from urllib3.exceptions import TimeoutError as NoAnswerInTime

from .watch import KubeError

MAX_WAITING = 16  # short requests in flight at once; the REST handlers' threads are more (server.handlers)
# a refused or reset connection is tried twice more (an API server restarting); a read that timed out is not:
# the request fails after one timeout. One redirect is followed: the API server's proxy adds a trailing slash.
RETRIES = urllib3.Retry(total=2, read=0, redirect=1, status=0, raise_on_status=False)
USER_AGENT = "jupyter-distrain"  # what the API server's audit log names this product's requests by


class NoAnswer(KubeError):
    status = 504


class TooManyWaiting(KubeError):
    status = 503


def in_cluster(kubeconfig: str | None = None) -> bool:
    """Whether this process runs in a pod and should use its service account (no kubeconfig given)."""
    return not kubeconfig and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def load_client(timeout: float, kubeconfig: str | None = None) -> client.ApiClient:
    """An API client from a kubeconfig file, else from the pod's service account when in a cluster, whose
    requests wait at most `timeout` seconds for an answer (with_deadlines)."""
    configuration = client.Configuration()
    if in_cluster(kubeconfig):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.retries = RETRIES
    return with_deadlines(client.ApiClient(configuration), timeout)


def with_deadlines(api: client.ApiClient, timeout: float) -> client.ApiClient:
    """`api`, its requests given `timeout` and their failures to answer made KubeErrors (Deadlines), sent as
    this product's (USER_AGENT)."""
    api.user_agent = USER_AGENT
    if not isinstance(api.rest_client, Deadlines):
        api.rest_client = Deadlines(api.rest_client, timeout)
    return api


class Deadlines:
    """A REST client (kubernetes.client.rest) whose requests each have a deadline: see the module's doc."""

    def __init__(self, rest_client: rest.RESTClientObject, timeout: float):
        self.rest_client, self.timeout = rest_client, timeout
        self.waiting = threading.BoundedSemaphore(MAX_WAITING)

    def __getattr__(self, name: str) -> Any:  # the pool manager, ...
        return getattr(self.rest_client, name)

    def request(self, method: str, url: str, *args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        if _request_timeout is not None:
            return self._request(method, url, *args, _request_timeout=_request_timeout, **kwargs)
        if not self.waiting.acquire(blocking=False):
            raise TooManyWaiting(f"Kubernetes is slow to answer: {MAX_WAITING} requests wait for it already; "
                                 "try again later")
        try:
            return self._request(method, url, *args, _request_timeout=(self.timeout, self.timeout), **kwargs)
        finally:
            self.waiting.release()

    def _request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Answer:
        try:
            return Answer(self.rest_client.request(method, url, *args, **kwargs).response, f"{method} {url}",
                          self.timeout)
        except HTTPError as e:
            raise no_answer(e, f"{method} {url}", self.timeout) from None


class Answer(rest.RESTResponse):
    """A response whose body, when read whole, fails as a KubeError if the server stops sending it."""

    def __init__(self, response: urllib3.BaseHTTPResponse, request: str, timeout: float):
        super().__init__(response)
        self.request, self.timeout = request, timeout

    def read(self) -> bytes:
        try:
            return super().read()
        except HTTPError as e:
            raise no_answer(e, self.request, self.timeout) from None


def no_answer(error: HTTPError, request: str, timeout: float) -> KubeError:
    """What a request that got no (whole) answer tells the user: the API server's URL is theirs to check."""
    cause = getattr(error, "reason", None) or error  # MaxRetryError wraps the last failure
    if isinstance(cause, NoAnswerInTime):
        return NoAnswer(f"Kubernetes did not answer {request} within {timeout:g} s")
    return KubeError(f"cannot reach Kubernetes for {request}: {cause}")
