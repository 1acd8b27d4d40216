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

import gradio as gr
import torch

from components.captions import CAPTIONS
from components.compare_view import COLUMNS
from components.settings import INITS, LAYOUTS, MODES, TREES
from components.size_view import size_figure, size_sentences
from components.text_view import COLOR_MAP
from components.trace_schema import MAX_TRACE_BYTES
from esp import methods
from explorer import calls, gpu, lesson
from explorer.calls import KNOB_INFO, LIMITS, TRACES
from explorer.session import Session, free_session

log = logging.getLogger("esp.app")
ASSETS = Path(__file__).resolve().parent / "assets"
SESSION_TTL_S = 3600
# Gradio's file cache (uploads, and the copies of exports it serves) is swept every 10 minutes of files
# older than a session lives; a session's own export folder goes with it (explorer.session.free_session).
DELETE_CACHE = (600, SESSION_TTL_S)
QUEUE_SIZE = 16  # requests waiting for the model at once; more get "queue full"
# Stop says so in the page at once, before the server answers (a busy 2-core machine can take a while):
# a status that says a run is decoding now says it is stopping; the run's next update replaces it.
STOPPING_JS = "(s) => typeof s === 'string' ? s.replace(/^\\*\\*Decoding\\*\\*/, '**Stopping…**') : s"
# Page-side listeners (assets/explorer.js holds window.espExplorer): the link follows the shown step, trace
# and tab in place, once the page has read it (`linked`: the tabs announce a selection as they mount, and the
# server reads the link from the page's address); the Go-to-step box shows the step on screen, however it got there.
LINKED_JS = "() => { if (window.espExplorer) window.espExplorer.linked = true; }"
STEP_JS = "(s) => { if (window.espExplorer?.linked) window.espExplorer.setState({step: s}); return s; }"
TRACE_JS = "(t) => { if (window.espExplorer?.linked) window.espExplorer.setState({trace: t || null}); }"
TAB_JS = "() => {{ if (window.espExplorer?.linked) window.espExplorer.setState({{tab: '{tab}'}}); }}"
# The tour's spotlight waits for its view to exist (a tab that just opened renders a moment later).
SPOTLIGHT_JS = ("(v) => { let n = 0; const go = () => window.espExplorer?.spotlight(v) || ++n > 30 "
                "|| setTimeout(go, 100); setTimeout(go, 50); }")
OFFER_JS = ("() => window.espExplorer?.firstVisit() ? 'New here? Press **Tour** for a walk through the views, "
            "stop by stop (no model needed).' : ''")

if gpu.mode() != "local":  # ZeroGPU: the model is loaded now, on the CPU, before any worker forks
    calls.ready_process(LIMITS.models[0])


# ---------------------------------------------------------------- layout

def _examples() -> list[list[str]]:
    return [[e["prompt"]] for e in json.loads((ASSETS / "examples.json").read_text())]


def checked_by_us(component: gr.components.Component) -> gr.components.Component:
    """`component` without Gradio's own value check (choices, slider bounds): the event functions check
    every value themselves (RunSettings, LIMITS), so a bad value sent through the API is refused in one
    line of ours instead of Gradio's error plus a traceback in the server log. (A subclass would do the
    same, but Gradio writes a .pyi stub next to the module of every component subclass.)"""
    component.preprocess = lambda payload: payload
    return component


def caption(view: str) -> gr.Markdown:
    """The one-line how-to-read note under a figure."""
    return gr.Markdown(CAPTIONS[view], elem_classes="esp-caption")


def plot_row(*plots: tuple[str, str, str]) -> list[gr.Plot]:
    """Captioned figures side by side (stacked on a narrow screen), each given as (label, elem_id, view)."""
    out = []
    with gr.Row():
        for label, elem_id, view in plots:
            with gr.Column(min_width=320):
                out.append(gr.Plot(label=label, elem_id=elem_id))
                caption(view)
    return out


