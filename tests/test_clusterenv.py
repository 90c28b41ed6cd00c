"""Golden tests of the cluster environments: exact strings, as Kubeflow's training-operator shapes them."""

import json
import os
import re
import socket
import subprocess
import sys

import pytest
from controlplane.cluster import kubelet_expanded

from jupyter_distrain import incluster
from jupyter_distrain import spec as spec_
from jupyter_distrain.backends.kubernetes import naming, podspec, render
from jupyter_distrain.clusterenv import AWAIT_PSERVERS, REPLICA_SITE, Dirs, replica_command, replica_env
from jupyter_distrain.config import Distrain

DIRS = Dirs(input="/input", output="/output", logdir="/output/training_logs")


def svc(job, role, i, port):
    return f"{job}-{role}-{i}.team.svc:{port}"


def addresses(spec, port):
    out = {}
    for role, i in spec_.replicas(spec):
        out.setdefault(role, []).append(svc(spec["name"], role, i, port))
    return out


def make(raw):
    return spec_.validate({"command": "python train.py", **raw})


def test_tf_config_golden():
    spec = make({"name": "mnist", "framework": "tensorflow",
                 "replicas": {"chief": {}, "ps": {"count": 2}, "worker": {"count": 2}, "evaluator": {}}})
    env = replica_env(spec, addresses(spec, 2222), "worker", 1, DIRS)
    assert env["TF_CONFIG"] == (
        '{"cluster":{"chief":["mnist-chief-0.team.svc:2222"],'
        '"evaluator":["mnist-evaluator-0.team.svc:2222"],'
        '"ps":["mnist-ps-0.team.svc:2222","mnist-ps-1.team.svc:2222"],'
        '"worker":["mnist-worker-0.team.svc:2222","mnist-worker-1.team.svc:2222"]},'
        '"task":{"type":"worker","index":1},"environment":"cloud"}'
    )
    chief = json.loads(replica_env(spec, addresses(spec, 2222), "chief", 0, DIRS)["TF_CONFIG"])
    assert chief["task"] == {"type": "chief", "index": 0}
    assert env["DISTRAIN_ROLE"] == "worker" and env["DISTRAIN_INDEX"] == "1" and env["DISTRAIN_REPLICA"] == "worker-1"
    assert env["PYTHONUNBUFFERED"] == "1" and env["TTY_COMPATIBLE"] == "1"  # Rich draws its bars into the log
    plain = {**spec, "env": {"TTY_COMPATIBLE": 0}}  # ...unless the job says not to
    assert replica_env(plain, addresses(plain, 2222), "worker", 1, DIRS)["TTY_COMPATIBLE"] == "0"
    assert env["OUTPUT_DIR"] == env["DISTRAIN_OUTPUT_DIR"] == "/output"
    assert env["DISTRAIN_INPUT_DIR"] == "/input"
    assert env["DISTRAIN_LOG_DIR"] == "/output/training_logs"
    # trainers are the chief then the workers: worker 1 reads shard 2 of 3
    assert (env["DISTRAIN_SHARD_INDEX"], env["DISTRAIN_NUM_SHARDS"]) == ("2", "3")
    ps = replica_env(spec, addresses(spec, 2222), "ps", 1, DIRS)
    assert (ps["DISTRAIN_SHARD_INDEX"], ps["DISTRAIN_NUM_SHARDS"]) == ("0", "1")


def test_tf_config_only_for_distributed_jobs():
    single = make({"name": "one", "framework": "keras", "replicas": {"worker": {"count": 1}}})
    assert "TF_CONFIG" not in replica_env(single, addresses(single, 2222), "worker", 0, DIRS)
    two = make({"name": "two", "framework": "keras", "replicas": {"worker": {"count": 2}}})
    env = replica_env(two, addresses(two, 2222), "worker", 0, DIRS)
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["two-worker-0.team.svc:2222", "two-worker-1.team.svc:2222"]},
        "task": {"type": "worker", "index": 0}, "environment": "cloud"}


