"""The end-to-end demo behind ``tabloader demo`` / ``make demo``.

Five stages, each timed:

1. **generate** -- synthetic Criteo-like click logs (:mod:`tabloader.synthetic`): a training
   set and a held-out validation set drawn with another seed (same distribution, independent
   rows);
2. **fit** -- the Criteo workflow (``Categorify(freq_threshold=2)`` on ``C1..C26``;
   ``FillMissing(0) >> Clip(min_value=0) >> LogOp >> Normalize`` on ``I1..I13``; ``label``);
3. **transform** -- both sets through the fitted workflow to parquet;
4. **train** -- one epoch of a small DLRM (a :class:`~tabloader.torch.FusedEmbeddingCollection`
   for the 26 categorical columns with its own row-wise Adagrad applied inside the backward
   pass, a bottom MLP for the 13 continuous ones, pairwise dot interactions, a top MLP;
   AdamW for the dense weights) fed by :class:`tabloader.torch.Loader`;
5. **evaluate** -- ROC AUC on the validation set (:func:`tabloader.metrics.roc_auc`).

The synthetic label depends on the features (the best possible AUC is about 0.77), so a
working pipeline gets an AUC well above 0.5.

Example:
    >>> report = run_demo(rows=20_000, quiet=True)  # doctest: +SKIP
    >>> print(format_report(report))                # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any, Iterator

import numpy as np

from tabloader.extras import require

__all__ = ["run_demo", "format_report", "CATEGORICAL", "CONTINUOUS", "LABEL", "criteo_workflow", "DLRM"]

CATEGORICAL = [f"C{i}" for i in range(1, 27)]
CONTINUOUS = [f"I{i}" for i in range(1, 14)]
LABEL = "label"
ROWS_PER_FILE = 250_000
MIN_ROWS = 2000  # fewer leave too few rows for a meaningful train/validation split


# Stages.
def generate(path: str, rows: int, seed: Any, quiet: bool = False, desc: str = "generate") -> str:
    """Write ``rows`` synthetic Criteo rows to ``path`` (parquet files of <= 250K rows)."""
    from tqdm.auto import tqdm

    from tabloader import synthetic
    from tabloader.synthetic.files import write_parts

    files = max(1, -(-rows // ROWS_PER_FILE))
    with tqdm(total=rows, desc=desc, unit="row", unit_scale=True, disable=quiet, leave=False) as bar:
        def part(n: int, file_seed: Any) -> Any:
            frame = synthetic.criteo(n, seed=file_seed)
            bar.update(n)
            return frame

        # the writer of write_criteo, with a per-file hook for the progress bar
        write_parts(path, rows, files, seed, True, part, synthetic.criteo_schema())
    return path


def criteo_workflow(quiet: bool = False) -> Any:
    """The usual Criteo preprocessing workflow (unfitted)."""
    from tabloader import Workflow, ops

    cats = CATEGORICAL >> ops.Categorify(freq_threshold=2)
    conts = CONTINUOUS >> ops.FillMissing(0) >> ops.Clip(min_value=0) >> ops.LogOp() >> ops.Normalize()
    return Workflow(cats + conts + [LABEL], progress=not quiet)


def fit(raw_train: str, quiet: bool = False) -> Any:
    from tabloader import Dataset

    return criteo_workflow(quiet).fit(Dataset(raw_train))


def transform(workflow: Any, raw: str, out: str, quiet: bool = False) -> str:
    from tabloader import Dataset

    return workflow.transform(Dataset(raw)).to_parquet(out, overwrite=True, progress=not quiet)


def default_threads() -> int:
    """Torch threads for the CPU: one core fewer than this process may use (at least one).

    The loader's prefetch thread and Dask need a core too; with every core given to torch's
    OpenMP pool, the pool's threads wait on each other and a step gets several times slower
    (measured on 2 cores: one epoch of the demo at 300K rows, 6.6 s with 1 thread, 23 s with 2).
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def _torch_device(device: str) -> Any:
    import torch

    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device} was asked for, but no CUDA device is usable here")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {device!r}")
    return dev


def make_loader(path: str, batch_size: int, device: Any, shuffle: bool, seed: int = 0) -> Any:
    """A :class:`tabloader.torch.Loader` over a transformed Criteo directory; on CUDA the
    loader works on the GPU when CuPy is installed, else batches are copied there."""
    from tabloader import Dataset
    from tabloader.torch import Loader

    return Loader(Dataset(path), batch_size, device=device, shuffle=shuffle, seed=seed,
                  categorical=CATEGORICAL, continuous=CONTINUOUS, target=LABEL)


