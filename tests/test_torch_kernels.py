"""The Triton kernels of FusedEmbeddingCollection against the PyTorch reference and torch.optim.

On CPU the kernels run through Triton's interpreter. ``TRITON_INTERPRET=1`` must be set before
the kernels are decorated, and this pytest process may already have imported them without it
(doctest collection imports every module), so the cases of ``tests/_fused_cases.py`` run in
one subprocess at small shapes; each case is reported as its own test here. Every kernel launch
of the collections is also compiled natively for an H100 without a GPU (``tests/_native_builds.py``),
and its registers, spills and memory accesses checked. With a CUDA device the same cases run
natively at realistic shapes (``gpu`` marker).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import _fused_cases  # noqa: E402

pytestmark = pytest.mark.torch

CASE_NAMES = sorted(_fused_cases.CASES)
INTERPRETER_CASE_NAMES = CASE_NAMES + sorted(_fused_cases.HOST_GRID_CASES)


@pytest.fixture(scope="module")
def interpreter_results():
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "_fused_cases.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=540)
    if proc.returncode != 0:
        pytest.fail(f"interpreter run failed (rc={proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", INTERPRETER_CASE_NAMES)
def test_kernel_case_interpreter(interpreter_results, case):
    result = interpreter_results[case]
    assert result == "ok", result


@pytest.fixture(scope="module")
def native_builds():
    """Every kernel launch of the collections, compiled for an H100 (sm_90) without a GPU, by
    ``tests/_native_builds.py`` in a subprocess (the kernels must not be decorated for the
    interpreter there)."""
    return _native_builds()


def _native_builds(**env_vars: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(env_vars)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "_native_builds.py"), "90"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=540)
    if proc.returncode != 0:
        pytest.fail(f"native compile failed (rc={proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_kernel_launch_of_the_collections_compiles_for_sm90(native_builds):
    """The launches of the fused and offloaded collections -- single-hot and pooled, each
    optimizer, fp32/fp16/bf16 activations, dims 8 to 512, capturable or not -- all compile to
    sm_90 cubins."""
    assert not native_builds["failures"], "\n".join(native_builds["failures"])
    builds = native_builds["builds"]
    assert all(b["cubin"] for b in builds)
    assert {b["kernel"] for b in builds} == {"gather", "pooled", "partial", "update"}
    updates = [b for b in builds if b["kernel"] == "update"]
    assert {b["constexprs"]["OPT"] for b in updates} == {0, 1, 2}
    on_device = {b["constexprs"]["OPT"] for b in updates if b["constexprs"]["HYPER_ON_DEVICE"]}
    assert on_device == {0, 1, 2}, "capturable=True: the update reading lr/step_size from the device"
    assert {b["signature"]["grad"] for b in updates} == {"*fp32", "*fp16", "*bf16"}
    assert {b["signature"]["out"] for b in builds if b["kernel"] == "gather"} == {"*fp32", "*fp16", "*bf16"}
    assert {b["constexprs"]["BLOCK_D"] for b in builds} == {16, 64, 128, 512}


def test_direct_cold_access_builds_read_the_host_rows_in_the_same_kernels(native_builds):
    """The offloaded collection's direct access compiles the gather, pooled and update kernels
    with their cold-rows branch (SPLIT), not a fallback to staging."""
    split = {b["kernel"] for b in native_builds["builds"] if b["constexprs"].get("SPLIT")}
    assert split == {"gather", "pooled", "update"}, split


def test_no_kernel_spills_registers(native_builds):
    """ptxas keeps every kernel's working set in registers: a spill would go through local
    memory on every row, at a cost the interpreter cannot show."""
    spilled = [b for b in native_builds["builds"] if b["spill_bytes"] or b["registers"] is None]
    assert not spilled, spilled


def test_one_warp_update_kernels_compile_without_spills():
    """The candidate launch that ``tools/gpu_checks.sh embedding_warps`` times on a GPU, one warp
    per program for rows of up to 128 values (``TABLOADER_UPDATE_WARPS=1``), compiles for an
    H100 without spills, within the persistent grid's registers, with 16-byte loads of 128-wide
    rows, and row-wise Adagrad's accumulator still read before it is overwritten."""
    from tabloader.torch.kernels import _PERSISTENT_WARPS_PER_SM, UPDATE_WARPS_ENV

    builds = _native_builds(**{UPDATE_WARPS_ENV: "1"})
    assert not builds["failures"], "\n".join(builds["failures"])
    updates = [b for b in builds["builds"] if b["kernel"] in ("partial", "update")]
    assert {b["num_warps"] for b in updates if b["constexprs"]["BLOCK_D"] <= 128} == {1}
    assert not [b for b in builds["builds"] if b["spill_bytes"] or b["registers"] is None]
    assert max(b["registers"] for b in updates) <= 65536 // (_PERSISTENT_WARPS_PER_SM * 32)
    rows128 = [b for b in updates if b["constexprs"]["BLOCK_D"] == 128]
    assert rows128 and all("ld.global.v4.b32" in b["loads"] for b in rows128)
    assert not [b["constexprs"] for b in updates if b["scalar_rmw_unguarded"]]


