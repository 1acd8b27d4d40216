"""ESP Explorer: watch a frozen LM draft its own future, step by step, in the browser.

`python app.py` serves the app on the embedded model (127.0.0.1:7860 locally, 0.0.0.0 on a Space;
PORT / GRADIO_SERVER_PORT and GRADIO_SERVER_NAME override). Figures come from `components/`; this
module only wires controls, the engine and per-session state together.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import gradio as gr
import torch

from components.align_plot import align_figure
from components.captions import CAPTIONS
from components.compare_view import COLUMNS, compare_figure, compare_rows
from components.cost_view import cost_figure, cost_sentences, ratio, step_width
from components.export import read_trace_json, write_figures_html, write_trace_json
from components.limits import Limits
from components.mask_plot import mask_figure
from components.settings import INITS, KNOBS, LAYOUTS, MODES, TREES, RunSettings, knob_reasons
from components.stats import accept_hist_figure, run_summary, stats_markdown, timing_figure
from components.text_view import COLOR_MAP, token_sources
from components.tree_plot import tree_figure
from esp import methods
from esp.drafters.base import Drafter
from esp.engine import Decoder
from esp.cost import curve_for
from esp.errors import ESPError
from esp.lm import LM
from esp.models import EMBEDDED, load
from esp.sampling import Sampling
from esp.trace import StepTrace
from esp.whatif import whatif_step

try:  # ZeroGPU on Spaces; elsewhere a no-op with the same call forms
    import spaces

    GPU = spaces.GPU
except ImportError:
    def GPU(fn=None, **_):
        return fn if fn is not None else (lambda f: f)

log = logging.getLogger("esp.app")
ASSETS = Path(__file__).resolve().parent / "assets"
LIMITS = Limits.from_env()
SESSION_TTL_S = 3600
QUEUE_SIZE = 16  # requests waiting for the model at once; more get "queue full"
# Recorded runs shipped with the app (scripts/record_traces.py): the first is shown when the page opens.
TRACES = {"Copying from the prompt (fix a typo)": ASSETS / "trace_copy.json",
          "ESP masks (k=2, BC=30, counting)": ASSETS / "trace_masks.json"}
# Output order of every per-step render; the run's last output tuple therefore holds text + figures.
VIEWS = ("text", "tree", "mask", "align", "stats", "hist", "timing", "cost", "cost_note")
# While a run streams, the page gets at most one update per UPDATE_S (engine steps in between are stored,
# not sent: a 2-core machine's browser cannot redraw seven figures per 80 ms step and stops answering
# clicks). The views that change little per step follow every SLOW_UPDATE_S; the last step is always sent.
UPDATE_S = 1.0
SLOW_UPDATE_S = 3.0
FAST_VIEWS = ("text", "tree", "mask", "stats", "cost_note")
_load_lock = threading.Lock()  # the startup warm-up and a first Run must not load the same model twice


@dataclass
class Session:
    """One browser session's last run: its traces (CPU-only data), a folder for exports, and the Stop
    flag the running decode checks at every step boundary."""

    steps: list[StepTrace] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    folder: str | None = None
    running: bool = False
    stop: bool = False

    def export_dir(self) -> Path:
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="esp-explorer-")
        return Path(self.folder)


def free_session(session: Session | None) -> None:
    """State delete callback: drop the session's export files."""
    if session is not None and session.folder:
        shutil.rmtree(session.folder, ignore_errors=True)


# ---------------------------------------------------------------- rendering (no model)

def render(session: Session, i: int, views: tuple[str, ...] = VIEWS) -> tuple:
    """The per-step views for step i of the stored run, in VIEWS order; views not in `views` are
    gr.skip() (left as they are on the page)."""
    steps = session.steps
    step = steps[i]
    summary = run_summary(steps, i) if {"stats", "hist"} & set(views) else None
    build = {
        "text": lambda: token_sources(steps, i),
        "tree": lambda: tree_figure(step),
        "mask": lambda: mask_figure(step),
        "align": lambda: align_figure(steps, i),
        "stats": lambda: stats_markdown(summary),
        "hist": lambda: accept_hist_figure(summary, None if step.prefill else len(step.accepted)),
        "timing": lambda: timing_figure(steps, i),
        "cost": lambda: cost_figure(steps, i, session.meta.get("curve")),
        "cost_note": lambda: cost_sentences(steps, i, session.meta.get("curve")),
    }
    return tuple(build[v]() if v in views else gr.skip() for v in VIEWS)


