"""Linear regression trained with PaddlePaddle's parameter servers (fleet, static graph, async).

PaddleCloudRoleMaker takes the role and the cluster from TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST,
PADDLE_TRAINER_ENDPOINTS, PADDLE_TRAINERS_NUM, PADDLE_PORT, POD_IP and PADDLE_TRAINER_ID, and the
trainers' barriers from PADDLE_WITH_GLOO and PADDLE_GLOO_*. The pservers hold the weights and apply
SGD; each trainer streams its shard of the data through exe.train_from_dataset, which pushes gradients
and pulls weights in the background. Needs a Paddle with the parameter-server runtime: the wheels up to
3.0 have it, later ones do not.
"""

import argparse
import glob
import json
import os
import socket
import sys
import tempfile
import time

import numpy as np

# Fleet's parameter servers build legacy static-graph programs, not PIR ones (Paddle 3's default).
os.environ.setdefault("FLAGS_enable_pir_api", "0")
import paddle  # noqa: E402
from paddle.distributed import fleet  # noqa: E402

FEATURES, FILES, ROWS = 8, 8, 256


def parse_args():
    output = os.environ.get("DISTRAIN_OUTPUT_DIR", "output")
    p = argparse.ArgumentParser()
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--learning_rate", type=float, default=0.01)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--data_dir", help="part-*.txt to train on; by default, data generated into <output_dir>/data")
    p.add_argument("--output_dir", default=output)
    p.add_argument("--log_dir", default=os.environ.get("DISTRAIN_LOG_DIR", os.path.join(output, "training_logs")))
    return p.parse_args()


def write_data(data_dir):
    """part-00000.txt ...: y = x.w + 1 + noise from a fixed seed, so every trainer writes the same bytes, each
    file another trainer has not written yet (so none waits for another); `data_dir`.

    One sample a line, in the MultiSlot text format Paddle's datasets read: "8 x1 .. x8 1 y".
    """
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    true_w = np.array([[0.5 * (i - FEATURES / 2)] for i in range(FEATURES)], np.float32)
    for n in range(FILES):
        x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
        y = (x @ true_w + 1.0 + 0.1 * rng.normal(size=(ROWS, 1))).astype(np.float32)
        path = os.path.join(data_dir, f"part-{n:05d}.txt")
        if not os.path.exists(path):  # written aside, then renamed: no reader sees half a file
            # a name of its own (two trainers in containers may share a PID)
            fd, tmp = tempfile.mkstemp(dir=data_dir, prefix=f"part-{n:05d}.", suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.writelines(f"{FEATURES} {' '.join(map(str, xi))} 1 {yi[0]}\n" for xi, yi in zip(x, y))
            os.replace(tmp, path)
    return data_dir


def wait_for_pservers():
    """Trainers: wait until every pserver accepts connections (Paddle 3.0 no longer waits by itself)."""
    for endpoint in fleet.server_endpoints():
        host, port = endpoint.rsplit(":", 1)
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                break
            except OSError:
                time.sleep(0.2)


def build_model(args):
    x = paddle.static.data("x", [None, FEATURES], "float32")
    y = paddle.static.data("y", [None, 1], "float32")
    prediction = paddle.static.nn.fc(
        x, 1, weight_attr=paddle.ParamAttr(name="w"), bias_attr=paddle.ParamAttr(name="b")
    )
    loss = paddle.mean(paddle.square(prediction - y))
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True  # asynchronous: trainers never wait for each other
    optimizer = fleet.distributed_optimizer(paddle.optimizer.SGD(args.learning_rate), strategy)
    optimizer.minimize(loss)
    return x, y, prediction


def my_files(paths):
    """This trainer's shard: every file whose position modulo the shard count is its index (what
    jupyter_distrain.shard.my_files does, where the image has that package)."""
    index, count = int(os.environ.get("DISTRAIN_SHARD_INDEX", 0)), int(os.environ.get("DISTRAIN_NUM_SHARDS", 1))
    return [path for i, path in enumerate(paths) if i % count == index]


def train(args, x, y, prediction):
    from tensorboard.summary import Writer

    trainer = fleet.worker_index()
    data_dir = args.data_dir or write_data(os.path.join(args.output_dir, "data"))
    files = my_files(sorted(glob.glob(os.path.join(data_dir, "part-*.txt"))))
    print(f"trainer {trainer} reads {', '.join(os.path.basename(f) for f in files)}", flush=True)
    rows = np.concatenate([np.loadtxt(f, dtype=np.float32, ndmin=2) for f in files])
    xs, ys = rows[:, 1 : 1 + FEATURES], rows[:, -1:]

    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    fleet.init_worker()  # trainer 0 pushes its initial weights to the pservers; every trainer pulls them
    dataset = paddle.distributed.QueueDataset()
    dataset.init(batch_size=args.batch_size, thread_num=1, pipe_command="cat", use_var=[x, y])
    dataset.set_filelist(files)
    writer = Writer(args.log_dir)
    scope = paddle.static.global_scope()

    def shard_loss():
        """The loss, on this trainer's shard, of the weights last pulled from the pservers."""
        w, b = (np.array(scope.find_var(name).get_tensor()) for name in ("w", "b"))
        return float(np.mean((xs @ w + b - ys) ** 2))

    # of the initial weights: after the first pass, how far they got depends on how much of the other
    # trainer's (asynchronous) updates had reached the pservers
    losses = [shard_loss()]
    for p in range(1, args.passes + 1):
        exe.train_from_dataset(paddle.static.default_main_program(), dataset)
        losses.append(shard_loss())
        writer.add_scalar("loss", losses[-1], step=p)
        writer.flush()
        print(f"pass {p}/{args.passes} loss {losses[-1]:.4f}", flush=True)
    writer.close()

    # Every trainer calls this (it holds barriers); trainer 0 pulls the weights from the pservers and saves them.
    fleet.save_inference_model(exe, os.path.join(args.output_dir, "model"), ["x"], [prediction])
    fleet.stop_worker()
    fleet.barrier_worker()  # every trainer is done with the pservers
    if trainer == 0:
        with open(os.path.join(args.output_dir, "result.json"), "w") as f:
            json.dump({"passes": args.passes, "loss": losses[-1], "initial_loss": losses[0]}, f)
        print(f"done passes {args.passes} loss {losses[-1]:.4f}", flush=True)
        # stop_worker() leaves the pservers serving; stop them, as Paddle's pslib fleet.stop_worker() does. Last:
        # an engine that ends the job with its pservers (a PaddleJob) may stop the trainers right after.
        fleet.fleet._runtime_handle._worker.stop_server()


def main():
    args = parse_args()
    if "send" not in paddle.base.core.get_all_op_names():
        sys.exit(f"paddle {paddle.__version__} has no parameter-server runtime; use paddlepaddle 2.6 or 3.0")
    paddle.enable_static()
    fleet.init(fleet.PaddleCloudRoleMaker(is_collective=False))
    if fleet.is_worker():
        wait_for_pservers()
    x, y, prediction = build_model(args)
    if fleet.is_server():
        index = fleet.server_index()
        print(f"pserver {index} serving at {fleet.server_endpoints()[index]}", flush=True)
        fleet.init_server()
        fleet.run_server()  # returns once trainer 0 stops the pservers
        print(f"pserver {index} stopped", flush=True)
    else:
        os.makedirs(args.output_dir, exist_ok=True)
        train(args, x, y, prediction)


if __name__ == "__main__":
    main()