def test_update_warps_can_be_set_for_rows_of_up_to_128_values(monkeypatch):
    from tabloader.torch.kernels import UPDATE_WARPS_ENV, _update_launch

    monkeypatch.delenv(UPDATE_WARPS_ENV, raising=False)
    assert [_update_launch(d) for d in (32, 128, 512)] == [(32, 1), (16, 2), (8, 4)]
    monkeypatch.setenv(UPDATE_WARPS_ENV, "1")
    assert [_update_launch(d) for d in (32, 128, 512)] == [(32, 1), (8, 1), (8, 4)]  # 512-wide rows keep 4
    for bad in ("0", "3", "-1", "abc"):
        monkeypatch.setenv(UPDATE_WARPS_ENV, bad)
        with pytest.raises(ValueError, match=f"TABLOADER_UPDATE_WARPS='{bad}'.*1, 2, 4 or 8"):
            _update_launch(128)


def test_persistent_update_kernels_fit_an_sm_in_one_wave(native_builds):
    """The persistent partial/update kernels' default grid puts 28 warps on each SM; they all run
    at once (no second wave behind the first) only if each thread holds at most
    65536 / (28 warps * 32 threads) = 73 of an H100 SM's 65536 registers."""
    from tabloader.torch.kernels import _PERSISTENT_WARPS_PER_SM

    most = 65536 // (_PERSISTENT_WARPS_PER_SM * 32)
    heavy = [(b["kernel"], b["registers"], b["constexprs"]) for b in native_builds["builds"]
             if b["kernel"] in ("partial", "update") and b["registers"] > most]
    assert not heavy, heavy


def test_embedding_rows_move_in_128_bit_accesses(native_builds):
    """Rows of 16-byte multiples are read 4 floats at a time (``ld.global.v4``), by every kernel;
    the forward gather has no narrower load of the table at all -- what lets the lookups run at a
    good fraction of HBM bandwidth."""
    wide = [b for b in native_builds["builds"] if b["constexprs"]["BLOCK_D"] >= 64]
    assert wide and all("ld.global.v4.b32" in b["loads"] for b in wide), [(b["kernel"], b["loads"]) for b in wide]
    gathers = [b for b in wide if b["kernel"] == "gather"]
    scalar = [b["loads"] for b in gathers if {"ld.global.b32", "ld.global.b16"} & set(b["loads"])]
    assert gathers and not scalar, scalar


def test_rowwise_adagrad_reads_its_accumulator_before_any_warp_overwrites_it(native_builds):
    """The row's Adagrad accumulator is stored by one thread and read by every warp of the
    program; a ``bar.sync`` between the read and the write keeps a late warp from reading this
    step's value and applying the step with twice the accumulator (on the H100, fp16/bf16
    activations: elements moved by 1/sqrt(2) of the step, 5% of the weights' scale off)."""
    adagrad = [b for b in native_builds["builds"] if b["kernel"] == "update" and b["constexprs"]["OPT"] == 1]
    assert adagrad and all(b["scalar_rmw"] for b in adagrad), adagrad
    unguarded = [(b["signature"]["grad"], b["constexprs"]) for b in adagrad if b["scalar_rmw_unguarded"]]
    assert not unguarded, unguarded


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASE_NAMES)
def test_kernel_case_cuda(case):
    _fused_cases.CASES[case]("cuda", "large")


@pytest.mark.gpu
def test_cuda_zipf_batch_matches_reference_and_torch():
    """26 tables, 65536 x Zipf ids, dim 128: triton == reference; SGD == nn.Embedding + SGD."""
    _fused_cases.zipf_batch("cuda")


@pytest.mark.gpu
def test_cuda_out_of_range_is_a_clear_error_not_a_device_assert():
    from tabloader.torch.fused import FusedEmbeddingCollection
    from tabloader.torch.layers import EmbeddingConfig

    coll = FusedEmbeddingCollection([EmbeddingConfig("users", 100, 16)], device="cuda")
    with pytest.raises(IndexError, match="'users'.*100"):
        coll({"users": torch.tensor([1, 100], device="cuda")})
    with pytest.raises(IndexError, match="'users'.*-1"):
        coll({"users": torch.tensor([-1, 5], device="cuda")})
    # the device is still usable
    assert coll({"users": torch.tensor([1, 2], device="cuda")}).shape == (2, 16)
