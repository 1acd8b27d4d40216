"""The app through gradio_client against an in-process launch on the embedded model, with its GPU calls
run in-process and under the ZeroGPU emulation (forked workers; marker `zerogpu`)."""
from __future__ import annotations

import gc
import json
import logging
import re
from pathlib import Path

import pytest
from gradio_client import Client

from app_server import MODES, in_process_only, serve
from components.text_view import DRAFT_LABELS, MODEL_LABELS

pytestmark = [pytest.mark.model, pytest.mark.app]

PROMPT = "Count from 1 to 10."
SHORT = dict(k=2, bc=30, lam=0.1, max_new_tokens=16)


@pytest.fixture(scope="module", params=MODES)
def client(lm, request):
    with serve(request.param) as url:
        yield Client(url, verbose=False)


@pytest.fixture(scope="module")
def streamed(client):
    """Every update of one streamed k=2, BC=30 run."""
    job = client.submit(prompt=PROMPT, api_name="/generate", **SHORT)
    job.result()
    return job.outputs()


def _value(output) -> float:
    """A component's value from an output that may be a gr.update(...) dict."""
    return output["value"] if isinstance(output, dict) else output


def _figure(output: dict) -> dict:
    assert output["type"] == "plotly"
    return json.loads(output["plot"])


def _tree_tokens(tree: dict) -> tuple[str, list[str]]:
    """(root text, accepted texts in depth order) from the tree figure's node traces."""
    by_name = {t["name"]: t for t in tree["data"]}
    root = by_name["root"]["customdata"][0][0]
    accepted = sorted(by_name.get("accepted", {"customdata": []})["customdata"], key=lambda c: c[2])
    return root, [c[0] for c in accepted]


def test_generate_streams_coalesced_updates_and_the_last_step(streamed):
    status, scrub, text, tree, mask, align, stats, hist, timing, cost, cost_note, words, focus, note, eye, *lens = streamed[-1]
    assert len(lens) == 3  # the Mask Lens grid, the commitment strip and the mean rank per layer
    assert len(streamed) >= 2  # at least the first step, then the final one
    assert all(o[0].startswith("**Decoding** · step") for o in streamed[:-1])
    assert status.startswith("**Done**")
    steps = [int(_value(o[1])) for o in streamed]
    assert steps == sorted(steps) and steps[0] == 0  # the prefill is sent at once, then newer steps only
    last = int(status.split(" of ")[1].split(" ")[0])
    assert f"**Step {last}**" in words and note == ""  # the step in words; no node in focus
    assert [c[1] for c in focus["choices"]][:1] == [0]  # the Focus box offers the step's nodes, from the root
    assert steps[-1] == last  # the last step always reaches the page
    assert "τ" in stats and _figure(mask)["data"][0]["type"] == "heatmap"
    assert _figure(align)["data"], "k=2 runs record alignment after a few steps"
    assert _figure(eye)["data"] and _figure(lens[2])["data"], "a run on the page records the verifier's eye and the lens"
    assert len(_figure(timing)["data"]) == 6 and _figure(hist)["data"][0]["type"] == "bar"
    assert "break-even" in json.dumps(_figure(cost)) and "one-token forward" in cost_note
    assert cost_note.startswith("On this CPU") and "on this CPU" in _figure(cost)["layout"]["title"]["text"]


def test_final_tree_accepted_path_matches_the_text(streamed):
    text, tree = streamed[-1][2], _figure(streamed[-1][3])
    tokens = [(p["token"], p["class_or_confidence"]) for p in text]
    root, accepted = _tree_tokens(tree)
    assert f"step {int(_value(streamed[-1][1]))}" in tree["layout"]["title"]["text"]
    # The last step emitted its accepted drafts, then (unless cut by max tokens) the model's own token (a
    # correction or a bonus); the token before them is this step's root, the previous step's last token.
    tail = tokens[:-1] if tokens[-1][1] in MODEL_LABELS else tokens
    drafts = []
    while tail and tail[-1][1] in DRAFT_LABELS:
        drafts.insert(0, tail.pop()[0])
    assert drafts == accepted[: len(drafts)]
    assert len(drafts) == len(accepted) or tokens[-1][1] in DRAFT_LABELS
    assert tail[-1][0] == root


def test_scrub_renders_a_stored_step(client, streamed):
    out = client.predict(1, api_name="/show_step")
    assert int(_value(out[1])) == 1 and "step 1 of" in out[0]
    assert "step 1" in _figure(out[3])["layout"]["title"]["text"]
    assert len(out[2]) < len(streamed[-1][2])  # the text up to step 1 only


