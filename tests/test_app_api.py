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
from components.frames import held as merged
from components.frames import message as player_message
from components.text_view import DRAFT_LABELS, MODEL_LABELS
from player_messages import text, views

pytestmark = [pytest.mark.model, pytest.mark.app]

PROMPT = "Count from 1 to 10."
SHORT = dict(k=2, bc=30, lam=0.1, max_new_tokens=16)


@pytest.fixture(scope="module", params=MODES)
def client(lm, request):
    with serve(request.param) as url:
        yield Client(url, verbose=False)


@pytest.fixture(scope="module")
def streamed(client):
    """Every update of one streamed k=2, BC=30 run, from its first step on (before it, a run may be told its
    place in the model's line, with no message to the player: tests/test_class.py)."""
    job = client.submit(prompt=PROMPT, api_name="/generate", **SHORT)
    job.result()
    return [o for o in job.outputs() if not str(o[0]).startswith("**Waiting for the model**")]


def _figure(output: dict) -> dict:
    assert output["type"] == "plotly"
    return json.loads(output["plot"])


def _tree_tokens(tree: dict) -> tuple[str, list[str]]:
    """(root text, accepted texts in depth order) from the tree figure's node traces."""
    by_name = {t["name"]: t for t in tree["data"]}
    root = by_name["root"]["customdata"][0][0]
    accepted = sorted(by_name.get("accepted", {"customdata": []})["customdata"], key=lambda c: c[2])
    return root, [c[0] for c in accepted]


def _steps(status: str) -> int:
    return int(re.search(r"(\d+) steps", status).group(1))


def test_generate_streams_coalesced_updates_and_the_last_step(streamed):
    """Each update carries the frames of the steps made since the last one (each step's once), the first starts
    the page's run over, the views of the whole run come with the last; the page's player then holds them all."""
    statuses, messages = [o[0] for o in streamed], [player_message(o[1]) for o in streamed]
    assert len(streamed) >= 2  # at least the first step, then the final one
    assert all(s.startswith("**Decoding** · step") for s in statuses[:-1]) and statuses[-1].startswith("**Done**")
    assert messages[0]["reset"] is True and not any(m.get("reset") for m in messages[1:])
    assert all(m["live"] for m in messages)  # the player follows the newest step while it shows the last
    last = _steps(statuses[-1]) - 1
    whole = [int(k) for m in messages for k, f in m["frames"].items() if "tree" in f]
    assert whole == list(range(last + 1))  # every step's frame, once, in order
    frames, shown = merged(messages), views(messages)
    f = frames[last]
    assert f"<b>Step {last}</b>" in f["words"] and f["nodes"][0][0].startswith("0 · ")  # its words; the Focus box
    assert "τ" in f["stats"] and f["mask"]["data"][0]["type"] == "heatmap"
    assert f["eye"][0]["data"] and f["lens"]["data"], "a run on the page records the verifier's eye and the lens"
    assert shown["align"]["figure"]["data"], "k=2 runs record alignment after a few steps"
    assert shown["lens_rank"]["figure"]["data"] and shown["hist"]["figure"]["data"][0]["type"] == "bar"
    assert len(shown["timing"]["figure"]["data"]) == 6 and "break-even" in json.dumps(shown["cost"])
    assert f["cost_note"].startswith("On this CPU") and "on this CPU" in shown["cost"]["figure"]["layout"]["title"]["text"]


def test_final_tree_accepted_path_matches_the_text(streamed):
    frames = merged([o[1] for o in streamed])
    tokens, tree = text(frames), frames[-1]["tree"]
    root, accepted = _tree_tokens(tree)
    assert f"step {len(frames) - 1}" in tree["layout"]["title"]["text"]
    # The last step emitted its accepted drafts, then (unless cut by max tokens) the model's own token (a
    # correction or a bonus); the token before them is this step's root, the previous step's last token.
    tail = tokens[:-1] if tokens[-1][1] in MODEL_LABELS else tokens
    drafts = []
    while tail and tail[-1][1] in DRAFT_LABELS:
        drafts.insert(0, tail.pop()[0])
    assert drafts == accepted[: len(drafts)]
    assert len(drafts) == len(accepted) or tokens[-1][1] in DRAFT_LABELS
    assert tail[-1][0] == root


