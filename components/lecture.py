"""A lecture file: one standalone HTML player of a whole run (every step's tree, attention pattern, text and
words, and, when the trace records the lens, its verifier's eye and Mask Lens; a step slider, prev / next,
Play / Pause, arrow keys), with the figures of the step shown at export below it, that opens from disk with
no server and no network.

A crafted trace or prompt must not run code in it: the page is filled in one pass (a placeholder written in
a prompt stays text), every text is HTML-escaped, and the data sits in `application/json` script elements,
escaped for a `<script>` context and read with JSON.parse. Plotly.js is embedded once, gzip-compressed
(~1.5 MB of base64 instead of ~4.8 MB), and unpacked by the browser's DecompressionStream.

One player, two homes: the page and the notebook widget (components/notebook.py) run the same script
(PLAYER_JS) on the same markup (PLAYER_MARKUP) and the same per-step data (step_frames).
"""
from __future__ import annotations

import base64
import functools
import gzip
import html
import json
import re
from pathlib import Path
from typing import Mapping, Sequence

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from esp.trace import StepTrace

from .common import THEMES, as_steps
from .eye_view import NO_EYE, eye_figure
from .lens_view import NO_LENS, has_lens, lens_figure
from .mask_plot import mask_figure
from .step_words import step_words
from .story_player import STORY_CSS, STORY_JS, story_markup, story_run
from .text_view import COLOR_MAP, token_sources
from .tree_plot import tree_figure

PERIOD_MS = 500  # Play: two steps a second
PLOTLY_VERSION = get_plotlyjs_version()
# In a <script> element the HTML parser ends the data at "</script" and JavaScript ends a line at U+2028/9:
# these characters go in as JSON's own \u escapes, which JSON.parse reads back unchanged.
_SCRIPT_SAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028",
                0x2029: "\\u2029"}
# The step words' Markdown: code spans, backslash escapes (components.common.md_text), **bold**, entities.
_MD_TOKEN = re.compile(r"`([^`]*)`|\\([!-/:-@\[-`{-~])|(\*\*)|(&(?:amp|lt|gt);)")
_SLOT = re.compile(r"\{\{(\w+)\}\}")


def script_json(value) -> str:
    """`value` as JSON that is safe inside a <script> element (no "</script>", no "<!--", no U+2028/9)."""
    return json.dumps(value, ensure_ascii=False).translate(_SCRIPT_SAFE)


def fill(template: str, values: Mapping[str, str]) -> str:
    """`template` with every {{name}} replaced in one pass: text that a value brings in is never scanned
    again, so a placeholder written in a prompt stays as written."""
    return _SLOT.sub(lambda m: values[m.group(1)], template)


def markdown_html(text: str) -> str:
    """The step words' Markdown (**bold**, `code` spans, backslash escapes, entities) as HTML; every other
    character is escaped."""
    out, bold, pos = [], False, 0
    for m in _MD_TOKEN.finditer(text):
        code, char, star, entity = m.groups()
        out.append(html.escape(text[pos : m.start()], quote=False))
        if code is not None:
            out.append(f"<code>{html.escape(code, quote=False)}</code>")
        elif char is not None:
            out.append(html.escape(char, quote=False))
        elif star:
            out.append("</b>" if bold else "<b>")
            bold = not bold
        else:
            out.append(entity)
        pos = m.end()
    out.append(html.escape(text[pos:], quote=False))
    return "".join(out) + ("</b>" if bold else "")


def _wash(color: str) -> str:
    """A label's colour at half opacity, as Gradio's HighlightedText shows it, so dark text reads on it (less on
    a dark page, --esp-wash in PLAYER_CSS, so that light text keeps 4.5:1 on every colour)."""
    return f"color-mix(in srgb, {color} var(--esp-wash, 50%), transparent)"


def text_html(pairs: list[tuple[str, str]]) -> str:
    """Highlighted-text pairs as coloured spans (the app's text view, without Gradio); the label is the title."""
    return "".join(f'<span style="background:{_wash(COLOR_MAP.get(label, "transparent"))}" '
                   f'title="{html.escape(label)}">{html.escape(text)}</span>' for text, label in pairs)


