"""ESP Explorer: watch a frozen LM draft its own future, step by step, in the browser.

`python app.py` serves the app on the embedded model (127.0.0.1:7860 locally, 0.0.0.0 on a Space;
PORT / GRADIO_SERVER_PORT and GRADIO_SERVER_NAME override). This module is the page: its layout and
the wiring of its events to `explorer.calls` (sessions, GPU calls, rendering) and `components/` (figures).
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import gradio as gr
import torch

from components import plotly_bundle
from components.captions import CAPTIONS
from components.compare_view import COLUMNS
from components.eye_view import NO_EYE
from components.lecture import PARTS_CSS, PLAYER_JS, figure_box, speed_box
from components.lens_view import NO_LENS
from components.size_view import ablation_figure, ablation_sentences, size_figure, size_sentences
from components.story_player import STORY_CSS, STORY_JS, story_markup
from components.trace_schema import MAX_TRACE_BYTES
from explorer import calls, door, gpu, lesson, room
from explorer import requests as rq
from explorer.calls import KNOB_INFO, TRACES
from explorer.recipe import RUNNING
from explorer.requests import LIMITS
from explorer.session import Session, free_session
from explorer.views import refusal_error, sends_json

log = logging.getLogger("esp.app")
ASSETS = Path(__file__).resolve().parent / "assets"
GLOSSARY = Path(__file__).resolve().parent / "docs" / "glossary.md"
SESSION_TTL_S = 3600
# Gradio's file cache (uploads, and the copies of exports it serves) is swept every 10 minutes of files
# older than a session lives; a session's own export folder goes with it (explorer.session.free_session).
DELETE_CACHE = (600, SESSION_TTL_S)
# The events that open a stored run for the player (no model) share this many workers
# (LIMITS.render_concurrency).
RENDER = {"concurrency_limit": LIMITS.render_concurrency, "concurrency_id": "views"}
# The hidden box the server's messages to the player arrive in (explorer.views.payload); the page's script feeds
# each to the player.
FEED_JS = ("watch('value', () => { const v = props.value;"
           " if (v) window.espExplorer?.feed(typeof v === 'string' ? JSON.parse(v) : v); });")


# Stop says so in the page at once, before the server answers (a busy 2-core machine can take a while):
# a status that says a run is decoding now says it is stopping; the run's next update replaces it.
STOPPING_JS = "(s) => typeof s === 'string' ? s.replace(/^\\*\\*Decoding\\*\\*/, '**Stopping…**') : s"
# Page-side listeners (assets/explorer.js holds window.espExplorer): the link follows the run on screen (its
# recipe or shipped trace: explorer.recipe), the shown step and the tab in place, once the page has read it
# (`linked`: the tabs announce a selection as they mount, and the server reads the link from the page's
# address). A run being decoded has no link yet: Run clears it at once (with the note that says so), and the
# run's end sets it.
LINKED_JS = "(q) => { if (window.espExplorer) { window.espExplorer.linked = true; window.espExplorer.setRun(q); } }"
RUN_LINK_JS = "(q) => { window.espExplorer?.setRun(q); }"
RUN_STARTED_JS = f"() => {{ window.espExplorer?.setRun(''); return ['', {json.dumps(RUNNING)}]; }}"
TAB_JS = "() => {{ if (window.espExplorer?.linked) window.espExplorer.setState({{tab: '{tab}'}}); }}"
# The keys of the page, said on it (assets/explorer.js, and the player's own on the text's tokens).
KEYS_HELP = ("**Click** a token of the text, a node of the tree or a row of the attention mask to follow it in "
             "every view. **Keys**: ← → (or PgUp PgDn) step, Space plays; Tab to the text, then ← → between "
             "tokens and Enter to go to the step that wrote one; Tab to the tree, then ← → between nodes and "
             "Enter to focus one.")
# The tour's spotlight waits for its view to exist (a tab that just opened renders a moment later).
SPOTLIGHT_JS = ("(v) => { let n = 0; const go = () => window.espExplorer?.spotlight(v) || ++n > 30 "
                "|| setTimeout(go, 100); setTimeout(go, 50); }")
# The lesson room (explorer.room): the class link is built in the page from the room's id (the server does not
# know the address the page was reached by); anything that picks a run stops following the presenter (the Follow
# box unticked; a step picked in the player does the same: assets/explorer.js).
ROOM_LINK_JS = "(id) => id ? `${location.origin}${location.pathname}?room=${id}` : ''"
UNFOLLOW_JS = "() => false"

OFFER_JS = ("() => window.espExplorer?.firstVisit() ? 'New here? Press **Tour** for a walk through the views, "
            "stop by stop (no model needed).' : ''")

DTYPE_CHOICES = {"float32": "float32: exactly what plain decoding writes",
                 "bfloat16": "bfloat16: faster; equal to plain decoding up to rounding ties"}

if gpu.mode() != "local":  # ZeroGPU: the model is loaded now, on the CPU, before any worker forks
    calls.ready_process(LIMITS.models[0])


# ---------------------------------------------------------------- layout

def _examples() -> list[list[str]]:
    return [[e["prompt"]] for e in json.loads((ASSETS / "examples.json").read_text())]


def shown_js(at: int) -> str:
    """An event's `js` that sends the step the player shows as its input number `at` (the hidden #shown box is
    only its place): What-if, Export, a room's start and tick."""
    return f"(...a) => {{ a[{at}] = window.espExplorer?.shown() ?? a[{at}]; return a; }}"


