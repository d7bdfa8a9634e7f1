"""Where the fused-embedding kernels and the PyTorch reference differ on a GPU, and why.

Usage (repo root, CUDA device): ``python tools/gpu_kernel_probe.py OUT_DIR``

For the single-hot cases of ``tests/_fused_cases.py`` that differed on the first H100 run, it
replays the same batches through the Triton and the reference backends and through an
independent float64 computation of the same update (plain torch, written here), and reports for
the worst elements: both fp32 results, the float64 truth, the row's number of lookups, the
summed gradient ``g`` and ``sum |g_j|`` (the magnitude the rounding of the sum scales with).
A difference where both fp32 results are equally far from the truth and ``g`` is small next to
``sum |g_j| * n * 2**-24`` is summation order; one where the kernel alone is far off is a bug.
Writes ``OUT_DIR/probe.json`` and prints it.
"""

from __future__ import annotations

import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import _fused_cases as fc  # noqa: E402


def _truth_step(state, coll, feats, up, optimizer, lr, eps, betas, step):
    """One float64 update of ``state`` (dict of w, s1, s2) by the single-hot batch ``feats``."""
    d = coll.embedding_dim
    up = up.double().reshape(up.shape[0], len(coll.features) * d)
    g = torch.zeros_like(state["w"])
    mag = torch.zeros_like(state["w"])
    cnt = torch.zeros(g.shape[0], dtype=torch.float64, device=g.device)
    for f, feat in enumerate(coll.features):
        cfg = coll._by_feature[feat]
        ids = feats[feat]
        keep = ids != cfg.padding_idx if cfg.padding_idx is not None else torch.ones_like(ids, dtype=torch.bool)
        rows = ids[keep] + coll.table_offsets[cfg.name]
        gf = up[keep, f * d:(f + 1) * d]
        g.index_add_(0, rows, gf)
        mag.index_add_(0, rows, gf.abs())
        cnt.index_add_(0, rows, torch.ones_like(rows, dtype=torch.float64))
    touched = cnt > 0
    w = state["w"]
    if optimizer == "sgd":
        w -= lr * g
    elif optimizer == "adagrad":
        state["s1"] += torch.where(touched, (g * g).mean(1), 0.0)
        w -= torch.where(touched[:, None], lr * g / (state["s1"].sqrt() + eps)[:, None], 0.0)
    else:
        b1, b2 = betas
        m = state["s1"] + (g - state["s1"]) * (1 - b1)
        v = state["s2"] + (g * g - state["s2"]) * (1 - b2)
        state["s1"] = torch.where(touched[:, None], m, state["s1"])
        state["s2"] = torch.where(touched[:, None], v, state["s2"])
        size = lr * (1 - b2 ** step) ** 0.5 / (1 - b1 ** step)
        w -= torch.where(touched[:, None], size * state["s1"] / (state["s2"].sqrt() + eps), 0.0)
    return g, mag, cnt


def probe(optimizer, dtype, steps, size="large", lr=0.05, top=6, device="cuda"):
    tri, ref = fc._pair(size, device, optimizer, dtype=dtype, lr=lr)
    state = {"w": ref.weight.detach().double().clone()}
    if optimizer == "adagrad":
        state["s1"] = torch.zeros(ref.total_rows, dtype=torch.float64, device=device)
    if optimizer == "adam":
        state["s1"] = torch.zeros_like(state["w"])
        state["s2"] = torch.zeros_like(state["w"])
    gs, mags, cnts = [], [], []
    for step in range(steps):
        feats = fc._batch(size, device, 10 + step, empty=(step == 1))
        for coll in (tri, ref):
            out = coll(feats)
            up = torch.randn(out.shape, generator=torch.Generator().manual_seed(step)).to(device, out.dtype)
            (out * up).sum().backward()
        g, mag, cnt = _truth_step(state, ref, feats, up, optimizer, ref.lr, ref.eps, ref.betas, ref.step)
        gs.append(g)
        mags.append(mag)
        cnts.append(cnt)
    a, b, t = tri.weight.detach().double(), ref.weight.detach().double(), state["w"]
    diff = (a - b).abs()
    excess = diff - (1e-6 + 1e-4 * b.abs()) if dtype == torch.float32 else diff - (1e-5 + 1e-3 * b.abs())
    flat = torch.topk(excess.flatten(), top).indices
    worst = []
    for i in flat.tolist():
        r, c = divmod(i, a.shape[1])
        item = {"row": r, "col": c, "tri": a[r, c].item(), "ref": b[r, c].item(), "truth": t[r, c].item(),
                "excess": excess[r, c].item(), "count_per_step": [x[r].item() for x in cnts],
                "g_per_step": [x[r, c].item() for x in gs], "sum_abs_g_per_step": [x[r, c].item() for x in mags],
                "row_rms_g_per_step": [x[r].pow(2).mean().sqrt().item() for x in gs]}
        for name in ("state_sum", "exp_avg_sq"):
            if hasattr(ref, name):
                sr = getattr(ref, name)[r]
                st = getattr(tri, name)[r]
                item[name] = [float(sr if sr.dim() == 0 else sr[c]), float(st if st.dim() == 0 else st[c])]
        worst.append(item)
    return {"optimizer": optimizer, "dtype": str(dtype), "steps": steps,
            "n_outside_tol": int((excess > 0).sum()),
            "max_tri_minus_ref": diff.max().item(), "max_tri_minus_truth": (a - t).abs().max().item(),
            "max_ref_minus_truth": (b - t).abs().max().item(), "worst": worst}


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    results = []
    for optimizer, dtype, steps in (("adagrad", torch.float16, 2), ("adagrad", torch.bfloat16, 2),
                                    ("adagrad", torch.float32, 2), ("sgd", torch.float32, 2),
                                    ("adam", torch.float32, 2), ("adam", torch.float32, 3)):
        try:
            results.append(probe(optimizer, dtype, steps))
        except Exception as exc:  # report every probe
            results.append({"optimizer": optimizer, "dtype": str(dtype), "error": repr(exc)})
        print(json.dumps(results[-1], indent=1), flush=True)
    tmp = os.path.join(out_dir, "probe.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(results, fh, indent=1)
    os.replace(tmp, os.path.join(out_dir, "probe.json"))


if __name__ == "__main__":
    main(sys.argv[1])
