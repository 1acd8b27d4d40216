"""The app through gradio_client against an in-process launch on the embedded model."""
from __future__ import annotations

import json

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from app_server import serve
from components.text_view import BONUS, DRAFT

PROMPT = "Count from 1 to 10."
SHORT = dict(k=2, bc=30, lam=0.1, max_new_tokens=16)


@pytest.fixture(scope="module")
def client(lm):
    with serve() as url:
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


def test_generate_streams_one_update_per_step(streamed):
    status, scrub, text, tree, mask, align, stats, hist, timing = streamed[-1]
    assert len(streamed) >= 4  # several step updates, then the final one
    assert all(o[0].startswith("**Decoding** · step") for o in streamed[:-1])
    assert status.startswith("**Done**")
    steps = [int(_value(o[1])) for o in streamed[:-1]]
    assert steps == list(range(len(steps)))  # one update per engine step, in order
    assert "τ" in stats and _figure(mask)["data"][0]["type"] == "heatmap"
    assert _figure(align)["data"], "k=2 runs record alignment after a few steps"
    assert len(_figure(timing)["data"]) == 6 and _figure(hist)["data"][0]["type"] == "bar"


def test_final_tree_accepted_path_matches_the_text(streamed):
    text, tree = streamed[-1][2], _figure(streamed[-1][3])
    tokens = [(p["token"], p["class_or_confidence"]) for p in text]
    root, accepted = _tree_tokens(tree)
    assert f"step {len(streamed) - 2}" in tree["layout"]["title"]["text"]
    # The last step emitted its accepted drafts, then (unless cut by max tokens) a bonus token;
    # the token before them is this step's root, the previous step's last token.
    tail = tokens[:-1] if tokens[-1][1] == BONUS else tokens
    drafts = []
    while tail and tail[-1][1] == DRAFT:
        drafts.insert(0, tail.pop()[0])
    assert drafts == accepted[: len(drafts)]
    assert len(drafts) == len(accepted) or tokens[-1][1] == DRAFT
    assert tail[-1][0] == root


def test_scrub_renders_a_stored_step(client, streamed):
    out = client.predict(1, api_name="/show_step")
    assert int(_value(out[0])) == 1 and "step 1 of" in out[1]
    assert "step 1" in _figure(out[3])["layout"]["title"]["text"]
    assert len(out[2]) < len(streamed[-1][2])  # the text up to step 1 only


def test_export_files(client, streamed):
    trace, page = sorted(client.predict(2, api_name="/export"), key=lambda p: not p.endswith(".json"))
    data = json.loads(open(trace).read())
    assert len(data["steps"]) == len(streamed) - 1 and data["meta"]["spec"].startswith("esp:k=2:bc=30")
    assert "Draft tree · step 2" in open(page).read()


@pytest.mark.parametrize("bad, message", [
    (dict(prompt="   "), "prompt is empty"),
    (dict(prompt="hi", k=4, bc=10), "BC=10 is too small for k=4"),
    (dict(prompt="hi", model="no-such/model-anywhere"), "Could not load model"),
    (dict(prompt="hi", model="not a model name"), "Unknown model"),
    (dict(prompt="word " * 9000), "shorten it"),
])
def test_bad_input_gives_a_clear_message(client, bad, message):
    with pytest.raises(AppError, match=message) as err:
        client.predict(api_name="/generate", **{**SHORT, **bad})
    assert "Traceback" not in str(err.value)


def test_stop_mid_run_leaves_the_app_usable(client):
    job = client.submit(prompt=PROMPT, api_name="/generate", **{**SHORT, "max_new_tokens": 64})
    for n, _ in enumerate(job, 1):
        if n == 2:
            job.cancel()
            break
    out = client.predict(prompt=PROMPT, api_name="/generate", **{**SHORT, "max_new_tokens": 4})
    assert out[0].startswith("**Done**")


def test_compare_covers_every_registered_method(client):
    from esp import methods

    out = client.predict(prompt=PROMPT, api_name="/compare", **{**SHORT, "max_new_tokens": 8})
    rows = out[1]["data"]
    assert len(rows) == len(methods.REGISTRY) and rows[0][0] == "ar" and rows[0][5] == 1.0
    esp = next(r for r in rows if r[0].startswith("esp"))
    assert esp[6] == "yes"  # greedy ESP is lossless: the same text as autoregressive decoding
