"""Every request checked on the server (explorer/requests.py), with the handlers called directly (no
server): issue 21's probes one by one, then property tests (hypothesis) over every endpoint's parameters
with wrong types, NaN, infinities, huge and negative numbers, unicode and markup. Each request is answered
by a run (whose settings the page's own controls could have sent) or by one ⚠️ line, never by an
exception or a logged traceback. The GPU calls are replaced by recorders: what is tested is what reaches
them. tests/test_app_attacks.py sends a smaller set through a live server."""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import gradio as gr
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import plain
from esp import methods
from explorer import calls, gpu as machine
from explorer import requests as rq
from explorer.session import HeldRuns, Session

ROOT = Path(__file__).resolve().parents[1]
MASKS = json.loads((ROOT / "assets" / "trace_masks.json").read_text())
SHOWN = 2  # show_step's outputs: status, the player's message
# Few examples, no deadline: the suite runs on two shared cores.
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
WILD = st.one_of(
    st.none(), st.booleans(), st.integers(-10**40, 10**40), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(["<b>x</b>", "[a](javascript:alert(1))", "mean:top=100000", "static:shape=1-1", "1e308", "NaN",
                     "３", "\u202e", "<img src=x onerror=alert(1)>"]))


def near(field: rq.Field) -> st.SearchStrategy:
    """Values around a field's domain: in range, just outside, and of the right kind."""
    if isinstance(field, rq.Number):
        return st.one_of(st.integers(int(field.low) - 3, int(field.high) + 3),
                         st.floats(field.low - 1, field.high + 1, allow_nan=False))
    if isinstance(field, rq.Choice):
        return st.sampled_from(field.options)
    return st.text(max_size=60)


def sent(field: rq.Field) -> st.SearchStrategy:
    """What a caller may send for `field`: mostly plausible, often anything at all."""
    return st.one_of(near(field), near(field), WILD)


def valid(field: rq.Field) -> st.SearchStrategy:
    """Values the page's control for `field` could send."""
    if isinstance(field, rq.Dtype):  # bfloat16 only where this machine offers it (elsewhere its control is hidden)
        return st.sampled_from([d for d in field.options if d != "bfloat16" or machine.bf16_missing() is None])
    if isinstance(field, rq.Number):
        return st.integers(int(field.low), int(field.high)) if field.whole else st.floats(field.low, field.high)
    if isinstance(field, rq.Choice):
        return st.sampled_from(field.options)
    return st.text(min_size=1, max_size=60)


@st.composite
def requests(draw, fields: dict[str, rq.Field]) -> dict:
    """A request the page could send, with none, one or two of its values replaced by anything."""
    request = {name: draw(valid(field)) for name, field in fields.items()}
    for name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=2, unique=True)):
        request[name] = draw(sent(fields[name]))
    return request


def one_line_refusal(line) -> bool:
    return isinstance(line, str) and line.startswith("⚠️ ") and "\n" not in line and len(line) < 400


@pytest.fixture(scope="module")
def page():
    """The built page's controls by label (their bounds and choices are what a run may carry)."""
    import app

    return {b.label: b for b in app.build_app().blocks.values() if getattr(b, "label", None)}


def within_page(s, page) -> None:
    """RunSettings `s` could have come from the page's controls, and its method spec carries no setting
    beyond the knobs the page offers."""
    for label, value in (("k", s.k), ("BC", s.bc), ("λ", s.lam), ("temperature", s.temperature),
                         ("top-p", s.top_p), ("seed", s.seed), ("max new tokens", s.max_new_tokens)):
        assert page[label].minimum <= value <= page[label].maximum, (label, value)
        assert not isinstance(value, bool) and math.isfinite(value)
    for label, value in (("Mask init", s.init), ("Tree", s.tree), ("Target decoding", s.mode),
                         ("Mask construction", s.layouts), ("Method", s.method)):
        assert value in [v for _, v in page[label].choices], (label, value)
    assert s.dtype == "float32" or (page["Precision"].visible and machine.bf16_missing() is None)
    name, taken = methods.parse(s.spec())
    assert name == s.method and set(taken) <= {"k", "bc", "lam", "init", "tree"}
    assert all(taken[k] == getattr(s, k) for k in taken), taken


@pytest.fixture
def gpu(monkeypatch):
    """The GPU calls replaced by recorders of the settings they get (a run answers with one stored step). A
    request that passes its checks loads the model, to count its prompt's tokens: those tests are `model`."""
    seen = []

    def run_steps(name, ids, settings, token, seconds=None, who=None):
        seen.append(settings)
        yield {"meta": {"device": "CPU", "dtype": "float32", "curve": MASKS["meta"]["curve"]}}
        yield {"step": MASKS["steps"][1], "clock": 0.0}
        yield {"end": "done"}

    def decode_once(name, ids, settings, spec, defaults, seconds=None):
        seen.append(settings)
        return {"error": "recorded (no model call in this test)"}

    def rerun_step(name, settings, prompt_ids, steps, i, sampling, max_new_tokens, layouts, seconds=None):
        seen.append(settings)
        return {"step": steps[i]}

    monkeypatch.setattr(calls.batch, "updates", run_steps)
    for name, fn in (("decode_once", decode_once), ("rerun_step", rerun_step)):
        monkeypatch.setattr(calls, name, fn)
    return seen


