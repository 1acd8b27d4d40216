"""The page's event handlers: check the request, make the GPU call, rebuild the session, make the player's data.

Everything here runs in the main process. A handler validates its inputs before any GPU call (a refusal
costs no GPU time), calls one of `explorer.worker`'s functions, and turns the plain data that comes back
into the session's traces and the data of the page's player (components/frames.py: each step's frame once). `running` is set and reset here, in the handler's own
`finally`, whatever happened to the worker.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from contextlib import closing
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator

import gradio as gr

from components.common import as_step, md_text
from components.compare_view import compare_figure, compare_rows
from components.cost_view import ratio, step_width
from components.align_plot import align_figure
from components.export import read_trace_json, write_trace_json
from components.frames import STYLE, Feed, step_frame
from components.lecture import write_lecture
from components.mask_plot import mask_figure
from components.stats import accept_hist_figure, run_summary, timing_figure
from components.story_player import story_run
from components.settings import KNOBS, RunSettings, knob_reasons
from components.trace_schema import LABEL_CHARS
from components.tree_plot import tree_figure
from esp import methods
from esp.budget.cost import calibrate, stored
from esp.decoding.engine import Decoder, check_vocab
from esp.errors import ESPError
from esp.models.lm import LM
from esp.models.loader import EMBEDDED
from esp.sampling import Sampling
from esp.trace import RunSummary, StepTrace

from explorer import batch, emulation, gpu, line
from explorer.own_thread import own_thread
from explorer.recipe import Recipe
from explorer.requests import Choice, LIMITS, METHOD, MODEL, PROMPT, SETTINGS, STEP, guard, run_settings
from explorer.session import Session
from explorer.views import ACTIONS, opened, payload, player_data, refusal, status
from explorer.worker import decode_once, rerun_step

log = logging.getLogger("esp.app")
ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "assets"
# Recorded runs shipped with the app (scripts/record_traces.py), in the order of the page's list: first the
# run the page opens on, then the hybrid's copying, the embedded model's masks and the 0.5B model's.
TRACES = {"Qwen2.5-Coder-1.5B: ESP on an everyday question (why the sky is blue)": ASSETS / "trace_qwen15.json",
          "Copying from the prompt (fix a typo)": ASSETS / "trace_copy.json",
          "ESP masks (k=2, BC=30, counting)": ASSETS / "trace_masks.json",
          "Qwen2.5-Coder-0.5B: ESP out-drafts the baselines (counting)": ASSETS / "trace_qwen05.json"}
# The same traces by file stem: their names in a link (?trace=trace_masks) and in the tour.
SHIPPED = {path.stem: path for path in TRACES.values()}
# What the page opens on (no model call): ESP alone on a model where it wins (Qwen2.5-Coder-1.5B, tau 1.6),
# recorded with the Mask Lens, the verifier's eye and the alignment. The tour starts on it (tests/test_tour.py).
OPENING = "trace_qwen15"
# While a run streams, the page gets at most one update per UPDATE_S, holding the frames of every step made
# since the last one (the player keeps them all and draws the newest); the views of the whole run come again
# every SLOW_UPDATE_S. A 2-core machine's browser, drawing all the while, still answers a click at once.
UPDATE_S = 1.0
SLOW_UPDATE_S = 3.0
# The outputs of whatever shows a run: status, the player's data, session.
OPENED = 3
KNOB_INFO = {"k": "mask tokens = tree depth", "bc": "block budget: tokens per forward",
             "lam": "EMA rate of the mask tokens", "init": "mask embedding at the start",
             "tree": "static shape or best-first"}
_load_lock = threading.Lock()  # the startup warm-up and a first Run must not load the same model twice
WHATIF_TOKENS = 2  # a what-if decodes the stored root again, then one step


def load_model(name: str, dtype: str = "float32") -> LM:
    with _load_lock:  # a bf16 copy too is made once, here, before the GPU call that uses it
        return own_thread(gpu.load_model)(name, dtype)  # not on a request thread: explorer.own_thread


def call_seconds(lm: LM, new_tokens: int) -> float | None:
    return gpu.call_seconds(lm.model.num_parameters(), new_tokens)


def ready_process(name: str) -> None:
    """Ready this server process for `name`, its first model. Under ZeroGPU (or its emulation): load it
    now, on the CPU, before any worker forks from this process, and nothing more (no torch op runs here,
    see `gpu.enter_call`; on the GPU, bc=auto starts from the default shape and learns from its steps).
    Locally: load it and measure its cost curve (when none is stored) in a background thread, so that
    the page serves at once."""
    if gpu.mode() == "local":
        threading.Thread(target=_warm, args=(name,), daemon=True).start()
        return
    if gpu.mode() == "emulated":
        emulation.guard_main_process()
    load_model(name)


def _warm(name: str) -> None:
    try:
        with _load_lock:  # a first Run waits for the sweep as for the load, so neither times the other
            lm = gpu.load_model(name)
            if stored(lm) is None:  # the one sweep of this machine's cost curve: at start-up, never in a Run
                calibrate(lm)
        log.info("model %s ready", name)
    except ESPError as e:  # a failure is one log line; the Run then says why
        log.warning("could not warm %s: %s", name, e)


# ---------------------------------------------------------------- stored steps (no model)

def whole(value, default: int | None = None) -> int | None:
    """`value` (a number, or its text from a link or the API) as an int; `default` when it is none."""
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return default


def stored_step(session: Session | None, i: int | None, to: str = "show") -> int:
    """Step index i (None: the first) of the session's stored run; ESPError when there is none or no such
    step (`to`: what the visitor wanted to do with it)."""
    if session is None or not session.steps:
        raise ESPError((session and session.gone) or f"Nothing to {to} yet: press Run first.")
    last = len(session.steps) - 1
    if not 0 <= (i or 0) <= last:
        raise ESPError(f"This run has steps 0-{last}, not {i}.")
    return i or 0


@guard("show_step", 2, i=STEP)
def show_step(session: Session | None, i: int | None) -> tuple:
    """Step i of the stored run, for an API caller (the page's player holds every step and shows them itself):
    (status, the player's message with that step's frame: components.frames.step_frame)."""
    i = stored_step(session, i)
    session.hold()
    return status(session), payload(show=i, frames={str(i): step_frame(session.steps, i, session.meta)})


def _shown(session: Session, state: str = "done", i: int | None = None, data: dict | None = None) -> tuple:
    """The session's run with its status, the player showing step i (default: the last): the output that opens a
    trace. Outputs: (status, player, session)."""
    return status(session, state), opened(session, i, data), session


def open_trace(file: str | None, session: Session | None = None, step: int | None = None,
               data: dict | None = None) -> tuple:
    """Show a recorded trace (exported by the app, or shipped in assets/) with every view, without any
    model, at `step` (default: its last). Outputs: (status, player, session). The file is untrusted input: it is
    checked against every cap of components/trace_schema.py and the server's LIMITS before anything is stored,
    and a refused file gets one line and leaves the session exactly as it was. `data`: the trace's player data
    when it is made already (a shipped trace's)."""
    if not file:
        return refusal("Choose a trace file (.json) first.", OPENED, "open_trace")
    session = session or Session()
    if session.running:
        return refusal("A run is streaming: stop it before opening a trace.", OPENED, "open_trace")
    try:
        meta, steps = read_trace_json(file, LIMITS)
    except (OSError, ValueError) as e:
        detail = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        return refusal(f"This is not an ESP Explorer trace ({detail}): open a JSON file written by Export.",
                       OPENED, "open_trace")
    meta.setdefault("settings", meta.get("spec", steps[0].method))
    meta["opened"] = Path(file).name[:LABEL_CHARS]
    # Drawn into a candidate first: the session takes the trace only once every view of it was made.
    candidate = Session(steps=steps, meta=meta)
    i = None if step is None else min(max(step, 0), len(steps) - 1)
    try:
        shown = _shown(candidate, i=i, data=data or player_data(steps, meta))
    except Exception:  # noqa: BLE001 - a trace the schema let through but a view cannot draw is a bug here
        log.exception("a checked trace failed to render")
        return refusal("This trace could not be drawn: open a JSON file written by Export.", OPENED, "open_trace")
    session.load(steps, meta)
    return (*shown[:-1], session)


@functools.lru_cache(maxsize=len(TRACES))
def shipped_data(stem: str) -> dict:
    """A shipped trace's player data, made once per server: every page opens on one."""
    meta, steps = read_trace_json(SHIPPED[stem], LIMITS)
    return player_data(steps, {**meta, "settings": meta.get("settings", meta.get("spec", steps[0].method))})


# A shipped trace is named by its label (the page's list) or its file stem (a link, the tour).
SHIPPED_NAME = Choice("recorded trace", (*TRACES, *SHIPPED), unknown="No recorded trace called {value}.")


@guard("open_trace", OPENED, name=SHIPPED_NAME)
def open_shipped(name: str, session: Session | None = None, step: int | None = None) -> tuple:
    """Open one of the recorded traces shipped in assets/, by its label in TRACES or its file stem."""
    path = TRACES.get(name) or SHIPPED[name]
    out = open_trace(str(path), session, step, shipped_data(path.stem))
    if isinstance(out[-1], Session):
        out[-1].meta["shipped"] = path.stem  # its name in a link
    return out


@guard("export", None, i=STEP)
def export(session: Session | None, i: int | None) -> list[str]:
    """The run's trace as JSON, and one lecture file: a standalone HTML player of every step with the shown
    step's figures below it (components/lecture.py; one packed copy of Plotly.js keeps it small)."""
    i = stored_step(session, i, "export")
    folder = session.export_dir()
    steps, step = session.steps, session.steps[i]
    views = {"tree": tree_figure(step), "mask": mask_figure(step), "align": align_figure(steps, i),
             "hist": accept_hist_figure(run_summary(steps, i), None if step.prefill else len(step.accepted)),
             "timing": timing_figure(steps, i)}
    figures = {f"{name} (step {i})": fig for name, fig in views.items()}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return [
        str(write_trace_json(session.steps, session.meta, folder / f"esp-trace-{stamp}.json")),
        str(write_lecture(session.steps, session.meta, folder / f"esp-lecture-step{i}-{stamp}.html", figures)),
    ]


# ---------------------------------------------------------------- controls

def check_settings(k, bc, lam, init, tree, mode, temperature, top_p, seed, max_new_tokens, layouts,
                   method="esp", dtype="float32") -> str:
    """Live hint under the controls: what the settings mean, or why the engine would refuse them."""
    try:
        s = run_settings(k=k, bc=bc, lam=lam, init=init, tree=tree, mode=mode, temperature=temperature,
                         top_p=top_p, seed=seed, max_new_tokens=max_new_tokens, layouts=layouts, method=method,
                         dtype=dtype)
    except ESPError as e:
        return f"⚠️ {md_text(e)}"
    note = " · `lastk` copies the chat template's last tokens, not your text." if s.init == "lastk" else ""
    return f"Ready: {s.describe()}{note}"


def knob_updates(method: str) -> list[dict]:
    """Enable the drafting knobs `method` takes; grey out the others with a one-line reason."""
    try:
        reasons = knob_reasons(METHOD.parse(method))
    except ESPError:
        return [gr.skip() for _ in KNOBS]
    return [gr.update(interactive=reasons[k] is None, info=reasons[k] or KNOB_INFO[k]) for k in KNOBS]


# ---------------------------------------------------------------- model calls

def prepare(prompt: str, name: str, **knobs) -> tuple[RunSettings, str, LM, list[int]]:
    """The engine's and the server's checks of a request whose values `guard` parsed (settings that
    cannot go together, the prompt's length in tokens), before any GPU call; a refusal raises ESPError
    with one sentence and loads nothing it need not."""
    settings = RunSettings(**knobs)
    if not prompt.strip():
        raise ESPError("The prompt is empty: type some text or pick an example first.")
    lm = load_model(name, settings.dtype)
    ids = lm.chat_ids(prompt)
    LIMITS.check_prompt(len(ids))
    Decoder(lm, max_new_tokens=settings.max_new_tokens).check_prompt(ids)
    return settings, name, lm, ids


def _failure(e: Exception) -> str:
    """One line for an exception that ended a GPU call (ZeroGPU's abort is a gr.Error)."""
    if not isinstance(e, gr.Error):
        log.exception("GPU call failed")
    return getattr(e, "message", None) or f"{type(e).__name__}: {e}"


RUN_FIELDS = {"prompt": PROMPT, "model": MODEL, **SETTINGS}
COMPARE_FIELDS = {name: field for name, field in RUN_FIELDS.items() if name != "method"}


@guard("generate", OPENED, **RUN_FIELDS)
def generate(prompt: str, k: float = 2, bc: float = 30, lam: float = 0.1, model: str = EMBEDDED,
             init: str = "mean", tree: str = "static", mode: str = "greedy", temperature: float = 0.7,
             top_p: float = 0.95, seed: float = 0, max_new_tokens: float = 64, layouts: str = "efficient",
             method: str = "esp", dtype: str = "float32", session: Session | None = None,
             request: gr.Request | None = None) -> Iterator[tuple]:
    """Decode `prompt` with `method`, yielding (status, player, session) at most every UPDATE_S: the player's
    message holds the frames of the steps made since the last one (components.frames.Feed; the first message
    replaces the page's run), the run's views every SLOW_UPDATE_S and in the last one. While the run waits for
    the model, the status says its place in the line (explorer.line); it then runs as a row of the shared batch
    or alone (explorer.batch). Stop ends the run after the step in progress. A refused input yields one message
    and leaves the page's views as they were."""
    try:
        settings, name, lm, ids = prepare(prompt, model, k=k, bc=bc, lam=lam, init=init, tree=tree, mode=mode,
                                          temperature=temperature, top_p=top_p, seed=seed,
                                          max_new_tokens=max_new_tokens, layouts=layouts, method=method,
                                          dtype=dtype)
    except ESPError as e:
        yield refusal(str(e), OPENED, "generate")
        return
    session = session or Session()
    if session.running:
        yield refusal("A run is already streaming in this page: stop it first.", OPENED, "generate")
        return
    token = session.start({
        "model": lm.name, "model_name": name, "prompt": prompt, "prompt_ids": ids, "method": settings.method,
        "spec": settings.spec(), "settings": settings.describe(), "sampling": asdict(settings.sampling()),
        "max_new_tokens": settings.max_new_tokens, "layouts": settings.layouts,
        "recipe": Recipe(prompt, name, settings).to_dict()})  # its link (explorer.recipe.link_of)
    state, feed = "done", Feed()

    def message(views: bool) -> dict:
        """The player's message: the new steps' frames (the first message starts the run over)."""
        first = feed.sent == 0
        return payload(live=True, **({"reset": True, **STYLE} if first else {}),
                       **feed.update(session.steps, session.meta, views or first))

    try:
        last_fast, last_slow = float("-inf"), time.monotonic()
        seconds = call_seconds(lm, settings.max_new_tokens)
        who = line.identity(request, LIMITS.trusted_proxies)
        with closing(batch.updates(name, ids, settings, token, seconds=seconds, who=who)) as updates:
            for update in updates:
                if "error" in update:
                    yield refusal(update["error"], OPENED, "generate")
                    return
                if "wait" in update:
                    yield update["wait"], gr.skip(), session
                    continue
                if "meta" in update:
                    session.meta.update(update["meta"])
                    continue
                if "end" in update:
                    state = update["end"]
                    continue
                session.add(as_step(update["step"]), update["clock"])
                now = time.monotonic()
                if now - last_fast < UPDATE_S:
                    continue  # stored; the page gets it with the next update
                views = now - last_slow >= SLOW_UPDATE_S
                last_fast, last_slow = now, now if views else last_slow
                shown = "stopping" if session.stopped_at is not None else "running"
                yield status(session, shown), message(views), session
    except Exception as e:  # noqa: BLE001 - the worker aborted or died (ZeroGPU), or a bug here
        why = _failure(e)
        if not session.steps:
            yield refusal(f"The run failed: {why}", OPENED, "generate")
            return
        state = f"aborted: {why}"
    finally:
        session.finish()
    if state != "done":  # its link reproduces the tokens on screen, not the longer run it was stopped in
        session.meta["recipe"]["max_new_tokens"] = max(1, sum(len(s.emitted) for s in session.steps))
    session.meta["text"] = lm.tokenizer.decode([t for s in session.steps for t in s.emitted],
                                               skip_special_tokens=True)
    # The last steps, the whole run's views, and (the run complete) its story and predict mode's data.
    yield status(session, state), {**message(True), **story_run(session.steps, session.meta, ACTIONS)}, session


def request_stop(session: Session | None) -> None:
    """Ask the running decode, wherever it runs, to end after the step in progress."""
    if session is not None:
        session.request_stop()


@guard("whatif", 3, step=STEP, **{n: f for n, f in RUN_FIELDS.items() if n != "prompt"})
def whatif(step: float, k: float = 2, bc: float = 30, lam: float = 0.1, model: str = EMBEDDED,
           init: str = "mean", tree: str = "static", mode: str = "greedy", temperature: float = 0.7,
           top_p: float = 0.95, seed: float = 0, max_new_tokens: float = 64, layouts: str = "efficient",
           method: str = "esp", dtype: str = "float32", session: Session | None = None,
           request: gr.Request | None = None) -> tuple:
    """Re-run stored step `step` from the same committed prefix with the drafting settings given (the
    run's own model, decoding rule and token limit; the dtype given, float32 by default); the stored run
    is left as it is.
    Outputs: (comparison markdown, original tree, alternative tree)."""
    try:
        if session is None or not session.steps:
            raise ESPError("Nothing to re-run yet: press Run (or open a trace) first.")
        i = step or 0
        settings = RunSettings(k=k, bc=bc, lam=lam, init=init, tree=tree, method=method, dtype=dtype)
        meta = session.meta
        if meta.get("model_name") is None or "prompt_ids" not in meta:
            raise ESPError("What-if needs the model that recorded this trace, and this file does not name one.")
        if "sampling" not in meta or "max_new_tokens" not in meta:
            raise ESPError("What-if needs the run's decoding rule and token limit, and this file does not record them.")
        name = LIMITS.check_model(meta["model_name"])
        if not 1 <= i < len(session.steps):
            raise ESPError(f"What-if re-runs a decoding step, 1 to {len(session.steps) - 1}: "
                           f"step {i} is {'the prefill' if i == 0 else 'not in this run'}.")
        lm = load_model(name, settings.dtype)
        check_replay(lm, meta, session.steps[: i + 1])
        with batch.alone(line.identity(request, LIMITS.trusted_proxies)):
            out = rerun_step(name, settings, meta["prompt_ids"], [s.to_dict() for s in session.steps[: i + 1]], i,
                             meta["sampling"], meta["max_new_tokens"], meta.get("layouts", "efficient"),
                             seconds=call_seconds(lm, WHATIF_TOKENS))
    except ESPError as e:
        return refusal(str(e), 3, "whatif")
    except Exception as e:  # noqa: BLE001 - the worker aborted or died (ZeroGPU)
        return refusal(f"The what-if failed: {_failure(e)}", 3, "whatif")
    if "error" in out:
        return refusal(out["error"], 3, "whatif")
    alt = StepTrace.from_dict(out["step"])
    return whatif_table(session, session.steps[i], alt, settings), tree_figure(session.steps[i]), tree_figure(alt)


def whatif_stored(step: Any, session: Session | None):
    """What-if's stored side, drawn at once without the model while the what-if waits its turn for it: the
    stored step's tree; nothing when there is no such step (the what-if's own answer says why)."""
    try:
        i = stored_step(session, STEP.parse(step))
    except ESPError:
        return gr.skip()
    return tree_figure(session.steps[i])


def check_replay(lm: LM, meta: dict, steps: list[StepTrace]) -> None:
    """Every cap a typed prompt gets, for a what-if from a stored run (an opened trace's included), before
    any model call: prompt length, new tokens, the sampling rule, and every token id inside the model's
    vocabulary."""
    LIMITS.check_prompt(len(meta["prompt_ids"]))
    LIMITS.check_new_tokens(meta["max_new_tokens"])
    Sampling(**meta["sampling"])
    check_vocab([*meta["prompt_ids"], *(t for s in steps for t in (s.root, *s.emitted))], lm.vocab_size)


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
        row("original", md_text(session.meta.get("spec", original.method)), original),
        row("what-if", md_text(settings.spec()), alt),
    ])


