"""Backends run jobs: `local` (processes on this machine) and `kubernetes` (pods in a namespace)."""

from __future__ import annotations

import os
from pathlib import Path

BACKENDS = ("local", "kubernetes")


def open_backend(name: str | None = None, root: Path | None = None, namespace: str | None = None,
                 kubeconfig: str | None = None, **settings):
    """The backend `name` (default $DISTRAIN_BACKEND, else local); for Kubernetes, `namespace`
    (default $DISTRAIN_NAMESPACE, else default) through `kubeconfig` ($KUBECONFIG, ~/.kube/config, or
    the pod's service account inside a cluster)."""
    from ..errors import DistrainError
    from .local import LocalBackend

    name = name or os.environ.get("DISTRAIN_BACKEND") or "local"
    if name == "local":
        return LocalBackend(root)
    if name != "kubernetes":
        raise DistrainError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}")
    from .kube import KubeBackend, in_cluster, load_client
    from .local import default_root
    from .manifests import Settings

    namespace = namespace or os.environ.get("DISTRAIN_NAMESPACE") or "default"
    return KubeBackend(root or default_root(), Settings(namespace=namespace, **settings), load_client(kubeconfig),
                       inside=in_cluster(kubeconfig))