def legend_html() -> str:
    return " ".join(f'<span style="background:{_wash(c)}">{html.escape(label)}</span>' for label, c in COLOR_MAP.items())


def _figure_json(fig: go.Figure) -> dict:
    return json.loads(pio.to_json(fig, validate=False))


def step_frames(steps: Sequence[StepTrace | dict], meta: Mapping) -> list[dict]:
    """The player's data for every step of a run: each figure view (PLAYER_MARKUP's `data-figure` boxes) as
    Plotly JSON, the text so far and the step in words as escaped HTML. The verifier's eye and the Mask Lens are
    None when the trace does not record them (the player then says so in one line instead)."""
    steps = as_steps(steps)
    lens, eye = has_lens(steps), any(s.eye for s in steps)
    return [{"tree": _figure_json(tree_figure(s)), "mask": _figure_json(mask_figure(s)),
             "text": text_html(token_sources(steps, i)), "words": markdown_html(step_words(s, meta)),
             "eye": _figure_json(eye_figure(s, meta)) if eye else None,
             "lens": _figure_json(lens_figure(steps, i)) if lens else None}
            for i, s in enumerate(steps)]


def run_title(steps: Sequence[StepTrace], meta: Mapping) -> str:
    """'ESP Explorer · <model> · <spec>' (plain text: escape it where it becomes HTML)."""
    return f"ESP Explorer · {meta.get('model', 'a run')} · {meta.get('spec', steps[0].method)}"


def player_markup(steps: Sequence[StepTrace | dict], first: str = "") -> str:
    """The player's controls and view boxes for a run of len(steps) steps (the script fills the boxes), with
    `first` (the story and predict panels' markup, components/story_player.py) under its controls."""
    return fill(PLAYER_MARKUP, {"legend": legend_html(), "last": str(len(steps) - 1), "no_eye": html.escape(NO_EYE),
                                "no_lens": html.escape(NO_LENS), "first": first})


@functools.lru_cache(maxsize=1)
def packed_plotly() -> str:
    """Plotly.js (the version plotly.py draws for), gzip-compressed and base64-encoded."""
    return base64.b64encode(gzip.compress(get_plotlyjs().encode(), compresslevel=9, mtime=0)).decode()


def lecture_html(steps: Sequence[StepTrace | dict], meta: Mapping,
                 figures: Mapping[str, go.Figure] | None = None) -> str:
    """The player page: every step's views and the given `figures` (title -> figure, shown below the
    player) embedded as data, Plotly.js packed once, no external reference."""
    steps = as_steps(steps)
    if not steps:
        raise ValueError("a lecture needs at least one step")
    shown = [{"title": name, "figure": _figure_json(fig)} for name, fig in (figures or {}).items()]
    first = story_run(steps, meta)
    return fill(_PAGE, {
        "title": html.escape(run_title(steps, meta)), "prompt": html.escape(str(meta.get("prompt", ""))),
        "css": PLAYER_CSS + STORY_CSS, "player": player_markup(steps, story_markup(first["story"])),
        "script": PLAYER_JS + STORY_JS, "period": str(PERIOD_MS),
        "plotly": packed_plotly(), "version": script_json(PLOTLY_VERSION),
        "frames": script_json(step_frames(steps, meta)), "figures": script_json(shown), "first": script_json(first)})


def write_lecture(steps: Sequence[StepTrace | dict], meta: Mapping, path: str | Path,
                  figures: Mapping[str, go.Figure] | None = None) -> Path:
    path = Path(path)
    path.write_text(lecture_html(steps, meta, figures), encoding="utf-8")
    return path


