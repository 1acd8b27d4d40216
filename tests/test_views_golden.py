"""What the explorer draws (the Mask Lens, the verifier's eye, the alignment, the attention pattern) stays what it
was when the views were made cheap (issue 48): fixed runs on the tiny float64 models against the records the
engine wrote before (tests/data/views_golden.json), value for value within float tolerance, and, on the embedded
model in float32, the lens against the raw logit lens computed in float64 from the step's own states.

    python tests/test_views_golden.py      # rewrites tests/data/views_golden.json (only when a view's meaning changes)
"""
from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from conftest import repeated_prompt  # noqa: E402
from esp import methods  # noqa: E402
from esp.decoding import engine  # noqa: E402
from esp.decoding.engine import Decoder  # noqa: E402
from esp.sampling import Sampling  # noqa: E402
from esp.trace import StepTrace  # noqa: E402

GOLDEN = HERE / "data" / "views_golden.json"
# (arch, method, sampling, new tokens): ESP's masks (static and dynamic trees), the hybrid's mixed tree, and the
# eye under sampling (the distribution drawn from).
RUNS = [("llama", "esp:k=2:bc=30", "greedy", 16), ("qwen3", "esp:k=3:bc=60:tree=dynamic", "greedy", 12),
        ("gemma3", "hybrid:bc=60", "greedy", 16), ("qwen2", "esp:k=2:bc=30", "sampling", 12)]
SAMPLING = {"greedy": Sampling(), "sampling": Sampling(temperature=0.8, top_k=8, seed=5)}


def record(lm, spec: str, sampling: str, tokens: int) -> dict:
    """One fixed run's tokens, trees and every view record, as plain data."""
    steps = Decoder(lm, methods.build(spec), SAMPLING[sampling], tokens, align=True, lens=True).stream(
        repeated_prompt(7, lm.vocab_size))
    return {"steps": [views_of(s) for s in steps]}


def views_of(s: StepTrace) -> dict:
    d = s.to_dict()
    return {"emitted": d["emitted"], "tree": [n["token"] for n in d["nodes"]],
            "mask": ["".join("1" if x else "0" for x in row) for row in d["mask"]],
            "targets": [[n["target_rank"], n["target_p"]] for n in d["nodes"]], "eye": d["eye"],
            "lens": [{k: v for k, v in m.items() if k != "texts"} for m in d["lens"]], "lens_real": d["lens_real"],
            "alignment": d["alignment"]}


def close(a: float | None, b: float | None) -> bool:
    """Equal as probabilities kept to 3 significant digits are: at most one unit in the third digit apart (either
    side may have been rounded), or both None."""
    if a is None or b is None:
        return a is b
    top = max(abs(a), abs(b))
    return top == 0 or abs(a - b) <= 1.001 * 10 ** (math.floor(math.log10(top)) - 2)


def same_ranked(ids: list[int], ps: list[float], want_ids: list[int], want_ps: list[float]) -> bool:
    """Two best-first lists of (id, p) agree: the same probabilities within tolerance, and the same ids except
    where a near-equal probability may have swapped two (or pushed one past the cut)."""
    if len(ps) != len(want_ps) or not all(close(a, b) for a, b in zip(ps, want_ps)):
        return False
    cut = want_ps[-1] if want_ps else 0.0
    for i, p in zip(ids, ps):
        if i not in want_ids and not close(p, cut):
            return False
    got = dict(zip(ids, ps))
    return all(close(got[i], p) for i, p in zip(want_ids, want_ps) if i in got)


def compare(got: dict, want: dict) -> None:
    assert len(got["steps"]) == len(want["steps"])
    for n, (g, w) in enumerate(zip(got["steps"], want["steps"])):
        where = f"step {n}"
        assert g["emitted"] == w["emitted"] and g["tree"] == w["tree"] and g["mask"] == w["mask"], where
        assert [r for r, _ in g["targets"]] == [r for r, _ in w["targets"]], where
        assert all(close(a, b) for (_, a), (_, b) in zip(g["targets"], w["targets"])), where
        assert len(g["eye"]) == len(w["eye"]), where
        for a, b in zip(g["eye"], w["eye"]):
            assert same_ranked(a[::2], a[1::2], b[::2], b[1::2]), (where, a, b)
        assert len(g["lens"]) == len(w["lens"]), where
        for a, b in zip(g["lens"], w["lens"]):
            assert (a["j"], a["position"]) == (b["j"], b["position"]), where
            for layer, (ia, pa, ib, pb) in enumerate(zip(a["tokens"], a["probs"], b["tokens"], b["probs"])):
                assert same_ranked(ia, pa, ib, pb), (where, a["j"], layer, ia, pa, ib, pb)
        assert len(g["lens_real"]) == len(w["lens_real"]), where
        for a, b in zip(g["lens_real"], w["lens_real"]):
            keys = ("source_step", "j", "token", "text", "accepted", "rank")
            assert {k: a[k] for k in keys} == {k: b[k] for k in keys}, where
            assert all(close(x, y) for x, y in zip(a["prob"], b["prob"])), where
        assert len(g["alignment"]) == len(w["alignment"]), where
        for a, b in zip(g["alignment"], w["alignment"]):
            keys = ("source_step", "j", "position", "accepted")
            assert {k: a[k] for k in keys} == {k: b[k] for k in keys}, where
            pairs = zip(a["cos"] + a["cos_raw"], b["cos"] + b["cos_raw"])
            assert all(math.isclose(x, y, abs_tol=1e-5) for x, y in pairs), where