def _batches(loader: Any, device: Any) -> Iterator[tuple[Any, Any, Any]]:
    """(categorical dict, continuous (B, 13) float tensor, label float tensor) on ``device``."""
    import torch

    for features, target in loader:
        cats = {c: features[c].to(device, non_blocking=True) for c in CATEGORICAL}
        conts = torch.stack([features[c] for c in CONTINUOUS], dim=1).to(device, torch.float32, non_blocking=True)
        yield cats, conts, target.to(device, torch.float32, non_blocking=True)


def _mlp(sizes: list[int], last_activation: bool = True) -> Any:
    from torch import nn

    layers: list[Any] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if last_activation or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def DLRM(schema: Any, dim: int = 16, bottom: tuple[int, ...] = (64,), top: tuple[int, ...] = (128, 32),
         embedding_lr: float = 0.05, device: Any = "cpu") -> Any:
    """A small DLRM: fused embeddings (row-wise Adagrad inside backward) + bottom MLP + dot
    interactions + top MLP. Returns an ``nn.Module``; ``forward(cats, conts)`` gives logits."""
    import torch
    from torch import nn

    from tabloader.torch import FusedEmbeddingCollection, configs_from_schema

    class _DLRM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            configs = configs_from_schema(schema, dim=dim, columns=CATEGORICAL)
            self.embeddings = FusedEmbeddingCollection(configs, optimizer="adagrad", lr=embedding_lr,
                                                       output="stack", device=device)
            self.bottom = _mlp([len(CONTINUOUS), *bottom, dim])
            n = len(CATEGORICAL) + 1
            self.register_buffer("_iu", torch.triu_indices(n, n, offset=1), persistent=False)
            self.top = _mlp([dim + n * (n - 1) // 2, *top, 1], last_activation=False)

        def forward(self, cats: Any, conts: Any) -> Any:
            x = self.bottom(conts)                                        # (B, D)
            t = torch.cat([x[:, None, :], self.embeddings(cats)], dim=1)  # (B, F + 1, D)
            z = torch.bmm(t, t.transpose(1, 2))[:, self._iu[0], self._iu[1]]
            return self.top(torch.cat([x, z], dim=1)).squeeze(1)

    return _DLRM().to(device)


def train(model: Any, loader: Any, device: Any, epochs: int = 1, lr: float = 2e-3, quiet: bool = False) -> dict:
    """Train with AdamW for the dense weights (the embeddings update themselves in backward)."""
    import torch
    from tqdm.auto import tqdm

    dense = [p for name, p in model.named_parameters() if not name.startswith("embeddings.")]
    opt = torch.optim.AdamW(dense, lr=lr, weight_decay=1e-5)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    model.train()
    losses = []
    for epoch in range(epochs):
        with tqdm(total=len(loader), desc=f"train epoch {epoch + 1}", unit="batch", disable=quiet,
                  leave=False) as bar:
            for cats, conts, y in _batches(loader, device):
                loss = loss_fn(model(cats, conts), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
                bar.update(1)
                if bar.n % 10 == 0:
                    bar.set_postfix(loss=f"{np.mean(losses[-10:]):.4f}")
    return {"final_loss": float(np.mean(losses[-20:])) if losses else float("nan"), "steps": len(losses)}


def predict(model: Any, loader: Any, device: Any, quiet: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(labels, probabilities) over a loader."""
    import torch
    from tqdm.auto import tqdm

    model.eval()
    ys, ps = [], []
    with torch.no_grad(), tqdm(total=len(loader), desc="evaluate", unit="batch", disable=quiet, leave=False) as bar:
        for cats, conts, y in _batches(loader, device):
            ps.append(torch.sigmoid(model(cats, conts)).float().cpu().numpy())
            ys.append(y.cpu().numpy())
            bar.update(1)
    model.train()
    return np.concatenate(ys), np.concatenate(ps)


# The pipeline.
@contextlib.contextmanager
def _quiet_warnings(quiet: bool) -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        if quiet:
            warnings.simplefilter("ignore")
        yield


def run_demo(rows: int = 1_000_000, device: str = "auto", workdir: str | None = None, seed: int = 0,
             quiet: bool = False, batch_size: int = 4096, epochs: int = 1, valid_fraction: float = 0.1,
             dim: int = 16, lr: float = 2e-3, embedding_lr: float = 0.05, threads: int | None = None) -> dict:
    """Run the whole demo and return its report (see :func:`format_report`).

    ``rows`` rows are generated in all: ``valid_fraction`` of them (at least 1000) form the
    held-out validation set, drawn with another seed. ``workdir`` keeps the data there
    (default: a temporary directory, removed at the end). ``device``: ``"auto"`` (CUDA when
    available), ``"cpu"`` or ``"cuda"``. Progress bars go to stderr unless ``quiet``.

    Report keys: ``rows``, ``train_rows``, ``valid_rows``, ``device``, ``stages`` (a list of
    ``{"stage", "rows", "seconds", "rows_per_s"}``), ``auc``, ``logloss``, ``final_loss``,
    ``embedding_rows``, ``total_seconds``, ``workdir`` (None when it was temporary).
    """
    torch = require("torch", "torch", "the demo (it trains a DLRM with PyTorch)")
    from tabloader.metrics import log_loss, roc_auc

    rows = int(rows)
    if rows < MIN_ROWS:
        raise ValueError(f"rows must be >= {MIN_ROWS} for a meaningful train/validation split, got {rows}")
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
    if batch_size < 1 or epochs < 1:
        raise ValueError(f"batch_size and epochs must be >= 1, got {batch_size}, {epochs}")
    dev = _torch_device(device)
    if threads is None:
        threads = default_threads()
    torch.set_num_threads(max(1, int(threads)))
    torch.manual_seed(seed)
    valid_rows = max(1000, int(rows * valid_fraction))
    train_rows = rows - valid_rows
    keep = workdir is not None
    root = workdir if keep else tempfile.mkdtemp(prefix="tabloader-demo-")
    os.makedirs(root, exist_ok=True)
    paths = {k: os.path.join(root, k) for k in ("raw_train", "raw_valid", "train", "valid", "workflow")}
    stages: list[dict] = []

    def stage(name: str, n: int, start: float) -> None:
        seconds = time.perf_counter() - start
        stages.append({"stage": name, "rows": n, "seconds": seconds, "rows_per_s": n / seconds if seconds else 0.0})
        if not quiet:
            print(f"  {name:<10} {n:>11,} rows  {seconds:7.1f} s", file=sys.stderr, flush=True)

    begin = time.perf_counter()
    try:
        with _quiet_warnings(quiet):
            t = time.perf_counter()
            generate(paths["raw_train"], train_rows, seed, quiet, "generate train")
            generate(paths["raw_valid"], valid_rows, np.random.SeedSequence([seed, 1_000_003]), quiet, "generate valid")
            stage("generate", rows, t)

            t = time.perf_counter()
            wf = fit(paths["raw_train"], quiet)
            stage("fit", train_rows, t)
            wf.save(paths["workflow"], overwrite=True)  # --workdir may hold a previous run's

            t = time.perf_counter()
            transform(wf, paths["raw_train"], paths["train"], quiet)
            transform(wf, paths["raw_valid"], paths["valid"], quiet)
            stage("transform", rows, t)

            t = time.perf_counter()
            model = DLRM(wf.output_schema, dim=dim, embedding_lr=embedding_lr, device=dev)
            with make_loader(paths["train"], batch_size, dev, shuffle=True, seed=seed) as loader:
                fit_info = train(model, loader, dev, epochs=epochs, lr=lr, quiet=quiet)
            stage("train", train_rows * epochs, t)

            t = time.perf_counter()
            with make_loader(paths["valid"], max(batch_size, 65536), dev, shuffle=False) as loader:
                labels, probs = predict(model, loader, dev, quiet)
            stage("evaluate", valid_rows, t)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return {
        "rows": rows,
        "train_rows": train_rows,
        "valid_rows": valid_rows,
        "device": str(dev),
        "batch_size": batch_size,
        "epochs": epochs,
        "embedding_rows": int(model.embeddings.total_rows),
        "stages": stages,
        "auc": roc_auc(labels, probs),
        "logloss": log_loss(labels, probs),
        "final_loss": fit_info["final_loss"],
        "total_seconds": time.perf_counter() - begin,
        "workdir": root if keep else None,
    }


def format_report(report: dict) -> str:
    """The report as a small text table: stage | rows | seconds | rows/s, then AUC."""
    lines = [f"tabloader demo: {report['rows']:,} synthetic Criteo rows "
             f"({report['train_rows']:,} train / {report['valid_rows']:,} validation) on {report['device']}",
             f"model: DLRM, {report['embedding_rows']:,} embedding rows, batch {report['batch_size']}, "
             f"{report['epochs']} epoch(s)", ""]
    header = f"{'stage':<10} | {'rows':>11} | {'seconds':>8} | {'rows/s':>11}"
    lines += [header, "-" * len(header)]
    for s in report["stages"]:
        lines.append(f"{s['stage']:<10} | {s['rows']:>11,} | {s['seconds']:>8.1f} | {s['rows_per_s']:>11,.0f}")
    lines.append("-" * len(header))
    lines.append(f"{'total':<10} | {'':>11} | {report['total_seconds']:>8.1f} |")
    lines.append("")
    lines.append(f"validation AUC: {report['auc']:.4f}   logloss: {report['logloss']:.4f}   "
                 f"(a constant guess has AUC 0.5; the generator's best possible is about 0.77)")
    if report.get("workdir"):
        lines.append(f"data kept in {report['workdir']}")
    return "\n".join(lines)