def test_a_stored_steps_frame_for_an_api_caller(client, streamed):
    out = client.predict(1, api_name="/show_step")
    assert player_message(out[1])["show"] == 1 and out[0] == streamed[-1][0]  # the run's status, unchanged
    assert player_message(out[1])["frames"]["1"] == merged([o[1] for o in streamed])[1]  # the frame the page got


def test_the_players_messages_stay_json_text_after_a_skip(client, streamed):
    """After an output that leaves the player's box as it was (gr.skip(): a refusal here, the end of every Run on
    the page) the box's messages are still JSON text: such a skip once made the session a copy of the box that
    sent them as nested dicts, walked and re-encoded on every update (explorer.views.sends_json)."""
    refused = client.predict(10_000, api_name="/show_step")
    assert refused[0].startswith("⚠️")
    job = client.submit(prompt=PROMPT, api_name="/generate", **SHORT)
    job.result()
    sent = [o[1] for o in job.outputs() if not str(o[0]).startswith("**Waiting for the model**")]
    assert sent and all(isinstance(m, str) for m in sent), [type(m).__name__ for m in sent]
    assert isinstance(client.predict(0, api_name="/show_step")[1], str)


def test_export_files(client, streamed):
    paths = client.predict(2, api_name="/export")
    assert len(paths) == 2  # the trace, and one lecture file holding the shown step's figures too
    trace, lecture = (next(p for p in paths if tag in Path(p).name) for tag in ("trace", "lecture"))
    data = json.loads(open(trace).read())
    last = _steps(streamed[-1][0]) - 1
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
    # The stored run is untouched: its steps still answer.
    out = client.predict(1, api_name="/show_step")
    shown = player_message(out[1])
    assert shown["show"] == 1 and "step 1" in shown["frames"]["1"]["tree"]["layout"]["title"]["text"]


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
    assert after <= 1 and n_steps < 200  # the step in progress at the click, at most, finished after it
    frames = merged([o[1] for o in job.outputs()])
    assert len(frames) == n_steps and f"step {n_steps - 1}" in frames[-1]["tree"]["layout"]["title"]["text"]
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
    for p, out, job in zip(prompts, finals, jobs):
        expected = "".join(s.emitted_text[i] for s in Decoder(lm, max_new_tokens=4).stream(lm.chat_ids(p))
                           for i in range(len(s.emitted)))
        held = merged([o[1] for o in job.outputs()])  # a run's steps arrive over its messages
        assert out[0].startswith("**Done**") and "".join(t for t, _ in text(held)) == expected
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
    frames = merged([o[1] for o in outputs])
    assert all(f["mask"]["data"][0]["type"] == "heatmap" for f in frames)
    sources = set().union(*(_sources(f["tree"]) for f in frames))
    if method == "hybrid":
        assert len(sources) >= 2, sources  # copy and mask drafts side by side
    if method == "lade":  # the lookahead window's rows are in the mask view
        assert any("lookahead" in y for f in frames for y in f["mask"]["data"][0]["y"])
    if method != "ar":
        assert any(label in DRAFT_LABELS for _, label in text(frames)), "a copying prompt accepts drafts"


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
    assert after[0] == before[0]
    assert player_message(after[1])["frames"] == player_message(before[1])["frames"]  # the stored run unchanged
    bad = client.predict(step=0, api_name="/whatif", **SHORT)
    assert bad[0].startswith("⚠️") and "prefill" in bad[0]


def test_open_trace_and_a_malformed_file(client, tmp_path):
    from gradio_client import handle_file

    import app

    path = app.TRACES[next(iter(app.TRACES))]
    out = client.predict(handle_file(str(path)), api_name="/open_trace")
    assert out[0].startswith("**Done**") and f"recorded: {path.name}" in out[0]
    shown = player_message(out[1])
    frame = shown["frames"][shown["show"]]
    assert frame["tree"]["data"] and frame["mask"]["data"][0]["type"] == "heatmap"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = client.predict(handle_file(str(bad)), api_name="/open_trace")
    assert out[0].startswith("⚠️ This is not an ESP Explorer trace") and "\n" not in out[0]
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"hello": 1}))
    assert "no 'meta' field" in client.predict(handle_file(str(foreign)), api_name="/open_trace")[0]
    assert client.predict(1, api_name="/show_step")[0].startswith("**Done**")  # the app keeps serving
