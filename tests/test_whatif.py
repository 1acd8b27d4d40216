"""What-if re-runs of a stored step (esp/bench/whatif.py) on the embedded model: same root, lossless tokens."""
from __future__ import annotations

import pytest

from esp.decoding.engine import Decoder
from esp.errors import ESPError
from esp.methods import build
from esp.bench.whatif import whatif_step

pytestmark = pytest.mark.model

PROMPT = "Count from 1 to 20, separated by commas."


@pytest.fixture(scope="module")
def stored(lm):
    ids = lm.chat_ids(PROMPT)
    return ids, list(Decoder(lm, build("esp:k=2:bc=30"), max_new_tokens=24).stream(ids))


@pytest.mark.parametrize("spec", ["esp:k=1:bc=10", "esp:k=2:bc=60", "ar", "pld", "stand", "lade",
                                  "hybrid:k=1:bc=30", "hybrid:k=1:bc=auto", "esp:k=1:bc=auto"])
def test_alternative_step_has_the_same_root_and_emits_the_stored_tokens(lm, stored, spec):
    ids, steps = stored
    tokens = [t for s in steps for t in s.emitted]
    for i in (1, 3):
        alt = whatif_step(lm, build(spec), ids, steps, i, max_new_tokens=24)
        assert alt.step == i and alt.root == steps[i].root
        assert alt.positions[0] == steps[i].positions[0] and alt.n_past == steps[i].n_past
        start = sum(len(s.emitted) for s in steps[:i])
        assert alt.emitted == tokens[start : start + len(alt.emitted)]  # greedy: lossless
        assert not alt.prefill


def test_other_settings_give_another_tree(lm, stored):
    ids, steps = stored
    alt = whatif_step(lm, build("esp:k=2:bc=60"), ids, steps, 2, max_new_tokens=24)
    assert len(alt.nodes) > len(steps[2].nodes)


def test_bad_step_is_one_clear_line(lm, stored):
    ids, steps = stored
    with pytest.raises(ESPError, match="step 0 is the prefill"):
        whatif_step(lm, build("ar"), ids, steps, 0)
    with pytest.raises(ESPError, match="from 1 to"):
        whatif_step(lm, build("ar"), ids, steps, len(steps))


def test_a_stored_root_the_replay_does_not_choose_is_a_failure_not_a_near_tie(lm, stored):
    """The root check uses esp.bench.verdict: a root outside the replay's top two is named as a real difference."""
    from dataclasses import replace

    ids, steps = stored
    real = steps[2].root
    fake = next(t for t in range(5, 50) if t not in steps[1].top2[-1][::2])
    tampered = steps[:2] + [replace(steps[2], root=fake)] + steps[3:]
    assert steps[1].top2[-1][0] == real  # the stored top-2 of the row that chose the root, chosen first
    with pytest.raises(ESPError, match=r"cannot be re-run from the same root: .*one outside the other's best") as e:
        whatif_step(lm, build("ar"), ids, tampered, 2, max_new_tokens=24)
    assert "near-tie" not in str(e.value)
