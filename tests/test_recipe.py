"""A run's recipe in a link (issue 37, explorer/recipe.py): encoded and read back to the same run, every value
checked as a request's, a crafted link refused whole in one line, and a run that cannot be linked said so.
No model runs here (the one Run is answered by a recorder)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qsl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.settings import RunSettings
from esp.errors import ESPError
from explorer import calls, lesson
from explorer import recipe as links
from explorer import requests as rq
from explorer.session import Session

ROOT = Path(__file__).resolve().parents[1]
MASKS = json.loads((ROOT / "assets" / "trace_masks.json").read_text())
FEW = settings(max_examples=60, deadline=None)


def read(query: str) -> tuple[links.Recipe, int | None]:
    """A link's query as the server gets it (one value per key)."""
    return links.from_query(dict(parse_qsl(query, keep_blank_values=True)))


def same_run(a: links.Recipe, b: links.Recipe) -> bool:
    """Two recipes decode the same run: prompt, model, method spec, decoding rule, tokens, layout, dtype."""
    sa, sb = a.settings, b.settings
    return (a.prompt, a.model, sa.spec(), sa.sampling(), sa.max_new_tokens, sa.layouts, sa.dtype) == \
           (b.prompt, b.model, sb.spec(), sb.sampling(), sb.max_new_tokens, sb.layouts, sb.dtype)


@st.composite
def recipes(draw) -> links.Recipe:
    """Any recipe the page's controls could run (values within each control's bounds and choices)."""
    def value(field):
        if isinstance(field, rq.Choice):
            return draw(st.sampled_from([o for o in field.options if o != "bfloat16"]))  # bf16: machine-dependent
        if field.whole:
            return draw(st.integers(int(field.low), int(field.high)))
        return draw(st.sampled_from([field.low, field.high, field.default, 0.37, 0.1 + 0.2]))
    while True:
        values = {name: value(field) for name, field in rq.SETTINGS.items()}
        try:
            s = RunSettings(**values)
        except ESPError:  # settings the engine refuses together (k and BC): the page would say so, not run
            continue
        prompt = draw(st.text(min_size=1, max_size=80).filter(str.strip))
        return links.Recipe(prompt, rq.MODEL.default, s)


@FEW
@given(recipes(), st.one_of(st.none(), st.integers(0, 16)))
def test_a_recipe_reads_back_as_the_same_run(recipe, step):
    query = recipe.query() + ("" if step is None else f"&step={min(step, recipe.settings.max_new_tokens)}")
    back, at = read(query)
    assert same_run(back, recipe) and back.query() == recipe.query()  # one link per run
    assert at == (None if step is None else min(step, recipe.settings.max_new_tokens))


def test_a_link_carries_only_what_the_run_uses():
    greedy = links.Recipe("Count to 3.", "embedded", RunSettings(method="ar", max_new_tokens=16))
    assert dict(parse_qsl(greedy.query())) == {"prompt": "Count to 3.", "model": "embedded", "method": "ar",
                                               "dtype": "float32", "mode": "greedy", "seed": "0", "max_new": "16",
                                               "layouts": "efficient"}
    sampled = links.Recipe("<b>hi</b> & bye", "embedded",
                           RunSettings(k=3, bc=40, lam=0.15, tree="dynamic", mode="sampling", temperature=0.9,
                                       top_p=0.8, seed=7))
    got = dict(parse_qsl(sampled.query()))
    assert got["prompt"] == "<b>hi</b> & bye"  # the prompt is text: urlencoded, never cut or changed
    assert (got["k"], got["bc"], got["lam"], got["tree"], got["init"]) == ("3", "40", "0.15", "dynamic", "mean")
    assert (got["temperature"], got["top_p"], got["seed"]) == ("0.9", "0.8", "7")