def build_app() -> gr.Blocks:
    with gr.Blocks(title="ESP Explorer", delete_cache=DELETE_CACHE) as demo:
        session = gr.State(Session(), time_to_live=SESSION_TTL_S, delete_callback=free_session)
        with gr.Row(elem_id="header"):
            gr.Markdown("# ESP Explorer\nEmbedding-Space Probing: a frozen LM drafts several future tokens from "
                        "soft mask tokens, and one forward pass verifies the whole draft tree.")
            with gr.Row(elem_id="header-buttons"):
                tour_btn = gr.Button("Tour", elem_id="tour", size="sm", min_width=60)
                gr.Button("Copy link", elem_id="copy-link", size="sm", min_width=60)  # assets/explorer.js
                theme_btn = gr.Button("◐", elem_id="theme", size="sm", min_width=40)
        tour_offer = gr.Markdown(elem_id="tour-offer")
        with gr.Column(visible=False, elem_id="tour-panel") as tour_panel:
            tour_text = gr.Markdown(elem_id="tour-text")
            with gr.Row():
                tour_back = gr.Button("◀ Back", elem_id="tour-back", size="sm")
                tour_next = gr.Button("Next ▶", elem_id="tour-next", size="sm", variant="primary")
                tour_end = gr.Button("End the tour", elem_id="tour-end", size="sm")
        tour_n = gr.State(0)
        tour_view = gr.Textbox(visible="hidden", elem_id="tour-view")
        trace_key = gr.Textbox(visible="hidden", elem_id="trace-key")  # the shown shipped trace's name in a link
        playing = gr.State(False)
        timer = gr.Timer(1 / lesson.SPEED, active=False)
        with gr.Row():
            with gr.Column(scale=1, min_width=300, elem_id="controls"):
                prompt = gr.Textbox(label="Prompt", lines=4, elem_id="prompt",
                                    placeholder="Ask something, or pick an example below.")
                model = gr.Dropdown(list(LIMITS.models), value=LIMITS.models[0], label="Model", elem_id="model",
                               info="The models this server offers ('embedded' = SmolLM2-135M).")
                method = gr.Dropdown(methods.available(), value="esp", label="Method", elem_id="method",
                                info="esp = the paper's ESP; the others are baselines (ar = plain decoding).")
                k = gr.Slider(1, 4, value=2, step=1, label="k", info=KNOB_INFO["k"], elem_id="k")
                bc = gr.Slider(4, 120, value=30, step=1, label="BC", info=KNOB_INFO["bc"], elem_id="bc")
                lam = gr.Slider(0, 1, value=0.1, step=0.01, label="λ", info=KNOB_INFO["lam"], elem_id="lam")
                with gr.Row():
                    init = gr.Radio(list(INITS), value="mean", label="Mask init", info=KNOB_INFO["init"],
                                    elem_id="init")
                    tree = gr.Radio(list(TREES), value="static", label="Tree", info=KNOB_INFO["tree"], elem_id="tree")
                with gr.Accordion("Decoding", open=False):
                    mode = gr.Radio(list(MODES), value="greedy", label="Target decoding", elem_id="mode")
                    temperature = gr.Slider(0.05, 2, value=0.7, step=0.05, label="temperature")
                    top_p = gr.Slider(0.05, 1, value=0.95, step=0.01, label="top-p")
                    seed = gr.Number(0, precision=0, label="seed")
                    max_new = gr.Slider(1, LIMITS.max_new_tokens, value=min(64, LIMITS.max_new_tokens), step=1,
                                        label="max new tokens", elem_id="max-new")
                    layouts = gr.Radio(list(LAYOUTS), value="efficient", label="Mask construction")
                with gr.Row():
                    run = gr.Button("Run", variant="primary", elem_id="run")
                    stop = gr.Button("Stop", variant="stop", elem_id="stop")
                settings_note = gr.Markdown(elem_id="settings-note", elem_classes="esp-note")
                gr.Examples(_examples(), inputs=[prompt], label="Examples (one per Spec-Bench category)")
            with gr.Column(scale=3, min_width=320):
                status = gr.Markdown("Set the controls and press **Run**.", label="Status", elem_id="status")
                with gr.Row(elem_id="scrub-row"):
                    prev = gr.Button("◀ prev", elem_id="prev", size="sm")
                    scrub = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="scrub")
                    goto = gr.Number(None, precision=0, label="Go to step (Enter)", elem_id="goto", min_width=90)
                    nxt = gr.Button("next ▶", elem_id="next", size="sm")
                with gr.Row(elem_id="play-row"):
                    play = gr.Button(lesson.PLAY, elem_id="play", size="sm", min_width=90)
                    speed = gr.Number(lesson.SPEED, label="steps / s", elem_id="speed", min_width=80,
                                      minimum=lesson.SPEEDS[0], maximum=lesson.SPEEDS[1], step=0.5)
                    focus = gr.Dropdown([], value=None, label="Focus on a node", elem_id="focus",
                                        info="outlined in the tree, the mask, the text and the alignment")
                focus_note = gr.Markdown(elem_id="focus-note")
                # A click on a tree node writes "index:time" here (assets/explorer.js).
                focus_click = gr.Textbox(visible="hidden", elem_id="focus-click")
                words = gr.Markdown(elem_id="step-words")
                with gr.Tabs() as tabs:
                    with gr.Tab("Run", id="run"):
                        text = gr.HighlightedText(label="Generated text", color_map=COLOR_MAP, show_legend=True,
                                                  combine_adjacent=False, elem_id="text-view")
                        caption("text")
                        stats = gr.Markdown(label="Summary", elem_id="stats")
                        tree_plot, mask_plot = plot_row(("Draft tree", "tree-plot", "tree"),
                                                        ("Tree-attention mask", "mask-plot", "mask"))
                        cost_plot = gr.Plot(label="Cost", elem_id="cost-plot")
                        caption("cost")
                        cost_note = gr.Markdown(elem_id="cost-note")
                        align_plot = gr.Plot(label="Alignment", elem_id="align-plot")
                        caption("align")
                        hist_plot, timing_plot = plot_row(("Accepted drafts", "hist-plot", "hist"),
                                                          ("Timing", "timing-plot", "timing"))
                    with gr.Tab("What-if", id="whatif", elem_id="whatif-tab"):
                        gr.Markdown("Re-run the shown step from the same text with the method and settings on the "
                                    "left: what would it have drafted, accepted and cost?", elem_classes="esp-note")
                        whatif_btn = gr.Button("Re-run the shown step with these settings", elem_id="whatif")
                        whatif_note = gr.Markdown(elem_id="whatif-note")
                        with gr.Row():
                            whatif_orig = gr.Plot(label="Stored step", elem_id="whatif-orig", min_width=320)
                            whatif_alt = gr.Plot(label="What-if", elem_id="whatif-alt", min_width=320)
                        caption("whatif")
                    with gr.Tab("Open a trace", id="open", elem_id="open-tab"):
                        gr.Markdown("Scrub a recorded run with every view, no model needed: one shipped with the app, "
                                    "or a trace JSON from **Export** (e.g. recorded on a GPU with a bigger model).",
                                    elem_classes="esp-note")
                        shipped = gr.Radio(list(TRACES), value=None, label="Recorded runs",
                                           elem_id="shipped")
                        trace_file = gr.File(label="Trace JSON", file_types=[".json"], type="filepath",
                                             elem_id="trace-file")
                    with gr.Tab("Model size", id="size"):
                        gr.Plot(size_figure(), label="Model size", elem_id="size-plot")
                        gr.Markdown(size_sentences(), elem_id="size-note")
                    with gr.Tab("Compare", id="compare"):
                        gr.Markdown("Decodes the prompt with autoregressive decoding and every registered method, "
                                    "using the settings on the left. On a CPU big blocks cost more than they save: "
                                    "τ can exceed 1 while the speed-up stays below it.", elem_classes="esp-note")
                        compare_btn = gr.Button("Compare methods", elem_id="compare")
                        compare_status = gr.Markdown(label="Compare status", elem_id="compare-status")
                        compare_table = gr.Dataframe(headers=COLUMNS, label="Results", interactive=False, wrap=True,
                                                     elem_id="compare-table")
                        compare_plot = gr.Plot(label="τ and speed-up")
                        caption("compare")
                    with gr.Tab("Export", id="export"):
                        export_btn = gr.Button("Export the trace, the shown step's figures and a lecture file", elem_id="export")
                        files = gr.File(label="Downloads", file_count="multiple", elem_id="export-files")

        knobs = [k, bc, lam, model, init, tree, mode, temperature, top_p, seed, max_new, layouts]
        for c in (*knobs, method, scrub, goto, speed, focus):
            checked_by_us(c)
        checked = [k, bc, lam, init, tree, mode, temperature, top_p, seed, max_new, layouts, method]
        # In explorer.views.VIEWS order.
        views = [text, tree_plot, mask_plot, align_plot, stats, hist_plot, timing_plot, cost_plot, cost_note, words,
                 focus, focus_note]
        # The live check has its own line under the controls: a trace opening sets the controls (below),
        # and the status must keep saying what is on screen.
        for c in checked:
            c.change(calls.check_settings, checked, settings_note, queue=False, show_progress="hidden",
                     api_visibility="private")
        method.change(calls.knob_updates, method, [k, bc, lam, init, tree], queue=False, show_progress="hidden",
                      api_visibility="private")
        run.click(None, None, trace_key, js="() => ''")  # a new run is no shipped trace
        run.click(calls.generate, [prompt, *knobs, method, session], [status, scrub, *views, session],
                  api_name="generate", concurrency_limit=1, concurrency_id="model")
        compare_btn.click(calls.compare, [prompt, *knobs], [compare_status, compare_table, compare_plot],
                          api_name="compare", concurrency_limit=1, concurrency_id="model")
        # Not queued and not a cancel: it only sets the run's stop token, so it answers at once even while
        # the queue is busy, and the run (here or in a GPU worker) ends after the step in progress with
        # a final update. The page says "Stopping…" before the server answers (STOPPING_JS), in a listener
        # registered after this one: registered before it, the page never sent the stop (checked).
        stop.click(calls.request_stop, [session], None, queue=False, api_name="stop", show_progress="hidden")
        stop.click(None, status, status, js=STOPPING_JS, queue=False, api_visibility="private")
        # Re-rendering stored steps needs no model, so it is not held behind running decodes.
        scrubbed = [status, scrub, *views]
        scrub.release(calls.show_step, [session, scrub], scrubbed, api_name="show_step", concurrency_limit=None)
        goto.submit(calls.show_step, [session, goto], scrubbed, api_visibility="private", concurrency_limit=None)
        prev.click(calls.step_by(-1), [session, scrub], scrubbed, api_visibility="private", concurrency_limit=None)
        nxt.click(calls.step_by(1), [session, scrub], scrubbed, api_visibility="private", concurrency_limit=None)
        focus.input(calls.show_step, [session, scrub, focus], scrubbed, api_visibility="private",
                    concurrency_limit=None, show_progress="hidden")
        focus_click.change(lesson.clicked, [session, scrub, focus_click], scrubbed, api_visibility="private",
                          concurrency_limit=None, show_progress="hidden")
        scrub.change(None, scrub, goto, js=STEP_JS)
        trace_key.change(None, trace_key, None, js=TRACE_JS)
        # Playback: ticks are skipped, not queued, while a step is still being drawn (trigger_mode "once").
        play.click(lesson.play, [playing, speed, session, scrub], [playing, timer, play, *scrubbed],
                   api_visibility="private", concurrency_limit=None, show_progress="hidden")
        timer.tick(lesson.tick, [session, scrub], [*scrubbed, playing, timer, play], api_visibility="private",
                   concurrency_limit=None, show_progress="hidden")
        speed.change(lesson.set_speed, speed, timer, queue=False, api_visibility="private", show_progress="hidden")
        theme_btn.click(None, js="() => { window.espExplorer?.toggleTheme(); }")
        export_btn.click(calls.export, [session, scrub], files, api_name="export", concurrency_limit=None)
        whatif_btn.click(calls.whatif, [scrub, *knobs, method, session], [whatif_note, whatif_orig, whatif_alt],
                         api_name="whatif", concurrency_limit=1, concurrency_id="model")
        opened = [status, scrub, *views, session]
        # Whatever opens a trace then sets the controls to its method and settings (and the link to its name).
        controls = [trace_key, method, k, bc, lam, init, tree, mode, temperature, top_p, seed, max_new, layouts, model]

        def then_controls(event) -> None:
            event.then(lesson.trace_controls, session, controls, api_visibility="private", show_progress="hidden")

        then_controls(trace_file.upload(calls.open_trace, [trace_file, session], opened, api_name="open_trace",
                                        concurrency_limit=None))
        then_controls(shipped.input(calls.open_shipped, [shipped, session], opened, api_visibility="private",
                                    concurrency_limit=None))
        # A recorded run is on screen as soon as the page opens, before any model is warm: the one the link
        # names (?trace=trace_masks&step=7&tab=run), or the first shipped one.
        loaded = demo.load(lesson.open_link, session, [*opened, tabs], api_visibility="private")
        then_controls(loaded)
        loaded.then(None, js=LINKED_JS)
        demo.load(None, None, tour_offer, js=OFFER_JS)
        for tab in tabs.children:
            tab.select(None, None, None, js=TAB_JS.format(tab=tab.id))
        # The tour: each stop opens its trace at its step, then the page spotlights its view.
        toured = [tour_panel, tour_text, tour_n, tour_view, tabs, *opened]
        for button, move in ((tour_btn, None), (tour_next, 1), (tour_back, -1)):
            event = button.click(lesson.tour_move(move), [tour_n, session], toured,
                                 api_visibility="private", concurrency_limit=None, show_progress="hidden")
            event.then(None, tour_view, None, js=SPOTLIGHT_JS)
            then_controls(event)
        tour_end.click(lambda: gr.Column(visible=False), None, tour_panel, queue=False, api_visibility="private")
        tour_end.click(None, js="() => { window.espExplorer?.clearSpotlight(); }")
    return demo


def launch_options() -> dict:
    """Theme, CSS and the page script (keys, link state, tour spotlight, theme switch: assets/explorer.js);
    Gradio 6 takes them at launch."""
    return {"theme": gr.themes.Soft(primary_hue="emerald"), "css_paths": [ASSETS / "app.css"],
            "max_file_size": MAX_TRACE_BYTES,  # an upload is a trace: refused above its cap before it is stored
            "head": f"<script>{(ASSETS / 'explorer.js').read_text()}</script>"}


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
    demo = build_app()
    demo.queue(max_size=QUEUE_SIZE)
    demo.launch(server_name=host, server_port=port, **launch_options())


if __name__ == "__main__":
    main()
