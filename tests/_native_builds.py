"""The Triton kernels the embedding collections launch on a GPU, compiled natively without one.

Run as a script, *without* ``TRITON_INTERPRET``: ``python tests/_native_builds.py [ARCH]``
(default ``90``, the H100/H200) prints one JSON line: the builds, and the collection variants
that failed. One architecture per process: Triton keeps the first target it is given.

How: Triton is given a compile-only driver that reports an NVIDIA ``sm_<arch>`` target, and
every kernel of :mod:`tabloader.torch.kernels` is replaced by a recorder that *compiles* the
launch it is given (Triton's own ``warmup``, the same specialization as a real launch: argument
dtypes, 16-byte alignment and divisibility, constexprs, warps) instead of running it. Then the
real collections -- fused (also ``capturable``) and offloaded (staged and direct), single-hot and pooled, every
optimizer, fp32 / fp16 / bf16 activations, several embedding dims -- run forward and backward on CPU tensors, so the
kernels compiled are exactly those their wrappers would launch on the GPU (their outputs are
left unwritten, which does not matter here: nothing is checked but the builds).

Each build is then given to Triton's bundled ``ptxas -v`` for its registers and spills, and its
PTX is read for the widths of its global loads and for scalars read and overwritten without a
barrier between (a race between the warps of a program). What the interpreter on CPU cannot show:
whether the code compiles for the device at all (types across branches, layouts), spills, and
vectorized memory access -- what decides the kernels' share of HBM bandwidth.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import traceback

KERNELS = {"_gather_kernel": "gather", "_pooled_kernel": "pooled", "_partial_kernel": "partial",
           "_update_kernel": "update"}
OPTIMIZERS = ("sgd", "adagrad", "adam")
DTYPES = ("float32", "float16", "bfloat16")
DIMS = (8, 48, 128, 512)  # below the smallest tile, not a power of two, Criteo's, a large one


class CompileOnlyDriver:
    """What Triton's JIT asks its driver before compiling, for a GPU that is not there."""

    def __init__(self, arch: int):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", arch, 32)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")


class BuildRecorder:
    """Stands in for a ``@triton.jit`` kernel: ``kernel[grid](*args, **options)`` compiles."""

    def __init__(self, name: str, kernel, builds: dict):
        self.name, self.kernel, self.builds = name, kernel, builds

    def __getitem__(self, grid):
        def compile_launch(*args, **options):
            compiled = self.kernel.warmup(*args, grid=grid, **options)
            self.builds.setdefault(id(compiled), (self.name, compiled, _constexprs(options)))
        return compile_launch


def _constexprs(options: dict) -> dict:
    return {k: v for k, v in options.items() if k.isupper()}


def _ptxas_report(compiled, arch: int) -> dict:
    """Registers and spilled bytes of ``compiled``'s PTX, from Triton's own ptxas."""
    from triton.backends.nvidia.compiler import get_ptxas

    gpu_name = "sm_90a" if arch == 90 else f"sm_{arch}"
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "kernel.ptx")
        with open(ptx, "w") as f:
            f.write(compiled.asm["ptx"])
        proc = subprocess.run([get_ptxas(arch).path, "-v", f"--gpu-name={gpu_name}", ptx,
                               "-o", os.path.join(tmp, "kernel.cubin")], capture_output=True, text=True, check=True)
    log = proc.stdout + proc.stderr
    registers = re.search(r"Used (\d+) registers", log)
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    return {"registers": int(registers.group(1)) if registers else None, "spill_bytes": sum(spills)}


def _global_load_widths(ptx: str) -> list[str]:
    """The distinct global loads of a PTX text, e.g. ``ld.global.v4.b32`` (4 x 32 bits at once)."""
    return sorted(set(re.findall(r"ld\.global(?:\.\w+)*", ptx)))


def _scalar_read_modify_writes(ptx: str) -> dict:
    """The scalars a kernel reads and then overwrites in global memory (``ld.global.b32 {%r}, [a]``
    by every thread, later ``st.global.b32 [a]``), and those with no ``bar.sync`` in between.

    A scalar is stored by one thread but read by all: without a barrier between the read and
    the write, a warp running late reads the new value (a race the interpreter cannot show).
    """
    lines = ptx.splitlines()
    loads = {}  # address register -> line of the last unpredicated scalar load from it
    found, unguarded = [], []
    for i, line in enumerate(lines):
        load = re.match(r"\s*ld\.global\.b32 \{ %r\d+ \}, \[ (%rd\d+) \+ 0 \]", line)
        if load:
            loads[load.group(1)] = i
            continue
        store = re.search(r"st\.global\.b32 \[ (%rd\d+) \+ 0 \]", line)
        if store and store.group(1) in loads:
            found.append(store.group(1))
            if not any("bar.sync" in x for x in lines[loads[store.group(1)]:i]):
                unguarded.append(store.group(1))
    return {"scalar_rmw": found, "scalar_rmw_unguarded": unguarded}


