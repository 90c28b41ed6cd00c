"""When a local job will be done, as `distrain list` foretells it from what the code prints (Keras `fit`'s progress,
no change to the code), against the real end: for each look between 10% and 90% done, the error of the end
foretold over the job's time. Beside it, in the same runs, the plain guess from the job's own start (its time so far
over the fraction done), which counts its start (the interpreter, TensorFlow's import, the first epoch's tracing).
Run: python bench/eta.py [times] [epochs]
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from datetime import datetime

from harness import Server, table

KERAS = """import sys, time
import numpy as np
import keras
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)  # a steady pace beside the server and the looks, on 2 CPUs

x = np.random.default_rng(0).random((19200, 32)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(64).repeat().prefetch(2)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
last_step = keras.callbacks.LambdaCallback(on_train_end=lambda logs: print("last step", time.time()))
model.fit(data, epochs=int(sys.argv[1]), steps_per_epoch=1200, callbacks=[last_step])
print("trained", time.time())
"""
TRAINED = re.compile(r"trained (\d+\.\d+)")
LAST_STEP = re.compile(r"last step (\d+\.\d+)")


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def errors(server: Server, name: str, epochs: int) -> tuple[float, ...]:
    """Of one job, the worst and the median error of the ends foretold between 10% and 90% done, over the job's time;
    then the same of the plain guess from its start; the worst of each from 20% done; and how long `fit` took to
    return after its last step, over the job's time (no line foretells it)."""
    server.submit(name, f"python keras_fit.py {epochs}")
    looks = []  # (asked, fraction done, end foretold)
    while (job := server.request("GET", f"jobs/{name}"))["phase"] in ("Pending", "Running"):
        progress = next((job for job in server.request("GET", "jobs") if job["name"] == name), {}).get("progress")
        if progress and progress["ends"]:
            looks.append((time.time(), progress["fraction"], seconds(progress["ends"])))
        time.sleep(0.5)
    assert job["phase"] == "Succeeded", server.request_text(f"jobs/{name}/logs")
    started = seconds(job["started"])
    logs = server.request_text(f"jobs/{name}/logs")
    end, last_step = float(TRAINED.findall(logs)[-1]), float(LAST_STEP.findall(logs)[-1])
    steady = [(asked, done, ends) for asked, done, ends in looks if 0.1 <= done <= 0.9]
    assert len(steady) >= 5, looks
    foretold = [abs(ends - end) / (end - started) for _, _, ends in steady]
    guessed = [abs(started + (asked - started) / done - end) / (end - started) for asked, done, _ in steady]
    later = [(e, g) for (_, done, _), e, g in zip(steady, foretold, guessed) if done >= 0.2]
    server.request("DELETE", f"jobs/{name}")
    return (max(foretold), statistics.median(foretold), max(guessed), statistics.median(guessed),
            max(e for e, _ in later), max(g for _, g in later), (end - last_step) / (end - started))


def measure(times: int = 3, epochs: int = 10) -> list[tuple]:
    with Server() as server:
        (server.code / "keras_fit.py").write_text(KERAS)
        runs = [errors(server, f"eta-{i}", epochs) for i in range(times)]
    worst, median, worst_guess, median_guess, later, later_guess = (statistics.median(run[i] for run in runs)
                                                                     for i in range(6))
    guess = "the job's time so far over the fraction done"
    print("each run's (worst, median) error of the ends foretold, then of the guess; the worst of each from 20% done; "
          "fit's return after its last step:", [tuple(round(e, 3) for e in run) for run in runs])
    return [
        (f"Keras fit ({epochs} epochs), worst error of an end foretold 10-90% done, over the job's time", worst,
         worst_guess, guess, worst / worst_guess, "<= 0.15"),
        ("median error of an end foretold, over the job's time", median, median_guess, guess,
         median / median_guess, "-"),
        ("worst error of an end foretold 20-90% done (the first epoch seen whole)", later, later_guess, guess,
         later / later_guess, "-"),
    ]


if __name__ == "__main__":
    print(table(measure(*(int(arg) for arg in sys.argv[1:3]))))
