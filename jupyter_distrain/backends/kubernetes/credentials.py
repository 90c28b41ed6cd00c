"""Git credentials as Secrets: only those this extension made (its label), each for its owner (the annotation)."""

from __future__ import annotations

import base64
import builtins  # `list` is also a method name below

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ...errors import FieldError, SpecError
from . import naming
from .naming import JOB, MANAGED, OWNER
from .objects import NamespaceObjects
from .watch import SELECTOR, api_error


class CredentialStore:
    """Stores, lists and deletes an owner's git credentials; never reads one back to a request."""

    def __init__(self, objects: NamespaceObjects):
        self.objects, self.ns, self.core = objects, objects.ns, objects.core

    def _secret(self, secret: str) -> client.V1Secret | None:
        """The Secret `secret`, if this extension made it and its owner is this backend's."""
        try:
            found = self.core.read_namespaced_secret(secret, self.ns)
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"read secret {secret}") from None
        return found if self._own_credentials(found) else None

    def _own_credentials(self, secret: client.V1Secret) -> bool:
        """Whether `secret` is credentials this extension stored for this owner (not a job's snapshot)."""
        labels = secret.metadata.labels or {}
        return all(labels.get(key) == value for key, value in MANAGED.items()) and JOB not in labels \
            and self.objects.visible(secret)

    def credentials(self, secret: str) -> dict:
        found = self._secret(secret)
        if found is None:
            raise SpecError([FieldError("code.credentials", f"no secret named {secret!r} of yours in namespace "
                                        f"{self.ns} (create it with 'distrain secret set {secret} --host HOST')")])
        data = found.data or {}
        return {k: base64.b64decode(data.get(k, "")).decode() for k in ("username", "password", "host")}

    def set_credentials(self, secret: str, username: str, password: str, host: str) -> None:
        """Create the Secret, or replace one this extension made for this owner; any other Secret of that name
        is left alone and the name refused."""
        metadata = client.V1ObjectMeta(name=secret, namespace=self.ns,
                                       labels={**MANAGED, OWNER: naming.label_value(self.objects.owner)},
                                       annotations={OWNER: self.objects.owner})
        body = client.V1Secret(metadata=metadata, type="kubernetes.io/basic-auth",
                               string_data={"username": username, "password": password, "host": host})
        try:
            self.core.create_namespaced_secret(self.ns, body)
            return
        except ApiException as e:
            if e.status != 409:
                raise api_error(e, f"create secret {secret}") from None
        existing = self.objects.call(lambda: self.core.read_namespaced_secret(secret, self.ns), f"read secret {secret}")
        if not self._own_credentials(existing):
            raise SpecError([FieldError("name", f"namespace {self.ns} has a Secret {secret!r} that is not one of "
                                                "yours from jupyter-distrain; choose another name")],
                            subject="credentials")
        metadata.annotations = existing.metadata.annotations  # an admin replacing it keeps its owner
        metadata.resource_version = existing.metadata.resource_version  # unless it changed meanwhile
        self.objects.call(lambda: self.core.replace_namespaced_secret(secret, self.ns, body),
                          f"replace secret {secret}")

    def credential_names(self) -> builtins.list[str]:
        """The Secrets this extension made for this owner (other Secrets of the namespace are none of its
        business)."""
        secrets = self.objects.call(lambda: self.core.list_namespaced_secret(  # not a job's (its snapshot's)
            self.ns, label_selector=f"{SELECTOR},!{JOB}").items, "list secrets")
        return [s.metadata.name for s in secrets if self.objects.visible(s)]

    def delete_credentials(self, secret: str) -> None:
        self.objects.call(lambda: self.core.delete_namespaced_secret(secret, self.ns), f"delete secret {secret}")