@pytest.fixture
def opened() -> Session:
    session = Session()
    calls.open_shipped("trace_masks", session)
    return session


def no_traceback(caplog) -> None:
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


# ---------------------------------------------------------------- issue 21's probes, one by one

GOOD = dict(prompt="Count from 1 to 5.", k=2, bc=30, lam=0.1, max_new_tokens=8)


@pytest.mark.parametrize("bad, says", [
    (dict(bc=121), "BC must be at most 120, not 121."),
    (dict(bc=1000), "BC must be at most 120, not 1000."),
    (dict(method="hybrid", k=1, init="mean:top=100000:draft=100000"), "Unknown mask init 'mean:top=100000:draft=100000'"),
    (dict(method="tr", tree="small:start=hot:matrix=zero"), "Unknown tree 'small:start=hot:matrix=zero'"),
    (dict(k="abc"), "k must be a number, not 'abc'."),
    (dict(k=float("nan")), "k must be a finite number, not nan."),
    (dict(temperature="hot"), "temperature must be a number, not 'hot'."),
    (dict(k=True), "k must be a number, not True."),
    (dict(bc=[30]), "BC must be a number, not [30]."),
    (dict(lam={"a": 1}), "λ must be a number, not {'a': 1}."),
    (dict(lam=1.5), "λ must be at most 1, not 1.5."),
    (dict(top_p=float("inf")), "top-p must be a finite number, not inf."),
    (dict(seed=-5), "seed must be at least 0, not -5."),
    (dict(seed=2**40), "seed must be at most 2.14748e+09"),
    (dict(max_new_tokens=1e308), "This server generates at most 512 new tokens per run, not 1e+308."),
    (dict(max_new_tokens=0), "max new tokens must be at least 1, not 0."),
    (dict(k=2.5), "k must be a whole number, not 2.5."),
    (dict(method="<b>esp</b>"), "Unknown method '<b>esp</b>'"),  # shown as text, not markup
    (dict(model=["embedded"]), "does not offer the model ['embedded']"),
    (dict(init="[a](javascript:alert(1))"), "Unknown mask init '[a](javascript:alert(1))'"),
    (dict(prompt=123), "The prompt must be text, not 123."),
    (dict(prompt="x" * 20_000), "this server takes at most 16384: shorten it."),
])
def test_each_probe_is_refused_in_one_line_before_the_gpu(gpu, caplog, bad, says):
    caplog.set_level(logging.INFO, logger="esp.app")
    for handler, args in ((calls.generate, {}), (calls.whatif, {"step": 1}), (calls.compare, {})):
        request = {**GOOD, **args, **bad}
        if handler is calls.whatif:
            request.pop("prompt")
            if "prompt" in bad:
                continue
        if handler is calls.compare:
            request.pop("method", None)
            if "method" in bad:
                continue
        out = handler(**request)
        out = [out] if handler is calls.whatif else list(out)  # generate and compare stream
        assert len(out) == 1 and one_line_refusal(out[0][0]) and says in plain(out[0][0]), (handler.__name__, out[0][0])
        assert "<b>" not in out[0][0] and "[a](" not in out[0][0]  # what was sent reads as text
    assert not gpu
    no_traceback(caplog)


@pytest.mark.parametrize("i", ["x", None, -1, 25, 1e308, float("nan"), [1], True])
def test_show_step_and_export_refuse_a_bad_step_in_one_line(opened, caplog, i):
    caplog.set_level(logging.INFO, logger="esp.app")
    if i is None:  # an empty Go-to box: the first step
        assert calls.show_step(opened, i)[1]["show"] == 0
        return
    out = calls.show_step(opened, i)
    assert len(out) == SHOWN and one_line_refusal(out[0]) and all(o == gr.skip() for o in out[1:])
    with pytest.raises(gr.Error) as e:
        calls.export(opened, i)
    assert one_line_refusal(e.value.message) and e.value.print_exception is False
    no_traceback(caplog)


@pytest.mark.model
@pytest.mark.app
def test_a_run_asks_the_gpu_for_exactly_the_settings_sent(gpu, page):
    out = list(calls.generate(**{**GOOD, "method": "hybrid", "k": 1, "bc": 120, "mode": "sampling",
                                 "temperature": 2, "top_p": 0.05, "seed": rq.SEED_MAX}, session=Session()))
    assert out[-1][0].startswith("**Done**") and len(gpu) == 1
    within_page(gpu[0], page)
    assert gpu[0].spec() == "hybrid:k=1:bc=120:lam=0.1:init=mean"