def test_pytorch_env_golden():
    spec = make({"name": "ddp", "framework": "pytorch", "replicas": {"master": {}, "worker": {"count": 3}}})
    envs = {f"{r}-{i}": replica_env(spec, addresses(spec, 23456), r, i, DIRS) for r, i in spec_.replicas(spec)}
    keys = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE")
    assert {k: envs["worker-2"][k] for k in keys} == {
        "MASTER_ADDR": "ddp-master-0.team.svc", "MASTER_PORT": "23456", "WORLD_SIZE": "4", "RANK": "3",
        "PET_NNODES": "4", "PET_NODE_RANK": "3", "PET_NPROC_PER_NODE": "1"}
    assert [envs[n]["RANK"] for n in ("master-0", "worker-0", "worker-1", "worker-2")] == ["0", "1", "2", "3"]
    # torchrun's c10d rendezvous: the master hosts its store, whatever the host names say
    assert [envs[n]["PET_RDZV_CONF"] for n in ("master-0", "worker-0")] == ["is_host=1", "is_host=0"]
    assert "TF_CONFIG" not in envs["master-0"]


def test_pytorch_without_master_worker_zero_is_rank_zero():
    spec = make({"name": "nomaster", "framework": "pytorch", "replicas": {"worker": {"count": 2}}})
    env = replica_env(spec, addresses(spec, 23456), "worker", 1, DIRS)
    assert (env["MASTER_ADDR"], env["RANK"], env["WORLD_SIZE"]) == ("nomaster-worker-0.team.svc", "1", "2")


def test_paddle_env_golden():
    spec = make({"name": "pd", "framework": "paddle",
                 "replicas": {"ps": {"count": 2}, "worker": {"count": 3, "resources": {"gpus": 1}}}})
    trainer = replica_env(spec, addresses(spec, 6174), "worker", 2, DIRS)
    assert {k: v for k, v in trainer.items() if k.startswith("PADDLE_INIT_")} == {
        "PADDLE_INIT_PORT": "6174",
        "PADDLE_INIT_PORTS_NUM": "1",
        "PADDLE_INIT_PORTS_NUM_FOR_SPARSE": "1",
        "PADDLE_INIT_NUM_GRADIENT_SERVERS": "3",
        "PADDLE_INIT_TRAINER_ID": "2",
        "PADDLE_INIT_TRAINER_COUNT": "3",
        "PADDLE_INIT_PSERVERS": "pd-ps-0.team.svc,pd-ps-1.team.svc",
        "PADDLE_INIT_USE_GPU": "1",
    }
    assert trainer["TRAINING_ROLE"] == "TRAINER"
    assert trainer["PADDLE_TRAINER_ID"] == "2" and trainer["PADDLE_TRAINERS_NUM"] == "3"
    assert trainer["PADDLE_PSERVERS_IP_PORT_LIST"] == "pd-ps-0.team.svc:6174,pd-ps-1.team.svc:6174"
    assert trainer["PADDLE_CURRENT_ENDPOINT"] == "pd-worker-2.team.svc:6174"
    pserver = replica_env(spec, addresses(spec, 6174), "ps", 1, DIRS)
    assert pserver["TRAINING_ROLE"] == "PSERVER" and "PADDLE_TRAINER_ID" not in pserver
    assert pserver["PADDLE_INIT_USE_GPU"] == "0"
    # gloo off, as Paddle's launcher has it; where the job's env turns it on, its HTTP store is on the first pserver,
    # the port after its own
    for env in (trainer, pserver):
        assert {k: env[k] for k in ("PADDLE_WITH_GLOO", "PADDLE_GLOO_RENDEZVOUS", "PADDLE_GLOO_HTTP_ENDPOINT")} == {
            "PADDLE_WITH_GLOO": "0", "PADDLE_GLOO_RENDEZVOUS": "3", "PADDLE_GLOO_HTTP_ENDPOINT": "pd-ps-0.team.svc:6175"}
    gloo = make({**spec, "env": {"PADDLE_WITH_GLOO": 1}})
    gloo_trainer = replica_env(gloo, addresses(gloo, 6174), "worker", 0, DIRS)
    assert gloo_trainer["PADDLE_WITH_GLOO"] == "1"
    # a trainer's command waits for the pservers first, except with gloo on (pserver 0 serves its store first)
    assert replica_command(spec, "worker", trainer) == f"python {AWAIT_PSERVERS} || exit 1\npython train.py"
    assert replica_command(spec, "worker", trainer, "/opt/distrain/await_pservers") == (
        "python /opt/distrain/await_pservers || exit 1\npython train.py")  # a pod's copy
    assert replica_command(spec, "ps", pserver) == replica_command(gloo, "worker", gloo_trainer) == "python train.py"
    collective = make({"name": "pd", "framework": "paddle", "replicas": {"worker": {"count": 2}}})
    assert "PADDLE_WITH_GLOO" not in replica_env(collective, addresses(collective, 6174), "worker", 0, DIRS)


