"""DLRM on synthetic Criteo data in a plain PyTorch training loop.

The sparse-embedding recipe: the embedding tables produce *sparse* gradients
(``ConcatenatedEmbeddings(..., sparse_columns=True)``) and get their own optimizer
(``torch.optim.SparseAdam``), which touches only the rows of a batch; the dense layers use
``torch.optim.AdamW``. Batches come from :class:`tabloader.torch.Loader`. Run:

    python examples/criteo_torch.py --rows 500000 --epochs 1

(``tabloader demo`` is the same pipeline with the fused-optimizer embeddings instead.)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
from torch import nn

import tabloader as tl
from tabloader import ops, synthetic
from tabloader.metrics import roc_auc
from tabloader.torch import ConcatenatedEmbeddings, Loader, configs_from_schema

CATEGORICAL = [f"C{i}" for i in range(1, 27)]
CONTINUOUS = [f"I{i}" for i in range(1, 14)]


def preprocess(root: str, rows: int, quiet: bool) -> tuple[str, str, tl.Schema]:
    """Synthetic train/validation sets -> Criteo workflow -> parquet. Returns (train, valid, schema)."""
    synthetic.write_criteo(f"{root}/raw_train", rows, num_files=2, seed=0, overwrite=True)
    synthetic.write_criteo(f"{root}/raw_valid", max(rows // 10, 1000), seed=1, overwrite=True)
    cats = CATEGORICAL >> ops.Categorify(freq_threshold=2)
    conts = CONTINUOUS >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp() >> ops.Normalize()
    wf = tl.Workflow(cats + conts + ["label"], progress=not quiet).fit(tl.Dataset(f"{root}/raw_train"))
    for split in ("train", "valid"):
        wf.transform(tl.Dataset(f"{root}/raw_{split}")).to_parquet(f"{root}/{split}", overwrite=True,
                                                                  progress=not quiet)
    return f"{root}/train", f"{root}/valid", wf.output_schema


class DLRM(nn.Module):
    """Embeddings + bottom MLP -> pairwise dot interactions -> top MLP -> logit.

    ``sparse=True`` gives the tables sparse gradients (for SparseAdam); ``False`` dense ones
    (what DDP all-reduces, see ddp_criteo.py).
    """

    def __init__(self, schema: tl.Schema, dim: int = 16, sparse: bool = True) -> None:
        super().__init__()
        configs = configs_from_schema(schema, dim=dim, columns=CATEGORICAL)
        self.embeddings = ConcatenatedEmbeddings(configs, sparse_columns=sparse)
        self.bottom = nn.Sequential(nn.Linear(len(CONTINUOUS), 64), nn.ReLU(), nn.Linear(64, dim), nn.ReLU())
        n = len(CATEGORICAL) + 1
        self.register_buffer("iu", torch.triu_indices(n, n, offset=1), persistent=False)
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 128), nn.ReLU(), nn.Linear(128, 32), nn.ReLU(),
                                 nn.Linear(32, 1))
        self.dim = dim

    def forward(self, features: dict) -> torch.Tensor:
        x = self.bottom(torch.stack([features[c] for c in CONTINUOUS], dim=1))
        e = self.embeddings(features).view(-1, len(CATEGORICAL), self.dim)
        t = torch.cat([x[:, None], e], dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, z], dim=1)).squeeze(1)


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000, help="training rows (validation: a tenth more)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    # leave a core to the loader's prefetch thread: a full OpenMP pool slows every step badly
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) - 1) if hasattr(os, "sched_getaffinity")
                          else max(1, (os.cpu_count() or 2) - 1))
    root = args.workdir or tempfile.mkdtemp(prefix="tabloader-criteo-torch-")
    os.makedirs(root, exist_ok=True)
    device = torch.device(args.device)
    # on CUDA without CuPy, let the loader work on the CPU and copy the batches over
    loader_device = device if device.type == "cuda" and tl.backend.has_module("cupy") else "cpu"

    t = time.perf_counter()
    train_dir, valid_dir, schema = preprocess(root, args.rows, args.quiet)
    print(f"preprocessed in {time.perf_counter() - t:.1f} s")

    model = DLRM(schema).to(device)
    dense_opt = torch.optim.AdamW(model.embeddings.dense_parameters() + [p for n, p in model.named_parameters()
                                                                         if not n.startswith("embeddings.")], lr=2e-3)
    sparse_opt = torch.optim.SparseAdam(model.embeddings.sparse_parameters(), lr=1e-2)
    loss_fn = nn.BCEWithLogitsLoss()
    cols = dict(categorical=CATEGORICAL, continuous=CONTINUOUS, target="label")

    def on_device(features: dict) -> dict:
        return {k: v.to(device) for k, v in features.items()}

    with Loader(tl.Dataset(train_dir), args.batch_size, shuffle=True, device=loader_device, **cols) as train:
        for epoch in range(args.epochs):
            t, total, steps = time.perf_counter(), 0.0, 0
            for features, target in train:
                loss = loss_fn(model(on_device(features)), target.to(device).float())
                dense_opt.zero_grad()
                sparse_opt.zero_grad()
                loss.backward()
                dense_opt.step()
                sparse_opt.step()
                total, steps = total + loss.item(), steps + 1
            seconds = time.perf_counter() - t
            print(f"epoch {epoch + 1}: {steps} steps, mean loss {total / max(steps, 1):.4f}, "
                  f"{args.rows / seconds:,.0f} rows/s")

    model.eval()
    labels, scores = [], []
    with torch.no_grad(), Loader(tl.Dataset(valid_dir), 65536, shuffle=False, device=loader_device, **cols) as valid:
        for features, target in valid:
            scores.append(torch.sigmoid(model(on_device(features))).cpu())
            labels.append(target.cpu())
    auc = roc_auc(torch.cat(labels).numpy(), torch.cat(scores).numpy())
    print(f"validation AUC: {auc:.4f}")
    return auc


if __name__ == "__main__":
    main()
