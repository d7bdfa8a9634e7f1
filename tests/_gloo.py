"""Two processes of a test script under torch.distributed's gloo backend on this machine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_two_ranks(script: str, *args: str) -> list[str]:
    """Run ``tests/<script> *args`` as ranks 0 and 1 of a gloo group (``MASTER_ADDR``,
    ``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE`` set, a free local port) and return their logs;
    an assertion fails, with the logs, when a rank fails."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
           "PYTHONPATH": os.path.dirname(HERE), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, script), *args], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(2)]
    try:
        logs = [p.communicate(timeout=120)[0].decode() for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), logs
    return logs


def exit_rank() -> None:
    """End a rank that has written its result and destroyed its process group, skipping the C++
    static destructors: once in a while one of them met a still-joinable thread of
    torch.distributed's (std::terminate, "terminate called without an active exception") and
    failed a rank that had done its work."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