def test_a_trainer_waits_for_its_parameter_servers_and_gives_up_naming_those_it_did_not_reach():
    listening, closed = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
    up, down = (f"127.0.0.1:{s.getsockname()[1]}" for s in (listening, closed))
    closed.close()
    with listening:
        waits = lambda servers: subprocess.run(  # noqa: E731
            [sys.executable, AWAIT_PSERVERS], capture_output=True, text=True, timeout=30,
            env={**os.environ, "PADDLE_PSERVERS_IP_PORT_LIST": servers, "DISTRAIN_PSERVERS_WAIT_SECONDS": "1"})
        assert waits(up).returncode == 0
        gave_up = waits(f"{up},{down}")
    assert gave_up.returncode == 1
    assert gave_up.stderr == f"the parameter servers at {down} did not accept connections within 1 s: see their logs\n"


def test_every_framework_gets_the_common_variables():
    for framework, roles in spec_.roles_by_framework().items():
        spec = make({"name": "x", "framework": framework, "replicas": {roles[-1]: {"count": 1}}})
        env = replica_env(spec, addresses(spec, 1), roles[-1], 0, Dirs("/input", "/output", resume_from="/ckpt"))
        assert env["DISTRAIN_RESUME_FROM"] == "/ckpt"
        assert json.loads(env["DISTRAIN_CLUSTER"]) == {roles[-1]: ["x-" + roles[-1] + "-0.team.svc:1"]}
        assert {"PYTHONUNBUFFERED", "DISTRAIN_JOB", "OUTPUT_DIR", "DISTRAIN_SHARD_INDEX"} <= env.keys()


def test_the_specs_env_reaches_its_replicas_under_distrains_own_variables():
    """The job's env, its role's over it, placeholders replaced by the replica's values; what distrain sets is
    refused by name (DISTRAIN_*, the framework's, CUDA_VISIBLE_DEVICES), in the job's env and a role's."""
    spec = make({"name": "mnist", "framework": "pytorch", "hyperparameters": {"lr": 0.1, "legacy": True},
                 "env": {"LR_NOTE": "lr={{ lr }} at {{ role }}", "TF_USE_LEGACY_KERAS": 1, "FLAG": "{{legacy}}"},
                 "replicas": {"master": {}, "worker": {"count": 2, "env": {"LR_NOTE": "worker {{ index }}"}}}})
    master = replica_env(spec, addresses(spec, 23456), "master", 0, DIRS)
    worker = replica_env(spec, addresses(spec, 23456), "worker", 1, DIRS)
    assert (master["LR_NOTE"], master["TF_USE_LEGACY_KERAS"], master["FLAG"]) == ("lr=0.1 at master", "1", "true")
    assert (worker["LR_NOTE"], worker["TF_USE_LEGACY_KERAS"], worker["RANK"]) == ("worker 1", "1", "2")

    with pytest.raises(spec_.SpecError) as refused:
        make({"name": "mnist", "framework": "pytorch", "env": {"RANK": "0", "DISTRAIN_JOB": "x", "OK": "{{ lrr }}"},
              "replicas": {"worker": {"count": 2, "env": {"CUDA_VISIBLE_DEVICES": "1", "MASTER_PORT": "1"}}}})
    assert sorted(e.path for e in refused.value.errors) == [
        "env.DISTRAIN_JOB", "env.OK", "env.RANK", "replicas.worker.env.CUDA_VISIBLE_DEVICES",
        "replicas.worker.env.MASTER_PORT"]
    assert "RANK is set by distrain in this job's replicas" in str(refused.value)
    assert "unknown placeholder {{ lrr }}; known: index, input, job, logdir, output, role" in str(refused.value)
    # a variable of another framework's is the user's to set
    assert make({"name": "plain", "env": {"TF_CONFIG": "{}"}})["env"] == {"TF_CONFIG": "{}"}


def mount(volume: dict, directory):
    """The files of the programs' ConfigMap (render.programs) as the pod's `volume` of it lays them out under
    `directory`, with its mode."""
    for item in volume["configMap"]["items"]:
        path = directory / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(podspec.PROGRAM_FILES[item["key"]])
        path.chmod(volume["configMap"]["defaultMode"])


