"""The usage ledger in the namespace (contract.Ledger): a ConfigMap per owner and month, a key per run (usage.row_key)
holding its usage.ledger_row as JSON. Written by whoever ends a job's life (a Jupyter server, `distrain delete`, the
namespace's janitor), each run a key of its own, so writers never overwrite one another's (a merge patch adds it).
Not labelled as a job's objects are (managed-by), which the product lists as its jobs."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import hashlib
import json
import time
from datetime import datetime, timezone

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ...usage import counted_since, month_start, row_key
from .naming import COMPONENT
from .objects import NamespaceObjects
from .watch import api_error

LEDGER = "distrain-usage"
LABELS = {"app.kubernetes.io/part-of": "jupyter-distrain", COMPONENT: "usage-ledger"}


def month_of(moment: float) -> str:
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m")


def ledger_name(owner: str, moment: float, part: int) -> str:
    """The ConfigMap of `owner`'s runs that ended in `moment`'s month (a hash of the owner: any name fits), the
    `part`-th: a ConfigMap holds 1 MiB (some 2,500 runs), the next part the rest."""
    return f"{LEDGER}-{month_of(moment)}-{hashlib.sha256(owner.encode()).hexdigest()[:12]}-{part}"


class ConfigMapLedger:
    def __init__(self, objects: NamespaceObjects):
        self.ns, self.core = objects.ns, objects.core

    def add(self, row: dict) -> None:
        data, part = {row_key(row): json.dumps(row, separators=(",", ":"))}, 1
        while True:
            name = ledger_name(row["owner"], row["finished"] or time.time(), part)
            try:
                self.core.patch_namespaced_config_map(name, self.ns, {"data": data})
                return
            except ApiException as e:
                if e.status == 422 and "Too long" in str(e.body):  # full (1 MiB): the next part
                    part += 1
                    continue
                if e.status != 404:
                    raise api_error(e, f"write the usage ledger {name}") from None
            try:
                self.core.create_namespaced_config_map(self.ns, client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=name, labels=LABELS), data=data))
                return
            except ApiException as e:
                if e.status != 409:  # made meanwhile by another writer: added to at the next turn
                    raise api_error(e, f"make the usage ledger {name}") from None

    def since(self, moment: float) -> builtins.list[dict]:
        selector = ",".join(f"{key}={value}" for key, value in LABELS.items())
        try:
            months = self.core.list_namespaced_config_map(self.ns, label_selector=selector).items
        except ApiException as e:
            raise api_error(e, "list the usage ledger") from None
        first = f"{LEDGER}-{month_of(month_start(moment))}"
        rows = [json.loads(text) for month in months if month.metadata.name >= first
                for text in (month.data or {}).values()]
        return [row for row in rows if counted_since(row, moment)]
