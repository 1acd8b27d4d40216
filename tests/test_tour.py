"""The tour's data file: every stop names a shipped trace, one of its steps and a view on the page; a bad
file is refused in one line naming the stop."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from components.tour import MAX_STOPS, MIN_STOPS, TOUR, VIEWS, load_tour

ROOT = Path(__file__).resolve().parents[1]


def page_ids() -> set[str]:
    """The elem_ids of every component on the built page (no model is loaded to build it)."""
    import app

    return {b.elem_id for b in app.build_app().blocks.values() if getattr(b, "elem_id", None)}


def test_shipped_tour_is_valid():
    stops = load_tour()
    assert MIN_STOPS <= len(stops) <= MAX_STOPS
    for stop in stops:
        steps = json.loads((ROOT / "assets" / f"{stop.trace}.json").read_text())["steps"]
        assert 0 <= stop.step < len(steps) and stop.view in VIEWS
        assert 2 <= len(re.findall(r"[.?!](?:\s|$)", stop.text)) <= 3, stop  # two or three sentences
    assert len({s.view for s in stops}) >= 6  # a walk through the views, not one view many times


@pytest.mark.app
def test_views_are_on_the_page():
    ids = page_ids()
    assert set(VIEWS) <= ids, set(VIEWS) - ids


def _write(tmp_path, stops):
    path = tmp_path / "tour.json"
    path.write_text(json.dumps(stops))
    return path


@pytest.mark.parametrize("change, says", [
    ({"trace": "trace_nope"}, "tour stop 2: no shipped trace 'trace_nope'"),
    ({"trace": "../app"}, "no shipped trace"),
    ({"step": 999}, "tour stop 2: step 999 is not one of trace_masks's steps"),
    ({"step": "3"}, "step '3' is not one of"),
    ({"view": "nowhere"}, "tour stop 2: view 'nowhere' is not on the page"),
    ({"text": " "}, "tour stop 2: it has no text"),
    ({"tab": "run"}, "tour stop 2: needs exactly trace, step, view and text"),
])
def test_bad_stop_refused_in_one_line(tmp_path, change, says):
    stops = [dict(s.__dict__) for s in load_tour()]
    stops[1] = {**stops[1], "trace": "trace_masks", "step": 2, **change}
    with pytest.raises(ValueError) as e:
        load_tour(_write(tmp_path, stops))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_bad_file_refused(tmp_path):
    stops = [dict(s.__dict__) for s in load_tour()]
    with pytest.raises(ValueError, match=f"a list of {MIN_STOPS}-{MAX_STOPS} stops"):
        load_tour(_write(tmp_path, stops[:3]))
    (tmp_path / "broken.json").write_text("[{")
    with pytest.raises(ValueError, match="cannot read the tour broken.json"):
        load_tour(tmp_path / "broken.json")
    assert TOUR.exists()


def test_the_tour_starts_on_the_run_the_page_opens_on():
    from explorer.calls import OPENING

    assert load_tour()[0].trace == OPENING


# ---------------------------------------------------------------- every number a stop states is its trace's

def _steps(trace: str) -> list:
    from components.common import as_steps

    return as_steps(json.loads((ROOT / "assets" / f"{trace}.json").read_text())["steps"])


def _stop(trace: str, view: str, step: int | None = None):
    """The tour's stop on `view` of `trace` (at `step`, when several stops share the view)."""
    found = [s for s in load_tour() if s.trace == trace and s.view == view and step in (None, s.step)]
    assert len(found) == 1, (trace, view, step, found)
    return found[0]


def _number(pattern: str, text: str) -> str:
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return m.group(1)


def _quoted(token: str) -> str:
    return f"'{token}'"


def test_the_first_stop_states_the_opened_runs_size():
    stop = load_tour()[0]
    data = json.loads((ROOT / "assets" / f"{stop.trace}.json").read_text())
    summary, first = data["summary"], _steps(stop.trace)[0]
    assert stop.step == 0 and first.prefill
    tokens, forwards = map(int, re.search(r"(\d+) tokens in (\d+) forwards", stop.text).groups())
    assert (tokens, forwards) == (summary["tokens"], summary["forwards"]) and summary["method"] == "esp"
    k = int(_number(r"k = (\d+) mask tokens", stop.text))
    assert first.row_kinds.count("mask") == k and ":init=mean" in data["meta"]["spec"]


def test_the_tree_and_attention_stops():
    tree = _stop("trace_qwen15", "tree-plot", 2)
    step = _steps("trace_qwen15")[2]
    assert f"static shape {step.shape}" in tree.text and step.shape == [7, 2]
    depth1 = [n for n in step.nodes if n.depth == 1]
    best = max(depth1, key=lambda n: n.prob)
    assert {n.parent for n in step.nodes if n.depth == 2} == {best.index}  # "under the best of them"
    attention = _stop("trace_qwen15", "mask-plot", 2)
    kept = [n for n in step.nodes if n.row in step.accepted_rows]
    assert [n.text for n in kept] == [step.nodes[0].text, " blue"] and _quoted(" blue") in attention.text


def test_the_walk_stop_names_the_correction():
    from components.common import CORRECTION, own_kind

    stop = _stop("trace_qwen15", "step-words")
    step = _steps("trace_qwen15")[stop.step]
    fed = [n for n in step.nodes if n.depth == 1 and n.row is not None]
    assert not step.accepted and own_kind(step) == CORRECTION
    assert f"wanted {_quoted(step.emitted_text[0])} after {_quoted(step.nodes[0].text)}" in stop.text
    assert f"none of the {len(fed)} drafts" in stop.text and step.emitted[0] not in {n.token for n in fed}