def test_a_pod_starts_python_with_the_replica_site_first(tmp_path):
    """On Kubernetes the pod mounts clusterenv.REPLICA_SITE's sitecustomize.py from the programs' ConfigMap, and its
    command puts it first on PYTHONPATH, before the image's own (locally the supervisor does, as test_examples'
    PyTorch jobs show): for every framework, since it lets a replica's stacks be taken; a PyTorch job's variables turn
    its TensorBoard switch on."""
    def pod(framework):
        spec = spec_.validate({"name": "x", "framework": framework, "command": "python train.py"})
        return next(o for o in render.render(spec, Distrain(namespace="team"), "pods") if o["kind"] == "Pod")["spec"]

    def started(framework):
        container = pod(framework)["containers"][0]
        script = kubelet_expanded(container["command"][-1], {}).removeprefix(podspec.INSTALL + "\n")
        assert script.startswith(podspec.SITE_SETUP + "\n")
        mount(next(v for v in pod(framework)["volumes"] if v["name"] == podspec.PROGRAMS_VOLUME), tmp_path)
        setup = podspec.SITE_SETUP.replace(podspec.PROGRAMS_DIR, str(tmp_path))
        switch = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("DISTRAIN_TENSORB")}
        first_finder = "import sys; print(type(sys.meta_path[0]).__name__)"
        return subprocess.run(["sh", "-c", f'{setup} && echo "$PYTHONPATH" && exec "$0" -c "$1"', sys.executable,
                               first_finder], env={"PATH": os.environ["PATH"], "PYTHONPATH": "/image", **switch},
                              capture_output=True, text=True, check=True).stdout.split()

    assert started("pytorch") == [f"{tmp_path}/python:/image", "TensorBoardWithoutTensorFlow"]
    assert started("tensorflow")[0] == f"{tmp_path}/python:/image"
    assert started("tensorflow")[1] != "TensorBoardWithoutTensorFlow"


def test_kubernetes_hands_every_container_the_strings_it_was_rendered_with():
    """Kubernetes expands $(VAR) in a container's command, args and env values; locally env values are literal.
    Every container the product renders has each $ there escaped as $$, so a replica's env and command are the
    spec's, as on the local backend (the command's shell expands $VAR on both)."""
    spec = make({"name": "x", "framework": "tensorflow", "command": 'echo "$(DISTRAIN_CLUSTER)" $$ $HOME',
                 "env": {"K": "$(DISTRAIN_CLUSTER)", "PRICE": "$$5"}, "tensorboard": {"enabled": True},
                 "code": {"git": "https://example.com/m.git", "commit": "0" * 40, "credentials": "login"},
                 "replicas": {"chief": {}, "worker": {"count": 2}}})
    settings = Distrain(namespace="team", controller_image="registry.example.com/notebook:1",
                        pod_security="restricted")
    head = render.root(spec, settings, "pods")
    objects = [*render.render(spec, settings, "pods"), *render.render(spec, settings, "jobset"),
               *render.render(spec, settings, "kubeflow"), render.log_reader(spec, settings, head, "s3cret"),
               render.purger(spec, settings, head), *render.janitor(settings),
               *render.render(make({"name": "hp", "sweep": {"parameters": {"lr": {"values": [0.1]}}}}), settings,
                              "sweep")]

    def containers(value):
        if isinstance(value, dict):
            yield from (c for key in ("containers", "initContainers") for c in value.get(key, []))
            yield from (c for v in value.values() for c in containers(v))
        elif isinstance(value, list):
            yield from (c for v in value for c in containers(v))

    found = list(containers(objects))
    assert {c["name"] for c in found} == {"main", "tensorflow", "fetch-code", "stack-tools", "tensorboard",
                                          "monitor", "reader", "purge", "janitor", "sweeper"}
    for c in found:
        values = [e["value"] for e in c.get("env", []) if "value" in e]
        for text in [*c.get("command", []), *c.get("args", []), *values]:
            assert re.fullmatch(r"([^$]|\$\$)*", text), (c["name"], text)
    pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "x-worker-1")
    main = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in main["env"] if "value" in e}
    assert (env["K"], env["PRICE"]) == ("$$(DISTRAIN_CLUSTER)", "$$$$5")
    assert 'echo "$$(DISTRAIN_CLUSTER)" $$$$ $$HOME' in main["command"][-1]
    # what the container gets, once the kubelet has expanded them
    assert (kubelet_expanded(env["K"], env), kubelet_expanded(env["PRICE"], env)) == ("$(DISTRAIN_CLUSTER)", "$$5")
    assert 'echo "$(DISTRAIN_CLUSTER)" $$ $HOME' in kubelet_expanded(main["command"][-1], env)


def pod_specs(value):
    """Every pod spec (or pod template's spec) in `value`, a list of rendered objects."""
    if isinstance(value, dict):
        yield from [value] if "containers" in value else []
        yield from (s for v in value.values() for s in pod_specs(v))
    elif isinstance(value, list):
        yield from (s for v in value for s in pod_specs(v))


