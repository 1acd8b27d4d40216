"""Opened traces are untrusted input (issue 21): every crafted or oversize trace is refused with one line
before the session changes, the shipped traces still open, what-if from a trace applies a typed prompt's
caps, and the server keeps serving after each refusal."""
from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path

import pytest

from components.frames import message
from components.limits import Limits
from components.trace_schema import (MAX_CELLS, MAX_ROWS, MAX_TRACE_BYTES, MAX_VOCAB, check_against, json_depth,
                                     parse_trace)
from esp.errors import ESPError
from explorer import calls
from explorer.session import Session

ROOT = Path(__file__).resolve().parents[1]
TRACE = json.loads((ROOT / "assets" / "trace_copy.json").read_text())


def _set(path: str, value):
    """A malformation: the field at a dotted path (list indices as numbers) set to `value`."""
    def apply(d: dict) -> None:
        *head, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        for p in head:
            d = d[p]
        d[last] = value
    return apply


def _many_steps(d: dict) -> None:
    d["steps"] += [{**copy.deepcopy(d["steps"][1]), "step": i} for i in range(len(d["steps"]), 600)]


def _deep(d: dict) -> None:
    d["meta"]["model"] = json.loads("[" * 40 + "]" * 40)


def _wide_step(d: dict) -> None:
    node = d["steps"][1]["nodes"][1]
    d["steps"][1]["nodes"] += [{**node, "index": i} for i in range(len(d["steps"][1]["nodes"]), 600)]


def _misnumbered(d: dict) -> None:
    d["steps"][2]["step"] = 7


# (what is wrong, how to make it, what the one line names)
CRAFTED = [
    ("a number where text belongs", _set("steps.1.nodes.1.text", 42), "steps[1].nodes[1].text"),
    ("text where a number belongs", _set("steps.1.n_past", "12"), "steps[1].n_past"),
    ("true where a number belongs", _set("steps.1.bonus", True), "steps[1].bonus"),
    ("Infinity in a cost row", _set("steps.1.cost.measured_s", float("inf")), "Infinity is not a number"),
    ("NaN in a timing", _set("steps.2.timings.forward", float("nan")), "NaN is not a number"),
    ("meta as a list", _set("meta", ["model", "embedded"]), "meta"),
    ("the settings as a number", _set("meta.settings", 3), "meta.settings"),
    ("a step with no nodes", _set("steps.1.nodes", []), "steps[1].nodes"),
    ("a step that is not an object", _set("steps.1", "step"), "steps[1]"),
    ("deep nesting", _deep, "nests 4"),
    ("too many steps", _many_steps, "at most 513 steps"),
    ("too many nodes in a step", _wide_step, "at most 512 items"),
    ("a token text too long", _set("steps.1.nodes.1.text", "x" * 1000), "at most 256 characters"),
    ("a settings line too long", _set("meta.settings", "s" * 5000), "meta.settings"),
    ("a token id outside any vocabulary", _set("steps.1.nodes.1.token", MAX_VOCAB + 5), "steps[1].nodes[1].token"),
    ("a negative token id", _set("meta.prompt_ids.0", -1), "meta.prompt_ids[0]"),
    ("a prompt over the server's cap", _set("meta.prompt_ids", [1] * 1500), "at most 1024"),
    ("more new tokens than the server allows", _set("meta.max_new_tokens", 100_000), "at most 512"),
    ("a prompt text over its cap", _set("meta.prompt", "p" * 40_000), "its prompt is 40,000 characters"),
    ("a parent after its child", _set("steps.1.nodes.1.parent", 5), "parent must be an earlier node"),
    ("a second root", _set("steps.1.nodes.1.status", "root"), "only node 0 is the root"),
    ("an unknown source", _set("steps.1.nodes.1.sources", ["evil"]), "steps[1].nodes[1].sources[0]"),
    ("a mask of the wrong shape", _set("steps.1.mask.0", [True]), "the mask must be"),
    ("row kinds that do not match the rows", _set("steps.1.row_kinds", ["root"]), "row kinds"),
    ("a node in a row outside the block", _set("steps.1.nodes.1.row", 200), "row 200"),
    ("steps out of order", _misnumbered, "steps are 0 (the prefill), 1, 2"),
    ("an unknown mask construction", _set("meta.layouts", "<b>fast</b>"), "meta.layouts"),
    ("a sampling rule out of range", _set("meta.sampling.top_p", 7.0), "meta.sampling.top_p"),
    ("a summary with text for a count", _set("summary.tokens", "many"), "summary.tokens"),
    ("an unknown step field", _set("steps.1.evil", 1), "steps[1].evil"),
    ("a method spec the engine refuses", _set("meta.spec", "esp:tree=<b>x</b>"), "meta.spec: tree must be"),
]