def _status(session: Session, i: int, state: str = "done") -> str:
    s = run_summary(session.steps, i)
    last = len(session.steps) - 1
    where = {"done": f"**Done** · step {i} of {last}", "running": f"**Decoding** · step {i}",
             "stopped": f"**Stopped after {last + 1} steps** · step {i} of {last}"}[state]
    source = f" · recorded: {session.meta['opened']}" if session.meta.get("opened") else ""
    return f"{where} · {s.tokens} tokens · τ {s.tau:.2f} · {session.meta['settings']}{source}"


def refuse(message: str, where: str) -> str:
    """A user error: one log line (no traceback) and one toast; returns the status line to show."""
    log.info("refused %s: %s", where, message)
    gr.Warning(message)
    return f"⚠️ {message}"


def refusal(message: str, outputs: int, where: str) -> tuple:
    """`refuse`, as an output tuple whose first output is the status; every other output keeps its value."""
    return (refuse(message, where), *(gr.skip() for _ in range(outputs - 1)))


def show_step(session: Session | None, i: float | None) -> tuple:
    """Re-render a stored step (the scrubber); needs no model. Outputs: status, scrubber, *VIEWS."""
    if session is None or not session.steps:
        return refusal("Nothing to show yet: press Run first.", 2 + len(VIEWS), "show_step")
    i = min(max(int(i or 0), 0), len(session.steps) - 1)
    return (_status(session, i), gr.update(value=i), *render(session, i))


def step_by(delta: int):
    def move(session: Session | None, i: float) -> tuple:
        return show_step(session, (i or 0) + delta)
    return move


# ---------------------------------------------------------------- running the engine

def load_model(name: str) -> LM:
    """The model `name` (already checked against LIMITS), loaded once per process."""
    with _load_lock:
        return load(name)


def machine_curve(lm: LM) -> dict:
    """Seconds per forward of q rows on this machine for `lm`, as {"q", "t"} (measured once per model and
    machine setting by the engine, then read from its cache)."""
    return curve_for(lm).to_dict()


def prepare(prompt: str, model: str, **knobs) -> tuple[RunSettings, LM, list[int]]:
    """Check everything the user sent (settings, server limits, model, prompt) before any output is
    touched; a refusal raises ESPError with one sentence and loads nothing it need not."""
    settings = RunSettings(**knobs)
    LIMITS.check_new_tokens(settings.max_new_tokens)
    name = LIMITS.check_model(model)
    if not (prompt or "").strip():
        raise ESPError("The prompt is empty: type some text or pick an example first.")
    lm = load_model(name)
    ids = lm.chat_ids(prompt)
    LIMITS.check_prompt(len(ids))
    Decoder(lm, max_new_tokens=settings.max_new_tokens).check_prompt(ids)
    return settings, lm, ids


def check_settings(k, bc, lam, init, tree, mode, temperature, top_p, seed, max_new_tokens, layouts,
                   method="esp") -> str:
    """Live hint under the controls: what the settings mean, or why the engine would refuse them."""
    try:
        s = RunSettings(k=k, bc=bc, lam=lam, init=init, tree=tree, mode=mode, temperature=temperature,
                        top_p=top_p, seed=seed, max_new_tokens=max_new_tokens, layouts=layouts, method=method)
        LIMITS.check_new_tokens(s.max_new_tokens)
    except ESPError as e:
        return f"⚠️ {e}"
    note = " · `lastk` copies the chat template's last tokens, not your text." if s.init == "lastk" else ""
    return f"Ready: {s.describe()}{note}"


def knob_updates(method: str) -> list[dict]:
    """Enable the drafting knobs `method` takes; grey out the others with a one-line reason."""
    try:
        reasons = knob_reasons(method)
    except ESPError:
        return [gr.skip() for _ in KNOBS]
    return [gr.update(interactive=reasons[k] is None, info=reasons[k] or KNOB_INFO[k]) for k in KNOBS]