def test_export_files(client, streamed):
    paths = client.predict(2, api_name="/export")
    assert len(paths) == 2  # the trace, and one lecture file holding the shown step's figures too
    trace, lecture = (next(p for p in paths if tag in Path(p).name) for tag in ("trace", "lecture"))
    data = json.loads(open(trace).read())
    last = int(_value(streamed[-1][1]))
    assert len(data["steps"]) == last + 1 and data["meta"]["spec"].startswith("esp:k=2:bc=30")
    assert Path(lecture).name.startswith("esp-lecture-step2-")
    lecture = open(lecture, encoding="utf-8").read()  # the whole run as a player (tests/test_lecture.py plays it)
    assert '"title": "tree (step 2)"' in lecture  # the shown step's figures, below the player
    assert lecture.count('"words": ') == last + 1  # one frame per step


@pytest.mark.parametrize("bad, message", [
    (dict(prompt="   "), "prompt is empty"),
    (dict(prompt="hi", k=4, bc=10), "BC=10 is too small for k=4"),
    (dict(prompt="hi", model="/tmp"), "does not offer the model '/tmp'"),
    (dict(prompt="hi", model="Qwen/Qwen3-0.6B"), "does not offer the model"),
    (dict(prompt="hi", max_new_tokens=100_000), "at most 512 new tokens"),
    (dict(prompt="word " * 3000), "shorten it"),
])
def test_bad_input_gives_one_line_and_keeps_the_run(client, streamed, caplog, capfd, monkeypatch, bad, message):
    from explorer import gpu

    loads, real = [], gpu.load
    monkeypatch.setattr(gpu, "load", lambda *a, **kw: loads.append(a) or real(*a, **kw))
    caplog.set_level(logging.INFO, logger="esp.app")
    outputs = _outputs(client, **{**SHORT, **bad})
    assert len(outputs) == 1 and outputs[0][0].startswith("⚠️") and message in outputs[0][0]
    assert "\n" not in outputs[0][0]
    if "model" in bad:
        assert not loads  # a model the server does not offer is never loaded
    refused = [r for r in caplog.records if r.name == "esp.app"]
    assert len(refused) == 1 and message in refused[0].getMessage()  # one log line, no traceback
    assert "Traceback" not in capfd.readouterr().err
    # The stored run is untouched: its steps still re-render and export.
    out = client.predict(1, api_name="/show_step")
    assert "step 1 of" in out[0] and "step 1" in _figure(out[3])["layout"]["title"]["text"]


def _outputs(client, **kwargs) -> list:
    job = client.submit(api_name="/generate", **kwargs)
    job.result()
    return job.outputs()


def test_stop_ends_the_run_within_one_step_and_says_so(client):
    job = client.submit(prompt=PROMPT, api_name="/generate", **{**SHORT, "max_new_tokens": 200})
    for n, out in enumerate(job, 1):
        if n == 2:
            client.predict(api_name="/stop")
            break
    job.result()
    final = job.outputs()[-1]
    n_steps, after = map(int, re.search(r"Stopped after (\d+) steps\*\* \((\d+) after the click\)", final[0]).groups())
    assert after <= 1  # the step in progress at the click, at most, finished after it
    assert int(_value(final[1])) == n_steps - 1 < 200  # every view shows the last finished step
    assert f"step {n_steps - 1}" in _figure(final[3])["layout"]["title"]["text"]
    out = client.predict(prompt=PROMPT, api_name="/generate", **{**SHORT, "max_new_tokens": 4})
    assert out[0].startswith("**Done**")  # a new run afterwards works


def test_cancel_mid_run_leaves_the_app_usable(client):
    job = client.submit(prompt=PROMPT, api_name="/generate", **{**SHORT, "max_new_tokens": 64})
    for n, _ in enumerate(job, 1):
        if n == 2:
            job.cancel()
            break
    out = client.predict(prompt=PROMPT, api_name="/generate", **{**SHORT, "max_new_tokens": 4})
    assert out[0].startswith("**Done**")


def _rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def test_ten_sessions_at_once_and_memory_stays_flat(client, lm, request):
    from esp.decoding.engine import Decoder

    in_process_only(request, "client", "tests/test_zerogpu.py (runs in workers)")

    url = client.src
    clients = [Client(url, verbose=False) for _ in range(10)]
    prompts = [f"Say the number {i} in words." for i in range(10)]
    small = {**SHORT, "max_new_tokens": 4}
    jobs = [c.submit(prompt=p, api_name="/generate", **small) for c, p in zip(clients, prompts)]
    finals = [j.result() for j in jobs]
    for p, out in zip(prompts, finals):
        expected = "".join(s.emitted_text[i] for s in Decoder(lm, max_new_tokens=4).stream(lm.chat_ids(p))
                           for i in range(len(s.emitted)))
        assert out[0].startswith("**Done**") and "".join(x["token"] for x in out[2]) == expected
    gc.collect()
    after_ten = _rss_mb()
    for c, p in zip(clients, prompts):
        c.predict(prompt=p, api_name="/generate", **small)
    gc.collect()
    after_twenty = _rss_mb()
    print(f"server RSS after the first ten runs {after_ten:.0f} MB, after 10 more {after_twenty:.0f} MB")
    assert after_twenty <= 1.15 * after_ten


