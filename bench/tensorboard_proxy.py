"""TensorBoard through the extension's proxy versus direct to the same TensorBoard, same run.

A real job writes scalars with TensorFlow; then the same requests (TensorBoard's scalar data)
go to the TensorBoard's own port and through <base_url>/distrain/tensorboard/..., in
alternating rounds, with the same concurrency. Run: python bench/tensorboard_proxy.py [requests]
"""

import asyncio
import statistics
import sys
import time

import psutil
from harness import HEADERS, Server
from tornado.httpclient import AsyncHTTPClient

WRITE = """
import os, tensorflow as tf
writer = tf.summary.create_file_writer(os.environ["DISTRAIN_LOG_DIR"])
with writer.as_default():
    for step in range(1000):
        tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
writer.close()
"""
PATH = "/data/plugin/scalars/scalars?run=.&tag=loss"
CONCURRENCY = 4


async def load(url: str, requests: int) -> tuple[float, list[float]]:
    """(requests per second, latencies in ms) for `requests` GETs, CONCURRENCY at a time."""
    client = AsyncHTTPClient(force_instance=True, max_clients=CONCURRENCY)
    latencies: list[float] = []

    async def one() -> None:
        began = time.monotonic()
        response = await client.fetch(url, headers=HEADERS)
        assert response.code == 200 and response.body.startswith(b"[[")
        latencies.append((time.monotonic() - began) * 1000)

    began = time.monotonic()
    for start in range(0, requests, CONCURRENCY):
        await asyncio.gather(*(one() for _ in range(min(CONCURRENCY, requests - start))))
    elapsed = time.monotonic() - began
    client.close()
    return requests / elapsed, latencies


def tensorboard_port(root) -> int:
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "tensorboard.main" in cmdline and str(root) in " ".join(cmdline):
            return int(cmdline[cmdline.index("--port") + 1])
    raise RuntimeError("no TensorBoard running")


async def main(requests: int) -> None:
    with Server() as server:
        (server.code / "write.py").write_text(WRITE)
        await asyncio.to_thread(server.submit, "scalars", "python write.py")
        assert (await asyncio.to_thread(server.wait, "scalars"))["phase"] == "Succeeded"
        prefix = "/distrain/tensorboard/scalars/worker-0"
        proxied = f"{server.url}{prefix}{PATH}"
        await load(proxied, 1)  # starts the TensorBoard
        direct = f"http://127.0.0.1:{tensorboard_port(server.root)}{prefix}{PATH}"
        results = {"direct": ([], []), "proxied": ([], [])}
        for _ in range(3):  # alternate, so drift on a noisy machine hits both
            for mode, url in (("direct", direct), ("proxied", proxied)):
                rate, latencies = await load(url, requests)
                results[mode][0].append(rate)
                results[mode][1].extend(latencies)
    for mode, (rates, latencies) in results.items():
        print(f"{mode:8} {statistics.median(rates):7.1f} requests/s  p50 {statistics.median(latencies):6.2f} ms")
    (direct_rates, direct_ms), (proxy_rates, proxy_ms) = results["direct"], results["proxied"]
    print(f"ratio proxied/direct: throughput {statistics.median(proxy_rates) / statistics.median(direct_rates):.2f}, "
          f"p50 latency {statistics.median(proxy_ms) / statistics.median(direct_ms):.2f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