def _compare_plans(settings: RunSettings) -> list[tuple[str, str, dict | None]]:
    """(label, spec, defaults) per method: 'ar' first, then every method registered now (ESP with the
    panel's settings). Each is built here once, so that a bad setting is refused before any GPU call."""
    plans = []
    for name in methods.available():
        spec, defaults = (settings.esp_spec(), None) if name == "esp" else (
            name, {"bc": settings.bc} if methods.REGISTRY[name].uses_bc else None)
        plans.append((methods.build(spec, defaults).describe(), spec, defaults))
    return sorted(plans, key=lambda p: p[1] != "ar")


@guard("compare", 3, **COMPARE_FIELDS)
def compare(prompt: str, k: float = 2, bc: float = 30, lam: float = 0.1, model: str = EMBEDDED,
            init: str = "mean", tree: str = "static", mode: str = "greedy", temperature: float = 0.7,
            top_p: float = 0.95, seed: float = 0, max_new_tokens: float = 64,
            layouts: str = "efficient", dtype: str = "float32",
            request: gr.Request | None = None) -> Iterator[tuple]:
    """Decode the prompt with every registered method, one GPU call each, in one turn of the model's line (the
    model to itself); yield (status, table rows, chart) as each finishes. The last column is each method's
    verdict against ar (esp.bench.verdict)."""
    try:
        LIMITS.check_compare(len(methods.available()), max_new_tokens)  # before anything is loaded
        settings, name, lm, ids = prepare(prompt, model, k=k, bc=bc, lam=lam, init=init, tree=tree, mode=mode,
                                          temperature=temperature, top_p=top_p, seed=seed,
                                          max_new_tokens=max_new_tokens, layouts=layouts, dtype=dtype)
        plans = _compare_plans(settings)
    except ESPError as e:
        yield refusal(str(e), 3, "compare")
        return
    seconds = call_seconds(lm, settings.max_new_tokens)
    with batch.alone(line.identity(request, LIMITS.trusted_proxies)):
        yield from _compare_runs(name, ids, settings, plans, seconds)


def _compare_runs(name: str, ids: list[int], settings: RunSettings, plans: list,
                  seconds: float | None) -> Iterator[tuple]:
    """Compare's decodes, one per plan (`_compare_plans`), each yielding the table so far."""
    results = []
    for n, (label, spec, defaults) in enumerate(plans, 1):
        yield f"Running {label} ({n}/{len(plans)})…", gr.skip(), gr.skip()
        try:
            out = decode_once(name, ids, settings, spec, defaults, seconds=seconds)
        except Exception as e:  # noqa: BLE001 - the worker aborted or died (ZeroGPU)
            out = {"error": f"{label} failed: {_failure(e)}"}
        if "error" in out:
            yield refusal(out["error"], 3, "compare")
            return
        results.append({"label": label, "summary": RunSummary(**out["summary"]), "tokens": out["tokens"],
                        "top2": out["top2"]})
        rows = compare_rows(results, out["dtype"])
        yield f"Finished {n}/{len(plans)} methods on this {out['device']} ({out['dtype']}).", rows, compare_figure(rows)