def test_a_pods_command_runs_the_products_programs_from_files_it_mounts_not_from_its_manifest():
    """Issue 58: the programs the product runs in a pod (the log tee, the installer, the replicas' sitecustomize.py, a
    Paddle trainer's wait, the TensorBoard, the log reader, the purger) are no text of a container's command, which
    reads like the user's (`ps`, `kubectl describe pod`), on every engine: they are files of the namespace's ConfigMap
    of programs, which every pod that runs one mounts read-only at /opt/distrain."""
    settings = Distrain(namespace="team", controller_image="registry.example.com/notebook:1", pod_security="restricted")
    tf = make({"name": "tf", "framework": "tensorflow", "tensorboard": {"enabled": True},
               "code": {"git": "https://example.com/m.git", "commit": "0" * 40},
               "replicas": {"chief": {}, "ps": {}, "worker": {"count": 2}}})
    paddle = make({"name": "pd", "framework": "paddle", "replicas": {"ps": {"count": 2}, "worker": {"count": 2}},
                   "policy": {"success": "all-workers"}})
    sweep = make({"name": "hp", "tensorboard": {"enabled": True}, "sweep": {"parameters": {"lr": {"values": [0.1]}}}})
    head = render.root(tf, settings, "pods")
    objects = [*(o for spec in (tf, paddle) for engine in ("pods", "jobset", "kubeflow")
                 for o in render.render(spec, settings, engine)),
               render.log_reader(tf, settings, head, "s3cret"), render.purger(tf, settings, head),
               *render.janitor(settings), *render.render(sweep, settings, "sweep")]
    specs = list(pod_specs(objects))
    for pod in specs:
        for c in [*pod["containers"], *pod.get("initContainers", [])]:
            for text in [*c.get("command", []), *c.get("args", [])]:
                assert len(text) <= 1000 and "import " not in text, (c["name"], len(text), text[:200])

    programs = render.programs(settings)
    assert [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == programs[
        "metadata"]["name"]][0] == programs  # `distrain render` shows it, beside each job's objects
    name, files = programs["metadata"]["name"], programs["data"]
    assert re.fullmatch(r"distrain-programs-[0-9a-f]{10}", name) and programs["immutable"]
    assert naming.JOB not in programs["metadata"]["labels"]  # not listed as a job: no job's ConfigMap
    assert not set(naming.MANAGED.items()) & set(programs["metadata"]["labels"].items())
    ran = set()
    for pod in specs:
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for c in pod["containers"]:
            named = {m for text in c.get("command", []) for m in re.findall(r"/opt/distrain/[\w./]+", text)}
            if not named:
                continue
            mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/opt/distrain")
            volume = volumes[mount["name"]]["configMap"]
            assert mount["readOnly"] and volume["name"] == name and volume["defaultMode"] == 0o444
            paths = {f"/opt/distrain/{item['path']}": item["key"] for item in volume["items"]}
            assert set(paths.values()) <= files.keys()
            for path in named:  # a program's file, or a directory of them (the sitecustomize.py's, on PYTHONPATH)
                keys = {key for file, key in paths.items() if file == path or file.startswith(f"{path}/")}
                assert keys, (c["name"], path)
                ran |= keys
    assert ran == {*incluster.PROGRAMS, "sitecustomize.py"}
    assert {key: files[key] for key in incluster.PROGRAMS} == {key: incluster.source(key) for key in incluster.PROGRAMS}
    assert files["sitecustomize.py"] == (REPLICA_SITE / "sitecustomize.py").read_text()


def test_shard_helper(monkeypatch):
    from jupyter_distrain import shard

    files = [f"/input/part-{i:05d}" for i in range(7)] + ["/input/extra.csv", "/input/more.csv"]
    picked = []
    for index in range(3):
        monkeypatch.setenv("DISTRAIN_SHARD_INDEX", str(index))
        monkeypatch.setenv("DISTRAIN_NUM_SHARDS", "3")
        picked.append(shard.my_files(files))
        assert shard.my_items(list(range(7))) == list(range(index, 7, 3))
    assert picked[1] == ["/input/part-00001", "/input/part-00004", "/input/more.csv"]
    assert sorted(sum(picked, [])) == sorted(files)  # every file exactly once
    monkeypatch.delenv("DISTRAIN_SHARD_INDEX")
    monkeypatch.delenv("DISTRAIN_NUM_SHARDS")
    assert shard.my_files(files) == files[:7] + files[7:]