def checked_by_us(**event) -> dict:
    """The options of an event whose handler checks every value it takes itself (explorer.requests: the
    same fields its controls are built from): Gradio's own value checks (choices, slider bounds) are off
    (`preprocess=False`), so that a bad value sent through the API is refused in one line of ours instead
    of Gradio's error plus a traceback in the server log. Per event, not per component: Gradio rebuilds a
    component that an update changed (the scrubber's maximum, the Focus box's choices) from its class,
    and the rebuilt one would check again. State inputs are the server's own either way."""
    return {**event, "preprocess": False}


def caption(view: str) -> gr.Markdown:
    """The one-line how-to-read note under a figure."""
    return gr.Markdown(CAPTIONS[view], elem_classes="esp-caption")


def part(markup: str, elem_id: str, **kw) -> gr.HTML:
    """A part of the page's player (components/lecture.py): fixed markup, no value, no script of its own; the
    player finds it by its data-role or data-figure and fills it."""
    return gr.HTML(html_template=markup, elem_id=elem_id, js_on_load=None, **kw)


def view(label: str, elem_id: str, key: str, note: str = "") -> gr.HTML:
    """A figure of the player: its label and its box (`key`: a frame's view or the run's), and the line shown
    instead when the run does not record it."""
    said = f'<p class="esp-note" data-note="{key}" hidden>{note}</p>' if note else ""
    return part(f'<div class="esp-label">{label}</div>{figure_box(key)}{said}', elem_id)


def plot_row(*plots: tuple[str, str, str], elem_id: str | None = None) -> None:
    """Captioned figures of the player side by side (stacked on a narrow screen), each given as (label, elem_id,
    view); each figure's column is `<elem_id>-col`."""
    with gr.Row(elem_id=elem_id):
        for label, plot_id, key in plots:
            with gr.Column(min_width=320, elem_id=f"{plot_id}-col"):
                view(label, plot_id, key)
                caption(key)


def build_app() -> gr.Blocks:
    """The page: a header with the tour, the controls on the left, the shown step and its tabs on the
    right, then the wiring of every event (each checked on the server: explorer.requests)."""
    with gr.Blocks(title="ESP Explorer", delete_cache=DELETE_CACHE) as demo:
        page = SimpleNamespace(session=gr.State(Session(), time_to_live=SESSION_TTL_S, delete_callback=free_session))
        _header(page)
        _room_controls(page)
        with gr.Row(elem_id="main-row"):
            _controls(page)
            with gr.Column(scale=3, min_width=320, elem_id="views", elem_classes="esp-player"):
                _step_views(page)
                with gr.Tabs(elem_id="tabs") as page.tabs:
                    _run_tab(page)
                    _other_tabs(page)
        _wire_settings(page)
        _wire_model_calls(page)
        _wire_traces(page, demo)
        _wire_header(page)
        _wire_room(page)
    count_checked(demo)
    return demo


def count_checked(demo: gr.Blocks) -> None:
    """A request with fewer values than its event takes gets one line, not Gradio's bare "Error" with a
    traceback in the log (`Blocks.validate_inputs` runs before any handler, so no guard can see it)."""
    check = demo.validate_inputs

    def validate(block_fn, inputs: list) -> None:
        if len(inputs) < len(block_fn.inputs):
            wanted = sum(not isinstance(b, gr.State) for b in block_fn.inputs)  # the session is not sent
            raise refusal_error(f"This request sends {len(inputs)} values; this event takes {wanted}.")
        check(block_fn, inputs)

    demo.validate_inputs = validate


