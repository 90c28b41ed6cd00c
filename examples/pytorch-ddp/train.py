"""A small regression network trained with DistributedDataParallel (gloo backend, CPU).

Rank 0 (the master) logs, writes its loss per epoch to TensorBoard (torch.utils.tensorboard, in
DISTRAIN_LOG_DIR), saves model.pt and result.json. With WORLD_SIZE unset or 1 the script trains in a
single process.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

try:
    from torch.utils.tensorboard import SummaryWriter
except ImportError:  # TensorBoard is not installed
    SummaryWriter = None

FEATURES = 8


def parse_args():
    output = os.environ.get("DISTRAIN_OUTPUT_DIR") or os.environ.get("OUTPUT_DIR") or "output"
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=0.05)
    p.add_argument("--samples", type=int, default=2048)
    log_dir = os.environ.get("DISTRAIN_LOG_DIR") or os.path.join(output, "training_logs")
    p.add_argument("--log_dir", default=log_dir, help="TensorBoard event files, if installed")
    p.add_argument("--output_dir", default=output)
    p.add_argument("--fail_with", type=int, default=None, help="rank 0 exits with this code")
    return p.parse_args()


def synthetic_data(samples):
    """The same y = x.w + 1 + noise on every rank (fixed seed); the sampler shards it."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, FEATURES, generator=g)
    w = torch.linspace(-2, 2, FEATURES).unsqueeze(1)
    y = x @ w + 1.0 + 0.1 * torch.randn(samples, 1, generator=g)
    return TensorDataset(x, y)


def tensorboard_writer(log_dir):
    if SummaryWriter is None:
        print("tensorboard is not installed: no event files", flush=True)
        return None
    return SummaryWriter(log_dir)


def main():
    args = parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if args.fail_with is not None and rank == 0:
        print(f"failing on purpose with code {args.fail_with}", flush=True)
        sys.exit(args.fail_with)

    distributed = world > 1
    if distributed:  # MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE come from the environment
        dist.init_process_group("gloo", init_method="env://")
        print(f"rank {rank}/{world} joined", flush=True)

    torch.manual_seed(0)  # identical initial weights on every rank
    net = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.SGD(net.parameters(), lr=args.learning_rate)
    start = 0
    resume = os.environ.get("DISTRAIN_RESUME_FROM")
    if resume:
        path = os.path.join(resume, "model.pt") if os.path.isdir(resume) else resume
        state = torch.load(path)
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
        print(f"resumed from epoch {start}", flush=True)
    model = DistributedDataParallel(net) if distributed else net

    data = synthetic_data(args.samples)
    sampler = DistributedSampler(data, world, rank) if distributed else None
    loader = DataLoader(data, args.batch_size, shuffle=sampler is None, sampler=sampler)
    writer = tensorboard_writer(args.log_dir) if rank == 0 else None

    began, last, loss = time.time(), start + args.epochs, float("nan")
    for epoch in range(start + 1, last + 1):
        if sampler:
            sampler.set_epoch(epoch)
        total = torch.zeros(2)  # sum of batch losses, number of batches
        for x, y in loader:
            optimizer.zero_grad()
            batch_loss = torch.nn.functional.mse_loss(model(x), y)
            batch_loss.backward()  # DDP averages the gradients across ranks here
            optimizer.step()
            total += torch.tensor([batch_loss.item(), 1.0])
        if distributed:
            dist.all_reduce(total)
        loss = (total[0] / total[1]).item()
        if rank == 0:
            print(f"epoch {epoch}/{last} loss {loss:.4f}", flush=True)
            if writer:
                writer.add_scalar("loss", loss, epoch)

    if rank == 0:
        os.makedirs(args.output_dir, exist_ok=True)
        state = {"epoch": last, "model": net.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save(state, os.path.join(args.output_dir, "model.pt"))
        result = {"epoch": last, "loss": loss, "seconds": round(time.time() - began, 2)}
        with open(os.path.join(args.output_dir, "result.json"), "w") as f:
            json.dump(result, f)
        if writer:
            writer.close()
        print(f"done epoch {last} loss {loss:.4f}", flush=True)
    if distributed:
        dist.barrier()  # every rank done (rank 0 saved) before any tears the group down
        dist.destroy_process_group()
        # Leave without finalizing the interpreter: a gloo thread may still be releasing the last
        # collective's tensors, and one that needs the GIL while Python shuts down aborts the process
        # (SIGABRT, "terminate called without an active exception"). Everything is saved and flushed.
        os._exit(0)


if __name__ == "__main__":
    main()
