"""Pure functions from (spec, replica addresses) to each replica's environment and command. No I/O.

`addresses` maps each role to its replicas' "host:port", in index order: 127.0.0.1 ports on the
local backend, stable DNS names on Kubernetes (podspec.host). The port after a replica's is the
replica's too (processes.replica_ports locally; a pod's are all its own).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from . import incluster
from .placeholders import PLACEHOLDER, hyperparameter_env, placeholder_variable, render_command, scalar_text
from .roles import ROLE_ORDER, chief, gpus, replica_name, replicas

TF_FRAMEWORKS = ("tensorflow", "keras")
# A job's replicas start Python with this directory first on PYTHONPATH (every job's locally; a PyTorch job's on
# Kubernetes): its sitecustomize.py lets the job's user dump their stacks, and in a PyTorch job keeps TensorFlow out
# of their TensorBoard writers, which would otherwise import it wherever it is installed beside PyTorch, and crash
# the process once torch loads Triton (see there).
REPLICA_SITE = Path(__file__).parent / "replica_site"
# What distrain sets that a job's env may change: Paddle's gloo switch (a program whose barriers need gloo), Rich's
# terminal (TTY_COMPATIBLE=1: Rich draws its progress bars, Lightning's among them, into the replica's log, which keeps
# a bar redrawn in place as last drawn each second; without it Rich writes a bar once, when it is done)
DEFAULTS = frozenset({"PADDLE_WITH_GLOO", "TTY_COMPATIBLE"})
AWAIT_PSERVERS = str(incluster.path("await_pservers"))  # the program's file here, which local replicas run


@dataclass(frozen=True)
class Dirs:
    """Directories as the replica sees them (/input and /output inside a container)."""

    input: str
    output: str
    logdir: str | None = None
    resume_from: str | None = None


def replica_env(spec: dict, addresses: dict[str, list[str]], role: str, index: int, dirs: Dirs) -> dict[str, str]:
    """The environment of replica `role`-`index`: the spec's env (the job's, its role's over it, placeholders
    replaced), then distrain's own variables."""
    own = distrain_env(spec, addresses, role, index, dirs)
    chosen = {**spec.get("env", {}), **spec["replicas"].get(role, {}).get("env", {})}
    placeholders = lambda m: own.get(placeholder_variable(m.group(1)), "")  # noqa: E731
    # validation refuses the names distrain sets, except its defaults (DEFAULTS), which the spec's env changes
    return {**own, **{name: PLACEHOLDER.sub(placeholders, scalar_text(value)) for name, value in chosen.items()}}


def reserved_variables(spec: dict) -> set[str]:
    """The names distrain sets in this job's replicas (besides every DISTRAIN_* name and CUDA_VISIBLE_DEVICES),
    which its env cannot set."""
    job = {key: value for key, value in spec.items() if key != "sweep"}  # a sweep's trials: jobs of its replicas
    addresses: dict[str, list[str]] = {}
    for role, index in replicas(job):
        addresses.setdefault(role, []).append(f"127.0.0.1:{index + 1}")
    dirs = Dirs(input="/input", output="/output", logdir="/output/logs", resume_from="/resume")
    return {"CUDA_VISIBLE_DEVICES"} | {name for role in addresses
                                      for name in distrain_env(job, addresses, role, 0, dirs)} - DEFAULTS


def replica_command(spec: dict, role: str, env: dict[str, str], await_pservers: str = AWAIT_PSERVERS) -> str:
    """The shell command of a replica whose environment is `env`: the spec's, placeholders rendered. A Paddle
    trainer first waits until every parameter server accepts connections (incluster/await_pservers.py, run from the
    file `await_pservers`: a pod's own copy on Kubernetes), unless gloo is on: pserver 0 then hosts gloo's store
    before it serves, until the trainers have met there."""
    command = render_command(spec)
    if (spec.get("framework") == "paddle" and role == "worker" and env.get("PADDLE_PSERVERS_IP_PORT_LIST")
            and env.get("PADDLE_WITH_GLOO") not in ("1", "2")):
        return f"python {shlex.quote(await_pservers)} || exit 1\n{command}"
    return command


def distrain_env(spec: dict, addresses: dict[str, list[str]], role: str, index: int, dirs: Dirs) -> dict[str, str]:
    """Framework variables plus DISTRAIN_*, the hyperparameters' (DISTRAIN_HP_<name>) included: the command's
    placeholders refer to these variables."""
    env = {
        **hyperparameter_env(spec),
        "PYTHONUNBUFFERED": "1",
        "TTY_COMPATIBLE": "1",
        "DISTRAIN_JOB": spec["name"],
        "DISTRAIN_ROLE": role,
        "DISTRAIN_INDEX": str(index),
        "DISTRAIN_REPLICA": replica_name(role, index),
        "DISTRAIN_CLUSTER": json.dumps(_cluster(addresses), separators=(",", ":")),
        "DISTRAIN_INPUT_DIR": dirs.input,
        "DISTRAIN_OUTPUT_DIR": dirs.output,
        "OUTPUT_DIR": dirs.output,
    }
    if dirs.logdir:
        env["DISTRAIN_LOG_DIR"] = dirs.logdir
    if dirs.resume_from:
        env["DISTRAIN_RESUME_FROM"] = dirs.resume_from
    shard, shards = shard_of(spec, role, index)
    env["DISTRAIN_SHARD_INDEX"], env["DISTRAIN_NUM_SHARDS"] = str(shard), str(shards)
    framework = spec.get("framework", "python")
    if framework in TF_FRAMEWORKS:
        env.update(tensorflow_env(spec, addresses, role, index))
    elif framework == "pytorch":
        env.update(pytorch_env(spec, addresses, role, index))
    elif framework == "paddle":
        env.update(paddle_env(spec, addresses, role, index))
    return env


