"""Data-parallel DLRM training with torch.distributed DDP over the rank-sharded loader.

Every rank reads its own rows: :class:`tabloader.torch.Loader` sees that torch.distributed is
initialized and takes its rank and world size, so the ranks read disjoint rows and make the
same number of steps (DDP's all-reduce would hang otherwise). The model, embedding tables
included, is replicated on every rank and its dense gradients are all-reduced: the right
recipe while the tables are small next to a GPU's memory (see docs/scale.md for larger ones).
Run it:

    python examples/ddp_criteo.py --nproc 2                  # 2 processes on this machine
    torchrun --nproc_per_node 8 examples/ddp_criteo.py       # one process per GPU (NCCL)
    torchrun --nnodes 2 --node_rank 0 --nproc_per_node 8 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 examples/ddp_criteo.py --workdir /shared/dir   # 2 machines

GPUs use NCCL, CPUs gloo. Global rank 0 writes the synthetic data and preprocesses it into
``--workdir`` (which must be shared by all machines) while the other ranks wait at a barrier;
rank 0 prints the progress and the validation AUC.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import tabloader as tl
from criteo_torch import CATEGORICAL, CONTINUOUS, DLRM, preprocess  # the example beside this one
from tabloader.metrics import roc_auc
from tabloader.torch import Loader

COLUMNS = dict(categorical=CATEGORICAL, continuous=CONTINUOUS, target="label")


def main(argv=None) -> float | None:
    """Spawn ``--nproc`` ranks on this machine, or be one rank when started by torchrun."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=max(torch.cuda.device_count(), 2),
                        help="processes to spawn when not started by torchrun (default: GPUs, at least 2)")
    parser.add_argument("--rows", type=int, default=500_000, help="training rows (validation: a tenth more)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4096, help="rows per step on each rank")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--workdir", default=None, help="data directory, shared by all machines")
    args = parser.parse_args(argv)
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="tabloader-ddp-criteo-")
    if "RANK" in os.environ:  # started by torchrun, which set the rendezvous variables
        return train(args)
    port = _free_port()
    torch.multiprocessing.spawn(_spawned_rank, args=(args, port), nprocs=args.nproc)
    return None


def _spawned_rank(local_rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(args.nproc),
                      LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    train(args)
    _exit_rank()


def _exit_rank() -> None:
    """End a rank whose work is done and whose process group is destroyed, skipping the C++ static
    destructors: now and then one meets a still-joinable thread of torch.distributed's
    ("terminate called without an active exception", SIGABRT) and fails a rank that succeeded."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(args: argparse.Namespace) -> float | None:
    """One rank: join the process group, train, evaluate; returns the AUC on rank 0."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}" if args.device == "cuda" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:  # share the cores among the ranks of this machine, leaving the loaders some room
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
        torch.set_num_threads(max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", 1)) - 1))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        if rank == 0:
            t = time.perf_counter()
            preprocess(args.workdir, args.rows, quiet=True)
            print(f"preprocessed in {time.perf_counter() - t:.1f} s; training on {world} ranks ({device.type})",
                  flush=True)
        dist.barrier()  # the data exists once rank 0 is past this point
        train_dir, valid_dir = f"{args.workdir}/train", f"{args.workdir}/valid"
        torch.manual_seed(0)  # DDP copies rank 0's weights to the others anyway
        model = DistributedDataParallel(DLRM(tl.Dataset(train_dir).schema, sparse=False).to(device),
                                        device_ids=[device.index] if device.type == "cuda" else None,
                                        forward_sync_buffers=False)  # its one buffer is a constant
        tables = model.module.embeddings.parameters()
        others = [p for name, p in model.module.named_parameters() if not name.startswith("embeddings.")]
        optimizer = torch.optim.AdamW([{"params": tables, "lr": 1e-2}, {"params": others}], lr=2e-3)
        # on CUDA without CuPy, the loader works on the CPU and the batches are copied over
        loader_device = "cuda" if device.type == "cuda" and tl.backend.has_module("cupy") else "cpu"
        with Loader(tl.Dataset(train_dir), args.batch_size, shuffle=True, device=loader_device, **COLUMNS) as loader:
            for epoch in range(args.epochs):
                train_epoch(model, optimizer, loader, device, epoch)
        auc = evaluate(model, valid_dir, device, loader_device)
        if rank == 0:
            print(f"validation AUC: {auc:.4f}", flush=True)
        # Every rank's collectives are complete before any tears the group down: a rank that
        # destroyed it while gloo still finished its last send was seen to abort at exit.
        dist.barrier()
        return auc
    finally:
        dist.destroy_process_group()


def train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, loader: Loader, device: torch.device,
                epoch: int) -> None:
    """One epoch on this rank's shard; rank 0 prints every rank's step count and the mean loss."""
    loss_fn = nn.BCEWithLogitsLoss()
    t, steps = time.perf_counter(), 0
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, rows
    for features, target in loader:
        loss = loss_fn(model(_to(features, device)), target.to(device).float())
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        sums += torch.stack([loss.detach().double(), torch.tensor(float(len(target)), device=device).double()])
        steps += 1
    seconds = time.perf_counter() - t
    step_counts = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(step_counts, torch.tensor([steps], device=device))
    dist.all_reduce(sums)
    if dist.get_rank() == 0:
        per_rank = [int(c) for c in step_counts]
        print(f"epoch {epoch + 1}: steps per rank {per_rank}, mean loss {sums[0].item() / max(sum(per_rank), 1):.4f}, "
              f"{sums[1].item() / seconds:,.0f} rows/s over all ranks", flush=True)


@torch.no_grad()
def evaluate(model: DistributedDataParallel, valid_dir: str, device: torch.device, loader_device: str) -> float | None:
    """AUC over the whole validation set, each rank scoring its shard; None except on rank 0."""
    model = model.module.eval()  # the replica itself: no gradients, so no DDP collectives
    dataset = tl.Dataset(valid_dir)
    scores, labels = [], []
    with Loader(dataset, 65536, shuffle=False, device=loader_device, **COLUMNS) as loader:
        for features, target in loader:
            scores.append(torch.sigmoid(model(_to(features, device))).cpu().numpy())
            labels.append(target.cpu().numpy())
    # Without shuffle, rank r reads rows [r * per_rank, (r + 1) * per_rank) in order and the
    # rows that pad the last rank(s) come after the end: drop them so every row counts once.
    rank, world = dist.get_rank(), dist.get_world_size()
    per_rank = -(-dataset.num_rows // world)
    own = max(0, min(per_rank, dataset.num_rows - rank * per_rank))
    shard = (np.concatenate(scores)[:own], np.concatenate(labels)[:own])
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(shard, gathered, dst=0)
    if rank != 0:
        return None
    return roc_auc(np.concatenate([g[1] for g in gathered]), np.concatenate([g[0] for g in gathered]))


def _to(features: dict, device: torch.device) -> dict:
    return {name: value.to(device, non_blocking=True) for name, value in features.items()}


if __name__ == "__main__":
    main()
    if "RANK" in os.environ:  # a rank started by torchrun
        _exit_rank()
