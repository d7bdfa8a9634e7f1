"""One rank of the DDP test of the table-batched collections: each rank trains its own shard.

Run by tests/test_torch_embeddings.py as ``python ddp_embeddings_train.py SETUP OUT`` with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment. SETUP is one of the two setups of
docs/scale.md: ``excluded`` (the collections inside the model DDP wraps, named by
``exclude_from_ddp``) or ``outside`` (DDP wraps the head only). Each rank builds its own shard
(its own initial rows) of a fused and an offloaded collection, trains 3 steps on its own ids
under DDP, then replays the same steps on copies of the shards taken before wrapping, without
DDP, with the gradients the collections' outputs got. Writes ``OUT/rank{RANK}.json``: whether
the shards kept their own rows when wrapped and trained as the replay did, and the head's
parameters (which DDP keeps equal on every rank).
"""

import copy
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import tabloader.torch as tlt
from tabloader.torch import EmbeddingConfig

from _gloo import exit_rank


class Model(torch.nn.Module):
    def __init__(self, rank: int) -> None:
        super().__init__()
        torch.manual_seed(100 + rank)  # each rank's own shard
        configs = [EmbeddingConfig("shard", 10, 4)]
        self.fused = tlt.FusedEmbeddingCollection(configs, optimizer="adagrad", lr=0.1, backend="reference")
        self.offloaded = tlt.OffloadedEmbeddingCollection(configs, hot_rows=4, optimizer="adam", lr=0.1,
                                                          backend="reference")
        torch.manual_seed(0)  # the same head on every rank
        self.head = torch.nn.Linear(8, 1)
        self.grads: list = []  # the gradient of each step's embeddings, for the replay

    def embed(self, ids: dict) -> torch.Tensor:
        out = torch.cat([self.fused(ids), self.offloaded(ids)], 1)
        if out.requires_grad:
            out.register_hook(self.grads.append)
        return out

    def forward(self, ids: dict) -> torch.Tensor:
        return self.head(self.embed(ids))


def shards(model: Model) -> list:
    """The rows and optimizer states of both collections."""
    return [model.fused.weight.detach(), model.fused.state_sum, model.offloaded.table_weight("shard"),
            model.offloaded.table_state("shard", "exp_avg"), model.offloaded.table_state("shard", "exp_avg_sq")]


def same(a: Model, b: Model) -> bool:
    return all(torch.equal(x, y) for x, y in zip(shards(a), shards(b)))


def main(setup: str, out: str) -> None:
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    model = Model(rank)
    replay = copy.deepcopy(model)
    if setup == "excluded":
        tlt.exclude_from_ddp(model)
        forward = DistributedDataParallel(model)
        parameters = forward.parameters()
    else:
        head = DistributedDataParallel(model.head)
        forward = lambda ids: head(model.embed(ids))  # noqa: E731
        parameters = head.parameters()
    kept = same(model, replay)
    optimizer = torch.optim.SGD(parameters, lr=0.1)  # skips the collections' rows: they get no .grad
    batches = [{"shard": torch.tensor([1 + 3 * rank + s, 5, 0])} for s in range(3)]  # rank 0: rows 1-3, rank 1: 4-6
    for ids in batches:
        optimizer.zero_grad()
        forward(ids).sum().backward()  # all-reduces the head's gradient
        optimizer.step()
    for ids, grad in zip(batches, model.grads):
        (replay.embed(ids) * grad).sum().backward()
    result = {"kept": kept, "trained_as_replay": same(model, replay), "changed": not same(model, Model(rank)),
              "head": [p.detach().flatten().tolist() for p in model.head.parameters()]}
    dist.barrier()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    exit_rank()