@pytest.mark.parametrize("arch,spec,sampling,tokens", RUNS)
def test_every_view_is_what_it_was(tiny_lm, arch, spec, sampling, tokens):
    want = json.loads(GOLDEN.read_text())[f"{arch} {spec} {sampling}"]
    got = json.loads(json.dumps(record(tiny_lm(arch), spec, sampling, tokens)))
    assert any(s["lens"] for s in want["steps"]) and any(s["lens_real"] for s in want["steps"])
    assert any(s["alignment"] for s in want["steps"]) == spec.startswith("esp")  # ESP's own record
    compare(got, want)


def test_the_comparison_bites():
    """A changed probability, rank or id is caught; a swap of two near-equal probabilities is not one."""
    assert same_ranked([1, 2], [0.5, 0.25], [1, 2], [0.5, 0.25])
    assert not same_ranked([1, 2], [0.5, 0.248], [1, 2], [0.5, 0.25])
    assert same_ranked([1, 2], [0.5, 0.00101], [1, 2], [0.5, 0.0010077])  # 3 significant digits
    assert not same_ranked([1, 3], [0.5, 0.25], [1, 2], [0.5, 0.2])
    assert same_ranked([2, 1], [0.3, 0.3], [1, 2], [0.3, 0.3])
    step = {"emitted": [1], "tree": [1], "mask": [], "targets": [[None, None]], "eye": [[1, 0.5]], "lens": [],
            "lens_real": [{"source_step": 0, "j": 1, "token": 4, "text": "4", "accepted": True, "prob": [0.5],
                           "rank": [1]}], "alignment": []}
    moved = json.loads(json.dumps(step))
    moved["lens_real"][0]["rank"] = [2]
    with pytest.raises(AssertionError):
        compare({"steps": [moved]}, {"steps": [step]})


@pytest.mark.model
def test_the_embedded_models_lens_is_the_raw_logit_lens_of_its_states(lm):
    """float32: every layer's top tokens and probabilities, and the real token's probability and rank, as the
    float64 logit lens of the same states gives them (the states captured from the step's own forward)."""
    states = []
    forward = lm.forward

    def spy(*a, **kw):
        out = forward(*a, **kw)
        states.append(out[1])
        return out

    lm.forward = spy
    try:
        ids = lm.chat_ids("Count from 1 to 30, separated by commas.")
        steps = list(Decoder(lm, methods.build("esp:k=2:bc=30"), max_new_tokens=12, lens=True).stream(ids))
    finally:
        del lm.forward
    head = lm.model.get_output_embeddings().weight.double()
    norm = copy.deepcopy(lm.model.get_decoder().norm).double()
    lens = {(s.step, m.j): m for s in steps for m in s.lens}
    checked = 0
    for s, layers in zip(steps, states):
        lead = len(ids) - 1 if s.prefill else 0
        for m in s.lens:
            row = lead + s.row_labels.index(f"mask {walk_end_index(s)}.{m.j}")
            h = torch.stack([x[row] for x in layers]).double()
            z = torch.cat([norm(h[:-1]), h[-1:]]) @ head.T
            p = torch.softmax(z, -1)
            for layer, (got_ids, got_ps) in enumerate(zip(m.tokens, m.probs)):
                want_p, want_i = p[layer].topk(len(got_ids))
                assert same_ranked(got_ids, got_ps, want_i.tolist(), want_p.tolist()), (s.step, m.j, layer)
            checked += 1
    for s in steps:
        for r in s.lens_real:
            assert lens[(r.source_step, r.j)].tokens[-1][0] == r.token or r.rank[-1] > 1
    assert checked >= 8


def walk_end_index(s: StepTrace) -> int:
    """The node where the step's accepted path ends (its masks are the lens's)."""
    return s.accepted_rows[-1]


def main() -> None:
    from conftest import _tiny
    from esp.models.lm import IdTokenizer, LM

    out = {}
    for arch, spec, sampling, tokens in RUNS:
        torch.manual_seed(0)
        model = _tiny(arch).double().eval()
        model.generation_config.eos_token_id = None
        out[f"{arch} {spec} {sampling}"] = record(LM(model, IdTokenizer(), f"tiny-{arch}"), spec, sampling, tokens)
    GOLDEN.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