def test_the_lens_stop_shows_a_mask_turning_to_the_token_that_came():
    from components.common import walk_end
    from components.lens_view import commit_layer, resolved

    stop = _stop("trace_qwen15", "lens-plot")
    steps = _steps("trace_qwen15")
    i = stop.step
    lens = next(r for r in steps[i].lens if r.j == 1)
    real = resolved(steps, i)[1]
    came = _quoted(real.text)
    assert real.accepted and f"{came} from layer {commit_layer(real)} on" in stop.text
    top = [lens.texts[t[0]] for t in lens.tokens]
    turned = commit_layer(real)
    assert all(t == real.text for t in top[turned:]) and real.text not in top[: turned - 5]  # noise below
    before = int(_number(r"' at layer (\d+)", stop.text))
    assert before == turned - 1 and f"{_quoted(top[before])} at layer {before}" in stop.text
    assert f"p = {real.prob[-1]:.2f} at the output" in stop.text
    assert f"after {_quoted(walk_end(steps[i]).text)}" in stop.text  # where the masks were fed
    assert f"then says {_quoted(steps[i].emitted_text[-1])}" in stop.text
    assert real.token in steps[i + 1].accepted and f"Step {i + 1} drafted {came}" in stop.text


def test_the_eye_stop_states_the_drafts_ranks():
    from components.eye_view import eye_pairs

    stop = _stop("trace_qwen15", "eye-plot")
    step = _steps("trace_qwen15")[stop.step]
    want, p = eye_pairs(step, 0)[0]
    assert not step.accepted and step.emitted == [want]
    assert f"after {_quoted(step.nodes[0].text)}, the model wanted {_quoted(step.emitted_text[0])} (p = {p:.2f})" in stop.text
    named = re.findall(r"'([^']+)' at rank (\d+)", stop.text)
    assert len(named) == 2
    ranks = {n.text: n.target_rank for n in step.nodes if n.depth == 1 and n.row is not None}
    for text, rank in named:
        assert ranks[text] == int(rank)


def test_the_both_depths_stop():
    from components.common import BONUS, own_kind
    from esp.trace import ESP

    stop = _stop("trace_qwen15", "tree-plot", 7)
    step = _steps("trace_qwen15")[stop.step]
    path = sorted((n for n in step.nodes if n.status == "accepted"), key=lambda n: n.depth)
    assert [n.depth for n in path] == [1, 2] and all(ESP in n.sources for n in path)
    assert f"{_quoted(path[0].text)} from mask 1 and {_quoted(path[1].text)} from mask 2" in stop.text
    assert own_kind(step) == BONUS and f"{_quoted(step.emitted_text[-1])} as a bonus" in stop.text
    assert f"emitted {len(step.emitted)} tokens" in stop.text


def test_the_commitment_and_rank_stops():
    from components.lens_view import commitments, rank_stats

    steps = _steps("trace_qwen15")
    strip = _stop("trace_qwen15", "commit-plot")
    found = commitments(steps, strip.step)
    layers = [layer for _, layer in found.values()]
    committed = [x for x in layers if x is not None]
    last = len(next(iter(found.values()))[0].rank) - 1
    assert f"each of the {len(found)} drafts" in strip.text and len(committed) * 2 == len(found)  # "half"
    assert f"({min(committed)} to {max(committed)} of {last})" in strip.text

    ranks = _stop("trace_qwen15", "lens-rank-plot")
    stats = rank_stats([r for s in steps[: ranks.step + 1] for r in s.lens_real])
    good, bad = stats["accepted"], stats["rejected"]
    assert f"the {good['n']} accepted masks" in ranks.text and f"the {bad['n']} rejected masks" in ranks.text
    up_to = int(_number(r"above 1000 up to layer (\d+)", ranks.text))
    assert (good["mean"][: up_to + 1] > 1000).all() and good["mean"][up_to + 1] < 1000
    assert f"climbs to {good['mean'][-1]:.1f} at the output" in ranks.text and good["top"][-1] == 1.0
    assert f"ends at a mean rank of {bad['mean'][-1]:.0f}" in ranks.text


def test_the_copy_and_cost_stops():
    from components.cost_view import ratio, step_curve, step_width

    tree, cost = _stop("trace_copy", "tree-plot"), _stop("trace_copy", "cost-plot")
    assert tree.step == cost.step
    step = _steps("trace_copy")[cost.step]
    drafts = len(step.accepted)
    assert f"accepted {drafts} drafts" in tree.text and f"its {drafts} drafts" in cost.text
    width = step_width(step)
    r = ratio(step_curve(step, None), width)
    assert f"a forward of {width} rows costs about {r:.1f} one-row forwards" in cost.text
    assert f"emitted {len(step.emitted)} tokens" in cost.text and len(step.emitted) > r  # "and won"
    assert len(step.emitted) < drafts + 1 and step.emitted_text[-1] == "<|im_end|>"  # cut by the answer's end


def test_the_size_stop_matches_the_shipped_results():
    from components.size_view import ESP, load_sizes

    stop = _stop("trace_qwen05", "size-plot")
    runs = {r["label"]: {m: v["tau"] for m, v in r["results"].items()} for r in load_sizes()["runs"]}
    baselines = ("pld", "stand", "lade", "tr")
    small = runs["SmolLM2-135M"]
    assert small[ESP] < max(small["pld"], small["stand"])
    taus = re.search(r"τ (\d\.\d\d) and (\d\.\d\d)", stop.text).groups()
    for label, tau in zip(("Qwen2.5-Coder-0.5B", "Qwen2.5-Coder-1.5B"), taus):
        assert runs[label][ESP] > max(runs[label][b] for b in baselines) and f"{runs[label][ESP]:.2f}" == tau
