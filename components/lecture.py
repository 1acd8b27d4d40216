"""A lecture file: one standalone HTML player of a whole run (every step's tree, attention pattern, text and
words, and, when the trace records the lens, its verifier's eye and Mask Lens; a step slider, prev / next,
Play / Pause, arrow keys), with the figures of the step shown at export below it, that opens from disk with
no server and no network.

A crafted trace or prompt must not run code in it: the page is filled in one pass (a placeholder written in
a prompt stays text), every text is HTML-escaped, and the data sits in `application/json` script elements,
escaped for a `<script>` context and read with JSON.parse. Plotly.js is embedded once, gzip-compressed
(~1.5 MB of base64 instead of ~4.8 MB), and unpacked by the browser's DecompressionStream.
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
from plotly.offline import get_plotlyjs

from esp.trace import StepTrace

from .common import THEMES, as_steps
from .eye_view import NO_EYE, eye_figure
from .lens_view import NO_LENS, has_lens, lens_figure
from .mask_plot import mask_figure
from .step_words import step_words
from .text_view import COLOR_MAP, token_sources
from .tree_plot import tree_figure

STEPS_PER_S = 2
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
    """A label's colour at half opacity, as Gradio's HighlightedText shows it, so dark text reads on it."""
    return f"color-mix(in srgb, {color} 50%, transparent)"


def text_html(pairs: list[tuple[str, str]]) -> str:
    """Highlighted-text pairs as coloured spans (the app's text view, without Gradio); the label is the title."""
    return "".join(f'<span style="background:{_wash(COLOR_MAP.get(label, "transparent"))}" '
                   f'title="{html.escape(label)}">{html.escape(text)}</span>' for text, label in pairs)


def legend_html() -> str:
    return " ".join(f'<span style="background:{_wash(c)}">{html.escape(label)}</span>' for label, c in COLOR_MAP.items())


def _figure_json(fig: go.Figure) -> dict:
    return json.loads(pio.to_json(fig, validate=False))


def _frames(steps: list[StepTrace], meta: Mapping) -> list[dict]:
    """Every step's views as data; the verifier's eye and the Mask Lens only when the trace records them (the
    page then says so in one line instead)."""
    lens, eye = has_lens(steps), any(s.eye for s in steps)
    return [{"tree": _figure_json(tree_figure(s)), "mask": _figure_json(mask_figure(s)),
             "text": text_html(token_sources(steps, i)), "words": markdown_html(step_words(s, meta)),
             "eye": _figure_json(eye_figure(s, meta)) if eye else None,
             "lens": _figure_json(lens_figure(steps, i)) if lens else None}
            for i, s in enumerate(steps)]


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
    title = html.escape(f"ESP Explorer · {meta.get('model', 'a run')} · {meta.get('spec', steps[0].method)}")
    shown = [{"title": name, "figure": _figure_json(fig)} for name, fig in (figures or {}).items()]
    return fill(_PAGE, {
        "title": title, "prompt": html.escape(str(meta.get("prompt", ""))), "legend": legend_html(),
        "last": str(len(steps) - 1), "no_eye": html.escape(NO_EYE), "no_lens": html.escape(NO_LENS), "dark": THEMES["dark"], "light": THEMES["light"],
        "period": str(1000 // STEPS_PER_S), "plotly": packed_plotly(), "frames": script_json(_frames(steps, meta)),
        "figures": script_json(shown)})


def write_lecture(steps: Sequence[StepTrace | dict], meta: Mapping, path: str | Path,
                  figures: Mapping[str, go.Figure] | None = None) -> Path:
    path = Path(path)
    path.write_text(lecture_html(steps, meta, figures), encoding="utf-8")
    return path


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{title}}</title>
<style>
 body { font-family: Inter, Helvetica, Arial, sans-serif; margin: 1em auto; max-width: 1200px; padding: 0 1em;
        color: {{light}}; background: #fdfdfd; }
 body.dark { color: {{dark}}; background: #15171a; }
 body.dark .main-svg text { fill: {{dark}} !important; }
 #bar { display: flex; gap: .6em; align-items: center; flex-wrap: wrap; position: sticky; top: 0;
        background: inherit; padding: .4em 0; z-index: 2; }
 #scrub { flex: 1; min-width: 12em; }
 button { font-size: 1em; padding: .3em .8em; }
 #views { display: flex; flex-wrap: wrap; gap: 1em; }
 #views > div, #lensviews > div { flex: 1 1 420px; min-width: 300px; }
 #lensviews { display: flex; flex-wrap: wrap; gap: 1em; }
 .note { font-size: .85em; opacity: .8; }
 #text { font-family: ui-monospace, Menlo, monospace; white-space: pre-wrap; line-height: 1.7; }
 #text span, #legend span { border-radius: 3px; padding: 0 1px; color: inherit; }
 #legend { font-size: .8em; } #legend span { margin-right: .4em; padding: 0 .3em; }
 code { background: rgba(128,128,128,.18); padding: 0 .2em; border-radius: 3px; }
</style></head>
<body>
<h2>{{title}}</h2>
<p><b>Prompt:</b> {{prompt}}</p>
<div id="bar">
 <button id="prev" title="Left arrow">◀ prev</button>
 <button id="play" title="Space">Play</button>
 <button id="next" title="Right arrow">next ▶</button>
 <input id="scrub" type="range" min="0" max="{{last}}" value="0" step="1" aria-label="step">
 <span id="step-label"></span>
 <button id="theme" title="light / dark">◐</button>
</div>
<p id="words"></p>
<div id="views"><div id="tree"></div><div id="mask"></div></div>
<div id="legend">{{legend}}</div>
<p id="text"></p>
<div id="lensviews"><div id="eye"></div><div id="lens"></div></div>
<p class="note" id="eye-note" hidden>{{no_eye}}</p>
<p class="note" id="lens-note" hidden>{{no_lens}}</p>
<div id="figures"></div>
<script type="application/octet-stream" id="esp-plotly">{{plotly}}</script>
<script type="application/json" id="esp-frames">{{frames}}</script>
<script type="application/json" id="esp-figures">{{figures}}</script>
<script>
const data = (id) => JSON.parse(document.getElementById(id).textContent);
const FRAMES = data("esp-frames");
const FIGURES = data("esp-figures");
const LAST = FRAMES.length - 1;
const $ = (id) => document.getElementById(id);
let timer = null;

function show(i) {
  if (!window.Plotly) return;  // still unpacking
  i = Math.max(0, Math.min(LAST, i));
  const f = FRAMES[i];
  $("scrub").value = i;
  $("step-label").textContent = "Step " + i + " of " + LAST;
  $("words").innerHTML = f.words;
  $("text").innerHTML = f.text;
  Plotly.react("tree", f.tree.data, f.tree.layout, {displaylogo: false, responsive: true});
  Plotly.react("mask", f.mask.data, f.mask.layout, {displaylogo: false, responsive: true});
  for (const view of ["eye", "lens"]) {
    const fig = f[view];
    $(view + "-note").hidden = fig !== null;
    $(view).hidden = fig === null;
    if (fig) Plotly.react(view, fig.data, fig.layout, {displaylogo: false, responsive: true});
  }
}
const current = () => Number($("scrub").value);

function pause() { clearInterval(timer); timer = null; $("play").textContent = "Play"; }
function play() {
  if (timer) return pause();
  if (current() >= LAST) show(0);
  $("play").textContent = "Pause";
  timer = setInterval(() => { show(current() + 1); if (current() >= LAST) pause(); }, {{period}});
}

$("prev").onclick = () => { pause(); show(current() - 1); };
$("next").onclick = () => { pause(); show(current() + 1); };
$("play").onclick = play;
$("scrub").oninput = () => { pause(); show(current()); };
$("theme").onclick = () => document.body.classList.toggle("dark");
document.addEventListener("keydown", (e) => {
  if (e.target.matches("input:not([type=range]), textarea, select, [contenteditable]")) return;
  const keys = {ArrowRight: "next", PageDown: "next", ArrowLeft: "prev", PageUp: "prev", " ": "play"};
  if (keys[e.key]) { e.preventDefault(); $(keys[e.key]).click(); }
});
if (matchMedia("(prefers-color-scheme: dark)").matches) document.body.classList.add("dark");

// Plotly.js is packed (gzip + base64): unpack it, run it, then draw.
async function unpackPlotly() {
  const bytes = Uint8Array.from(atob($("esp-plotly").textContent), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  const code = document.createElement("script");
  code.textContent = await new Response(stream).text();
  document.head.appendChild(code);
}
function showFigures() {
  for (const {title, figure} of FIGURES) {
    const box = document.createElement("div"), head = document.createElement("h3");
    head.textContent = title;
    $("figures").append(head, box);
    Plotly.newPlot(box, figure.data, figure.layout, {displaylogo: false, responsive: true});
  }
}
unpackPlotly().then(() => { show(0); showFigures(); }, (e) => {
  $("words").textContent = "This browser could not unpack the embedded Plotly.js (" + e + ").";
});
</script>
</body></html>
"""