@GPU(duration=120)
def generate(prompt: str, k: float = 2, bc: float = 30, lam: float = 0.1, model: str = EMBEDDED,
             init: str = "mean", tree: str = "static", mode: str = "greedy", temperature: float = 0.7,
             top_p: float = 0.95, seed: float = 0, max_new_tokens: float = 64, layouts: str = "efficient",
             method: str = "esp", session: Session | None = None) -> Iterator[tuple]:
    """Decode `prompt` with `method`, yielding (status, scrubber, *VIEWS, session) at most every
    UPDATE_S; the last yield holds the last step's full views. Stop (Session.stop) ends the run at the
    next step boundary. A refused input yields one message and leaves the page's views as they were."""
    outputs = 3 + len(VIEWS)
    try:
        settings, lm, ids = prepare(prompt, model, k=k, bc=bc, lam=lam, init=init, tree=tree, mode=mode,
                                    temperature=temperature, top_p=top_p, seed=seed,
                                    max_new_tokens=max_new_tokens, layouts=layouts, method=method)
    except ESPError as e:
        yield refusal(str(e), outputs, "generate")
        return
    session = session or Session()
    session.steps, session.stop, session.running = [], False, True
    session.meta = {"model": lm.name, "model_name": LIMITS.check_model(model), "prompt": prompt, "prompt_ids": ids,
                    "method": settings.method, "spec": settings.spec(), "settings": settings.describe(),
                    "sampling": asdict(settings.sampling()), "max_new_tokens": settings.max_new_tokens,
                    "layouts": settings.layouts, "curve": machine_curve(lm)}
    decoder = Decoder(lm, settings.drafter(), settings.sampling(), settings.max_new_tokens, settings.layouts,
                      align=True)
    state = "done"
    try:
        # The first update carries the light views only: the page is busiest while the run starts.
        last_fast, last_slow = float("-inf"), time.monotonic()
        for step in decoder.stream(ids):
            session.steps.append(step)
            if session.stop:
                state = "stopped"
                break
            now = time.monotonic()
            if now - last_fast < UPDATE_S:
                continue  # stored; the page catches up at the next update
            views = FAST_VIEWS if now - last_slow < SLOW_UPDATE_S else VIEWS
            last_fast, last_slow = now, now if views is VIEWS else last_slow
            i = len(session.steps) - 1
            # The slider needs max > min; a one-step run simply clamps when scrubbed.
            yield (_status(session, i, "running"), gr.update(maximum=max(i, 1), value=i),
                   *render(session, i, views), session)
    except ESPError as e:
        yield refusal(str(e), outputs, "generate")
        return
    except Exception as e:  # a bug, not a user error: keep its traceback in the log, one line on screen
        log.exception("run failed")
        yield refusal(f"The run failed: {type(e).__name__}: {e}", outputs, "generate")
        return
    finally:
        session.running = False
    i = len(session.steps) - 1
    session.meta["text"] = lm.tokenizer.decode([t for s in session.steps for t in s.emitted], skip_special_tokens=True)
    # Send the last step again as a whole, so the final output alone holds the text and every figure.
    yield (_status(session, i, state), gr.update(maximum=max(i, 1), value=i), *render(session, i), session)


def request_stop(session: Session | None) -> None:
    """Ask the running decode to end at its next step boundary (it then says "Stopped after N steps")."""
    if session is not None and session.running:
        session.stop = True


@GPU(duration=60)
def whatif(step: float, k: float = 2, bc: float = 30, lam: float = 0.1, model: str = EMBEDDED,
           init: str = "mean", tree: str = "static", mode: str = "greedy", temperature: float = 0.7,
           top_p: float = 0.95, seed: float = 0, max_new_tokens: float = 64, layouts: str = "efficient",
           method: str = "esp", session: Session | None = None) -> tuple:
    """Re-run stored step `step` from the same committed prefix with the drafting settings given (the
    run's own model, decoding rule and token limit); the stored run is left as it is.
    Outputs: (comparison markdown, original tree, alternative tree)."""
    try:
        if session is None or not session.steps:
            raise ESPError("Nothing to re-run yet: press Run (or open a trace) first.")
        i = int(step or 0)
        settings = RunSettings(k=k, bc=bc, lam=lam, init=init, tree=tree, method=method)
        name = session.meta.get("model_name")
        if name is None or "prompt_ids" not in session.meta:
            raise ESPError("What-if needs the model that recorded this trace, and this file does not name one.")
        lm = load_model(LIMITS.check_model(name))
        alt = whatif_step(lm, settings.drafter(), session.meta["prompt_ids"], session.steps, i,
                          Sampling(**session.meta["sampling"]), session.meta["max_new_tokens"],
                          session.meta.get("layouts", "efficient"))
    except ESPError as e:
        return refusal(str(e), 3, "whatif")
    return whatif_table(session, session.steps[i], alt, settings), tree_figure(session.steps[i]), tree_figure(alt)


