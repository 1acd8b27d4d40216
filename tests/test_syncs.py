"""Host sync points per decoding step stay few (scripts/count_syncs.py counts them): behaviour, not time."""
from __future__ import annotations

import pytest

from conftest import script_module

count_syncs = script_module("count_syncs")

# Host syncs per step with timings off (the bench's mode), reads of tensor values and device synchronizes
# together: every method reads its verify rows once and what its drafter learns from the step once (ESP
# also its next tree's top-k); bc=auto adds its forward timer, counted as one sync (on CUDA it reads its
# events a step later without waiting). Issue 23's bar: at most 3 for every method and budget. The code
# before it: tr 5.9, hybrid:bc=60 18.2, hybrid:bc=auto 24.6.
METHODS = count_syncs.METHODS.split(",") + ["esp:bc=auto", "stand:bc=auto"]
BAR = 3.0


@pytest.fixture(scope="module")
def tiny():
    return count_syncs.tiny_lm()


@pytest.mark.parametrize("method", METHODS)
def test_syncs_per_step_are_at_most_three(tiny, method):
    prompt = (list(range(40, 60)) * 3)[:50]
    count_syncs.count(tiny, method, prompt, 24, timings=False)  # fills the process's caches (LADE's window shapes)
    r = count_syncs.count(tiny, method, prompt, 24, timings=False)
    assert r["steps"] >= 4
    assert r["total_mean"] <= BAR, r
    # No device synchronize inside a step unless timings are asked for, but bc=auto's one timed forward.
    assert r["syncs_mean"] == (1 if "bc=auto" in method else 0), r
    timed = count_syncs.count(tiny, method, prompt, 24)
    assert timed["syncs_mean"] >= 6  # with timings, every phase boundary syncs (as it would on CUDA)
    if "bc=auto" not in method:  # bc=auto's widths follow measured seconds, so its steps (and reads) may differ
        assert timed["reads_mean"] == r["reads_mean"]


def test_the_counter_sees_a_read():
    import torch

    with count_syncs.Reads() as reads:
        x = torch.arange(3)
        x.tolist(), int(x[0]), float(x[1]), bool(x[2] > 0), x.sum().item()
    assert reads.n == 5


@pytest.mark.parametrize("method", ["esp:k=2:bc=30", "hybrid:bc=60", "pld"])
def test_the_views_add_at_most_four_host_reads_a_step(tiny, method):
    """Recording what the app draws (issue 48) reads back, per step, the verifier's eye, the Mask Lens, the masks
    it resolves and the alignment once each: it was 19 reads a step for ESP before (one per mask, row and list)."""
    prompt = (list(range(40, 60)) * 3)[:50]
    count_syncs.count(tiny, method, prompt, 24, timings=False, views=True)
    seen = count_syncs.count(tiny, method, prompt, 24, timings=False, views=True)
    plain = count_syncs.count(tiny, method, prompt, 24, timings=False)
    assert seen["steps"] == plain["steps"] >= 4
    assert seen["reads_max"] - plain["reads_max"] <= 4 and seen["syncs_mean"] == 0, (seen, plain)