def test_compare_streams_each_method_with_its_verdict(client):
    from esp import methods

    job = client.submit(prompt=PROMPT, api_name="/compare", **{**SHORT, "max_new_tokens": 8})
    job.result()
    tables = [o[1]["data"] for o in job.outputs() if isinstance(o[1], dict) and "data" in o[1]]
    assert sorted({len(t) for t in tables}) == list(range(1, len(methods.REGISTRY) + 1))  # a row per GPU call
    rows = tables[-1]
    assert rows[0][0] == "ar" and rows[0][5] == 1.0 and rows[0][6] == "baseline"
    assert job.outputs()[-1][0].startswith(f"Finished {len(rows)}/{len(rows)} methods on this CPU (float32)")
    # Greedy decoding in fp32 is lossless for every method: the same tokens as ar.
    assert [r[6] for r in rows[1:]] == ["exact"] * (len(rows) - 1), rows


METHODS = ["esp", "hybrid", "stand", "pld", "lade", "ar"]
COPY = "Fix the typo in this sentence and write it again: The cat sat on teh mat and looked at the birds in the garden."


@pytest.fixture
def often(monkeypatch):
    """Updates as often as steps come, so that short test runs stream several updates."""
    from explorer import calls

    monkeypatch.setattr(calls, "UPDATE_S", 0.0)


def _sources(tree: dict) -> set[str]:
    return {t["name"] for t in tree["data"] if t["name"].startswith("source: ")}


@pytest.mark.parametrize("method", METHODS)
def test_every_method_streams_in_the_same_views(client, often, method):
    from esp import methods

    if method not in methods.available():
        pytest.skip(f"{method} is not registered on this branch yet")
    outputs = _outputs(client, prompt=COPY, method=method, **{**SHORT, "k": 1, "max_new_tokens": 24})
    assert len(outputs) >= 3 and outputs[-1][0].startswith("**Done**"), outputs[-1][0]
    final = outputs[-1]
    assert _figure(final[4])["data"][0]["type"] == "heatmap"
    tree = _figure(final[3])
    if method == "hybrid":
        assert len(_sources(tree)) >= 2, _sources(tree)  # copy and mask drafts side by side
    if method == "lade":  # the lookahead window's rows are in the mask view
        assert any("lookahead" in y for y in _figure(final[4])["data"][0]["y"])
    if method != "ar":
        assert any(p["class_or_confidence"] in DRAFT_LABELS for p in final[2]), "a copying prompt accepts drafts"


def test_method_outside_the_list_is_refused(client):
    out = _outputs(client, prompt=PROMPT, method="nope", **SHORT)
    assert len(out) == 1 and "Unknown method 'nope'" in out[0][0]


def test_whatif_changes_the_tree_and_keeps_the_run(client, streamed):
    before = client.predict(2, api_name="/show_step")
    note, original, alternative = client.predict(step=2, api_name="/whatif", **{**SHORT, "bc": 60})
    assert "what-if" in note and "esp:k=2:bc=60" in note
    orig, alt = _figure(original), _figure(alternative)
    assert "step 2" in orig["layout"]["title"]["text"] and "step 2" in alt["layout"]["title"]["text"]
    count = lambda fig: sum(len(t["x"]) for t in fig["data"] if t.get("mode") == "markers+text")
    assert count(alt) > count(orig)  # BC 60 drafts a bigger tree than BC 30
    after = client.predict(2, api_name="/show_step")
    assert after[0] == before[0] and after[2] == before[2]  # the stored run's text and step count unchanged
    bad = client.predict(step=0, api_name="/whatif", **SHORT)
    assert bad[0].startswith("⚠️") and "prefill" in bad[0]


def test_open_trace_and_a_malformed_file(client, tmp_path):
    from gradio_client import handle_file

    import app

    path = app.TRACES[next(iter(app.TRACES))]
    out = client.predict(handle_file(str(path)), api_name="/open_trace")
    assert out[0].startswith("**Done**") and f"recorded: {path.name}" in out[0]
    assert _figure(out[3])["data"] and _figure(out[4])["data"][0]["type"] == "heatmap"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = client.predict(handle_file(str(bad)), api_name="/open_trace")
    assert out[0].startswith("⚠️ This is not an ESP Explorer trace") and "\n" not in out[0]
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"hello": 1}))
    assert "no 'meta' field" in client.predict(handle_file(str(foreign)), api_name="/open_trace")[0]
    assert client.predict(1, api_name="/show_step")[0].startswith("**Done**")  # the app keeps serving