# ---------------------------------------------------------------- sections of the page

def _header(page: SimpleNamespace) -> None:
    """Title and buttons (Tour, Copy link, theme), the first-visit offer, the tour panel, and the hidden
    values the page's script reads and writes."""
    with gr.Row(elem_id="header"):
        gr.Markdown("# ESP Explorer\nEmbedding-Space Probing: a frozen LM drafts several future tokens from "
                    "soft mask tokens, and one forward pass verifies the whole draft tree.")
        with gr.Row(elem_id="header-buttons"):
            # The first screen tells one step as a story; this opens the whole page (assets/explorer.js).
            gr.Button("Show the dashboard", elem_id="dashboard", size="sm", variant="primary", min_width=140)
            page.tour_btn = gr.Button("Tour", elem_id="tour", size="sm", min_width=60)
            gr.Button("Copy link", elem_id="copy-link", size="sm", min_width=60)  # assets/explorer.js
            page.theme_btn = gr.Button("◐", elem_id="theme", size="sm", min_width=40)
    page.link_note = gr.Markdown(elem_id="link-note", elem_classes="esp-note")  # why the run on screen has no link
    page.tour_offer = gr.Markdown(elem_id="tour-offer")
    with gr.Column(visible=False, elem_id="tour-panel") as page.tour_panel:
        page.tour_text = gr.Markdown(elem_id="tour-text")
        with gr.Row():
            page.tour_back = gr.Button("◀ Back", elem_id="tour-back", size="sm")
            page.tour_next = gr.Button("Next ▶", elem_id="tour-next", size="sm", variant="primary")
            page.tour_end = gr.Button("End the tour", elem_id="tour-end", size="sm")
    with gr.Accordion("Glossary: every term on this page", open=False, elem_id="glossary"):
        gr.Markdown(GLOSSARY.read_text(encoding="utf-8"), elem_id="glossary-text")
    page.tour_n = gr.State(0)
    page.tour_view = gr.Textbox(visible="hidden", elem_id="tour-view")
    # The link of the run on screen ("trace=..." or its recipe, explorer.recipe; "" when it has none), and the
    # recipe a link brought, until it is run (explorer.lesson.open_link).
    page.run_link = gr.Textbox(visible="hidden", elem_id="run-link")
    page.link = gr.State(None)
    # The player's data (explorer.views.payload, fed to the player by FEED_JS), and a place for the step it shows
    # in the inputs of the events that need it (shown_js).
    page.player = gr.HTML(None, html_template="", js_on_load=FEED_JS, elem_id="player-data", visible="hidden")
    page.shown = gr.Number(None, precision=0, visible="hidden", elem_id="shown")


def _room_controls(page: SimpleNamespace) -> None:
    """The lesson room (explorer.room): Start and End and the class link for the page that presents, the
    Follow box for a page opened from that link, and the hidden values its timer passes along."""
    page.room = gr.State(None)
    with gr.Row(elem_id="room-row", equal_height=True):
        page.room_start = gr.Button("Start a lesson room", elem_id="room-start", size="sm", min_width=140, scale=0)
        page.room_link = gr.Textbox(label="Class link: every page that opens it follows this page's step",
                                    elem_id="room-link", visible=False, interactive=False, buttons=["copy"], scale=3)
        page.room_end = gr.Button("End the room", elem_id="room-end", size="sm", visible=False, min_width=100,
                                  scale=0)
        page.follow = gr.Checkbox(True, label="Follow the presenter", elem_id="follow", visible=False, scale=0,
                                  min_width=180)
    page.room_note = gr.Markdown(elem_id="room-note")
    page.room_id = gr.Textbox(visible="hidden", elem_id="room-id")
    page.room_timer = gr.Timer(room.FOLLOW_S, active=False)


