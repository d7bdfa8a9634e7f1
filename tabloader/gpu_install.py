"""Which pip extra brings the GPU path to this machine: the CUDA major it runs, and the hint to print.

RAPIDS and CuPy publish one build per CUDA major, so ``pip install 'tabloader[gpu-cu12]'`` and
``'tabloader[gpu-cu13]'`` are different extras (``pyproject.toml``). :func:`install_hint` is what
:mod:`tabloader.backend` says when a GPU module is missing.
"""

from __future__ import annotations

# The pip extra of the GPU path per CUDA major (pyproject.toml): RAPIDS and CuPy build per major.
GPU_EXTRAS = {12: "gpu-cu12", 13: "gpu-cu13"}
_GPU_PACKAGES = {"cudf": "cudf-cu{major}", "cupy": "cupy-cuda{major}x", "dask_cudf": "dask-cudf-cu{major}"}


def gpu_extra(cuda_major: int) -> str:
    """The extra of ``pip install 'tabloader[...]'`` for a CUDA major version: ``gpu-cu12`` or
    ``gpu-cu13`` (newer majors run the newest builds: their drivers run older runtimes).

    Example:
        >>> gpu_extra(12), gpu_extra(13)
        ('gpu-cu12', 'gpu-cu13')
    """
    if cuda_major < min(GPU_EXTRAS):
        raise ValueError(f"tabloader's GPU path needs CUDA {min(GPU_EXTRAS)} or newer; this machine has "
                         f"CUDA {cuda_major}: update the NVIDIA driver")
    return GPU_EXTRAS[min(cuda_major, max(GPU_EXTRAS))]


def install_hint(module: str, cuda_major: int | None = None) -> str:
    """How to install the GPU ``module`` (``cudf``, ``cupy``, ``dask_cudf``): the pip extra of
    ``cuda_major``, by default the CUDA major of this machine (:func:`detect_cuda_major`); both
    extras when it is unknown.

    Example:
        >>> install_hint("cudf", 13)
        "pip install 'tabloader[gpu-cu13]' (it brings cudf-cu13) on a machine with an NVIDIA GPU and CUDA 13"
    """
    major = detect_cuda_major() if cuda_major is None else cuda_major
    if major is None:
        return ("pip install 'tabloader[gpu-cu12]' for CUDA 12 or 'tabloader[gpu-cu13]' for CUDA 13, on a "
                "machine with an NVIDIA GPU (`nvidia-smi` shows the CUDA version of its driver)")
    try:
        extra = gpu_extra(major)
    except ValueError as exc:
        return str(exc)
    package = _GPU_PACKAGES[module].format(major=extra.removeprefix("gpu-cu"))
    return f"pip install 'tabloader[{extra}]' (it brings {package}) on a machine with an NVIDIA GPU and CUDA {major}"


def detect_cuda_major() -> int | None:
    """The CUDA major version to install GPU packages for, or None when nothing says.

    The CUDA runtime an installed GPU library was built for comes first (PyTorch, then CuPy:
    one process then loads one CUDA major), else the newest CUDA the driver runs (``nvidia-smi``).
    Asked only when an install hint is needed (it may run ``nvidia-smi``).
    """
    for probe in (_torch_cuda_major, _cupy_cuda_major, _driver_cuda_major):
        try:
            major = probe()
        except Exception:  # a broken install or driver says nothing about the major
            major = None
        if major is not None:
            return major
    return None


def _torch_cuda_major() -> int | None:
    """PyTorch's CUDA major: asked of the module when it is imported, else read from the wheel's
    version (``2.4.0+cu121``) rather than importing it (seconds, for an error message)."""
    import sys
    from importlib import metadata

    torch = sys.modules.get("torch")
    if torch is not None:
        return int(torch.version.cuda.split(".")[0]) if torch.version.cuda else None
    try:
        local = metadata.version("torch").partition("+")[2]
    except metadata.PackageNotFoundError:
        return None
    return int(local[2:-1]) if local.startswith("cu") and local[2:].isdigit() and len(local) > 3 else None


def _cupy_cuda_major() -> int | None:
    from importlib import metadata

    for dist in metadata.distributions():  # cupy-cuda12x, cupy-cuda13x: the wheel's name says
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("cupy-cuda") and name.endswith("x") and name[9:-1].isdigit():
            return int(name[9:-1])
    return None


def _driver_cuda_major() -> int | None:
    import re
    import subprocess

    try:
        text = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"CUDA Version:\s*(\d+)\.", text)
    return int(found.group(1)) if found else None
