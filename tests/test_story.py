"""The first minute's data (issue 47): the story of one step, every number it states checked against the trace;
what predict mode scores a guess against and the hints it gives; the figures' text equivalents; all of it in the
lecture file. Pure functions, no browser (tests/test_browser_story.py drives them in chromium)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from components.common import BONUS, accepted_nodes, as_steps, own_kind, walk_end
from components.cost_view import step_width
from components.export import read_trace_json
from components.eye_view import eye_pairs
from components.lens_view import commit_layer, resolved
from components.story import VIEWS, lam, quote, story, story_step

ROOT = Path(__file__).resolve().parents[1]
OPENING = ROOT / "assets" / "trace_qwen15.json"
NUMBER = re.compile(r"\d+(?:\.\d+)?")


@pytest.fixture(scope="module")
def opening():
    return read_trace_json(OPENING)


@pytest.fixture(scope="module")
def told(opening):
    meta, steps = opening
    return story(steps, meta)


def _phase(told: dict, name: str) -> str:
    found = [p["text"] for p in told["phases"] if p["name"] == name]
    assert len(found) == 1, (name, told["phases"])
    return found[0]


def _pct(p: float) -> str:
    return f"{round(100 * p)}%"


def test_the_opening_run_tells_a_step_whose_masks_drafts_were_accepted(opening, told):
    from explorer.calls import OPENING as OPENED

    meta, steps = opening
    assert OPENED == OPENING.stem  # the story is of the run the page opens on
    i = told["step"]
    assert i == story_step(steps) and steps[i].accepted
    path = accepted_nodes(steps[i])
    assert all(n.sources == ["esp"] for n in path)
    assert len(path) == max(len(s.accepted) for s in steps)  # the most drafts any step kept
    assert i == 7 and len(path) == 2 and own_kind(steps[i]) == BONUS  # both depths, then a bonus token


def test_phases_are_short_and_each_lights_a_view(told):
    assert len(told["phases"]) >= 4
    for p in told["phases"]:
        assert p["view"] in VIEWS and p["name"] and p["text"]
        assert len(p["text"].split()) <= 60, p  # a few sentences, read in seconds
        assert 2 <= len(re.findall(r"[.!?](?:\s|$)", p["text"])) <= 5, p
    assert [p["view"] for p in told["phases"]] == ["tree", "mask", "eye", "text", "lens"]
    assert [a["id"] for a in told["actions"]] == ["play"]


def test_the_draft_phase_states_the_trees_numbers(opening, told):
    meta, steps = opening
    step = steps[told["step"]]
    text = _phase(told, "The masks draft")
    first = [n for n in step.nodes if n.depth == 1 and n.row is not None]
    second = [n for n in step.nodes if n.depth == 2 and n.row is not None]
    best = max(first, key=lambda n: n.prob)
    masks = step.row_kinds.count("mask") // sum(n.row is not None for n in step.nodes)
    assert f"{masks} mask tokens" in text and masks == int(re.search(r"k=(\d+)", meta["spec"]).group(1))
    assert f"Mask 1's {len(first)} likeliest guesses" in text and len(first) == step.shape[0]
    assert f"{quote(best.text)} first ({_pct(best.prob)} sure)" in text
    assert {n.parent for n in second} == {best.index}
    assert f"Mask 2's guesses {quote(second[0].text)} and {quote(second[1].text)} grow under {quote(best.text)}" in text
    so_far = "".join(t for s in steps[: told["step"]] for t in s.emitted_text)
    assert " ".join(so_far.split()[-6:]) in text


def test_the_forward_phase_counts_the_blocks_rows(opening, told):
    _, steps = opening
    step = steps[told["step"]]
    text = _phase(told, "One forward reads the whole block")
    fed = sum(n.row is not None for n in step.nodes[1:])
    assert f"the {fed} drafts and {step.row_kinds.count('mask')} mask rows" in text
    assert f"{step_width(step)} rows in one forward" in text and step_width(step) == len(step.row_kinds)
    assert f"The last token {quote(step.nodes[0].text)}" in text


def test_the_walk_phase_states_the_verifiers_choices(opening, told):
    _, steps = opening
    step = steps[told["step"]]
    text = _phase(told, "The verifier walks the tree")
    path = [step.nodes[0]] + accepted_nodes(step)
    for row, node in enumerate(path[1:]):
        (want, p), *_ = eye_pairs(step, row)
        assert want == node.token and node.target_rank == 1  # the model's own top choice was the draft
        assert f"After {quote(path[row].text)} it wanted {quote(node.text)} ({_pct(p)} sure): kept." in text
    (own, p), *_ = eye_pairs(step, len(step.accepted))
    assert own == step.emitted[-1] == step.bonus
    assert f"the model's own next word, {quote(step.emitted_text[-1])} ({_pct(p)} sure), comes free as a bonus" in text
    assert not [n for n in step.nodes if n.parent == walk_end(step).index and n.row is not None]  # nothing below


def test_the_join_and_move_on_phases(opening, told):
    meta, steps = opening
    i = told["step"]
    step = steps[i]
    join = _phase(told, "The kept path joins the text")
    n = len(step.emitted)
    assert f"one forward wrote {n} tokens, " + ", ".join(quote(t) for t in step.emitted_text[:-1]) in join
    assert f"plain decoding needs {n} forwards" in join
    assert f"({len(step.accepted_rows)} of {step_width(step)})" in join and len(step.accepted_rows) == n
    move = _phase(told, "The masks move on")
    assert f"after {quote(walk_end(step).text)}" in move and f"step {i + 1}'s drafts" in move
    assert f"{_pct(lam(meta))} of the way towards it (λ = {lam(meta):g})" in move and lam(meta) == 0.1
    data = json.loads(OPENING.read_text())["summary"]
    assert f"{data['tokens']} tokens in {data['forwards']} forwards" in move
    assert sum(len(s.emitted) for s in steps) == data["tokens"] and len(steps) == data["forwards"]


def test_every_number_the_story_states_is_one_checked_above(opening, told):
    """No number slips in unchecked: each one in the story is among those the tests above derive."""
    meta, steps = opening
    i = told["step"]
    step = steps[i]
    first = [n for n in step.nodes if n.depth == 1 and n.row is not None]
    path = accepted_nodes(step)
    known = {str(i), str(i + 1), "1", "2", str(len(first)), str(step.row_kinds.count("mask")),
             str(sum(n.row is not None for n in step.nodes[1:])), str(step_width(step)), str(len(step.emitted)),
             str(len(step.accepted_rows)), f"{lam(meta):g}", _pct(lam(meta))[:-1],
             _pct(max(first, key=lambda n: n.prob).prob)[:-1],
             *(_pct(eye_pairs(step, r)[0][1])[:-1] for r in range(len(path) + 1)),
             str(sum(len(s.emitted) for s in steps)), str(len(steps))}
    stated = {m for p in told["phases"] for m in NUMBER.findall(p["text"])}
    assert stated <= known, stated - known


def test_no_story_where_no_mask_draft_was_accepted(opening):
    meta, steps = read_trace_json(ROOT / "assets" / "trace_copy.json")
    assert story(steps, meta) is None  # a hybrid run: its drafts are not all the masks'
    meta, steps = opening
    plain = [s for s in steps if not s.accepted]
    assert story_step(plain) is None and story(plain, meta) is None


def test_a_sampled_run_is_told_in_its_own_words(opening):
    meta, steps = opening
    sampled = {**meta, "sampling": {"temperature": 0.8, "top_p": 1.0, "seed": 3}}
    walk = _phase(story(steps, sampled), "The verifier walks the tree")
    assert "sampled with seed 3" in walk and "top choice" not in walk and "sure" not in walk


# ------------------------------------------------------------------------------------------------ predict mode

def test_predict_scores_against_the_verdict_of_every_step(opening):
    from components.predict import predict_data

    meta, steps = opening
    data = predict_data(steps, meta)
    assert len(data["steps"]) == len(steps) and data["steps"][0] is None  # the prefill has nothing to guess
    for s, d in zip(steps[1:], data["steps"][1:]):
        assert d["kept"] == [n.index for n in accepted_nodes(s)]
        shown = {n["i"] for n in d["nodes"]}
        assert shown == {n.index for n in s.nodes if n.row is not None}  # pruned candidates were never checked
        assert set(d["kept"]) <= shown and 0 in shown
        assert d["own"] == s.emitted_text[len(s.accepted)].strip() and d["kind"] == own_kind(s)
        assert "".join(t for x in steps[: s.step] for t in x.emitted_text).endswith(d["before"].lstrip("…"))


def test_the_hints_say_only_what_the_trace_shows(opening):
    from components.predict import hints

    meta, steps = opening
    said = hints(steps, 7, meta)
    step = steps[7]
    first = [n for n in step.nodes if n.depth == 1 and n.row is not None]
    best = max(first, key=lambda n: n.cum_prob)
    assert accepted_nodes(step)[0] is best
    assert f"The kept {quote(best.text)} was the likeliest of the {len(first)} first-level drafts " \
           f"({best.cum_prob:.2f})." in said
    real = resolved(steps, 6)[1]
    assert real.accepted and real.text == best.text
    layers = len(real.rank) - 1
    assert f"Mask 1's lens had {quote(best.text)} on top from layer {commit_layer(real)} of {layers}." in said
    copied = hints(steps, 2, meta)  # ' blue' after ' is': the prompt asks why the sky "is blue"
    assert "“is blue” was already in the text before this step." in copied and "is blue" in meta["prompt"]
    lost = hints(steps, 3, meta)
    top = max((n for n in steps[3].nodes if n.depth == 1 and n.row is not None), key=lambda n: n.cum_prob)
    assert lost == [f"Even the masks' favourite, {quote(top.text)} ({top.cum_prob:.2f}), lost: the model wanted "
                    f"{quote(steps[3].emitted_text[0])}."]


# ----------------------------------------------------------------------------------------- text equivalents

def test_every_figure_of_every_step_has_a_text_equivalent(opening):
    from components.describe import step_texts

    _, steps = opening
    texts = step_texts(steps)
    assert len(texts) == len(steps)
    for s, t in zip(steps, texts):
        assert set(t) == {"tree", "mask", "eye", "lens"} and all(t.values())
        assert t["tree"].startswith(f"Draft tree, step {s.step}")
        assert t["mask"].startswith(f"Attention pattern, step {s.step}")
    step = steps[7]
    tree = texts[7]["tree"]
    assert tree.startswith("Draft tree, step 7: 9 drafts fed, 2 accepted (“way”, “sunlight”), "
                           "then the bonus “interacts”.")
    assert tree.count(" kept") == len(step.accepted) and tree.count(" rejected") == 7
    assert "1 pruned, never fed." in tree
    assert texts[7]["mask"].endswith("Kept in the cache: “the”, “way”, “sunlight”.")
    assert texts[7]["eye"].startswith("The verifier's eye, step 7, after “sunlight”: "
                                      "the model's top choices “interacts” 0.29")


def test_a_trace_without_the_lens_says_so_in_words():
    from components.describe import step_texts
    from components.eye_view import NO_EYE
    from components.lens_view import NO_LENS

    _, steps = read_trace_json(ROOT / "tests" / "data" / "trace_k2_bc30.json")
    texts = step_texts(steps)
    assert all(NO_EYE in t["eye"] and NO_LENS in t["lens"] for t in texts)


# --------------------------------------------------------------------------------------------- in the lecture

def test_the_lecture_carries_the_story_predict_and_text_equivalents(opening):
    from components.lecture import lecture_html

    meta, steps = opening
    page = lecture_html(steps, meta)
    first = json.loads(re.search(r'<script type="application/json" id="esp-first">(.*?)</script>', page, re.S).group(1))
    assert first["story"] == json.loads(json.dumps(story(steps, meta)))
    assert len(first["predict"]["steps"]) == len(first["alt"]) == len(steps)
    for elem in ("story", "story-back", "story-next", "story-play", "predict", "predict-panel", "reveal", "guess-tree"):
        assert f'id="{elem}"' in page, elem
    hybrid_meta, hybrid = read_trace_json(ROOT / "assets" / "trace_copy.json")
    other = lecture_html(hybrid, hybrid_meta)
    assert 'id="story-next"' not in other and 'id="predict"' in other  # no story to tell, guessing still