def _controls(page: SimpleNamespace) -> None:
    """The left column: prompt, model, method and its settings, each built from its explorer.requests
    field (bounds, step, choices, default), so that the page offers exactly what the server takes."""
    with gr.Column(scale=1, min_width=300, elem_id="controls"):
        page.prompt = gr.Textbox(label="Prompt", lines=4, elem_id="prompt", max_length=rq.PROMPT.max_chars,
                                 placeholder="Ask something, or pick an example below.")
        page.model = gr.Dropdown(list(rq.MODEL.options), value=rq.MODEL.default, label="Model", elem_id="model",
                                 info="The models this server offers ('embedded' = SmolLM2-135M).")
        page.method = gr.Dropdown(list(rq.METHOD.options), value=rq.METHOD.default, label="Method", elem_id="method",
                                  info="esp = the paper's ESP; the others are baselines (ar = plain decoding).")
        page.k = gr.Slider(**rq.K.slider(), label="k", info=KNOB_INFO["k"], elem_id="k")
        page.bc = gr.Slider(**rq.BC.slider(), label="BC", info=KNOB_INFO["bc"], elem_id="bc")
        page.lam = gr.Slider(**rq.LAM.slider(), label="λ", info=KNOB_INFO["lam"], elem_id="lam")
        page.max_new = gr.Slider(**rq.MAX_NEW.slider(), label="max new tokens", elem_id="max-new")
        # Folded until asked for: a first run needs none of them (issue 47).
        with gr.Accordion("Masks and tree", open=False, elem_id="masks-and-tree"):
            page.init = gr.Radio(list(rq.INIT.options), value=rq.INIT.default, label="Mask init",
                                 info=KNOB_INFO["init"], elem_id="init")
            page.tree = gr.Radio(list(rq.TREE.options), value=rq.TREE.default, label="Tree", info=KNOB_INFO["tree"],
                                 elem_id="tree")
        # Shown only where this machine computes bf16 natively (gpu.bf16_missing); elsewhere it stays at
        # float32, and a request naming bfloat16 is refused in one line (explorer.requests.DTYPE).
        page.dtype = gr.Radio([(DTYPE_CHOICES[d], d) for d in rq.DTYPE.options], value=rq.DTYPE.default,
                              label="Precision", elem_id="dtype", visible=gpu.bf16_missing() is None)
        with gr.Accordion("Decoding", open=False, elem_id="decoding"):
            page.mode = gr.Radio(list(rq.MODE.options), value=rq.MODE.default, label="Target decoding", elem_id="mode")
            page.temperature = gr.Slider(**rq.TEMPERATURE.slider(), label="temperature")
            page.top_p = gr.Slider(**rq.TOP_P.slider(), label="top-p")
            page.seed = gr.Number(rq.SEED.default, precision=0, minimum=rq.SEED.low, maximum=rq.SEED.high, label="seed")
            page.layouts = gr.Radio(list(rq.LAYOUT.options), value=rq.LAYOUT.default, label="Mask construction")
        with gr.Row():
            page.run = gr.Button("Run", variant="primary", elem_id="run")
            page.stop = gr.Button("Stop", variant="stop", elem_id="stop")
        page.settings_note = gr.Markdown(elem_id="settings-note", elem_classes="esp-note")
        gr.Examples(_examples(), inputs=[page.prompt], label="Examples (one per Spec-Bench category)")


def _step_views(page: SimpleNamespace) -> None:
    """Above the tabs: the status line, the shown step's draft tree and attention pattern (the method, before
    any control, on every screen: issue 31), the step scrubber, playback and focus, and the step in words: the
    player's parts (components/lecture.py), drawn in the browser from the run it holds. On a narrow screen the
    attention pattern comes after the step controls, so that they follow the tree (assets/app.css)."""
    # The story of the opening run's step and the predict mode (components/story_player.py), on the player: the
    # first screen until the dashboard opens (assets/explorer.js), then a row of two buttons above the status.
    part(story_markup(calls.shipped_data(calls.OPENING)["story"]), "first-minute")
    page.status = gr.Markdown("Set the controls and press **Run**.", label="Status", elem_id="status")
    plot_row(("Draft tree", "tree-plot", "tree"), ("Attention pattern: who sees whom", "mask-plot", "mask"),
             elem_id="figures")
    part('<div class="esp-row"><button id="prev" data-role="prev" class="esp-button" title="← or PgUp">◀ prev</button>'
         '<span id="scrub"><input data-role="scrub" type="range" min="0" max="1" value="0" step="1" '
         'aria-label="step"></span><span id="step-label" data-role="label"></span>'
         '<label id="goto">Go to step <input data-role="goto" type="number" min="0" step="1"></label>'
         '<button id="next" data-role="next" class="esp-button" title="→ or PgDn">next ▶</button></div>', "scrub-row")
    part(f'<div class="esp-row"><button id="play" data-role="play" class="esp-button" title="Space">▶ Play</button>'
         f'<label id="speed">steps / s {speed_box()}</label><span id="pace" data-role="pace" aria-live="polite">'
         '</span><label id="focus">Focus on a node <select data-role="focus"></select></label></div>'
         '<div class="esp-note">outlined in the tree, the attention pattern, the text and the alignment</div>',
         "play-row")
    part('<div data-role="focus-note"></div>', "focus-note")
    gr.Markdown(KEYS_HELP, elem_id="keys-help", elem_classes="esp-caption")
    part('<div data-role="words"></div>', "step-words")


