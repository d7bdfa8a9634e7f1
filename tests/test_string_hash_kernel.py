"""The CUDA source of the GPU string hash gives the CPU's bits, checked without a GPU.

``tabloader/encoding/gpu/hashing.py`` hashes strings with a CuPy ``RawKernel`` (one thread per
string) that must give exactly :func:`tabloader.hashes.hash_strings`' bits, or ids would differ
between devices. Here the kernel's own source, unchanged, is compiled as C++ for the host, and
every thread of its grid is run in a loop; its output must equal the CPU hashes bit for bit.
The ``gpu`` tests run the same kernel on a device.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pyarrow as pa
import pytest

from tabloader import hashes
from tabloader.encoding.gpu import hashing

# CUDA's thread-index built-ins as plain globals; a launch becomes a loop over blocks and threads.
_HOST_PRELUDE = """
struct Index { unsigned int x; };
static Index blockIdx, blockDim, threadIdx;
#define __global__
"""
_HOST_LAUNCH = """
extern "C" void launch(const long long* offsets, const unsigned char* chars, unsigned long long* out,
                       long long n, unsigned int blocks, unsigned int threads) {
    blockDim.x = threads;
    for (unsigned int b = 0; b < blocks; ++b) {
        for (unsigned int t = 0; t < threads; ++t) {
            blockIdx.x = b;
            threadIdx.x = t;
            fnv1a_splitmix64(offsets, chars, out, n);
        }
    }
}
"""


@pytest.fixture(scope="module")
def host_kernel(tmp_path_factory):
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the kernel's source for the host")
    folder = tmp_path_factory.mktemp("string_hash_kernel")
    source, library = folder / "kernel.cpp", folder / "kernel.so"
    source.write_text(_HOST_PRELUDE + hashing._STRING_HASH_SOURCE + _HOST_LAUNCH)
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    lib = ctypes.CDLL(str(library))
    lib.launch.restype = None
    return lib


def _run_on_host(lib, values: list[str]) -> np.ndarray:
    """The kernel's launch as ``hash_strings`` makes it, over an arrow string column's buffers."""
    column = pa.array(values, type=pa.large_string())
    _, offset_buffer, char_buffer = column.buffers()
    offsets = np.frombuffer(offset_buffer, dtype=np.int64)[: len(values) + 1].copy()
    chars = np.frombuffer(char_buffer, dtype=np.uint8).copy() if char_buffer is not None else np.zeros(1, np.uint8)
    out = np.zeros(len(values), dtype=np.uint64)
    blocks = (len(values) + hashing._THREADS - 1) // hashing._THREADS
    lib.launch(offsets.ctypes.data_as(ctypes.c_void_p), chars.ctypes.data_as(ctypes.c_void_p),
               out.ctypes.data_as(ctypes.c_void_p), ctypes.c_longlong(len(values)),
               ctypes.c_uint(blocks), ctypes.c_uint(hashing._THREADS))
    return out


def test_the_kernel_source_gives_the_cpu_bits(host_kernel):
    rng = np.random.default_rng(7)
    alphabet = list("abcXYZ019 _-") + ["é", "漢", "🙂", "\x00", "\xff"]
    randoms = ["".join(rng.choice(alphabet, size=rng.integers(0, 40))) for _ in range(1000)]
    values = ["", "a", "A", "a" * 10_000, "\x00", "naïve", "0", "-1", "1e6"] + randoms
    got = _run_on_host(host_kernel, values)
    assert np.array_equal(got, hashes.hash_strings(values))


def test_fnv1a_constants_of_the_source_hash_a_known_string(host_kernel):
    """FNV-1a-64 of b"a" is 0xAF63DC4C8601EC8C (the published test vector); the kernel adds the
    splitmix64 finalizer, written here independently of the library."""
    x = (0xAF63DC4C8601EC8C + 0x9E3779B97F4A7C15) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
    assert int(_run_on_host(host_kernel, ["a"])[0]) == x ^ (x >> 31)
