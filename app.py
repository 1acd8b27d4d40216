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
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import gradio as gr

from components.align_plot import align_figure
from components.compare_view import COLUMNS, compare_figure, compare_rows
from components.export import write_figures_html, write_trace_json
from components.mask_plot import mask_figure
from components.settings import INITS, LAYOUTS, MODES, TREES, RunSettings
from components.stats import accept_hist_figure, run_summary, stats_markdown, timing_figure
from components.text_view import COLOR_MAP, token_sources
from components.tree_plot import tree_figure
from esp import methods
from esp.drafters.base import Drafter
from esp.engine import Decoder
from esp.errors import ESPError
from esp.lm import LM
from esp.models import EMBEDDED, load
from esp.trace import StepTrace

try:  # ZeroGPU on Spaces; elsewhere a no-op with the same call forms
    import spaces

    GPU = spaces.GPU
except ImportError:
    def GPU(fn=None, **_):
        return fn if fn is not None else (lambda f: f)

log = logging.getLogger("esp.app")
ASSETS = Path(__file__).resolve().parent / "assets"
MODELS = [EMBEDDED, "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct"]
SESSION_TTL_S = 3600
# Output order of every per-step render; the run's last output tuple therefore holds text + figures.
VIEWS = ("text", "tree", "mask", "align", "stats", "hist", "timing")


@dataclass
class Session:
    """One browser session's last run: its traces (CPU-only data) and a folder for exports."""

    steps: list[StepTrace] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    folder: str | None = None

    def export_dir(self) -> Path:
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="esp-explorer-")
        return Path(self.folder)


def free_session(session: Session | None) -> None:
    """State delete callback: drop the session's export files."""
    if session is not None and session.folder:
        shutil.rmtree(session.folder, ignore_errors=True)


# ---------------------------------------------------------------- rendering (no model)

def render(session: Session, i: int) -> tuple:
    """Every per-step view for step i of the stored run, in VIEWS order."""
    steps = session.steps
    summary = run_summary(steps, i)
    step = steps[i]
    return (
        token_sources(steps, i),
        tree_figure(step),
        mask_figure(step),
        align_figure(steps, i),
        stats_markdown(summary),
        accept_hist_figure(summary, None if step.prefill else len(step.accepted)),
        timing_figure(steps[: i + 1], i),
    )


def _status(session: Session, i: int, done: bool) -> str:
    s = run_summary(session.steps, i)
    where = f"**Done** · step {i} of {len(session.steps) - 1}" if done else f"**Decoding** · step {i}"
    return f"{where} · {s.tokens} tokens · τ {s.tau:.2f} · {session.meta['settings']}"


def show_step(session: Session | None, i: float) -> tuple:
    """Re-render a stored step (the scrubber); needs no model."""
    if session is None or not session.steps:
        raise gr.Error("Nothing to show yet: press Run first.")
    i = min(max(int(i), 0), len(session.steps) - 1)
    return (gr.update(value=i), _status(session, i, True), *render(session, i))


def step_by(delta: int):
    def move(session: Session | None, i: float) -> tuple:
        return show_step(session, (i or 0) + delta)
    return move


# ---------------------------------------------------------------- running the engine

def _settings(k, bc, lam, init, tree, mode, temperature, top_p, seed, max_new_tokens, layouts) -> RunSettings:
    try:
        return RunSettings(k=k, bc=bc, lam=lam, init=init, tree=tree, mode=mode, temperature=temperature,
                           top_p=top_p, seed=seed, max_new_tokens=max_new_tokens, layouts=layouts)
    except ESPError as e:
        raise gr.Error(str(e)) from None


def _prepare(prompt: str, model: str, settings: RunSettings) -> tuple[LM, list[int]]:
    """Load the model and encode the prompt, turning every refusal into a one-line gr.Error."""
    if not (prompt or "").strip():
        raise gr.Error("The prompt is empty: type some text or pick an example first.")
    try:
        lm = load(model or EMBEDDED)
        ids = lm.chat_ids(prompt)
        Decoder(lm, max_new_tokens=settings.max_new_tokens).check_prompt(ids)
    except ESPError as e:
        raise gr.Error(str(e)) from None
    return lm, ids


def check_settings(k, bc, lam, init, tree, mode, temperature, top_p, seed, max_new_tokens, layouts) -> str:
    """Live hint under the controls: what the settings mean, or why the engine would refuse them."""
    try:
        s = RunSettings(k=k, bc=bc, lam=lam, init=init, tree=tree, mode=mode, temperature=temperature,
                        top_p=top_p, seed=seed, max_new_tokens=max_new_tokens, layouts=layouts)
    except ESPError as e:
        return f"⚠️ {e}"
    note = " · `lastk` copies the chat template's last tokens, not your text." if s.init == "lastk" else ""
    return f"Ready: {s.describe()}{note}"


