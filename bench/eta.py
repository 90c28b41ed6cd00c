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

x = np.random.default_rng(0).random((19200, 32)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(64).repeat().prefetch(2)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(data, epochs=int(sys.argv[1]), steps_per_epoch=600)
print("trained", time.time())
"""
TRAINED = re.compile(r"trained (\d+\.\d+)")


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def errors(server: Server, name: str, epochs: int) -> tuple[float, float, float, float]:
    """Of one job, the worst and the median error of the ends foretold between 10% and 90% done, over the job's time;
    then the same of the plain guess from its start."""
    server.submit(name, f"python keras_fit.py {epochs}")
    looks = []  # (asked, fraction done, end foretold)
    while (job := server.request("GET", f"jobs/{name}"))["phase"] in ("Pending", "Running"):
        progress = next((job for job in server.request("GET", "jobs") if job["name"] == name), {}).get("progress")
        if progress and progress["ends"]:
            looks.append((time.time(), progress["fraction"], seconds(progress["ends"])))
        time.sleep(0.5)
    assert job["phase"] == "Succeeded", server.request_text(f"jobs/{name}/logs")
    started = seconds(job["started"])
    end = float(TRAINED.findall(server.request_text(f"jobs/{name}/logs"))[-1])
    steady = [(asked, done, ends) for asked, done, ends in looks if 0.1 <= done <= 0.9]
    assert len(steady) >= 5, looks
    foretold = [abs(ends - end) / (end - started) for _, _, ends in steady]
    guessed = [abs(started + (asked - started) / done - end) / (end - started) for asked, done, _ in steady]
    server.request("DELETE", f"jobs/{name}")
    return max(foretold), statistics.median(foretold), max(guessed), statistics.median(guessed)


def measure(times: int = 3, epochs: int = 10) -> list[tuple]:
    with Server() as server:
        (server.code / "keras_fit.py").write_text(KERAS)
        runs = [errors(server, f"eta-{i}", epochs) for i in range(times)]
    worst, median, worst_guess, median_guess = (statistics.median(run[i] for run in runs) for i in range(4))
    guess = "the job's time so far over the fraction done"
    print("each run's (worst, median) error of the ends foretold, then of the guess:",
          [tuple(round(e, 3) for e in run) for run in runs])
    return [
        (f"Keras fit ({epochs} epochs), worst error of an end foretold 10-90% done, over the job's time", worst,
         worst_guess, guess, worst / worst_guess, "<= 0.15"),
        ("median error of an end foretold, over the job's time", median, median_guess, guess,
         median / median_guess, "-"),
    ]


if __name__ == "__main__":
    print(table(measure(*(int(arg) for arg in sys.argv[1:3]))))