def test_compare_total_tokens_are_capped_before_any_model_work(gpu, monkeypatch):
    monkeypatch.setattr(calls, "load_model", lambda name: pytest.fail("a refused Compare loaded a model"))
    n = len(methods.available())
    out = list(calls.compare(**{**GOOD, "max_new_tokens": rq.LIMITS.max_compare_tokens // n + 1}))
    assert len(out) == 1 and f"Compare decodes {n} methods" in out[0][0] and not gpu


def test_a_bug_in_a_handler_is_one_line_for_the_visitor_and_a_traceback_in_the_log(opened, monkeypatch, caplog):
    monkeypatch.setattr(calls, "step_frame", lambda *a, **kw: 1 / 0)
    out = calls.show_step(opened, 3)
    assert out[0] == "⚠️ Something went wrong on the server (ZeroDivisionError); it is logged."
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [ZeroDivisionError]


# ---------------------------------------------------------------- every endpoint's parameters

@pytest.mark.model
@pytest.mark.app
@FEW
@given(requests(calls.RUN_FIELDS))
def test_generate_answers_anything_with_a_run_from_the_page_or_one_line(gpu, page, caplog, request):
    gpu.clear()
    caplog.clear()
    out = list(calls.generate(**request, session=Session()))
    event("ran" if gpu else "refused")
    if gpu:
        within_page(gpu[0], page)
        assert out[-1][0].startswith("**Done**")
    else:
        assert len(out) == 1 and one_line_refusal(out[0][0]) and all(o == gr.skip() for o in out[0][1:])
    no_traceback(caplog)


@FEW
@given(requests({"step": rq.Number("step", 0, 30, whole=True),
                 **{n: f for n, f in calls.RUN_FIELDS.items() if n != "prompt"}}))
@pytest.mark.model
@pytest.mark.app
def test_whatif_answers_anything_with_a_rerun_from_the_page_or_one_line(gpu, page, opened, caplog, request):
    gpu.clear()
    caplog.clear()
    out = calls.whatif(**request, session=opened)
    event("ran" if gpu else "refused")
    if gpu:
        within_page(gpu[0], page)
        assert "what-if" in out[0] and 1 <= request["step"] < len(opened.steps)
    else:
        assert one_line_refusal(out[0])
    no_traceback(caplog)


@pytest.mark.model
@pytest.mark.app
@FEW
@given(requests(calls.COMPARE_FIELDS))
def test_compare_answers_anything_within_its_token_cap_or_in_one_line(gpu, page, caplog, request):
    gpu.clear()
    caplog.clear()
    out = list(calls.compare(**request))
    event("ran" if gpu else "refused")
    if gpu:
        within_page(gpu[0], page)
        assert len(methods.available()) * gpu[0].max_new_tokens <= rq.LIMITS.max_compare_tokens
    else:
        assert len(out) == 1
    assert one_line_refusal(out[-1][0])  # the recorder answers the first method's call with an error
    no_traceback(caplog)


def is_step(out, session: Session) -> bool:
    """A stored step for the player: the run's status and a step to show inside the run."""
    return out[0].startswith("**Done** · ") and 0 <= out[1]["show"] < len(session.steps)


@FEW
@given(sent(rq.STEP))
def test_the_stored_step_handler_answers_anything(opened, caplog, i):
    caplog.clear()
    out = calls.show_step(opened, i)
    assert len(out) == SHOWN and (is_step(out, opened) or one_line_refusal(out[0]))
    if is_step(out, opened):
        assert list(out[1]["frames"]) == [str(out[1]["show"])]  # that step's frame, and no other
    no_traceback(caplog)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(WILD)
def test_export_answers_anything(opened, caplog, i):
    caplog.clear()
    try:
        files = calls.export(opened, i)
        assert len(files) == 2 and all(Path(f).parent == Path(opened.folder) for f in files)  # trace, lecture
    except gr.Error as e:
        assert one_line_refusal(e.message)
    no_traceback(caplog)


@FEW
@given(requests(rq.SETTINGS), sent(calls.SHIPPED_NAME))
def test_live_hints_and_opening_a_shipped_trace_answer_anything(caplog, knobs, name):
    caplog.clear()
    note = calls.check_settings(**knobs)
    assert note.startswith("Ready: ") or one_line_refusal(note)
    updates = calls.knob_updates(knobs["method"])
    assert len(updates) == 5
    out = calls.open_shipped(name, Session())
    assert is_step(out, out[-1]) if isinstance(out[-1], Session) else one_line_refusal(out[0])
    no_traceback(caplog)


# ---------------------------------------------------------------- bounded memory

def test_held_runs_are_bounded_and_a_dropped_one_says_so():
    held = HeldRuns(2)
    sessions = [Session() for _ in range(3)]
    for s in sessions:
        calls.open_shipped("trace_copy", s)
        held.hold(s)
    assert len(held) == 2 and not sessions[0].steps and sessions[1].steps and sessions[2].steps
    out = calls.show_step(sessions[0], 0)
    assert one_line_refusal(out[0]) and "let go to make room" in out[0]
    sessions[1].running = True  # a running run is never let go
    held.hold(sessions[2])
    calls.open_shipped("trace_copy", sessions[0])
    held.hold(sessions[0])
    assert sessions[1].steps and sessions[0].steps and not sessions[2].steps
