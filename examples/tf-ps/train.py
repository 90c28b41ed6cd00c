"""Linear regression trained with tf.distribute.ParameterServerStrategy.

With TF_CONFIG (as Kubeflow sets it) the ps and worker replicas run a tf.distribute.Server
and wait; the chief coordinates training on them. Without TF_CONFIG the script trains
locally with the default strategy.
"""

import argparse
import json
import os
import signal
import sys
import time

FEATURES = 8


def parse_args():
    output = os.environ.get("DISTRAIN_OUTPUT_DIR") or os.environ.get("OUTPUT_DIR") or "output"
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--learning_rate", type=float, default=0.05)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--log_every", type=int, default=50)
    log_dir = os.environ.get("DISTRAIN_LOG_DIR") or os.path.join(output, "training_logs")
    p.add_argument("--log_dir", default=log_dir, help="TensorBoard event files")
    p.add_argument("--output_dir", default=output)
    p.add_argument("--fail_with", type=int, default=None, help="chief exits with this code at once")
    return p.parse_args()


def serve(resolver, role, index):
    """ps / worker: serve until the launcher sends SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=role, task_index=index, protocol="grpc", start=True
    )
    print(f"{role} {index} serving at {server.target}", flush=True)
    while True:  # a Python loop (not server.join()) so the SIGTERM handler can run
        time.sleep(1)


def synthetic_dataset(batch_size):
    """An endless stream of (x, y) with y = x.w + b + noise; every worker draws its own samples."""
    true_w = tf.constant([[0.5 * (i - FEATURES / 2)] for i in range(FEATURES)])

    def batch(_):
        x = tf.random.normal([batch_size, FEATURES])
        y = tf.matmul(x, true_w) + 1.0 + 0.1 * tf.random.normal([batch_size, 1])
        return x, y

    return tf.data.Dataset.range(1).repeat().map(batch).prefetch(2)


def write_scalar(tag, value, step):
    """A TensorBoard scalar, written without the tensorboard package (unlike tf.summary.scalar)."""
    metadata = tf.compat.v1.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(tag, tf.constant(value, tf.float32), step=step, metadata=metadata)


def find_checkpoint(path):
    """The latest checkpoint in an output dir, its checkpoints/ subdir, or a checkpoint prefix."""
    for candidate in (os.path.join(path, "checkpoints"), path):
        if os.path.isdir(candidate) and tf.train.latest_checkpoint(candidate):
            return tf.train.latest_checkpoint(candidate)
    if os.path.exists(path + ".index"):
        return path
    return None


def train(args, resolver):
    if resolver is None:
        strategy, coordinator = tf.distribute.get_strategy(), None
    else:
        strategy = tf.distribute.ParameterServerStrategy(resolver)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(1)])
        optimizer = tf.keras.optimizers.SGD(args.learning_rate)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    manager = tf.train.CheckpointManager(
        checkpoint, os.path.join(args.output_dir, "checkpoints"), max_to_keep=3
    )
    resume = os.environ.get("DISTRAIN_RESUME_FROM")
    if resume:
        path = find_checkpoint(resume)
        if path is None:
            sys.exit(f"no checkpoint found in {resume}")
        checkpoint.restore(path).expect_partial()
        print(f"resumed from step {int(step.numpy())}", flush=True)
    start = int(step.numpy())
    last = start + args.steps

    @tf.function
    def train_step(iterator):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            step.assign_add(1)
            return loss

        x, y = next(iterator)
        return strategy.reduce("MEAN", strategy.run(replica_fn, args=(x, y)), axis=None)

    if coordinator is None:
        iterator = iter(synthetic_dataset(args.batch_size))
        run_step = lambda: train_step(iterator)  # noqa: E731
        fetch = float
    else:
        iterator = iter(
            coordinator.create_per_worker_dataset(lambda: synthetic_dataset(args.batch_size))
        )
        run_step = lambda: coordinator.schedule(train_step, args=(iterator,))  # noqa: E731
        fetch = lambda value: value.fetch()  # noqa: E731

    writer = tf.summary.create_file_writer(args.log_dir)
    began = time.time()
    loss = float("nan")
    for i in range(start + 1, last + 1):
        result = run_step()
        if i % args.log_every == 0 or i == last:
            if coordinator is not None:
                coordinator.join()  # wait for every scheduled step, so `step` is exact
            loss = float(fetch(result))
            with writer.as_default():
                write_scalar("loss", loss, i)
            writer.flush()
            manager.save(checkpoint_number=i)
            print(f"step {i}/{last} loss {loss:.4f}", flush=True)  # once it is in the events and checkpoint

    writer.close()
    result = {"step": int(step.numpy()), "loss": loss, "seconds": round(time.time() - began, 2)}
    with open(os.path.join(args.output_dir, "result.json"), "w") as f:
        json.dump(result, f)
    print(f"done step {result['step']} loss {loss:.4f}", flush=True)


def main():
    args = parse_args()
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = tf_config.get("task", {})
    role, index = task.get("type", "chief"), int(task.get("index", 0))

    if args.fail_with is not None and role in ("chief", "master"):
        print(f"failing on purpose with code {args.fail_with}", flush=True)
        sys.exit(args.fail_with)

    global tf  # imported only now, so that --fail_with fails fast
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    resolver = None
    if tf_config.get("cluster"):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        if role in ("ps", "worker"):
            serve(resolver, role, index)
        elif role == "evaluator":
            print("evaluator: nothing to do in this example", flush=True)
            return

    os.makedirs(args.output_dir, exist_ok=True)
    train(args, resolver)
    # The coordinator's threads can keep the interpreter from exiting; leave at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