# The player's look, scoped to its root (the lecture's <body>, or a widget's box on a notebook page), so that
# on a page of its own or among a notebook's cells it looks the same and styles nothing else.
PLAYER_CSS = fill("""
.esp-player { font-family: Inter, Helvetica, Arial, sans-serif; color: {{light}}; background: #fdfdfd; }
.esp-player.dark { color: {{dark}}; background: #15171a; --esp-wash: 30%; }
.esp-player.dark .main-svg text { fill: {{dark}} !important; }
.esp-player #bar { display: flex; gap: .6em; align-items: center; flex-wrap: wrap; position: sticky; top: 0;
                   background: inherit; padding: .4em 0; z-index: 2; }
.esp-player #scrub { flex: 1; min-width: 12em; }
.esp-player button { font-size: 1em; padding: .3em .8em; }
.esp-player #views, .esp-player #lensviews { display: flex; flex-wrap: wrap; gap: 1em; }
.esp-player #views > div, .esp-player #lensviews > div { flex: 1 1 420px; min-width: 300px; }
.esp-player .note { font-size: .85em; opacity: .8; }
.esp-player #text { font-family: ui-monospace, Menlo, monospace; white-space: pre-wrap; line-height: 1.7; }
.esp-player #text span, .esp-player #legend span { border-radius: 3px; padding: 0 1px; color: inherit; }
.esp-player #legend { font-size: .8em; } .esp-player #legend span { margin-right: .4em; padding: 0 .3em; }
.esp-player code { background: rgba(128,128,128,.18); padding: 0 .2em; border-radius: 3px; }
""", THEMES)

# One run's controls and views. Ids are unique within a player; the script looks them up inside its root, so
# several players on one notebook page never reach into each other.
PLAYER_MARKUP = """<div id="bar">
 <button id="prev" title="Left arrow">◀ prev</button>
 <button id="play" title="Space">Play</button>
 <button id="next" title="Right arrow">next ▶</button>
 <input id="scrub" type="range" min="0" max="{{last}}" value="0" step="1" aria-label="step">
 <span id="step-label"></span>
 <button id="theme" title="light / dark">◐</button>
</div>
{{first}}
<p id="words"></p>
<div id="views"><div id="tree" data-figure="tree"></div><div id="mask" data-figure="mask"></div></div>
<div id="legend">{{legend}}</div>
<p id="text"></p>
<div id="lensviews"><div id="eye" data-figure="eye"></div><div id="lens" data-figure="lens"></div></div>
<p class="note" id="eye-note" hidden>{{no_eye}}</p>
<p class="note" id="lens-note" hidden>{{no_lens}}</p>
<div id="figures"></div>"""