def whatif_table(session: Session, original: StepTrace, alt: StepTrace, settings: RunSettings) -> str:
    """Original vs alternative step: rows fed, accepted drafts, tokens emitted, forward time and cost."""
    curve = session.meta.get("curve")

    def row(label: str, describe: str, s: StepTrace) -> str:
        cost = f"{ratio(curve, step_width(s)):.2f}×" if curve else "—"
        return (f"| {label} | {describe} | {step_width(s)} | {len(s.accepted)} | {len(s.emitted)} | "
                f"{1000 * s.timings.get('forward', 0.0):.0f} | {cost} |")

    return "\n".join([
        f"**Step {original.step}, re-run from the same text.** Stateful drafters (STAND's table, LADE's pool, "
        "ESP's EMA, calibrators) restart from the text, not from the run's history; the stored run is unchanged.",
        "",
        "| | method | rows fed | accepted drafts | tokens emitted | forward ms | cost (one-row forwards) |",
        "|---|---|---:|---:|---:|---:|---:|",
        row("original", session.meta.get("spec", original.method), original),
        row("what-if", settings.spec(), alt),
    ])


def open_trace(file: str | None, session: Session | None = None) -> tuple:
    """Show a recorded trace (exported by the app, or shipped in assets/) with every view, without any
    model. Outputs: (status, scrubber, *VIEWS, session); a malformed or foreign file gets one line."""
    outputs = 3 + len(VIEWS)
    if not file:
        return refusal("Choose a trace file (.json) first.", outputs, "open_trace")
    try:
        meta, steps = read_trace_json(file)
        if not steps:
            raise ValueError("it has no steps")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        detail = f"no {e.args[0]!r} field" if isinstance(e, KeyError) else str(e).splitlines()[0][:120]
        return refusal(f"This is not an ESP Explorer trace ({detail}): open a JSON file written by Export.",
                       outputs, "open_trace")
    session = session or Session()
    if session.running:
        return refusal("A run is streaming: stop it before opening a trace.", outputs, "open_trace")
    session.steps, session.meta = steps, dict(meta)
    session.meta.setdefault("settings", meta.get("spec", steps[0].method))
    session.meta["opened"] = Path(file).name
    i = len(steps) - 1
    return (_status(session, i), gr.update(maximum=max(i, 1), value=i), *render(session, i), session)


def open_shipped(name: str, session: Session | None = None) -> tuple:
    """Open one of the recorded traces shipped in assets/ (TRACES)."""
    if name not in TRACES:
        return refusal(f"No recorded trace called {name!r}.", 3 + len(VIEWS), "open_trace")
    return open_trace(str(TRACES[name]), session)


def _compare_drafters(settings: RunSettings) -> list[Drafter]:
    """'ar' first, then every method registered right now (ESP with the panel's settings)."""
    out = []
    for name in methods.available():
        method = methods.REGISTRY[name]
        if name == "esp":
            out.append(methods.build(settings.esp_spec()))
        else:
            out.append(methods.build(name, {"bc": settings.bc} if method.uses_bc else None))
    return sorted(out, key=lambda d: d.name != "ar")  # the baseline first, whatever the registry order


@GPU(duration=300)
def compare(prompt: str, k: float = 2, bc: float = 30, lam: float = 0.1, model: str = EMBEDDED,
            init: str = "mean", tree: str = "static", mode: str = "greedy", temperature: float = 0.7,
            top_p: float = 0.95, seed: float = 0, max_new_tokens: float = 64,
            layouts: str = "efficient") -> Iterator[tuple]:
    """Decode the prompt with every registered method; yield (status, table rows, chart) after each."""
    try:
        settings, lm, ids = prepare(prompt, model, k=k, bc=bc, lam=lam, init=init, tree=tree, mode=mode,
                                    temperature=temperature, top_p=top_p, seed=seed,
                                    max_new_tokens=max_new_tokens, layouts=layouts)
        drafters = _compare_drafters(settings)
    except ESPError as e:
        yield refusal(str(e), 3, "compare")
        return
    results = []
    for n, drafter in enumerate(drafters, 1):
        label = drafter.describe()
        yield f"Running {label} ({n}/{len(drafters)})…", gr.skip(), gr.skip()
        gen = Decoder(lm, drafter, settings.sampling(), settings.max_new_tokens, settings.layouts).generate(ids)
        results.append((label, gen.summary, gen.text))
        rows = compare_rows(results)
        yield f"Finished {n}/{len(drafters)} methods.", rows, compare_figure(rows)