def _run_tab(page: SimpleNamespace) -> None:
    """The Run tab: the generated text and the shown step's other figures (its tree and attention pattern are
    above the tabs): the verifier's eye, the cost, the alignment and the Mask Lens, the histogram and timing."""
    with gr.Tab("Run", id="run"):
        part('<div class="esp-label">Generated text</div><div data-role="legend"></div>'
             '<div data-role="text" class="esp-text"></div>', "text-view")
        caption("text")
        part('<div data-role="stats"></div>', "stats")
        view("The verifier's eye", "eye-plot", "eye", NO_EYE)
        caption("eye")
        view("Cost", "cost-plot", "cost")
        caption("cost")
        part('<div data-role="cost-note"></div>', "cost-note")
        view("Alignment", "align-plot", "align")
        caption("align")
        _mask_lens(page)
        plot_row(("Accepted drafts", "hist-plot", "hist"), ("Timing", "timing-plot", "timing"))


def _mask_lens(page: SimpleNamespace) -> None:
    """The Mask Lens beside the alignment: the shown step's layers x masks grid and the run's, then the
    commitment strip over the generated text (components/lens_view.py)."""
    with gr.Column(elem_id="mask-lens"):
        gr.Markdown("### Mask Lens · what each mask's layers would say, read as tokens (a raw logit lens)",
                    elem_classes="esp-note", elem_id="mask-lens-title")
        with gr.Row():
            with gr.Column(min_width=320, elem_id="lens-plot-col"):
                view("Mask Lens", "lens-plot", "lens", NO_LENS)
                caption("lens")
            with gr.Column(min_width=320, elem_id="lens-rank-plot-col"):
                view("Mask Lens, the run", "lens-rank-plot", "lens_rank")
                caption("lens_rank")
        view("Commitment strip", "commit-plot", "commit")
        caption("commit")


def _other_tabs(page: SimpleNamespace) -> None:
    """What-if, Open a trace, Model size, Compare and Export."""
    with gr.Tab("What-if", id="whatif", elem_id="whatif-tab"):
        gr.Markdown("Re-run the shown step from the same text with the method and settings on the "
                    "left: what would it have drafted, accepted and cost?", elem_classes="esp-note")
        page.whatif_btn = gr.Button("Re-run the shown step with these settings", elem_id="whatif")
        page.whatif_note = gr.Markdown(elem_id="whatif-note")
        with gr.Row():
            page.whatif_orig = gr.Plot(label="Stored step", elem_id="whatif-orig", min_width=320)
            page.whatif_alt = gr.Plot(label="What-if", elem_id="whatif-alt", min_width=320)
        caption("whatif")
    with gr.Tab("Open a trace", id="open", elem_id="open-tab"):
        gr.Markdown("Scrub a recorded run with every view, no model needed: one shipped with the app, "
                    "or a trace JSON from **Export** (e.g. recorded on a GPU with a bigger model).",
                    elem_classes="esp-note")
        page.shipped = gr.Radio(list(TRACES), value=None, label="Recorded runs", elem_id="shipped")
        page.trace_file = gr.File(label="Trace JSON", file_types=[".json"], type="filepath", elem_id="trace-file")
    with gr.Tab("Model size", id="size"):
        gr.Plot(size_figure(), label="Model size", elem_id="size-plot")
        gr.Markdown(size_sentences(), elem_id="size-note")
        gr.Plot(ablation_figure(), label="The paper's ablations", elem_id="ablation-plot")
        gr.Markdown(ablation_sentences(), elem_id="ablation-note")
    with gr.Tab("Compare", id="compare"):
        gr.Markdown("Decodes the prompt with autoregressive decoding and every registered method, "
                    "using the settings on the left. On a CPU big blocks cost more than they save: "
                    "τ can exceed 1 while the speed-up stays below it.", elem_classes="esp-note")
        page.compare_btn = gr.Button("Compare methods", elem_id="compare")
        page.compare_status = gr.Markdown(label="Compare status", elem_id="compare-status")
        page.compare_table = gr.Dataframe(headers=COLUMNS, label="Results", interactive=False, wrap=True,
                                          elem_id="compare-table")
        page.compare_plot = gr.Plot(label="τ and speed-up")
        caption("compare")
    with gr.Tab("Export", id="export"):
        page.export_btn = gr.Button("Export the trace, the shown step's figures and a lecture file", elem_id="export")
        page.files = gr.File(label="Downloads", file_count="multiple", elem_id="export-files")