def _lensed(d: dict) -> dict:
    """The trace with valid Mask Lens, eye and target-rank records on steps 1 and 2 (3 layers), ready to be
    malformed."""
    one, two = d["steps"][1], d["steps"][2]
    a, b = one["emitted"][0], two["emitted"][0]
    one["eye"] = [[t, 0.5, 7, 0.25] for t in one["emitted"]]
    one["nodes"][1].update(target_rank=1, target_p=0.5)
    one["lens"] = [{"j": 1, "position": one["nodes"][0]["position"] + 1, "tokens": [[a, b] for _ in range(3)],
                    "probs": [[0.5, 0.2] for _ in range(3)], "texts": {str(a): "a", str(b): "b"}}]
    two["lens_real"] = [{"source_step": 1, "j": 1, "token": b, "text": "b", "accepted": False, "prob": [0.2] * 3,
                         "rank": [2] * 3}]
    return d


def _lens(path: str, value):
    """_set on a trace that carries lens records (paths into steps 1 and 2 as `_lensed` writes them)."""
    def apply(d: dict) -> None:
        _set(path, value)(_lensed(d))
    return apply


def _many_lens_records(d: dict) -> None:
    _lensed(d)["steps"][1]["lens"] *= 65


LENS_CRAFTED = [
    ("more lens tokens per layer than LENS_TOP", _lens("steps.1.lens.0.tokens.0", [1, 2, 3, 4, 5, 6]), "at most 5"),
    ("more lens layers than MAX_LAYERS", _lens("steps.1.lens.0.tokens", [[1]] * 300), "at most 256 items"),
    ("lens probabilities of another shape", _lens("steps.1.lens.0.probs", [[0.5]] * 3), "one probability per token"),
    ("a lens probability above 1", _lens("steps.1.lens.0.probs.0.0", 3.0), "steps[1].lens[0].probs[0][0]"),
    ("a lens text too long", _lens("steps.1.lens.0.texts", {"7": "x" * 1000}), "at most 256 characters"),
    ("a lens text for an id it does not list", _lens("steps.1.lens.0.texts", {"7": "x"}), "does not list"),
    ("a lens text keyed by markup", _lens("steps.1.lens.0.texts", {"<b>1</b>": "x"}), "steps[1].lens[0].texts"),
    ("a lens token outside any vocabulary", _lens("steps.1.lens.0.tokens.1.0", MAX_VOCAB + 5),
     "steps[1].lens[0].tokens[1][0]"),
    ("too many lens records", _many_lens_records, "at most 64 items"),
    ("a resolved record with ranks of another length", _lens("steps.2.lens_real.0.rank", [2]), "one rank per"),
    ("a rank of 0", _lens("steps.2.lens_real.0.rank.0", 0), "steps[2].lens_real[0].rank[0]"),
    ("a resolved record's text as a number", _lens("steps.2.lens_real.0.text", 5), "steps[2].lens_real[0].text"),
    ("an eye row that is not id / probability pairs", _lens("steps.1.eye.0", [1.5, 0.2]), "eye rows alternate"),
    ("an eye row longer than LENS_TOP pairs", _lens("steps.1.eye.0", [1, 0.1] * 6), "at most 10 items"),
    ("more eye rows than emitted tokens", _lens("steps.1.eye", [[1, 0.5]] * 5), "eye rows for"),
    ("a target rank as text", _lens("steps.1.nodes.1.target_rank", "1"), "steps[1].nodes[1].target_rank"),
    ("a target probability as NaN", _lens("steps.1.nodes.1.target_p", float("nan")), "NaN is not a number"),
]


def _write(tmp_path: Path, data, name: str = "crafted.json") -> str:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


@pytest.fixture(scope="module")
def shown() -> Session:
    """A session showing a shipped run: a refused trace must leave it exactly like this (one for the module: each
    test compares it with itself before its own refusal, so a refusal that changed it fails there)."""
    session = Session()
    calls.open_shipped("trace_masks", session, 3)
    return session


def read(markdown: str) -> str:
    """What a visitor reads of a one-line Markdown status: escapes resolved, entities decoded."""
    return html.unescape(re.sub(r"\\(.)", r"\1", markdown))