# The player itself, the same script in both homes: espPlayer(root, run, opts) plays run = {frames, figures}
# (step_frames' data and titled figures) in `root` (which holds PLAYER_MARKUP), with Plotly.js unpacked from
# opts.plotly (packed_plotly) once per page; opts.keys takes the arrow keys (the page, or the widget's box);
# it returns a function that stops it. Every text in the frames is escaped HTML made in Python.
PLAYER_JS = r"""
function espPlotly(packed, version) {
  if (window.Plotly && window.Plotly.version === version) return Promise.resolve(window.Plotly);
  // Packed (gzip + base64): unpacked once per page and shared by every player on it. A different Plotly.js
  // already on the page (a notebook's own) is put back, so that its figures keep theirs.
  window.__espPlotly = window.__espPlotly || (async () => {
    const bytes = Uint8Array.from(atob(packed), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    const code = document.createElement("script");
    code.textContent = await new Response(stream).text();
    const before = window.Plotly;
    document.head.appendChild(code);
    const ours = window.Plotly;
    if (before) window.Plotly = before;
    return ours;
  })();
  return window.__espPlotly;
}

function darkPage() {
  const body = document.body;
  if (body.dataset.jpThemeLight) return body.dataset.jpThemeLight === "false";  // JupyterLab, Notebook 7
  if (body.classList.contains("vscode-dark") || body.classList.contains("vscode-light")) {
    return body.classList.contains("vscode-dark");
  }
  return matchMedia("(prefers-color-scheme: dark)").matches;
}

function espPlayer(root, run, opts) {
  const $ = (id) => root.querySelector("#" + id);
  const FRAMES = run.frames, FIGURES = run.figures || [], LAST = FRAMES.length - 1;
  const config = {displaylogo: false, responsive: true};
  let timer = null, Plotly = null;

  function show(i) {
    if (!Plotly) return;  // still unpacking
    i = Math.max(0, Math.min(LAST, i));
    const f = FRAMES[i];
    $("scrub").value = i;
    $("step-label").textContent = "Step " + i + " of " + LAST;
    $("words").innerHTML = f.words;
    $("text").innerHTML = f.text;
    for (const box of root.querySelectorAll("[data-figure]")) {
      // A view the trace does not record (null) is hidden and its one-line note shown.
      const fig = f[box.dataset.figure], note = $(box.dataset.figure + "-note");
      box.hidden = !fig;
      if (note) note.hidden = !!fig;
      if (fig) Plotly.react(box, fig.data, fig.layout, config);
    }
    root.dispatchEvent(new CustomEvent("esp-step", {detail: {step: i}}));
  }
  root.espShow = show;
  const current = () => Number($("scrub").value);

  function pause() { clearInterval(timer); timer = null; $("play").textContent = "Play"; }
  root.espPause = pause;
  function play() {
    if (timer) return pause();
    if (current() >= LAST) show(0);
    $("play").textContent = "Pause";
    timer = setInterval(() => { show(current() + 1); if (current() >= LAST) pause(); }, opts.period);
  }

  $("prev").onclick = () => { pause(); show(current() - 1); };
  $("next").onclick = () => { pause(); show(current() + 1); };
  $("play").onclick = play;
  $("scrub").oninput = () => { pause(); show(current()); };
  $("theme").onclick = () => root.classList.toggle("dark");
  function onKey(e) {
    if (e.target.matches("input:not([type=range]), textarea, select, [contenteditable]")) return;
    if (e.key === " " && e.target.closest("button")) return;  // Space presses the focused button
    const keys = {ArrowRight: "next", PageDown: "next", ArrowLeft: "prev", PageUp: "prev", " ": "play"};
    if (keys[e.key]) { e.preventDefault(); e.stopPropagation(); $(keys[e.key]).click(); }
  }
  opts.keys.addEventListener("keydown", onKey);
  if (darkPage()) root.classList.add("dark");

  function showFigures() {
    for (const {title, figure} of FIGURES) {
      const box = document.createElement("div"), head = document.createElement("h3");
      head.textContent = title;
      box.setAttribute("role", "figure");
      box.setAttribute("aria-label", title);
      $("figures").append(head, box);
      Plotly.newPlot(box, figure.data, figure.layout, config);
    }
  }
  espPlotly(opts.plotly, opts.version).then((p) => { Plotly = p; show(0); showFigures(); }, (e) => {
    $("words").textContent = "This browser could not unpack the embedded Plotly.js (" + e + ").";
  });
  return () => { pause(); opts.keys.removeEventListener("keydown", onKey); };
}
"""

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{title}}</title>
<style>{{css}}
 body { margin: 1em auto; max-width: 1200px; padding: 0 1em; }
 h1 { font-size: 1.5em; }
</style></head>
<body class="esp-player">
<main>
<h1>{{title}}</h1>
<p><b>Prompt:</b> {{prompt}}</p>
{{player}}
</main>
<script type="application/octet-stream" id="esp-plotly">{{plotly}}</script>
<script type="application/json" id="esp-frames">{{frames}}</script>
<script type="application/json" id="esp-figures">{{figures}}</script>
<script type="application/json" id="esp-first">{{first}}</script>
<script>{{script}}
const data = (id) => JSON.parse(document.getElementById(id).textContent);
const run = {frames: data("esp-frames"), figures: data("esp-figures"), ...data("esp-first")};
espPlayer(document.body, run, {plotly: document.getElementById("esp-plotly").textContent, version: {{version}},
                               period: {{period}}, keys: document});
espFirstMinute(document.body, run);
</script>
</body></html>
"""
