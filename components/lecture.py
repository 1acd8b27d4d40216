"""A lecture file: one standalone HTML player of a whole run (every step's tree, mask, text and words,
a step slider, prev / next, Play / Pause, arrow keys) that opens from disk with no server and no network."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Mapping, Sequence

import plotly.io as pio
from plotly.offline import get_plotlyjs

from esp.trace import StepTrace

from .common import THEMES, as_steps
from .mask_plot import mask_figure
from .step_words import step_words
from .text_view import COLOR_MAP, token_sources
from .tree_plot import tree_figure

STEPS_PER_S = 2


def markdown_html(text: str) -> str:
    """The step words' Markdown (only **bold** and `code` spans) as HTML, escaped first."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]*)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)


def text_html(pairs: list[tuple[str, str]]) -> str:
    """Highlighted-text pairs as coloured spans (the app's text view, without Gradio)."""
    return "".join(f'<span style="background:{COLOR_MAP.get(label, "transparent")}" title="{html.escape(label)}">'
                   f"{html.escape(text)}</span>" for text, label in pairs)


def legend_html() -> str:
    return " ".join(f'<span style="background:{c}">{html.escape(label)}</span>' for label, c in COLOR_MAP.items())


def _frames(steps: list[StepTrace], meta: Mapping) -> list[dict]:
    return [{"tree": json.loads(pio.to_json(tree_figure(s), validate=False)),
             "mask": json.loads(pio.to_json(mask_figure(s), validate=False)),
             "text": text_html(token_sources(steps, i)), "words": markdown_html(step_words(s, meta))}
            for i, s in enumerate(steps)]


def lecture_html(steps: Sequence[StepTrace | dict], meta: Mapping) -> str:
    """The player page: plotly.js inlined, every step's views embedded as JSON, no external reference."""
    steps = as_steps(steps)
    if not steps:
        raise ValueError("a lecture needs at least one step")
    # "</" inside a script's JSON would end the script element early.
    data = json.dumps(_frames(steps, meta), ensure_ascii=False).replace("</", "<\\/")
    title = html.escape(f"ESP Explorer · {meta.get('model', 'a run')} · {meta.get('spec', steps[0].method)}")
    prompt = html.escape(str(meta.get("prompt", "")))
    return (_PAGE.replace("{{title}}", title).replace("{{prompt}}", prompt).replace("{{legend}}", legend_html())
            .replace("{{last}}", str(len(steps) - 1)).replace("{{dark}}", THEMES["dark"])
            .replace("{{light}}", THEMES["light"]).replace("{{period}}", str(1000 // STEPS_PER_S))
            .replace("{{plotly}}", get_plotlyjs()).replace("{{data}}", data))


def write_lecture(steps: Sequence[StepTrace | dict], meta: Mapping, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(lecture_html(steps, meta), encoding="utf-8")
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
 #views > div { flex: 1 1 420px; min-width: 300px; }
 #text { font-family: ui-monospace, Menlo, monospace; white-space: pre-wrap; line-height: 1.7; }
 #text span, #legend span { border-radius: 3px; padding: 0 1px; color: #111; }
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
<script>{{plotly}}</script>
<script>
const FRAMES = {{data}};
const LAST = FRAMES.length - 1;
const $ = (id) => document.getElementById(id);
let timer = null;

function show(i) {
  i = Math.max(0, Math.min(LAST, i));
  const f = FRAMES[i];
  $("scrub").value = i;
  $("step-label").textContent = "Step " + i + " of " + LAST;
  $("words").innerHTML = f.words;
  $("text").innerHTML = f.text;
  Plotly.react("tree", f.tree.data, f.tree.layout, {displaylogo: false, responsive: true});
  Plotly.react("mask", f.mask.data, f.mask.layout, {displaylogo: false, responsive: true});
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
show(0);
</script>
</body></html>
"""
