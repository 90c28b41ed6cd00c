"""Every measurement of bench/ in one table, each beside its baseline measured in the same run, with the
machine it ran on. Run: PYTHONPATH=bench python bench/run.py"""

from __future__ import annotations

import asyncio
import os
import platform
from datetime import date
from pathlib import Path

import cli
import controllers
import eta
import follow_end
import job_end
import job_list
import job_list_browser
import launch
import log_latency
import log_search
import log_throughput
import stacks
import submit
import sweep
import tensorboard_memory
import tensorboard_proxy
import waiting
from harness import table


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}"


if __name__ == "__main__":
    rows = [*asyncio.run(log_latency.measure()), *asyncio.run(log_throughput.measure()), *log_search.measure(),
            *tensorboard_proxy.measure(3), *tensorboard_memory.measure(), *job_list.measure(), *job_list.measure_team(),
            *job_list.measure_sweep_view(),
            *job_list_browser.measure(), *job_list.measure_kubernetes(), *cli.measure(),
            *launch.measure(), *job_end.measure(), *stacks.measure(), *waiting.measure(), *submit.measure(),
            *submit.measure_real(), *follow_end.measure(), *sweep.measure(), *controllers.measure(), *eta.measure()]
    print(f"{date.today()}, {machine()}\n\n{table(rows)}")