@GPU(duration=120)
def generate(prompt: str, k: float = 2, bc: float = 30, lam: float = 0.1, model: str = EMBEDDED,
             init: str = "mean", tree: str = "static", mode: str = "greedy", temperature: float = 0.7,
             top_p: float = 0.95, seed: float = 0, max_new_tokens: float = 64, layouts: str = "efficient",
             session: Session | None = None) -> Iterator[tuple]:
    """Decode `prompt` with ESP, yielding (status, scrubber, *VIEWS, session) once per engine step."""
    settings = _settings(k, bc, lam, init, tree, mode, temperature, top_p, seed, max_new_tokens, layouts)
    lm, ids = _prepare(prompt, model, settings)
    session = session or Session()
    session.steps = []
    session.meta = {"model": lm.name, "prompt": prompt, "spec": settings.esp_spec(), "settings": settings.describe(),
                    "sampling": asdict(settings.sampling()), "max_new_tokens": settings.max_new_tokens,
                    "layouts": settings.layouts}
    decoder = Decoder(lm, methods.build(settings.esp_spec()), settings.sampling(), settings.max_new_tokens,
                      settings.layouts, align=True)
    try:
        for step in decoder.stream(ids):
            session.steps.append(step)
            i = len(session.steps) - 1
            # The slider needs max > min; a one-step run simply clamps when scrubbed.
            yield (_status(session, i, False), gr.update(maximum=max(i, 1), value=i), *render(session, i), session)
    except ESPError as e:
        raise gr.Error(str(e)) from None
    except Exception as e:  # keep tracebacks in the server log, one clear line on screen
        log.exception("run failed")
        raise gr.Error(f"The run failed: {type(e).__name__}: {e}") from None
    i = len(session.steps) - 1
    session.meta["text"] = lm.tokenizer.decode([t for s in session.steps for t in s.emitted], skip_special_tokens=True)
    # Send the last step again as a whole, so the final output alone holds the text and every figure.
    yield (_status(session, i, True), gr.update(maximum=max(i, 1), value=i), *render(session, i), session)


def stopped(session: Session | None) -> str:
    n = len(session.steps) if session else 0
    return f"**Stopped** after {n} steps: scrub through them, or press Run again." if n else "**Stopped.**"


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
    settings = _settings(k, bc, lam, init, tree, mode, temperature, top_p, seed, max_new_tokens, layouts)
    lm, ids = _prepare(prompt, model, settings)
    try:
        drafters = _compare_drafters(settings)
    except ESPError as e:
        raise gr.Error(str(e)) from None
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
        raise gr.Error("Nothing to export yet: press Run first.")
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