# ---------------------------------------------------------------- wiring of the events

def _knobs(page: SimpleNamespace) -> list:
    """The run's settings in the order generate, whatif and compare take them."""
    return [page.k, page.bc, page.lam, page.model, page.init, page.tree, page.mode, page.temperature, page.top_p,
            page.seed, page.max_new, page.layouts]


def _wire_settings(page: SimpleNamespace) -> None:
    """The live check under the controls and the knobs each method takes. It has its own line: a trace
    opening sets the controls (_wire_traces), and the status must keep saying what is on screen."""
    checked = [page.k, page.bc, page.lam, page.init, page.tree, page.mode, page.temperature, page.top_p, page.seed,
               page.max_new, page.layouts, page.method, page.dtype]
    for c in checked:
        c.change(calls.check_settings, checked, page.settings_note,
                 **checked_by_us(queue=False, show_progress="hidden", api_visibility="private"))
    page.method.change(calls.knob_updates, page.method, [page.k, page.bc, page.lam, page.init, page.tree],
                       **checked_by_us(queue=False, show_progress="hidden", api_visibility="private"))


def _wire_model_calls(page: SimpleNamespace) -> None:
    """Run, Stop, What-if and Compare: the events that use the model (concurrency_id "model"), each waiting in
    the model's line inside the server (explorer.line), LIMITS.line_size of them at once."""
    model = checked_by_us(concurrency_limit=LIMITS.line_size, concurrency_id="model")
    knobs = _knobs(page)
    page.run.click(None, None, [page.run_link, page.link_note], js=RUN_STARTED_JS)
    # The dtype comes after the method (the last of the old inputs): an API caller that does not send it gets
    # float32, as before it existed.
    opened = _opened(page)
    run = page.run.click(_to_player(page, calls.generate, opened),
                         [page.prompt, *knobs, page.method, page.dtype, page.session],
                         opened, api_name="generate", show_progress="hidden", **model)
    # Its end gives the run its link, and shows the step a link named when the run is the link's.
    after = [page.run_link, page.link_note, page.link, page.player]
    ran = run.then(_to_player(page, lesson.after_run, after), [page.session, page.link], after,
                   api_visibility="private", show_progress="hidden", **RENDER)
    ran.then(None, page.run_link, None, js=RUN_LINK_JS)
    page.compare_btn.click(calls.compare, [page.prompt, *knobs, page.dtype],
                           [page.compare_status, page.compare_table, page.compare_plot], api_name="compare", **model)
    # Not queued from the page and not a cancel: it only sets the run's stop token, so it answers at once even
    # while the queue is busy, and the run (here or in a GPU worker) ends after the step in progress with
    # a final update. The page says "Stopping…" before the server answers (STOPPING_JS), in a listener
    # registered after this one: registered before it, the page never sent the stop (checked).
    # Through the API (gradio_client, plain HTTP) every event joins the queue, Stop too: there it has a
    # concurrency group of its own with no limit (explorer.door.FREE), and the door lets it past a full queue
    # and every per-visitor limit, so it runs at once. It only reaches the caller's own session's run.
    page.stop.click(calls.request_stop, [page.session], None, queue=False, api_name="stop", show_progress="hidden",
                    concurrency_id=door.FREE, concurrency_limit=None)
    page.stop.click(None, page.status, page.status, js=STOPPING_JS, queue=False, api_visibility="private")
    # The stored side is drawn at once, without the model; the what-if waits its turn (its place on its note).
    page.whatif_btn.click(calls.whatif_stored, [page.shown, page.session], page.whatif_orig, js=shown_js(0),
                          api_visibility="private", show_progress="hidden", **checked_by_us(**RENDER))
    page.whatif_btn.click(calls.whatif, [page.shown, *knobs, page.method, page.dtype, page.session],
                          [page.whatif_note, page.whatif_orig, page.whatif_alt], api_name="whatif", js=shown_js(0),
                          show_progress_on=[page.whatif_note, page.whatif_alt], **model)
    page.export_btn.click(calls.export, [page.session, page.shown], page.files, api_name="export", js=shown_js(1),
                          **checked_by_us(concurrency_limit=LIMITS.export_concurrency, concurrency_id="export"))
    # For an API caller, a stored step's frame (the page's player holds every step: it never asks).
    page.api_step = gr.Button(visible=False)
    shown = [page.status, page.player]
    page.api_step.click(_to_player(page, calls.show_step, shown), [page.session, page.shown], shown,
                        api_name="show_step", **checked_by_us(**RENDER))


