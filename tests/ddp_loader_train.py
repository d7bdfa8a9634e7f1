"""One rank of the DDP test: trains a tiny linear model over the sharded loader for one epoch.

Run by tests/test_torch_loader.py as ``python ddp_loader_train.py DATA OUT`` with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment; writes the row ids it saw and the
number of steps to ``OUT/rank{RANK}.json``.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import tabloader as tl
import tabloader.torch  # noqa: F401

from _gloo import exit_rank


def main(data: str, out: str) -> None:
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = tl.torch.Loader(tl.Dataset(data, part_size=2000), batch_size=64, seed=1, buffer_size=6000,
                             categorical=["id"], continuous=["x", "cat_f"], target="y")
    ids, steps = [], 0
    for features, target in loader:
        inputs = torch.stack([features["x"], features["cat_f"]], dim=1)
        loss = torch.nn.functional.mse_loss(model(inputs).squeeze(1), target)
        optimizer.zero_grad()
        loss.backward()  # all-reduce: hangs if a rank has fewer steps
        optimizer.step()
        ids += features["id"].tolist()
        steps += 1
    dist.barrier()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"ids": ids, "steps": steps, "len": len(loader)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    exit_rank()  # the result is on disk and the process group destroyed