def _batch(pooled: bool, seed: int):
    """Ids for the three tables of :func:`_configs` with a hot row repeated more than a chunk."""
    import torch

    g = torch.Generator().manual_seed(seed)
    n = 600
    hot = torch.full((300,), 3, dtype=torch.long)
    feats = {"a": torch.cat([torch.randint(0, 50, (n - 300,), generator=g), hot]),
             "c1": torch.randint(0, 20, (n,), generator=g), "c2": torch.randint(0, 20, (n,), generator=g)}
    if pooled:
        lengths = torch.randint(0, 4, (n,), generator=g)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
        values = torch.randint(0, 80, (int(offsets[-1]),), generator=g)
        values[::2] = 5  # a hot row inside the bags
        feats["b"] = (values, offsets)
    else:
        feats["b"] = torch.randint(0, 80, (n,), generator=g)
    return feats


def _configs(dim: int, pooled: bool):
    from tabloader.torch.layers import EmbeddingConfig

    b = EmbeddingConfig("b", 80, dim, pooling="mean") if pooled else EmbeddingConfig("b", 80, dim)
    return [EmbeddingConfig("a", 50, dim), b, EmbeddingConfig("c", 20, dim, features=("c1", "c2"))]


def _run_collections() -> list[str]:
    """Forward + backward of every collection variant; returns the variants that raised."""
    import torch

    from tabloader.torch.fused import FusedEmbeddingCollection
    from tabloader.torch.offload import OffloadedEmbeddingCollection

    variants = [(opt, dtype, pooled, 128, "fused") for opt in OPTIMIZERS for dtype in DTYPES
                for pooled in (False, True)]
    variants += [("adam", "float32", pooled, dim, "fused") for dim in DIMS if dim != 128 for pooled in (False, True)]
    variants += [(opt, "bfloat16", True, 128, "offloaded") for opt in OPTIMIZERS]
    variants += [(opt, dtype, pooled, 128, "direct") for opt in OPTIMIZERS for dtype in ("float32", "bfloat16")
                 for pooled in (False, True)]
    variants += [(opt, "float32", pooled, 128, "capturable") for opt in OPTIMIZERS for pooled in (False, True)]
    failures = []
    for opt, dtype_name, pooled, dim, kind in variants:
        dtype = getattr(torch, dtype_name)
        try:
            if kind in ("fused", "capturable"):
                coll = FusedEmbeddingCollection(_configs(dim, pooled), optimizer=opt, backend="triton",
                                                chunk_size=64, dtype=dtype, capturable=kind == "capturable",
                                                validate_indices=kind != "capturable")
            else:
                coll = OffloadedEmbeddingCollection(_configs(dim, pooled), hot_rows=0.3, optimizer=opt,
                                                    backend="triton", chunk_size=64, dtype=dtype,
                                                    cold_access="direct" if kind == "direct" else "staged")
            coll(_batch(pooled, seed=dim)).float().sum().backward()  # the outputs' dtype is ``dtype``
        except Exception:
            failures.append(f"{kind} {opt} {dtype_name} pooled={pooled} dim={dim}:\n{traceback.format_exc()}")
    return failures


def build_all(arch: int) -> dict:
    """Compile every kernel launch of the collections for ``sm_<arch>``; the builds and failures."""
    import triton
    from triton.runtime import driver

    from tabloader.torch import dispatch, kernels

    driver.set_active(CompileOnlyDriver(arch))
    builds: dict = {}
    for name, short in KERNELS.items():
        setattr(kernels, name, BuildRecorder(short, getattr(kernels, name), builds))
    # The collections ask dispatch where to run: the kernels, as for CUDA tensors (bf16 outputs
    # included, which the host path would widen to fp32 for the interpreter).
    dispatch.kernels_for = lambda backend, device, owner: kernels
    dispatch.is_host = lambda device: False
    failures = _run_collections()
    report = []
    for name, compiled, constexprs in builds.values():
        entry = {"kernel": name, "arch": arch, "constexprs": constexprs, "num_warps": compiled.metadata.num_warps,
                 "signature": {k: v for k, v in compiled.src.signature.items() if v != "constexpr"},
                 "loads": _global_load_widths(compiled.asm["ptx"]), "cubin": bool(compiled.asm.get("cubin"))}
        entry.update(_scalar_read_modify_writes(compiled.asm["ptx"]))
        entry.update(_ptxas_report(compiled, arch))
        report.append(entry)
    return {"triton": triton.__version__, "builds": report, "failures": failures}


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.exit("run without TRITON_INTERPRET: the kernels must be decorated for compiling")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(json.dumps(build_all(int(sys.argv[1]) if len(sys.argv) > 1 else 90)))