def _to_player(page: SimpleNamespace, fn: Callable, outputs: list) -> Callable:
    """`fn` for an event with `outputs`: its message to the player leaves as JSON text (explorer.views.sends_json)."""
    return sends_json(fn, next(i for i, o in enumerate(outputs) if o is page.player))


def _opened(page: SimpleNamespace) -> list:
    """The outputs of whatever shows a run: status, the player's data, session."""
    return [page.status, page.player, page.session]


def _shown_controls(page: SimpleNamespace) -> list:
    """The outputs of explorer.lesson.shown_controls: the run's link, its note, and the controls that show the
    run's prompt, method and settings (explorer.lesson.CONTROLS)."""
    return [page.run_link, page.link_note, page.prompt, page.method, page.k, page.bc, page.lam, page.init, page.tree,
            page.mode, page.temperature, page.top_p, page.seed, page.max_new, page.layouts, page.model, page.dtype]


def _room_outputs(page: SimpleNamespace) -> list:
    """The room controls' outputs (explorer.room.CONTROLS order)."""
    return [page.room, page.room_id, page.room_note, page.room_end, page.room_link, page.follow, page.room_timer]


def _then_controls(page: SimpleNamespace, event, js: str = RUN_LINK_JS) -> None:
    """After `event` opened a trace: the controls show the run's prompt, method and settings
    (explorer.lesson.CONTROLS), then the page's address its link (`js`)."""
    controls = _shown_controls(page)
    shown = event.then(lesson.shown_controls, [page.session, page.link], controls, api_visibility="private",
                       show_progress="hidden", **RENDER)
    shown.then(None, page.run_link, None, js=js)


def _wire_traces(page: SimpleNamespace, demo: gr.Blocks) -> None:
    """Opening a trace (a file, a shipped one, the page's link) and the link following the tabs."""
    opened = _opened(page)
    _then_controls(page, page.trace_file.upload(_to_player(page, calls.open_trace, opened),
                                                [page.trace_file, page.session], opened, api_name="open_trace",
                                                **RENDER))
    _then_controls(page, page.shipped.input(_to_player(page, calls.open_shipped, opened),
                                            [page.shipped, page.session], opened,
                                            **checked_by_us(api_visibility="private", **RENDER)))
    # A recorded run is on screen as soon as the page opens, before any model is warm: the one the link
    # names (?trace=trace_masks&step=7&tab=run), or calls.OPENING; or a link's recipe fills the controls.
    # One event, so that when the player shows the link's step nothing more is on its way: the room a link names
    # (?room=...) and the controls showing the run come with it.
    outputs = [*opened, page.tabs, page.link, *_room_outputs(page), *_shown_controls(page)]
    loaded = demo.load(_to_player(page, lesson.open_page, outputs), page.session, outputs,
                       api_visibility="private", **RENDER)
    loaded.then(None, page.run_link, None, js=LINKED_JS)
    demo.load(None, None, page.tour_offer, js=OFFER_JS)
    for tab in page.tabs.children:
        tab.select(None, None, None, js=TAB_JS.format(tab=tab.id))


def _wire_header(page: SimpleNamespace) -> None:
    """The header's buttons: the theme switch, and the tour, each stop of which opens its trace at its
    step, then the page spotlights its view."""
    page.theme_btn.click(None, js="() => { window.espExplorer?.toggleTheme(); }")
    toured = [page.tour_panel, page.tour_text, page.tour_n, page.tour_view, page.tabs, *_opened(page)]
    for button, move in ((page.tour_btn, None), (page.tour_next, 1), (page.tour_back, -1)):
        event = button.click(_to_player(page, lesson.tour_move(move), toured), [page.tour_n, page.session], toured,
                             api_visibility="private", show_progress="hidden", **RENDER)
        event.then(None, page.tour_view, None, js=SPOTLIGHT_JS)
        _then_controls(page, event)
    page.tour_end.click(lambda: gr.Column(visible=False), None, page.tour_panel, queue=False,
                        api_visibility="private")
    page.tour_end.click(None, js="() => { window.espExplorer?.clearSpotlight(); }")