def export(session: Session | None, i: float) -> list[str]:
    """The run's trace as JSON and the figures of the shown step as one standalone HTML page."""
    if session is None or not session.steps:
        refuse("Nothing to export yet: press Run first.", "export")
        return gr.skip()
    i = min(max(int(i or 0), 0), len(session.steps) - 1)
    folder = session.export_dir()
    views = dict(zip(VIEWS, render(session, i)))
    figures = {f"{name} (step {i})": views[name] for name in ("tree", "mask", "align", "hist", "timing")}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return [
        str(write_trace_json(session.steps, session.meta, folder / f"esp-trace-{stamp}.json")),
        str(write_figures_html(figures, folder / f"esp-figures-step{i}-{stamp}.html")),
    ]


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


KNOB_INFO = {"k": "mask tokens = tree depth", "bc": "block budget: tokens per forward",
             "lam": "EMA rate of the mask tokens", "init": "mask embedding at the start",
             "tree": "static shape or best-first"}


def build_app() -> gr.Blocks:
    with gr.Blocks(title="ESP Explorer") as demo:
        session = gr.State(Session(), time_to_live=SESSION_TTL_S, delete_callback=free_session)
        gr.Markdown("# ESP Explorer\nEmbedding-Space Probing: a frozen LM drafts several future tokens from "
                    "soft mask tokens, and one forward pass verifies the whole draft tree.")
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
                gr.Examples(_examples(), inputs=[prompt], label="Examples (one per Spec-Bench category)")
            with gr.Column(scale=3, min_width=320):
                status = gr.Markdown("Set the controls and press **Run**.", label="Status", elem_id="status")
                with gr.Row(elem_id="scrub-row"):
                    prev = gr.Button("◀ prev", elem_id="prev", size="sm")
                    scrub = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="scrub")
                    goto = gr.Number(None, precision=0, label="Go to step (Enter)", elem_id="goto", min_width=90)
                    nxt = gr.Button("next ▶", elem_id="next", size="sm")
                with gr.Tab("Run"):
                    text = gr.HighlightedText(label="Generated text", color_map=COLOR_MAP, show_legend=True,
                                              combine_adjacent=False, elem_id="text-view")
                    caption("text")
                    stats = gr.Markdown(label="Summary", elem_id="stats")
                    with gr.Row():
                        with gr.Column(min_width=320):
                            tree_plot = gr.Plot(label="Draft tree", elem_id="tree-plot")
                            caption("tree")
                        with gr.Column(min_width=320):
                            mask_plot = gr.Plot(label="Tree-attention mask", elem_id="mask-plot")
                            caption("mask")
                    cost_plot = gr.Plot(label="Cost", elem_id="cost-plot")
                    caption("cost")
                    cost_note = gr.Markdown(elem_id="cost-note")
                    align_plot = gr.Plot(label="Alignment", elem_id="align-plot")
                    caption("align")
                    with gr.Row():
                        with gr.Column(min_width=320):
                            hist_plot = gr.Plot(label="Accepted drafts", elem_id="hist-plot")
                            caption("hist")
                        with gr.Column(min_width=320):
                            timing_plot = gr.Plot(label="Timing", elem_id="timing-plot")
                            caption("timing")
                with gr.Tab("What-if", elem_id="whatif-tab"):
                    gr.Markdown("Re-run the shown step from the same text with the method and settings on the "
                                "left: what would it have drafted, accepted and cost?", elem_classes="esp-note")
                    whatif_btn = gr.Button("Re-run the shown step with these settings", elem_id="whatif")
                    whatif_note = gr.Markdown(elem_id="whatif-note")
                    with gr.Row():
                        whatif_orig = gr.Plot(label="Stored step", elem_id="whatif-orig", min_width=320)
                        whatif_alt = gr.Plot(label="What-if", elem_id="whatif-alt", min_width=320)
                    caption("whatif")
                with gr.Tab("Open a trace", elem_id="open-tab"):
                    gr.Markdown("Scrub a recorded run with every view, no model needed: one shipped with the app, "
                                "or a trace JSON from **Export** (e.g. recorded on a GPU with a bigger model).",
                                elem_classes="esp-note")
                    shipped = gr.Radio(list(TRACES), value=None, label="Recorded with the embedded model",
                                       elem_id="shipped")
                    trace_file = gr.File(label="Trace JSON", file_types=[".json"], type="filepath",
                                         elem_id="trace-file")
                with gr.Tab("Compare"):
                    gr.Markdown("Decodes the prompt with autoregressive decoding and every registered method, "
                                "using the settings on the left. On a CPU big blocks cost more than they save: "
                                "τ can exceed 1 while the speed-up stays below it.", elem_classes="esp-note")
                    compare_btn = gr.Button("Compare methods", elem_id="compare")
                    compare_status = gr.Markdown(label="Compare status")
                    compare_table = gr.Dataframe(headers=COLUMNS, label="Results", interactive=False, wrap=True,
                                                 elem_id="compare-table")
                    compare_plot = gr.Plot(label="τ and speed-up")
                    caption("compare")
                with gr.Tab("Export"):
                    export_btn = gr.Button("Export trace + figures of the shown step", elem_id="export")
                    files = gr.File(label="Downloads", file_count="multiple", elem_id="export-files")

        knobs = [k, bc, lam, model, init, tree, mode, temperature, top_p, seed, max_new, layouts]
        for c in (*knobs, method, scrub, goto):
            checked_by_us(c)
        checked = [k, bc, lam, init, tree, mode, temperature, top_p, seed, max_new, layouts, method]
        views = [text, tree_plot, mask_plot, align_plot, stats, hist_plot, timing_plot, cost_plot, cost_note]
        for c in checked:
            c.change(check_settings, checked, status, queue=False, show_progress="hidden", api_visibility="private")
        method.change(knob_updates, method, [k, bc, lam, init, tree], queue=False, show_progress="hidden",
                      api_visibility="private")
        run.click(generate, [prompt, *knobs, method, session], [status, scrub, *views, session],
                  api_name="generate", concurrency_limit=1, concurrency_id="model")
        compare_btn.click(compare, [prompt, *knobs], [compare_status, compare_table, compare_plot],
                          api_name="compare", concurrency_limit=1, concurrency_id="model")
        # Not queued and not a cancel: it only sets the session's flag, so it answers at once even while
        # the queue is busy, and the run itself ends cleanly at its next step with a final update.
        stop.click(request_stop, [session], None, queue=False, api_name="stop", show_progress="hidden")
        # Re-rendering stored steps needs no model, so it is not held behind running decodes.
        scrubbed = [status, scrub, *views]
        scrub.release(show_step, [session, scrub], scrubbed, api_name="show_step", concurrency_limit=None)
        goto.submit(show_step, [session, goto], scrubbed, api_visibility="private", concurrency_limit=None)
        prev.click(step_by(-1), [session, scrub], scrubbed, api_visibility="private", concurrency_limit=None)
        nxt.click(step_by(1), [session, scrub], scrubbed, api_visibility="private", concurrency_limit=None)
        export_btn.click(export, [session, scrub], files, api_name="export", concurrency_limit=None)
        whatif_btn.click(whatif, [scrub, *knobs, method, session], [whatif_note, whatif_orig, whatif_alt],
                         api_name="whatif", concurrency_limit=1, concurrency_id="model")
        opened = [status, scrub, *views, session]
        trace_file.upload(open_trace, [trace_file, session], opened, api_name="open_trace", concurrency_limit=None)
        shipped.input(open_shipped, [shipped, session], opened, api_visibility="private", concurrency_limit=None)
        # A recorded run is on screen as soon as the page opens, before any model is warm.
        demo.load(open_shipped, [gr.State(next(iter(TRACES))), session], opened, api_visibility="private")
    return demo