@pytest.mark.parametrize("query, says", [
    ("prompt=hi&k=99", "k must be at most 4, not 99."),
    ("prompt=hi&k=two", "k must be a number, not 'two'."),
    ("prompt=hi&k=2.5", "k must be a whole number, not 2.5."),
    ("prompt=hi&lam=nan", "λ must be a number, not 'nan'."),
    ("prompt=hi&lam=1e9999", "λ must be a finite number, not inf."),
    ("prompt=hi&bc=1_000", "BC must be a number, not '1_000'."),
    ("prompt=hi&seed=-1", "seed must be at least 0, not -1."),
    ("prompt=hi&max_new=100000", "This server generates at most"),
    ("prompt=hi&method=%3Cimg+src%3Dx+onerror%3Dalert(1)%3E", "Unknown method '<img src=x onerror=alert(1)>'"),
    ("prompt=hi&init=mean:top=100000", "Unknown mask init 'mean:top=100000'"),
    ("prompt=hi&model=gpt-4", "This server does not offer the model 'gpt-4'"),
    ("prompt=hi&model=%2Ftmp", "This server does not offer the model '/tmp'"),
    ("prompt=hi&dtype=float64", "Unknown dtype 'float64'"),
    ("prompt=hi&method=ar&k=2", "This link sets k, which ar does not take."),
    ("prompt=hi&temperature=0.5", "This link sets temperature, which only sampling uses"),
    ("prompt=hi&k=4&bc=4", "BC"),  # the engine's own rule for k and BC together
    ("prompt=hi&max_new=16&step=17", "This link's step 17 is past the run's end"),
    ("prompt=hi&step=-2", "step must be at least 0, not -2."),
    ("prompt=hi&trace=trace_masks", "names both a recorded trace and a run's settings"),
    ("k=2", "This link has no prompt"),
    ("prompt=+++&k=2", "This link has no prompt"),
    ("prompt=" + "x" * 3000, "longer than a link carries"),
])
def test_a_crafted_link_is_refused_in_one_line(query, says):
    with pytest.raises(ESPError) as e:
        read(query)
    assert says in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 300


def test_a_key_given_twice_is_refused():
    with pytest.raises(ESPError, match="gives k more than once"):
        links.from_query({"prompt": "hi", "k": "2"}, repeated=("k",))


@FEW
@given(st.dictionaries(st.sampled_from([*links.FIELDS, "step", "trace", "tab", "other"]),
                       st.one_of(st.text(max_size=40), st.sampled_from(["1e308", "NaN", "-0", "３", "\u202e", "0x10",
                                                                         "<b>x</b>", "[a](javascript:x)", "2"])),
                       max_size=6))
def test_any_query_is_a_recipe_or_one_line(query):
    try:
        recipe, step = links.from_query(query)
    except ESPError as e:
        assert "\n" not in str(e) and len(str(e)) < 400
        return
    assert recipe.model in rq.LIMITS.models and recipe.prompt.strip() and recipe.settings.drafter()
    assert step is None or 0 <= step <= recipe.settings.max_new_tokens


def test_what_cannot_be_linked_is_said_not_linked():
    shipped = Session()
    calls.open_shipped("trace_masks", shipped)
    assert links.link_of(shipped.meta) == ("trace=trace_masks", "")
    made = links.Recipe("Count to 3.", "embedded", RunSettings(max_new_tokens=16))
    assert links.link_of({"recipe": made.to_dict()}) == (made.query(), "")
    long = links.Recipe("word " * 400, "embedded", RunSettings())
    query, note = links.link_of({"recipe": long.to_dict()})
    assert query == "" and re.search(r"too long for a link \(its link would be [\d,]+ characters; a link carries "
                                     r"at most 2,000\)", note)
    assert links.link_of({"prompt": "from a file"}) == ("", links.FROM_FILE)


def test_a_model_opens_under_its_other_name():
    offered = rq.LIMITS.models
    assert links.offered_model("embedded") == "embedded"
    assert links.offered_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "embedded"  # a Space's trace, here
    assert links.offered_model("meta-llama/Llama-3.2-1B-Instruct") is None and links.offered_model(None) is None
    if "qwen2.5-coder-1.5b" in offered:
        assert links.offered_model("Qwen/Qwen2.5-Coder-1.5B-Instruct") == "qwen2.5-coder-1.5b"


