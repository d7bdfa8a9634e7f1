"""Rating regression on synthetic MovieLens data: a list column of genres through
:class:`tabloader.torch.MultiHotEmbeddings`.

``userId`` and ``movieId`` are single-hot (``ConcatenatedEmbeddings``); ``genres`` is a list
of 1-4 genre names per movie, encoded by ``Categorify`` (0 = padding) and reaching the model
as ``(values, offsets)`` from :class:`tabloader.torch.Loader`, pooled by mean. Run:

    python examples/movielens_torch.py --rows 500000
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
from tabloader.torch import ConcatenatedEmbeddings, Loader, MultiHotEmbeddings, configs_from_schema

IDS = ["userId", "movieId"]


def preprocess(root: str, rows: int, quiet: bool) -> tuple[str, str, tl.Schema]:
    synthetic.write_movielens(f"{root}/raw_train", rows, num_files=2, seed=0, overwrite=True)
    synthetic.write_movielens(f"{root}/raw_valid", max(rows // 10, 1000), seed=1, overwrite=True)
    ids = IDS >> ops.Categorify()
    genres = ["genres"] >> ops.Categorify()  # a list column: every element gets an id
    wf = tl.Workflow(ids + genres + ["rating"], progress=not quiet).fit(tl.Dataset(f"{root}/raw_train"))
    for split in ("train", "valid"):
        wf.transform(tl.Dataset(f"{root}/raw_{split}")).to_parquet(f"{root}/{split}", overwrite=True,
                                                                  progress=not quiet)
    return f"{root}/train", f"{root}/valid", wf.output_schema


class RatingModel(nn.Module):
    def __init__(self, schema: tl.Schema, dim: int = 32) -> None:
        super().__init__()
        self.ids = ConcatenatedEmbeddings(configs_from_schema(schema, dim=dim, columns=IDS))
        self.genres = MultiHotEmbeddings(configs_from_schema(schema, dim=8, columns=["genres"], pooling="mean"))
        self.mlp = nn.Sequential(nn.Linear(self.ids.output_dim + self.genres.output_dim, 64), nn.ReLU(),
                                 nn.Linear(64, 1))

    def forward(self, features: dict) -> torch.Tensor:
        return 3.5 + self.mlp(torch.cat([self.ids(features), self.genres(features)], dim=1)).squeeze(1)


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000, help="training rows (validation: a tenth more)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))  # a core for the loader's prefetch thread
    root = args.workdir or tempfile.mkdtemp(prefix="tabloader-movielens-")
    os.makedirs(root, exist_ok=True)

    t = time.perf_counter()
    train_dir, valid_dir, schema = preprocess(root, args.rows, args.quiet)
    print(f"preprocessed in {time.perf_counter() - t:.1f} s; genres cardinality "
          f"{schema['genres'].properties['cardinality']}")

    model = RatingModel(schema)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    cols = dict(categorical=[*IDS, "genres"], continuous=[], target="rating")
    with Loader(tl.Dataset(train_dir), args.batch_size, shuffle=True, **cols) as train:
        for epoch in range(args.epochs):
            t, total, steps = time.perf_counter(), 0.0, 0
            for features, rating in train:  # features["genres"] is (values, offsets)
                loss = nn.functional.mse_loss(model(features), rating.float())
                opt.zero_grad()
                loss.backward()
                opt.step()
                total, steps = total + loss.item(), steps + 1
            print(f"epoch {epoch + 1}: {steps} steps, train MSE {total / max(steps, 1):.4f}, "
                  f"{time.perf_counter() - t:.1f} s")

    model.eval()
    errors, baseline, n = 0.0, 0.0, 0
    with torch.no_grad(), Loader(tl.Dataset(valid_dir), 65536, shuffle=False, **cols) as valid:
        for features, rating in valid:
            rating = rating.float()
            errors += float(((model(features) - rating) ** 2).sum())
            baseline += float(((rating - 3.5) ** 2).sum())
            n += len(rating)
    rmse, base = (errors / n) ** 0.5, (baseline / n) ** 0.5
    print(f"validation RMSE: {rmse:.4f} (constant 3.5: {base:.4f})")
    return rmse


if __name__ == "__main__":
    main()
