"""Fit y = a*x + b by gradient descent on synthetic data, with the standard library only."""

import argparse
import json
import os
import random
import time


def main():
    output = os.environ.get("DISTRAIN_OUTPUT_DIR") or os.environ.get("OUTPUT_DIR") or "output"
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--learning_rate", type=float, default=0.5)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--output_dir", default=output)
    p.add_argument("--fail_with", type=int, default=None, help="exit with this code at once")
    args = p.parse_args()
    if args.fail_with is not None:
        print(f"failing on purpose with code {args.fail_with}", flush=True)
        raise SystemExit(args.fail_with)

    rng = random.Random(0)
    xs = [rng.uniform(-1, 1) for _ in range(args.samples)]
    data = [(x, 3.0 * x + 0.5 + rng.gauss(0, 0.05)) for x in xs]  # true a=3, b=0.5

    a = b = 0.0
    start = 0
    resume = os.environ.get("DISTRAIN_RESUME_FROM")
    if resume:  # an earlier output dir, or its result.json
        path = os.path.join(resume, "result.json") if os.path.isdir(resume) else resume
        with open(path) as f:
            state = json.load(f)
        a, b, start = state["a"], state["b"], state["epoch"]
        print(f"resumed from epoch {start}", flush=True)

    last = start + args.epochs
    began = time.time()
    for epoch in range(start + 1, last + 1):
        grad_a = grad_b = loss = 0.0
        for x, y in data:
            err = a * x + b - y
            loss += err * err / len(data)
            grad_a += 2 * err * x / len(data)
            grad_b += 2 * err / len(data)
        a -= args.learning_rate * grad_a
        b -= args.learning_rate * grad_b
        print(f"epoch {epoch}/{last} loss {loss:.4f} a {a:.4f} b {b:.4f}", flush=True)

    os.makedirs(args.output_dir, exist_ok=True)
    result = {"epoch": last, "loss": loss, "a": a, "b": b,
              "seconds": round(time.time() - began, 3)}
    with open(os.path.join(args.output_dir, "result.json"), "w") as f:
        json.dump(result, f)
    print(f"done epoch {last} loss {loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
