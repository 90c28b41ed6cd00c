"""Every setting of jupyter-distrain, in one Configurable. The server reads it from Jupyter's config, the
`distrain` CLI from the same files (with its flags and environment on top); both hand it to the backends.

    # jupyter_server_config.py
    c.Distrain.root = "/data/distrain"
    c.Distrain.backends = ["local", "kubernetes"]   # the panel offers both; `backend` is the default
    c.Distrain.namespace = "training"
    c.Distrain.tensorboard_idle_timeout = 600

The server exports only DISTRAIN_HOME (`root`) and DISTRAIN_BACKEND (`backend`) to its terminals and
kernels; every other setting a terminal's `distrain` reads from these files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Int, List, TraitError, Unicode, default, validate
from traitlets.config import Config, Configurable

from .errors import DistrainError
from .outbound import Refused, checked
from .owners import current_owner
from .spec import duration_problem

# the image of a job whose spec names none
DEFAULT_IMAGES = {
    "tensorflow": "tensorflow/tensorflow:2.16.1",
    "keras": "tensorflow/tensorflow:2.16.1",
    "pytorch": "pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime",
    "paddle": "paddlepaddle/paddle:2.6.1",
    "python": "python:3.11-slim",
}
BACKEND_CLASSES = {"local": "jupyter_distrain.backends.local.LocalBackend",
                   "kubernetes": "jupyter_distrain.backends.kubernetes.KubeBackend"}


# Where a pod finds its service account's namespace (Kubernetes mounts it there).
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
ENGINES = ["auto", "jobset", "kubeflow", "pods"]  # what runs a Kubernetes job (c.Distrain.kubernetes_engine)


class Distrain(Configurable):
    """The settings of jupyter-distrain (c.Distrain.* in Jupyter's config)."""

    backend_classes = Dict(BACKEND_CLASSES, config=True,
                           help="Each backend's name and the class (module.Class) that implements it "
                                "(jupyter_distrain.contract.Backend).")
    backend = Unicode("local", config=True,
                      help="The default backend: 'local' runs every replica as a process on this machine; "
                           "'kubernetes' as a pod in `namespace` (see docs/kubernetes.md#rbac for the RBAC it needs).")
    backends = List(Unicode(), config=True,
                    help="Every backend jobs may be submitted to (POST jobs?backend=...). Default: [backend].")
    root = Unicode(config=True, help="Storage root: the local backend's job records, logs, outputs and volumes; "
                                     "the copied logs of Kubernetes jobs. "
                                     "Default: $DISTRAIN_HOME, else <jupyter data dir>/distrain.")
    namespace = Unicode(config=True, help="The Kubernetes namespace of the jobs. Default: in a pod, the pod's own "
                                          "(its service account's: with KubeSpawner's per-user namespaces, each "
                                          "user's), else 'default'.")
    owner = Unicode(help="Who submits and sees jobs (current_owner); not a setting: it is who runs the process.")
    see_all_owners = Bool(False, config=True,
                          help="Show every owner's jobs and act on them, not only this user's (an admin's server).")
    read_others_outputs = Bool(False, config=True,
                               help="Let a job read other owners' outputs (its data, resume_from): a team's shared "
                                    "results. Writing and purging stay each owner's own.")
    kubernetes_engine = Enum(ENGINES, "auto", config=True,
                             help="What runs a Kubernetes job: 'jobset' renders it to a JobSet, 'kubeflow' to the "
                                  "Training Operator's TFJob, PyTorchJob or PaddleJob, whose controllers enforce "
                                  "its lifecycle in the cluster; 'pods' to bare pods that this Jupyter server "
                                  "supervises (for clusters with neither); 'auto' picks 'jobset' when the cluster "
                                  "serves its API, else 'kubeflow' for the jobs the Training Operator can run, "
                                  "else 'pods'.")
    kubeconfig = Unicode(config=True, help="A kubeconfig file for the Kubernetes backend. Default: $KUBECONFIG, "
                                           "~/.kube/config, or the pod's service account inside a cluster.")
    kubernetes_timeout = Float(30, config=True,
                               help="Seconds the Kubernetes API server may take to answer a request (to connect, "
                                    "and between bytes of its answer) before the request fails with 504; "
                                    "watches and followed logs wait as long as they run.")
    output_claim = Unicode("distrain-outputs", config=True,
                           help="The PersistentVolumeClaim that keeps a Kubernetes job's /output when its spec "
                                "names no output volume.")
    pod_security = Enum(["baseline", "restricted"], "baseline", config=True,
                        help="The Kubernetes Pod Security Standard every pod of a job passes: 'baseline' (as "
                             "long as no spec mounts a host path) or 'restricted' (a non-root user, no "
                             "privilege escalation or capabilities, the runtime's seccomp profile).")
    run_as_user = Int(1000, config=True, help="The user (and group) id of a job's pods under pod_security "
                                              "'restricted'.")
    network_policy = Bool(False, config=True,
                          help="Give each Kubernetes job a NetworkPolicy: its replicas take connections from the "
                               "job's own pods only (where the cluster's network enforces NetworkPolicies).")
    # the admin's rules for every job (rules.py), enforced before anything of it is created
    allowed_host_paths = List(Unicode(), default_value=None, allow_none=True, config=True,
                              help="Host directories a spec's data or output may mount (host_path), as prefixes: "
                                   "'/data' allows /data and /data/x, not /database. Default: any on the local "
                                   "backend, none on Kubernetes (on a shared node, a host path is the node's "
                                   "files).")
    allowed_images = List(Unicode(), config=True,
                          help="Patterns (* and ? as in shell globs) a spec's image must match; empty: any image.")
    max_replicas = Int(None, allow_none=True, config=True,
                       help="The most replicas a job may have, every role together; None: no limit.")
    max_gpus_per_replica = Int(None, allow_none=True, config=True,
                               help="The most GPUs one replica may ask for; None: no limit.")
    max_gpus_per_job = Int(None, allow_none=True, config=True,
                           help="The most GPUs a job may ask for, every replica together; None: no limit.")
    max_deadline_seconds = Int(None, allow_none=True, config=True,
                               help="The longest a job may run (its policy.deadline_seconds): a job naming no "
                                    "deadline gets this one. None: no limit.")
    ttl_after_finished = Unicode("", config=True,
                                 help="How long a finished job and its logs are kept when its spec names no "
                                      "policy.ttl_after_finished: 30m, 12h, 7d, 2w (outputs stay). Empty: until "
                                      "deleted.")
    hang_after = Unicode("", config=True,
                         help="When a running job whose spec names no policy.hang_after is hung: no log line and no "
                              "TensorBoard step for this long (90s, 20m, 2h); see policy.on_hang. Empty: never.")
    notify_url = Unicode("", config=True,
                         help="A webhook every job's and sweep's end and warnings (NoProgress, Straggler) are posted "
                              "to as JSON, besides its owner's own URL ('distrain webhook set'); posted from the "
                              "cluster on Kubernetes (which needs controller_image). Empty: none.")
    public_url = Unicode("", config=True,
                         help="Where users open JupyterLab (https://hub.example.org/user/alice/), for the links "
                              "webhooks carry. Empty: they carry none (never the address a request came from, "
                              "which its sender chooses).")
    webhook_allow_private = Bool(False, config=True,
                                 help="Let webhooks (notify_url, each owner's) be posted to loopback, private, "
                                      "link-local and other non-public addresses: to hosts inside this network. "
                                      "Default: refused, whether written in the URL or resolved from its host.")
    ttl_check_interval = Float(60, config=True,
                               help="Seconds between the Jupyter server's looks for jobs past their time to be kept.")
    gpu_types = Dict(config=True,
                     help="Named kinds of GPU node, which a spec picks per role (resources.gpu_type) and the "
                          "form offers next to the GPU count; on Kubernetes each becomes its replicas' node "
                          "selector and tolerations: {'a100': {'node_selector': {'gpu': 'a100'}, "
                          "'tolerations': [{'key': 'gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}]}}.")
    prices = Dict(config=True,
                  help="What usage costs, for the usage report and each job's view: {'gpu_hour': {'a100': 2.9, "
                       "'*': 1.1}, 'cpu_hour': 0.04, 'currency': 'USD'}; a GPU-hour by resources.gpu_type ('*' "
                       "for any other), a CPU-hour as measured (local) or as requested (Kubernetes). Empty: no "
                       "cost shown.")
    budgets = Dict(config=True,
                   help="GPU-hours each owner may use per calendar month (UTC): {'alice': 200, '*': 40} ('*' for "
                        "every other owner). A submit or restart whose worst case (its GPUs for its whole "
                        "policy.deadline_seconds) is more than is left is refused with the numbers, or warned of "
                        "(budget_action). Empty: no budgets.")
    budget_action = Enum(["refuse", "warn"], "refuse", config=True,
                         help="What a job beyond its owner's budget meets: refused, or a warning in the form's and "
                              "the dry run's check.")
    priority_class = Unicode(config=True, help="The PriorityClass of every replica pod of a Kubernetes job; "
                                               "empty: the cluster's default.")
    git_image = Unicode("alpine/git:2.47.2", config=True, help="Image of the init container that fetches the code.")
    controller_image = Unicode(config=True,
                               help="Image of this product's own pods in a Kubernetes cluster (a sweep's controller, "
                                    "the namespace's janitor, a run's monitor; the jobs' TensorBoards, and the py-spy "
                                    "of the replicas' stacks, where set): one with "
                                    "jupyter-distrain installed. Default: $JUPYTER_IMAGE (the image of this server, "
                                    "as JupyterHub's KubeSpawner sets it).")
    janitor_schedule = Unicode("*/10 * * * *", config=True,
                               help="When the Kubernetes namespace's janitor (a CronJob, made with the first job "
                                    "that has a policy.ttl_after_finished) deletes the jobs past that time, whether "
                                    "or not a Jupyter server runs; cron syntax. Empty: no janitor, only Jupyter "
                                    "servers and `distrain prune` delete them.")
    default_images = Dict(DEFAULT_IMAGES, config=True,
                          help="Container image per framework, for jobs whose spec names none.")
    tensorboard_idle_timeout = Int(900, config=True,
                                   help="Seconds without a request after which the local jobs' TensorBoard stops; 0 keeps it.")
    tensorboard_start_timeout = Float(60, config=True, help="Seconds a TensorBoard may take to start serving.")

    @default("root")
    def _default_root(self) -> str:
        if os.environ.get("DISTRAIN_HOME"):
            return os.environ["DISTRAIN_HOME"]
        from jupyter_core.paths import jupyter_data_dir

        return str(Path(jupyter_data_dir()) / "distrain")

    @default("controller_image")
    def _default_controller_image(self) -> str:
        return os.environ.get("JUPYTER_IMAGE", "")

    @default("namespace")
    def _default_namespace(self) -> str:
        try:
            return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
        except OSError:
            return "default"

    @default("owner")
    def _default_owner(self) -> str:
        return current_owner()

    @validate("backend")
    def _known_backend(self, proposal: Any) -> str:
        self._check_names([proposal["value"]], "backend")
        return proposal["value"]

    @validate("backends")
    def _known_backends(self, proposal: Any) -> list[str]:
        self._check_names(proposal["value"], "backends")
        return proposal["value"]

    @validate("ttl_after_finished", "hang_after")
    def _a_duration(self, proposal: Any) -> str:
        field = proposal["trait"].name
        if proposal["value"] and (problem := duration_problem(field, proposal["value"])):
            raise TraitError(f"Distrain.{field}: {problem}")
        return proposal["value"]

    @validate("notify_url", "public_url")
    def _a_url(self, proposal: Any) -> str:
        """The URL as outbound.checked keeps it; private addresses only for a link, or where the admin allows them."""
        name = proposal["trait"].name
        try:
            return checked(proposal["value"], name == "public_url" or self.webhook_allow_private) \
                if proposal["value"] else ""
        except Refused as e:
            raise TraitError(f"Distrain.{name}: {e}") from None

    @validate("prices")
    def _well_formed_prices(self, proposal: Any) -> dict:
        prices = proposal["value"]
        per_gpu = prices.get("gpu_hour", {})
        if set(prices) - {"gpu_hour", "cpu_hour", "currency"} or not isinstance(per_gpu, dict) or not all(
                isinstance(price, (int, float)) and price >= 0 for price in [*per_gpu.values(),
                                                                              prices.get("cpu_hour", 0)]):
            raise TraitError("Distrain.prices: {'gpu_hour': {GPU type or '*': price}, 'cpu_hour': price, "
                             "'currency': name}, prices numbers of at least 0")
        return prices

    @validate("budgets")
    def _well_formed_budgets(self, proposal: Any) -> dict:
        if not all(isinstance(hours, (int, float)) and hours >= 0 for hours in proposal["value"].values()):
            raise TraitError("Distrain.budgets: {owner or '*': GPU-hours a month}, each a number of at least 0")
        return proposal["value"]

    @validate("gpu_types")
    def _well_formed_gpu_types(self, proposal: Any) -> dict:
        for name, placement in proposal["value"].items():
            problem = gpu_type_problem(name, placement)
            if problem:
                raise TraitError(f"Distrain.gpu_types[{name!r}]: {problem}")
        return proposal["value"]

    def _check_names(self, names: list[str], trait: str) -> None:
        unknown = [n for n in names if n not in self.backend_classes]
        if unknown:
            raise TraitError(f"Distrain.{trait}: unknown backend {unknown[0]!r}; allowed: "
                             f"{', '.join(self.backend_classes)}")

    def for_cluster(self) -> dict:
        """The settings that shape a job's objects, for a process that makes jobs in the cluster for this
        server (a sweep's controller): not where this server keeps or reads things."""
        here = {"backend_classes", "backend", "backends", "root", "namespace", "kubeconfig", "see_all_owners",
                "ttl_check_interval", "janitor_schedule", "tensorboard_idle_timeout", "tensorboard_start_timeout",
                "notify_url", "public_url", "webhook_allow_private",  # a sweep's own hooks are in its Secret
                "prices", "budgets", "budget_action"}  # a sweep's budget was checked whole at its submit
        return {name: value for name, value in self.trait_values(config=True).items() if name not in here}

    @property
    def enabled(self) -> list[str]:
        """The default backend first, then the others jobs may go to."""
        return list(dict.fromkeys([self.backend, *self.backends]))

    @classmethod
    def load(cls, **overrides: Any) -> Distrain:
        """The settings as a `distrain` command sees them: Jupyter server's config files (the ones the
        server reads), then $DISTRAIN_HOME, $DISTRAIN_BACKEND, $DISTRAIN_NAMESPACE and
        $DISTRAIN_KUBERNETES_ENGINE, then `overrides`
        (None: not given)."""
        from jupyter_core.paths import jupyter_config_dir, jupyter_config_path
        from traitlets.config import Application

        # the files and order of a Jupyter application's (JupyterApp, whose import costs every CLI call ~15 ms)
        path = jupyter_config_path()
        if jupyter_config_dir() not in path:
            path.insert(0, jupyter_config_dir())
        files = Application()
        for name in ("jupyter_config", "jupyter_server_config"):
            files.load_config_file(name, path=path)
        environment = {"root": "DISTRAIN_HOME", "backend": "DISTRAIN_BACKEND", "namespace": "DISTRAIN_NAMESPACE",
                       "kubernetes_engine": "DISTRAIN_KUBERNETES_ENGINE"}
        section = Config({key: os.environ[var] for key, var in environment.items() if os.environ.get(var)})
        section.update({key: value for key, value in overrides.items() if value is not None})
        config = Config(files.config)
        config.Distrain.merge(section)
        try:
            return cls(config=config)
        except TraitError as e:
            raise DistrainError(str(e)) from None


TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


def gpu_type_problem(name: Any, placement: Any) -> str:
    """What is wrong with one entry of c.Distrain.gpu_types ("" if nothing)."""
    from .spec import schema

    rule = schema()["$defs"]["replicaSpec"]["properties"]["resources"]["properties"]["gpu_type"]
    if not (isinstance(name, str) and len(name) <= rule["maxLength"] and re.match(rule["pattern"], name)):
        return f"a name as resources.gpu_type takes: {rule['pattern']}, at most {rule['maxLength']} characters"
    if not isinstance(placement, dict) or set(placement) - {"node_selector", "tolerations"}:
        return "must be a dict of node_selector and tolerations"
    selector = placement.get("node_selector", {})
    if not (isinstance(selector, dict) and all(isinstance(v, str) for v in [*selector, *selector.values()])):
        return "node_selector must map label names to values (strings)"
    tolerations = placement.get("tolerations", [])
    if not (isinstance(tolerations, list) and all(isinstance(t, dict) and set(t) <= TOLERATION_KEYS
                                                  for t in tolerations)):
        return f"tolerations must be a list of Kubernetes tolerations ({', '.join(sorted(TOLERATION_KEYS))})"
    return ""