def _wire_room(page: SimpleNamespace) -> None:
    """The lesson room: starting and ending it (a room link is opened with the page: explorer.lesson.open_page),
    and the room's tick (outside the queue): the presenter's page tells the room its step, a follower's gets it, and its player
    moves there, until its student scrubs."""
    private = {"api_visibility": "private", "show_progress": "hidden"}
    controls = _room_outputs(page)
    page.room_start.click(room.start, [page.session, page.room, page.shown], controls, js=shown_js(2),
                          **checked_by_us(**private, **RENDER))
    page.room_end.click(room.end, page.room, controls, **checked_by_us(**private, **RENDER))
    page.room_id.change(None, page.room_id, page.room_link, js=ROOM_LINK_JS)
    ticked = [page.player, page.room_note, page.room_timer]
    page.room_timer.tick(_to_player(page, room.tick, ticked), [page.room, page.follow, page.shown, page.session],
                         ticked, js=shown_js(2),
                         **checked_by_us(queue=False, **private))
    for picked in (page.run.click, page.shipped.input, page.trace_file.upload, page.tour_btn.click):
        picked(None, None, page.follow, js=UNFOLLOW_JS)


# How often the queue looks for a request to start when it has none (Gradio's own: 1 ms); 10 ms is lost in a
# request's round trip (~70 ms through gradio_client).
QUEUE_POLL_S = 0.01


def queued(demo: gr.Blocks) -> gr.Blocks:
    """`demo` with the server's queue: at most LIMITS.queue_size requests waiting (all events together);
    one more gets Gradio's one-line busy answer (the page: "This application is currently busy. Please
    try again."; gradio_client: QueueError "Queue is full! Please try again."; HTTP 503). In front of it,
    the door (explorer.door): one run per session, the views' own limit per session, each visitor's ceilings
    (runs, share of the queue, sessions), the runs served in turn (explorer.fair), and Stop's way past a full
    queue."""
    gate = door.Door(LIMITS)
    demo.unload(gate.unload)  # a closed page's session no longer counts for its visitor
    demo.queue(max_size=LIMITS.queue_size, default_concurrency_limit=1)
    # With nothing to start, Gradio's queue looks again every millisecond: a fifth of a core on an idle server,
    # and a thread that wakes a thousand times a second beside a run's decode for the interpreter's lock.
    demo._queue.sleep_when_free = QUEUE_POLL_S
    gate.install(demo)
    return demo


def launch_options() -> dict:
    """Theme, CSS and the page's scripts (the player, components/lecture.py; keys, link state, tour spotlight,
    theme switch: assets/explorer.js) with the Plotly.js the player loads, which Gradio 6 takes at launch, the
    upload cap, and the bound on the sessions whose state the server keeps."""
    # The player draws with the players' Plotly.js (components/plotly_bundle.py), served as a file (allowed_paths)
    # and loaded by assets/explorer.js.
    plotly_js = {"src": f"gradio_api/file={plotly_bundle.PATH}", "version": plotly_bundle.VERSION}
    return {"theme": gr.themes.Soft(primary_hue="emerald"), "css_paths": [ASSETS / "app.css"],
            "max_file_size": MAX_TRACE_BYTES,  # an upload is a trace: refused above its cap before it is stored
            # The first screen's rules are not scoped to Gradio's container: they read a class on <html>.
            "head": (f"<style>{PARTS_CSS}{STORY_CSS}{(ASSETS / 'first.css').read_text()}</style>"
                     f"<script>window.ESP_PLOTLY = {json.dumps(plotly_js)};\n"
                     f"window.ESP_OPENING = {json.dumps(calls.OPENING)};\n{PLAYER_JS}{STORY_JS}</script>"
                     f"<script>{(ASSETS / 'explorer.js').read_text()}</script>"),
            "allowed_paths": [str(plotly_bundle.PATH)], "state_session_capacity": LIMITS.max_sessions,
            # A run waiting in the model's line holds a worker thread: Gradio's 40 stay for everything else.
            "max_threads": 40 + LIMITS.line_size}


def configure_engine() -> None:
    """Process-wide engine settings of the server (LIMITS.threads torch CPU threads)."""
    torch.set_num_threads(LIMITS.threads)


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    on_space = bool(os.environ.get("SPACE_ID"))
    host = os.environ.get("GRADIO_SERVER_NAME") or ("0.0.0.0" if on_space else "127.0.0.1")
    port = int(os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT") or 7860)
    # Serve at once and warm the first model in the background (~30 s on a CPU the first time): the page,
    # and every view of a stored trace, work before the model is ready; a Run meanwhile waits for it.
    configure_engine()
    if gpu.mode() == "local":
        calls.ready_process(LIMITS.models[0])
    demo = queued(build_app())
    demo.launch(server_name=host, server_port=port, **launch_options())


if __name__ == "__main__":
    main()
