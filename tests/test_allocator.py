"""tabloader.allocator: freed memory is kept for reuse while partitions are processed, and
handed back afterwards. Each check runs in a fresh interpreter, whose allocator state is its
own, and counts what the kernel saw (page faults, resident memory)."""

import json
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from tabloader.allocator import glibc_library

pytestmark = pytest.mark.skipif(glibc_library() is None, reason="glibc's allocator is not in use")

# Allocates six 4 MB arrays and frees them, 30 times (as a partition's columns come and go),
# outside the block, then inside it; reports the page faults of each loop, and the resident
# memory before the block, inside it once 40 MB were freed, and after it.
PROBE = textwrap.dedent("""
    import json, resource
    import numpy as np
    from tabloader.allocator import retained_freed_memory

    def faults(loops=30):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(loops):
            columns = [np.ones(1 << 19) for _ in range(6)]  # 24 MB, touched
            del columns
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    def resident_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20

    outside = faults()
    before = resident_mb()
    with retained_freed_memory():
        inside = faults()
        blocks = [np.ones(1 << 20) for _ in range(5)]  # 40 MB from the heap
        del blocks
        held = resident_mb()
    after = resident_mb()
    print(json.dumps({"outside": outside, "inside": inside, "before": before, "held": held, "after": after}))
""")


def clean_env(**env: str) -> dict:
    """This environment without glibc malloc settings (importing distributed sets one, for the
    workers it starts), plus ``env``."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    return {**inherited, **env}


def run_probe(**env: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                          env=clean_env(**env))
    return json.loads(proc.stdout)


def test_freed_memory_is_reused_inside_and_handed_back_after():
    r = run_probe()
    # glibc's default trims most of the 24 MB freed at the top of its heap: ~3000 faults per loop
    assert r["outside"] > 30 * 2000, r
    assert r["inside"] < r["outside"] / 10, r
    # the 40 MB freed inside the block stay resident until the block ends, then go back
    assert r["held"] - r["before"] > 30, r
    assert r["after"] - r["before"] < 10, r


def test_the_user_can_turn_it_off():
    r = run_probe(TABLOADER_MALLOC_TUNING="0")
    assert r["inside"] > 30 * 2000, r
    assert r["held"] - r["before"] < 10, r


def test_the_users_own_malloc_settings_are_left_alone():
    r = run_probe(MALLOC_ARENA_MAX="4")
    assert r["inside"] > 30 * 2000, r


@pytest.mark.skipif(int(pd.__version__.split(".")[0]) < 3, reason=(
    "pandas 2 (no copy-on-write) copies every multi-column output once more per pass, about a "
    "partition's worth of fresh pages whatever the allocator does: the reuse this checks is pandas 3's"))
def test_a_workflow_run_reuses_its_memory_and_hands_it_back():
    """Fit and transform run their partitions inside the block: the second transform of the
    same data faults far fewer pages in than without tuning, and nothing stays held after."""
    code = textwrap.dedent("""
        import json, resource
        import numpy as np, pandas as pd
        import tabloader as tl
        from tabloader import ops

        def resident_mb():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * resource.getpagesize() / 2**20

        rows = 3_000_000
        frame = pd.DataFrame({"c": np.arange(rows) % 1000, "x": np.random.default_rng(0).random(rows)})
        data = tl.Dataset(frame, part_size="24MB")
        wf = tl.Workflow((["c"] >> ops.Categorify()) + (["x"] >> ops.LogOp() >> ops.Normalize()), progress=False)
        wf.fit(data)
        wf.transform(data).compute()
        base = resident_mb()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        out = wf.transform(data).compute()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        ids_ok = bool((out["c"].to_numpy() == np.arange(rows) % 1000 + 3).all())
        del out
        print(json.dumps({"faults": faults, "grown": resident_mb() - base, "ids_ok": ids_ok}))
    """)

    def run(**env: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env=clean_env(**env))
        return json.loads(proc.stdout)

    tuned, plain = run(), run(TABLOADER_MALLOC_TUNING="0")
    assert tuned["ids_ok"] and plain["ids_ok"]
    assert tuned["faults"] < plain["faults"] * 0.6, (tuned, plain)
    assert tuned["grown"] < 30, tuned