def trainers(spec: dict) -> list[tuple[str, int]]:
    """Replicas that consume training data, in rank order: the chief or master, then workers."""
    return [(r, i) for r, i in replicas(spec) if r in ("chief", "master", "worker")]


def shard_of(spec: dict, role: str, index: int) -> tuple[int, int]:
    """(shard index, shard count) for this replica; non-trainers read everything (shard 0 of 1)."""
    ranks = trainers(spec)
    if (role, index) not in ranks:
        return 0, 1
    return ranks.index((role, index)), len(ranks)


def is_distributed(spec: dict) -> bool:
    """As Kubeflow decides for TF_CONFIG: more (or fewer) than exactly one replica in all."""
    return len(replicas(spec)) != 1


def tensorflow_env(spec: dict, addresses: dict[str, list[str]], role: str, index: int) -> dict[str, str]:
    if not is_distributed(spec):
        return {}
    tf_config = {
        "cluster": _cluster(addresses),
        "task": {"type": role, "index": index},
        "environment": "cloud",
    }
    return {"TF_CONFIG": json.dumps(tf_config, separators=(",", ":"))}


def pytorch_env(spec: dict, addresses: dict[str, list[str]], role: str, index: int) -> dict[str, str]:
    """torch.distributed's env:// names, and torchrun's PET_* defaults (one process per replica, as on every
    engine; `--nproc-per-node` says otherwise). The master hosts a c10d rendezvous's store: torchrun would guess
    by host name, and every local replica shares this machine's."""
    ranks = trainers(spec)
    master_role, master_index = chief(spec)
    host, port = _split(addresses[master_role][master_index])
    rank = str(ranks.index((role, index)))
    is_master = (role, index) == (master_role, master_index)
    return {
        "MASTER_ADDR": host,
        "MASTER_PORT": port,
        "WORLD_SIZE": str(len(ranks)),
        "RANK": rank,
        "PET_MASTER_ADDR": host,
        "PET_MASTER_PORT": port,
        "PET_NNODES": str(len(ranks)),
        "PET_NODE_RANK": rank,
        "PET_NPROC_PER_NODE": "1",
        "PET_RDZV_CONF": f"is_host={int(is_master)}",
        "DISTRAIN_TENSORBOARD_WITHOUT_TENSORFLOW": "1",  # REPLICA_SITE's switch
    }


def paddle_env(spec: dict, addresses: dict[str, list[str]], role: str, index: int) -> dict[str, str]:
    """Both the legacy PADDLE_INIT_* names (v1 pserver/trainer) and today's PADDLE_* names (fleet's
    PaddleCloudRoleMaker). With pservers, fleet's barriers run over gloo, whose HTTP store the first pserver
    serves on the port after its own, as Paddle's launcher arranges it."""
    pservers = addresses.get("ps", [])
    workers = addresses.get("worker", [])
    own = addresses[role][index]
    host, port = _split(own)
    env = {
        "PADDLE_INIT_PORT": port,
        "PADDLE_INIT_PORTS_NUM": "1",
        "PADDLE_INIT_PORTS_NUM_FOR_SPARSE": "1",
        "PADDLE_INIT_NUM_GRADIENT_SERVERS": str(len(workers)),
        "PADDLE_INIT_TRAINER_ID": str(index),
        "PADDLE_INIT_TRAINER_COUNT": str(len(workers)),
        "PADDLE_INIT_PSERVERS": ",".join(_split(a)[0] for a in pservers),
        "PADDLE_INIT_USE_GPU": "1" if gpus(spec, role) else "0",
        "TRAINING_ROLE": "PSERVER" if role == "ps" else "TRAINER",
        "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(pservers),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(workers),
        "PADDLE_TRAINERS_NUM": str(len(workers)),
        "PADDLE_PORT": port,
        "POD_IP": host,
        "PADDLE_CURRENT_ENDPOINT": own,
    }
    if role == "worker":
        env["PADDLE_TRAINER_ID"] = str(index)
    if pservers:  # gloo off, as Paddle's launcher starts parameter servers; where a job's env turns it on,
        store_host, store_port = _split(pservers[0])  # pserver 0 hosts its HTTP store, at the port after its own
        env.update({"PADDLE_WITH_GLOO": "0", "PADDLE_GLOO_RENDEZVOUS": "3",
                    "PADDLE_GLOO_HTTP_ENDPOINT": f"{store_host}:{int(store_port) + 1}"})
    return env


def _cluster(addresses: dict[str, list[str]]) -> dict[str, list[str]]:
    return {role: list(addresses[role]) for role in sorted(addresses) if addresses[role] and role in ROLE_ORDER}


def _split(address: str) -> tuple[str, str]:
    host, _, port = address.rpartition(":")
    return host, port