def _assert_refused(out: tuple, session: Session, before: tuple, *needles: str) -> None:
    status = read(out[0])
    assert status.startswith("⚠️ This is not an ESP Explorer trace") and "\n" not in out[0], status
    for needle in needles:
        assert needle in status, (needle, status)
    assert all(o.get("__type__") == "update" for o in out[1:] if isinstance(o, dict))  # nothing else is touched
    steps, meta = before
    assert session.steps is steps and session.meta == meta


@pytest.mark.parametrize("what, craft, needle", CRAFTED, ids=[c[0] for c in CRAFTED])
def test_a_crafted_trace_is_refused_in_one_line_and_the_session_is_unchanged(shown, tmp_path, what, craft, needle):
    data = copy.deepcopy(TRACE)
    craft(data)
    before = (shown.steps, copy.deepcopy(shown.meta))
    out = calls.open_trace(_write(tmp_path, data), shown)
    _assert_refused(out, shown, before, needle)


@pytest.mark.parametrize("what, craft, needle", LENS_CRAFTED, ids=[c[0] for c in LENS_CRAFTED])
def test_a_crafted_lens_record_is_refused_in_one_line(shown, tmp_path, what, craft, needle):
    data = copy.deepcopy(TRACE)
    craft(data)
    before = (shown.steps, copy.deepcopy(shown.meta))
    out = calls.open_trace(_write(tmp_path, data), shown)
    _assert_refused(out, shown, before, needle)


def test_a_trace_with_lens_records_opens_and_shows_them(tmp_path):
    session = Session()
    out = calls.open_trace(_write(tmp_path, _lensed(copy.deepcopy(TRACE))), session, 1)
    assert out[0].startswith("**Done**"), out[0]
    step = session.steps[1]
    assert step.lens[0].texts == {step.lens[0].tokens[0][0]: "a", step.lens[0].tokens[0][1]: "b"}  # ids again
    assert session.steps[2].lens_real[0].rank == [2, 2, 2] and step.nodes[1].target_rank == 1
    frame = out[1]["frames"][1]
    assert frame["lens"]["data"] and frame["eye"][0]["data"]  # drawn, not a note


@pytest.mark.parametrize("text, needle", [
    ("{not json", "not JSON"),
    ("[1, 2, 3]", "a JSON list"),
    (b'{"meta": "\xff"}', "not UTF-8 JSON"),
    ("[" * 100_000 + "]" * 100_000, "nests 100000 levels"),
    ('{"meta": {}, "steps": [], "summary": null}', "steps: list should have at least 1 item"),
])
def test_a_file_that_is_no_trace_at_all_is_refused(shown, tmp_path, text, needle):
    before = (shown.steps, copy.deepcopy(shown.meta))
    _assert_refused(calls.open_trace(_write(tmp_path, text), shown), shown, before, needle)


def test_an_oversize_file_is_refused_before_it_is_read(shown, tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(TRACE) + " " * MAX_TRACE_BYTES)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("an oversize file was read"))
    before = (shown.steps, copy.deepcopy(shown.meta))
    _assert_refused(calls.open_trace(str(path), shown), shown, before, "at most 10 MB")