def launch_options() -> dict:
    """Theme and CSS (Gradio 6 takes them at launch)."""
    return {"theme": gr.themes.Soft(primary_hue="emerald"), "css_paths": [ASSETS / "app.css"]}


def configure_engine() -> None:
    """Process-wide engine settings of the server (LIMITS.threads torch CPU threads)."""
    torch.set_num_threads(LIMITS.threads)


def warm(name: str) -> None:
    """Load `name` and its cost curve ahead of the first Run; a failure is one log line (the Run then
    says why)."""
    try:
        machine_curve(load_model(name))
        log.info("model %s ready", name)
    except ESPError as e:
        log.warning("could not warm %s: %s", name, e)


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    on_space = bool(os.environ.get("SPACE_ID"))
    host = os.environ.get("GRADIO_SERVER_NAME") or ("0.0.0.0" if on_space else "127.0.0.1")
    port = int(os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT") or 7860)
    # Serve at once and warm the first model in the background (~30 s on a CPU the first time): the page,
    # and every view of a stored trace, work before the model is ready; a Run meanwhile waits for it.
    configure_engine()
    threading.Thread(target=warm, args=(LIMITS.models[0],), daemon=True).start()
    demo = build_app()
    demo.queue(max_size=QUEUE_SIZE)
    demo.launch(server_name=host, server_port=port, **launch_options())


if __name__ == "__main__":
    main()
