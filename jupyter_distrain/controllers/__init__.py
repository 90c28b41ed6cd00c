"""The controllers this product runs in the cluster, each the command of a pod made with the product's image
(c.Distrain.controller_image): `python -m jupyter_distrain.controllers.sweep` runs a sweep's trials (the
sweeper's Job), `python -m jupyter_distrain.controllers.janitor` deletes the jobs past their time to be kept (the
namespace's CronJob), `python -m jupyter_distrain.controllers.monitor` watches a run (its Job). Each acts through the
Kubernetes backend (`kube_backend`), whether or not a Jupyter server runs, with its pod's service account, whose
Role grants what its program needs and no more (backends/kubernetes/roles.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes import client

    from ..backends.kubernetes import KubeBackend
    from ..config import Distrain


def kube_backend(settings: Distrain, api: client.ApiClient | None = None, supervises: str = "") -> KubeBackend:
    """The backend a controller acts through: its pod's service account (or `api`). It applies the policy to no job
    on "pods" as it reads them (a Jupyter server does: restarting a replica makes a pod, which its Role does not
    allow), but to the trials of the sweep `supervises` names: a sweep's controller's, which made them. It copies no
    pod's log (its Role may not read them)."""
    from ..backends.kubernetes import KubeBackend

    return KubeBackend(settings, api, supervised=supervises, copies_logs=False)