def build_app() -> gr.Blocks:
    with gr.Blocks(title="ESP Explorer") as demo:
        session = gr.State(None, time_to_live=SESSION_TTL_S, delete_callback=free_session)
        gr.Markdown("# ESP Explorer\nEmbedding-Space Probing: a frozen LM drafts several future tokens from "
                    "soft mask tokens, and one forward pass verifies the whole draft tree.")
        with gr.Row():
            with gr.Column(scale=1, min_width=320, elem_id="controls"):
                prompt = gr.Textbox(label="Prompt", lines=4, elem_id="prompt",
                                    placeholder="Ask something, or pick an example below.")
                model = gr.Dropdown(MODELS, value=EMBEDDED, label="Model", allow_custom_value=True, elem_id="model",
                                    info="'embedded' = SmolLM2-135M (offline). Hub ids need network access.")
                k = gr.Slider(1, 4, value=2, step=1, label="k (mask tokens = tree depth)", elem_id="k")
                bc = gr.Slider(4, 120, value=30, step=1, label="BC (block budget, tokens per forward)", elem_id="bc")
                lam = gr.Slider(0, 1, value=0.1, step=0.01, label="λ (EMA rate of the mask tokens)", elem_id="lam")
                with gr.Row():
                    init = gr.Radio(list(INITS), value="mean", label="Mask init", elem_id="init")
                    tree = gr.Radio(list(TREES), value="static", label="Tree", elem_id="tree")
                with gr.Accordion("Decoding", open=False):
                    mode = gr.Radio(list(MODES), value="greedy", label="Target decoding", elem_id="mode")
                    temperature = gr.Slider(0.05, 2, value=0.7, step=0.05, label="temperature")
                    top_p = gr.Slider(0.05, 1, value=0.95, step=0.01, label="top-p")
                    seed = gr.Number(0, precision=0, label="seed")
                    max_new = gr.Slider(1, 512, value=64, step=1, label="max new tokens", elem_id="max-new")
                    layouts = gr.Radio(list(LAYOUTS), value="efficient", label="Mask construction")
                with gr.Row():
                    run = gr.Button("Run", variant="primary", elem_id="run")
                    stop = gr.Button("Stop", variant="stop", elem_id="stop")
                gr.Examples(_examples(), inputs=[prompt], label="Examples (one per Spec-Bench category)")
            with gr.Column(scale=3):
                status = gr.Markdown("Set the controls and press **Run**.", label="Status", elem_id="status")
                with gr.Row(elem_id="scrub-row"):
                    prev = gr.Button("◀ prev", elem_id="prev", size="sm")
                    scrub = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="scrub")
                    nxt = gr.Button("next ▶", elem_id="next", size="sm")
                with gr.Tab("Run"):
                    text = gr.HighlightedText(label="Generated text", color_map=COLOR_MAP, show_legend=True,
                                              combine_adjacent=False, elem_id="text-view")
                    stats = gr.Markdown(label="Summary", elem_id="stats")
                    with gr.Row():
                        tree_plot = gr.Plot(label="Draft tree", elem_id="tree-plot")
                        mask_plot = gr.Plot(label="Tree-attention mask", elem_id="mask-plot")
                    align_plot = gr.Plot(label="Alignment", elem_id="align-plot")
                    with gr.Row():
                        hist_plot = gr.Plot(label="Accepted drafts", elem_id="hist-plot")
                        timing_plot = gr.Plot(label="Timing", elem_id="timing-plot")
                with gr.Tab("Compare"):
                    gr.Markdown("Decodes the prompt with autoregressive decoding and every registered method, "
                                "using the settings on the left. On a CPU big blocks cost more than they save: "
                                "τ can exceed 1 while the speed-up stays below it.", elem_classes="esp-note")
                    compare_btn = gr.Button("Compare methods", elem_id="compare")
                    compare_status = gr.Markdown(label="Compare status")
                    compare_table = gr.Dataframe(headers=COLUMNS, label="Results", interactive=False)
                    compare_plot = gr.Plot(label="τ and speed-up")
                with gr.Tab("Export"):
                    export_btn = gr.Button("Export trace + figures of the shown step", elem_id="export")
                    files = gr.File(label="Downloads", file_count="multiple", elem_id="export-files")

        knobs = [k, bc, lam, model, init, tree, mode, temperature, top_p, seed, max_new, layouts]
        checked = [k, bc, lam, init, tree, mode, temperature, top_p, seed, max_new, layouts]
        views = [text, tree_plot, mask_plot, align_plot, stats, hist_plot, timing_plot]
        for c in checked:
            c.change(check_settings, checked, status, queue=False, show_progress="hidden", api_visibility="private")
        run_ev = run.click(generate, [prompt, *knobs, session], [status, scrub, *views, session],
                           api_name="generate", concurrency_limit=1, concurrency_id="model")
        cmp_ev = compare_btn.click(compare, [prompt, *knobs], [compare_status, compare_table, compare_plot],
                                   api_name="compare", concurrency_limit=1, concurrency_id="model")
        stop.click(stopped, [session], [status], cancels=[run_ev, cmp_ev], queue=False, api_name="stop")
        # Re-rendering stored steps needs no model, so it is not held behind running decodes.
        scrubbed = [scrub, status, *views]
        scrub.release(show_step, [session, scrub], scrubbed, api_name="show_step", concurrency_limit=None)
        prev.click(step_by(-1), [session, scrub], scrubbed, api_visibility="private", concurrency_limit=None)
        nxt.click(step_by(1), [session, scrub], scrubbed, api_visibility="private", concurrency_limit=None)
        export_btn.click(export, [session, scrub], files, api_name="export", concurrency_limit=None)
    return demo


def launch_options() -> dict:
    """Theme and CSS (Gradio 6 takes them at launch)."""
    return {"theme": gr.themes.Soft(primary_hue="emerald"), "css_paths": [ASSETS / "app.css"]}


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    on_space = bool(os.environ.get("SPACE_ID"))
    host = os.environ.get("GRADIO_SERVER_NAME") or ("0.0.0.0" if on_space else "127.0.0.1")
    port = int(os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT") or 7860)
    load(EMBEDDED)  # warm up now (~30 s on a CPU) so the first Run does not wait for the GGUF
    demo = build_app()
    demo.queue(max_size=16)
    demo.launch(server_name=host, server_port=port, **launch_options())


if __name__ == "__main__":
    main()