def test_too_many_mask_cells_are_refused(shown, tmp_path):
    """Full-size masks on every step: within the file cap when written compactly, over the cell cap."""
    data = copy.deepcopy(TRACE)
    step = data["steps"][1]
    rows = MAX_ROWS
    wide = {**step, "row_labels": ["node"] * rows, "row_kinds": ["node"] * rows, "positions": [1] * rows,
            "mask": [[True] * (rows + 1)] * rows, "accepted_rows": [0], "nodes": step["nodes"][:1], "accepted": [],
            "cost": None, "alignment": [], "shape": [], "eye": step["eye"][:1], "lens": [], "lens_real": []}
    data["steps"] = data["steps"][:1] + [{**wide, "step": i} for i in range(1, MAX_CELLS // (rows * (rows + 1)) + 2)]
    data["meta"]["max_new_tokens"] = 512
    for s in data["steps"][1:]:
        s["emitted"], s["emitted_text"] = s["emitted"][:1], s["emitted_text"][:1]
        s["eye"], s["top2"] = s.get("eye", [])[:1], s.get("top2", [])[:1]  # one row per emitted token
    path = _write(tmp_path, json.dumps(data, separators=(",", ":")))
    assert Path(path).stat().st_size <= MAX_TRACE_BYTES
    before = (shown.steps, copy.deepcopy(shown.meta))
    _assert_refused(calls.open_trace(path, shown), shown, before, "at most 1,000,000 are taken")


def test_token_ids_are_held_to_the_named_models_vocabulary(tmp_path):
    data = copy.deepcopy(TRACE)
    data["steps"][2]["emitted"][0] = 49_152  # one past SmolLM2's last id
    trace = parse_trace(_write(tmp_path, data))
    check_against(trace, Limits(), None)  # a model the server cannot tell: only the generic cap
    with pytest.raises(ValueError, match="steps\\[2\\] holds token id 49152, outside the 49,152-token vocabulary"):
        check_against(trace, Limits(), 49_152)


def test_json_depth_ignores_brackets_inside_strings():
    assert json_depth(b'{"a": "[[[[[[", "b": [[1]]}') == 3
    assert json_depth(b'"\\"[[["') == 0


def test_shipped_traces_and_their_exports_still_open(tmp_path):
    from components.export import write_trace_json

    for name in calls.SHIPPED:
        session = Session()
        out = calls.open_shipped(name, session)
        assert out[0].startswith("**Done**"), out[0]
        again = write_trace_json(session.steps, session.meta, tmp_path / f"{name}.json")
        reopened = Session()
        assert calls.open_trace(str(again), reopened)[0].startswith("**Done**")
        assert [s.to_dict() for s in reopened.steps] == [s.to_dict() for s in session.steps]


def test_whatif_from_a_trace_applies_the_typed_prompt_caps(shown, monkeypatch):
    """A stored run whose prompt, token limit or ids are past the caps is refused before any model call."""
    monkeypatch.setattr(calls, "rerun_step", lambda *a, **kw: pytest.fail("the model was called"))
    monkeypatch.setattr(calls, "load_model", lambda name, dtype="float32": _FakeLM())
    cases = [({"prompt_ids": [1] * 1500}, "takes at most 1024"), ({"max_new_tokens": 5000}, "at most 512 new tokens"),
             ({"prompt_ids": [1, 2, 60_000]}, "Token id 60000 is outside"),
             ({"model_name": "/tmp"}, "does not offer the model '/tmp'")]
    for change, needle in cases:
        session = Session(steps=shown.steps, meta={**shown.meta, **change})
        note, *_ = calls.whatif(2, session=session)
        assert note.startswith("⚠️") and needle in read(note), note


class _FakeLM:
    vocab_size = 49_152


@pytest.mark.model
def test_the_engine_refuses_ids_outside_the_vocabulary(lm):
    from esp.decoding.engine import Decoder

    with pytest.raises(ESPError, match="Token id 49152 is outside this model's vocabulary"):
        Decoder(lm).check_prompt([1, 2, 49_152])
    with pytest.raises(ESPError, match="Token id -1 is outside"):
        Decoder(lm).check_prompt([-1])


@pytest.mark.app
def test_the_server_refuses_crafted_uploads_and_keeps_serving(tmp_path):
    from gradio_client import Client, handle_file

    from app_server import serve

    crafted = copy.deepcopy(TRACE)
    crafted["steps"][1]["nodes"] = []
    big = tmp_path / "big.json"
    big.write_text(" " * (MAX_TRACE_BYTES + 1))
    with serve("local") as url:
        client = Client(url, verbose=False)
        out = client.predict(handle_file(_write(tmp_path, crafted)), api_name="/open_trace")
        assert out[0].startswith("⚠️ This is not an ESP Explorer trace") and "steps[1].nodes" in read(out[0])
        with pytest.raises(Exception, match="(?i)size|large|exceed|413"):
            client.predict(handle_file(str(big)), api_name="/open_trace")
        good = client.predict(handle_file(str(ROOT / "assets" / "trace_copy.json")), api_name="/open_trace")
        assert good[0].startswith("**Done**")
        assert message(client.predict(1, api_name="/show_step")[1])["show"] == 1


@pytest.mark.app
def test_exports_go_with_their_session_and_the_file_cache_is_swept():
    import app
    from explorer.session import free_session

    session = Session()
    calls.open_shipped("trace_copy", session)
    paths = [Path(p) for p in calls.export(session, 1)]
    assert len(paths) == 2 and all(p.is_file() for p in paths)
    free_session(session)  # Gradio calls it when the session's state expires or its page closes
    assert not any(p.exists() for p in paths)
    # Uploads and Gradio's copies of exports: swept every 10 minutes once older than a session lives.
    assert app.build_app().delete_cache == app.DELETE_CACHE == (600, app.SESSION_TTL_S)
    assert app.launch_options()["max_file_size"] == MAX_TRACE_BYTES
