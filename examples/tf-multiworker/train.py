"""Keras `fit` under tf.distribute.MultiWorkerMirroredStrategy, with a side-car evaluator.

Every worker holds a copy of the model and trains on its share of each global batch; gradients are
all-reduced, so there is no chief and no parameter server. Worker 0 (the chief, as TF decides without one)
writes the checkpoints, the TensorBoard scalars and result.json. The evaluator trains nothing: it
evaluates each new checkpoint on held-out data, and ends once worker 0 says training is done and the last
checkpoint is evaluated. Without TF_CONFIG the script trains alone.
"""

import argparse
import json
import os
import re
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402  Keras 2 (requirements.txt): Keras 3's fit fails here with several workers

FEATURES = 8


def parse_args():
    output = os.environ.get("DISTRAIN_OUTPUT_DIR") or os.environ.get("OUTPUT_DIR") or "output"
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--steps_per_epoch", type=int, default=20)
    p.add_argument("--learning_rate", type=float, default=0.05)
    p.add_argument("--batch_size", type=int, default=16, help="per worker")
    log_dir = os.environ.get("DISTRAIN_LOG_DIR") or os.path.join(output, "training_logs")
    p.add_argument("--log_dir", default=log_dir, help="TensorBoard event files")
    p.add_argument("--output_dir", default=output)
    return p.parse_args()


def samples(count, seed):
    """(x, y) with y = x.w + 1 + noise: the same function for training (seed 0) and evaluation (seed 1)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count, FEATURES)).astype("float32")
    w = np.linspace(-2, 2, FEATURES, dtype="float32")[:, None]
    return x, x @ w + 1 + 0.1 * rng.normal(size=(count, 1)).astype("float32")


def make_model(learning_rate):
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss="mse")
    return model


class Checkpoints(keras.callbacks.Callback):
    """The weights after each epoch, renamed into place so the evaluator never reads half a file."""

    def __init__(self, directory, chief):
        super().__init__()
        self.directory, self.chief = directory, chief

    def on_epoch_end(self, epoch, logs=None):
        partial = os.path.join(self.directory, f".epoch-{epoch + 1}.weights.h5")
        self.model.save_weights(partial)
        os.replace(partial, os.path.join(self.directory, f"epoch-{epoch + 1}.weights.h5"))
        if self.chief:
            print(f"epoch {epoch + 1} loss {logs['loss']:.4f}", flush=True)


def train(args, task_index):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    print(f"worker {task_index} of {workers} in sync", flush=True)
    x, y = samples(2048, seed=0)
    # the global batch is every worker's batch; fit gives each worker its share (auto-sharding by data)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(2048, seed=0).batch(args.batch_size * workers)
    with strategy.scope():
        model = make_model(args.learning_rate)
    chief = task_index == 0
    # Saving takes part in collectives, so every worker saves: worker 0 where it is kept, the others in
    # scratch directories they delete.
    with tempfile.TemporaryDirectory() as scratch:
        checkpoints = os.path.join(args.output_dir, "checkpoints") if chief else scratch
        os.makedirs(checkpoints, exist_ok=True)
        callbacks = [Checkpoints(checkpoints, chief),
                     keras.callbacks.TensorBoard(args.log_dir if chief else scratch, update_freq="epoch")]
        began = time.time()
        history = model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks,
                            verbose=0)
    loss = history.history["loss"]
    if chief:
        result = {"epochs": args.epochs, "first_loss": loss[0], "loss": loss[-1],
                  "seconds": round(time.time() - began, 2)}
        with open(os.path.join(args.output_dir, "result.json"), "w") as f:
            json.dump(result, f)
        print(f"done epoch {args.epochs} loss {loss[-1]:.4f}", flush=True)


def evaluate(args):
    """Evaluate each new checkpoint of worker 0 until its result.json appears and the last one is done."""
    checkpoints = os.path.join(args.output_dir, "checkpoints")
    model = make_model(args.learning_rate)
    x, y = samples(512, seed=1)
    writer = tf.summary.create_file_writer(args.log_dir)
    evaluated = 0
    while True:
        done = os.path.exists(os.path.join(args.output_dir, "result.json"))  # looked at before the checkpoints
        epochs = [int(m[1]) for name in (os.listdir(checkpoints) if os.path.isdir(checkpoints) else [])
                  if (m := re.fullmatch(r"epoch-(\d+)\.weights\.h5", name))]
        latest = max(epochs, default=0)
        if latest > evaluated:
            model.load_weights(os.path.join(checkpoints, f"epoch-{latest}.weights.h5"))
            loss = model.evaluate(x, y, verbose=0)
            with writer.as_default():
                tf.summary.scalar("eval_loss", loss, step=latest)
            writer.flush()
            print(f"evaluated epoch {latest}: loss {loss:.4f}", flush=True)
            evaluated = latest
        elif done:
            break
        else:
            time.sleep(0.5)
    with open(os.path.join(args.output_dir, "evaluation.json"), "w") as f:
        json.dump({"epoch": evaluated, "loss": loss}, f)
    print(f"evaluator done after epoch {evaluated}", flush=True)


def main():
    args = parse_args()
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    os.makedirs(args.output_dir, exist_ok=True)
    if task.get("type") == "evaluator":
        evaluate(args)
    else:
        train(args, int(task.get("index", 0)))


if __name__ == "__main__":
    main()