def test_a_recipe_link_fills_every_control_and_waits_for_run():
    made = links.Recipe("Count from 1 to 5, <i>please</i>.", "embedded",
                        RunSettings(k=3, bc=40, lam=0.2, tree="dynamic", init="lastk", max_new_tokens=16))
    request = type("R", (), {"query_params": dict(parse_qsl(made.query() + "&step=3&tab=whatif"))})()
    session = Session()
    out = lesson.open_link(session, request)
    assert "press **Run** to reproduce this run (it then opens at step 3)" in out[0] and not session.steps
    assert out[-2].selected == "whatif" and out[-1] == {"recipe": made.to_dict(), "step": 3}
    key, note, *values = lesson.shown_controls(session, out[-1])
    got = dict(zip(lesson.CONTROLS, values))
    assert key == made.query() and note == ""
    assert got["prompt"] == made.prompt and got["method"] == "esp" and got["model"] == "embedded"
    assert (got["k"], got["bc"], got["lam"], got["tree"], got["init"]) == (3, 40, 0.2, "dynamic", "lastk")
    assert (got["max_new"], got["mode"], got["dtype"], got["layouts"]) == (16, "greedy", "float32", "efficient")


def test_a_refused_recipe_link_opens_the_first_run_and_says_why_once():
    request = type("R", (), {"query_params": {"prompt": "hi", "k": "<b>9</b>", "tab": "nowhere"}})()
    out = lesson.open_link(Session(), request)
    assert out[0].startswith("⚠️ This link was refused: k must be a number, not '&lt;b&gt;9&lt;/b&gt;'.")
    assert "no tab 'nowhere'" in out[0] and "\n" not in out[0] and out[-1] is None
    assert f"recorded: {calls.OPENING}.json" in out[0]


@pytest.fixture
def run_ends(monkeypatch, lm):
    """run_ends(how): generate()'s GPU call replaced by one that streams three stored steps, then ends `how`
    ("done", "stopped")."""
    def make(how: str) -> None:
        def run_steps(name, ids, settings, token, seconds=None, who=None):
            yield {"meta": {"device": "CPU", "dtype": "float32", "curve": MASKS["meta"]["curve"]}}
            for step in MASKS["steps"][:3]:
                yield {"step": step, "clock": 0.0}
            yield {"end": how}

        monkeypatch.setattr(calls.batch, "updates", run_steps)
    return make


@pytest.mark.model
@pytest.mark.app
def test_a_run_made_on_the_page_links_its_recipe_and_a_stopped_one_its_tokens(run_ends):
    run_ends("stopped")
    session = Session()
    for _ in calls.generate("Count from 1 to 30, separated by commas.", k=2, bc=30, max_new_tokens=48,
                            session=session):
        pass
    emitted = sum(len(s["emitted"]) for s in MASKS["steps"][:3])
    query, note = links.link_of(session.meta)
    got = dict(parse_qsl(query))
    assert note == "" and got["prompt"] == "Count from 1 to 30, separated by commas." and got["k"] == "2"
    assert got["max_new"] == str(emitted) != "48"  # the tokens on screen, not the 48 it would have gone on to
    link, note, state, *shown = lesson.after_run(session, None)
    assert link == query and state is None and all(v == calls.gr.skip() for v in shown)


@pytest.mark.model
@pytest.mark.app
def test_after_the_links_own_run_the_page_shows_the_links_step(run_ends):
    run_ends("done")
    session = Session()
    made = links.Recipe("Count from 1 to 30, separated by commas.", "embedded", RunSettings(max_new_tokens=8))
    for _ in calls.generate(made.prompt, max_new_tokens=8, session=session):
        pass
    other = links.Recipe("another prompt", "embedded", RunSettings(max_new_tokens=8))
    out = lesson.after_run(session, {"recipe": other.to_dict(), "step": 1})
    assert out[0] == made.query() and out[2] is not None  # another run: the link's step waits for its own
    assert out[3] == calls.gr.skip()
    out = lesson.after_run(session, {"recipe": made.to_dict(), "step": 1})
    assert out[0] == made.query() and out[2] is None  # the link's run: its step, once
    assert out[3]["show"] == 1 and "frames" not in out[3]  # the player has the run: it only moves
