"""The player (PLAYER_JS), and the lecture file: one standalone HTML page that plays a whole run (every step's
views, the run's own, a step slider, prev / next, Play / Pause, arrow keys, focus), with the figures of the
step shown at export below it, and opens from disk with no server and no network.

One player, three homes: the app's page (explorer.js feeds it what the server sends), the notebook widget
(components/notebook.py) and the lecture file run the same script on markup holding the same data-role parts
and data-figure boxes, with the same data (components/frames.py run_data, or its pieces as a run streams).

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

from esp.trace import StepTrace

from .common import THEMES, as_steps
from .eye_view import NO_EYE
from .frames import HEIGHTS, figure_json, markdown_html, run_data, step_frames
from .lens_view import NO_LENS
from . import plotly_bundle
from .palette import FOCUS
from .story_player import STORY_CSS, STORY_JS, story_markup, story_run

PERIOD_MS = 500  # Play: two steps a second
# Play's speed box, in steps a second: slowest, fastest, its step, and the default (PERIOD_MS).
SPEEDS = {"min": 0.25, "max": 10, "step": 0.25, "value": 1000 / PERIOD_MS}
# In a <script> element the HTML parser ends the data at "</script" and JavaScript ends a line at U+2028/9:
# these characters go in as JSON's own \u escapes, which JSON.parse reads back unchanged.
_SCRIPT_SAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028",
                0x2029: "\\u2029"}
_SLOT = re.compile(r"\{\{(\w+)\}\}")
__all__ = ["markdown_html", "step_frames"]  # the player's data, also reached through this module


def script_json(value) -> str:
    """`value` as JSON that is safe inside a <script> element (no "</script>", no "<!--", no U+2028/9)."""
    return json.dumps(value, ensure_ascii=False).translate(_SCRIPT_SAFE)


def fill(template: str, values: Mapping[str, str]) -> str:
    """`template` with every {{name}} replaced in one pass: text that a value brings in is never scanned
    again, so a placeholder written in a prompt stays as written."""
    return _SLOT.sub(lambda m: values[m.group(1)], template)


def figure_box(view: str) -> str:
    """The box the player draws view `view` in (a key of a frame, or of the run's views), at its fixed height."""
    return f'<div class="esp-figure" data-figure="{view}" style="height:{HEIGHTS[view]}px"></div>'


def speed_box() -> str:
    """Play's speed box (steps a second) with its bounds."""
    return ('<input data-role="speed" type="number" aria-label="steps per second" '
            + " ".join(f'{k}="{v:g}"' for k, v in SPEEDS.items()) + ">")


def run_title(steps: Sequence[StepTrace], meta: Mapping) -> str:
    """'ESP Explorer · <model> · <spec>' (plain text: escape it where it becomes HTML)."""
    return f"ESP Explorer · {meta.get('model', 'a run')} · {meta.get('spec', steps[0].method)}"


def player_markup(steps: Sequence[StepTrace | dict], first: str = "") -> str:
    """The player's controls and view boxes for a run of len(steps) steps (the script fills the boxes), with
    `first` (the story and predict panels' markup, components/story_player.py) under its controls."""
    boxes = {view: figure_box(view) for view in HEIGHTS}
    return fill(PLAYER_MARKUP, {"last": str(len(steps) - 1), "no_eye": html.escape(NO_EYE),
                                "no_lens": html.escape(NO_LENS), "speed": speed_box(), "first": first, **boxes})


@functools.lru_cache(maxsize=1)
def packed_plotly() -> str:
    """The players' Plotly.js (components/plotly_bundle.py), gzip-compressed and base64-encoded."""
    return base64.b64encode(gzip.compress(plotly_bundle.source().encode(), compresslevel=9, mtime=0)).decode()


def lecture_html(steps: Sequence[StepTrace | dict], meta: Mapping,
                 figures: Mapping[str, go.Figure] | None = None) -> str:
    """The player page: every step's views, the run's, and the given `figures` (title -> figure, shown below
    the player) embedded as data, Plotly.js packed once, no external reference."""
    steps = as_steps(steps)
    if not steps:
        raise ValueError("a lecture needs at least one step")
    shown = [{"title": name, "figure": figure_json(fig)} for name, fig in (figures or {}).items()]
    first = story_run(steps, meta)
    return fill(_PAGE, {
        "title": html.escape(run_title(steps, meta)), "prompt": html.escape(str(meta.get("prompt", ""))),
        "css": PLAYER_CSS + STORY_CSS, "player": player_markup(steps, story_markup(first["story"])),
        "script": PLAYER_JS + STORY_JS, "period": str(PERIOD_MS),
        "plotly": packed_plotly(), "version": script_json(plotly_bundle.VERSION),
        "run": script_json(run_data(steps, meta)), "figures": script_json(shown), "first": script_json(first)})


def write_lecture(steps: Sequence[StepTrace | dict], meta: Mapping, path: str | Path,
                  figures: Mapping[str, go.Figure] | None = None) -> Path:
    path = Path(path)
    path.write_text(lecture_html(steps, meta, figures), encoding="utf-8")
    return path


# How the player's own parts look wherever it runs (the app's page adds its own layout: assets/app.css): the
# text's tokens, the focused one, the view boxes.
PARTS_CSS = fill("""
[data-role=text] { font-family: ui-monospace, Menlo, monospace; white-space: pre-wrap; line-height: 1.7; }
[data-role=text] .token, [data-role=legend] span { border-radius: 3px; padding: 0 1px; color: inherit; cursor: pointer; }
[data-role=text] .token.esp-focus, [data-role=text] .token:focus-visible { outline: 2px solid {{focus}}; }
[data-role=legend] { font-size: .8em; } [data-role=legend] span { margin-right: .4em; padding: 0 .3em; cursor: default; }
[data-role=stats] table { border-collapse: collapse; } [data-role=stats] th, [data-role=stats] td { padding: 0 .6em; text-align: right; }
[data-role=pace] { font-size: .85em; }
.esp-figure { width: 100%; overflow: hidden; }
@media (max-width: 600px) {  /* a phone: the summary's table wraps its cells rather than widen the page */
  [data-role=stats] table { width: 100%; table-layout: fixed; }
  [data-role=stats] th, [data-role=stats] td { overflow-wrap: anywhere; }
}
""", {"focus": FOCUS})

# The player's look, scoped to its root (the lecture's <body>, or a widget's box on a notebook page), so that
# on a page of its own or among a notebook's cells it looks the same and styles nothing else.
PLAYER_CSS = PARTS_CSS + fill("""
.esp-player { font-family: Inter, Helvetica, Arial, sans-serif; color: {{light}}; background: #fdfdfd; }
.esp-player.dark { color: {{dark}}; background: #15171a; --esp-wash: 30%; }
.esp-player.dark .main-svg text { fill: {{dark}} !important; }
.esp-player #bar { display: flex; gap: .6em; align-items: center; flex-wrap: wrap; position: sticky; top: 0;
                   background: inherit; padding: .4em 0; z-index: 2; }
.esp-player #scrub { flex: 1; min-width: 12em; }
.esp-player [data-role=speed] { width: 4em; }
.esp-player button { font-size: 1em; padding: .3em .8em; }
.esp-player .esp-views { display: flex; flex-wrap: wrap; gap: 1em; }
.esp-player .esp-views > .esp-figure { flex: 1 1 420px; min-width: 300px; }
.esp-player .note { font-size: .85em; opacity: .8; }
.esp-player code { background: rgba(128,128,128,.18); padding: 0 .2em; border-radius: 3px; }
""", THEMES)

# One run's controls and view boxes (boxes: figure_box, filled in by player_markup). The script finds each part by
# its data-role (a control, a text) or data-figure (a view), inside its root, so that several players on one
# notebook page never reach into each other; the ids are for the page's own styles and links.
PLAYER_MARKUP = """<div id="bar">
 <button id="prev" data-role="prev" title="Left arrow">◀ prev</button>
 <button id="play" data-role="play" title="Space">▶ Play</button>
 <button id="next" data-role="next" title="Right arrow">next ▶</button>
 <input id="scrub" data-role="scrub" type="range" min="0" max="{{last}}" value="0" step="1" aria-label="step">
 <span id="step-label" data-role="label"></span>
 <label>steps / s {{speed}}</label> <span data-role="pace" aria-live="polite"></span>
 <button id="theme" data-role="theme" title="light / dark">◐</button>
</div>
{{first}}
<p id="words" data-role="words"></p>
<div class="esp-views">{{tree}}{{mask}}</div>
<p><label>Focus on a node <select data-role="focus"></select></label> <span data-role="focus-note"></span></p>
<div id="legend" data-role="legend"></div>
<p id="text" data-role="text"></p>
<div data-role="stats"></div>
<div class="esp-views">{{eye}}{{lens}}</div>
<p class="note" id="eye-note" data-note="eye" hidden>{{no_eye}}</p>
<p class="note" id="lens-note" data-note="lens" hidden>{{no_lens}}</p>
<div class="esp-views">{{cost}}{{align}}</div>
<p class="note" data-role="cost-note"></p>
<div class="esp-views">{{lens_rank}}{{commit}}</div>
<div class="esp-views">{{hist}}{{timing}}</div>
<div id="figures" data-role="figures"></div>"""

# The player itself, the same script in all three homes: espPlayer(root, run, opts) plays `run` (components/frames.py
# run_data, with `figures`: titled figures drawn once below) in `root`, which holds the player's parts. Plotly.js
# comes from opts.plotly: packed (packed_plotly, unpacked once per page) or a promise of the page's own, at
# opts.version; opts.period is Play's default ms per step; opts.keys, where the arrow keys and Space act (or null:
# the page's own script clicks the buttons). It returns a function that stops it, and sets on `root`:
# root.espShow(i) (show step i) and root.esp (show, feed, focus, step, plotly); after every step shown, `root`
# gets the event "esp-step" ({detail: {step}}). root.esp.feed(data) takes more of a run: {reset, frames (a list,
# or {index: frame or the keys that changed}), views, legend, focus, show (the step to show), live (follow the
# newest step while the shown one is the last)}; unknown keys are ignored. Every text in the data is escaped
# HTML made in Python, or plain text written with textContent; colours and styles are the app's own.
PLAYER_JS = r"""
function espPlotly(source, version) {
  if (window.Plotly && window.Plotly.version === version) return Promise.resolve(window.Plotly);
  if (typeof source !== "string") return Promise.resolve(source);  // the page's own Plotly.js, or a promise of it
  // Packed (gzip + base64): unpacked once per page and shared by every player on it. A different Plotly.js
  // already on the page (a notebook's own) is put back, so that its figures keep theirs.
  window.__espPlotly = window.__espPlotly || (async () => {
    const bytes = Uint8Array.from(atob(source), (c) => c.charCodeAt(0));
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
  const part = (role) => root.querySelector('[data-role="' + role + '"]');
  const config = {displaylogo: false, responsive: true};
  const PLAY = "▶ Play", PAUSE = "⏸ Pause", INK = "rgba(128,128,128,0.95)";
  // Drawn at once when the step changes; every other view follows a task at a time, so that a key or a click
  // in between is answered (a newer step replaces what is left), and only while it is on screen.
  const URGENT = ["tree", "mask"];
  const STEP_VIEWS = ["tree", "mask", "eye", "lens"];  // a frame's own figures; the other views are the run's
  let Plotly = null, frames = [], revs = [], views = {}, viewsRev = 0, legend = [], focusColor = "#c0007f";
  let shown = -1, told = -1, focus = null, note = "", timer = null, queue = [], pumping = false, runId = 0;
  let offsets = [0];  // text index of each step's first token
  const drawn = new WeakMap(), onScreen = new WeakMap(), watched = new WeakSet(), clickable = new WeakSet();
  const seen = new IntersectionObserver((entries) => {
    for (const e of entries) {
      onScreen.set(e.target, e.isIntersecting);
      if (e.isIntersecting) draw(e.target);
    }
  }, {rootMargin: "300px"});
  const last = () => frames.length - 1;
  const setText = (el, value) => { if (el && el.textContent !== value) el.textContent = value; };
  const setHtml = (role, value) => { const el = part(role); if (el) el.innerHTML = value || ""; };

  // ------------------------------------------------------------ data
  function feed(data) {
    if (!data) return;
    const follow = data.live && (shown < 0 || shown === last());
    if (data.reset) reset();
    if (Array.isArray(data.legend)) { legend = data.legend; drawLegend(); }
    if (typeof data.focus_color === "string") focusColor = data.focus_color;
    const list = Array.isArray(data.frames) ? data.frames.map((f, i) => [i, f]) : Object.entries(data.frames || {});
    let redraw = false;
    for (const [key, f] of list) {
      const i = Number(key);
      if (!Number.isInteger(i) || i < 0 || i > frames.length || !f) continue;  // a run's steps come in order
      if (i === frames.length) {
        frames.push(f); revs.push(0);
        offsets[i + 1] = offsets[i] + (f.tokens || []).length;
        addText(part("text"), i);
      } else {
        frames[i] = Object.assign({}, frames[i], f); revs[i] += 1;
      }
      redraw = redraw || i === shown;
    }
    if (data.views) { views = Object.assign({}, views, data.views); viewsRev += 1; redraw = true; }
    const scrub = part("scrub");
    if (scrub) scrub.max = String(Math.max(last(), 0));
    const want = Number.isInteger(data.show) ? data.show : follow ? last() : Math.max(shown, 0);
    if (frames.length && (want !== shown || data.reset)) show(want);
    else if (redraw || frames.length) { setText(part("label"), "Step " + shown + " of " + last()); schedule(); }
  }

  function reset() {
    pause();
    frames = []; revs = []; views = {}; viewsRev += 1; offsets = [0]; runId += 1;
    shown = -1; told = -1; focus = null; note = "";
  }

  // ------------------------------------------------------------ the text: every token received, each step's in a
  // group of its own, hidden past the shown step
  function textBox() {
    const box = part("text");
    if (box && box.__espRun !== runId) {  // a new run, or a box that appeared since (a tab's content)
      box.__espRun = runId;
      box.textContent = "";
      frames.forEach((_, i) => addText(box, i));
    } else if (box) {
      for (const group of box.children) group.hidden = Number(group.dataset.step) > shown;
    }
    return box;
  }
  function addText(box, i) {
    if (!box || box.__espRun !== runId) return;
    const group = document.createElement("span");
    group.dataset.step = String(i);
    group.hidden = i > shown;
    (frames[i].tokens || []).forEach((t, k) => {
      const token = document.createElement("span");
      const [name, color] = legend[t[1]] || ["", "transparent"];
      token.className = "token";
      token.setAttribute("role", "button");
      token.tabIndex = offsets[i] + k === 0 ? 0 : -1;  // one tab stop; the arrows move between the tokens
      token.dataset.step = String(i);
      token.dataset.k = String(k);
      token.textContent = String(t[0]);
      token.title = name;
      token.style.background = "color-mix(in srgb, " + color + " var(--esp-wash, 50%), transparent)";
      group.append(token);
    });
    box.append(group);
  }
  function drawLegend() {
    const box = part("legend");
    if (!box) return;
    box.textContent = "";
    for (const [name, color] of legend) {
      const item = document.createElement("span");
      item.textContent = name;
      item.style.background = "color-mix(in srgb, " + color + " var(--esp-wash, 50%), transparent)";
      box.append(item, " ");
    }
  }
  function tokenAt(index) {  // [step, place in it] of text index `index`
    for (let s = 0; s < frames.length; s++) if (index >= offsets[s] && index < offsets[s + 1]) return [s, index - offsets[s]];
    return null;
  }

  // ------------------------------------------------------------ a step
  function show(i) {
    if (!frames.length) return;
    i = Math.max(0, Math.min(last(), Math.round(Number(i)) || 0));
    if (i !== shown) { focus = null; note = ""; }
    shown = i;
    const f = frames[i], scrub = part("scrub"), go = part("goto");
    if (scrub) scrub.value = String(i);
    if (go && document.activeElement !== go) go.value = String(i);
    setText(part("label"), "Step " + i + " of " + last());
    setHtml("words", f.words); setHtml("stats", f.stats); setHtml("cost-note", f.cost_note);
    const box = textBox();
    if (box) box.scrollTop = box.scrollHeight;
    showFocus();
    if (i !== told) { told = i; root.dispatchEvent(new CustomEvent("esp-step", {detail: {step: i}})); }
  }

  function focusNode(n, tokenNote) {
    const f = frames[shown];
    if (!f) return;
    focus = Number.isInteger(n) && f.nodes && n >= 0 && n < f.nodes.length ? n : null;
    note = focus === null ? "" : tokenNote || "";
    showFocus();
  }
  function showFocus() {
    const f = frames[shown], select = part("focus");
    if (select && select.__espStep !== runId + ":" + shown) {
      select.__espStep = runId + ":" + shown;
      select.textContent = "";
      select.append(new Option("—", ""));
      (f.nodes || []).forEach((n, k) => select.append(new Option(String(n[0]), String(k))));
    }
    if (select) select.value = focus === null ? "" : String(focus);
    setHtml("focus-note", focus === null ? "" : (note ? note + " " : "") + f.nodes[focus][1]);
    const box = part("text");
    if (box) {
      box.querySelectorAll(".esp-focus").forEach((el) => el.classList.remove("esp-focus"));
      const at = focus === null ? null : f.nodes[focus][4];
      const where = at === null ? null : tokenAt(offsets[shown] + at);
      const group = where && box.querySelector('span[data-step="' + where[0] + '"]');
      if (group && group.children[where[1]]) group.children[where[1]].classList.add("esp-focus");
    }
    schedule();
  }

  // ------------------------------------------------------------ the views
  function schedule() {
    const boxes = [...root.querySelectorAll("[data-figure]")];
    for (const b of boxes) if (!watched.has(b)) { watched.add(b); seen.observe(b); }
    const rank = (b) => { const k = URGENT.indexOf(b.dataset.figure); return k < 0 ? URGENT.length : k; };
    queue = boxes.sort((a, b) => rank(a) - rank(b));
    if (!Plotly) return;
    while (queue.length && rank(queue[0]) < URGENT.length) draw(queue.shift());
    if (pumping || !queue.length) return;
    pumping = true;
    setTimeout(function next() {
      const box = queue.shift();
      if (!box) { pumping = false; return; }
      draw(box);
      setTimeout(next, 0);
    }, 0);
  }

  function draw(box) {
    if (!Plotly || shown < 0) return;
    const key = box.dataset.figure, f = frames[shown];
    const perStep = STEP_VIEWS.includes(key);
    const present = perStep ? !!f[key] : !!(views[key] && views[key].figure);
    const note = root.querySelector('[data-note="' + key + '"]');
    box.hidden = !present;
    if (note) note.hidden = present || !perStep;
    // Hidden (another tab) or off screen: drawn when it comes into view; the step's own tree and attention pattern
    // are drawn at once wherever they are (what the step is, for whoever reads the page: a reader scrolled away).
    const away = !URGENT.includes(key) && onScreen.get(box) !== true;
    if (!present || box.getClientRects().length === 0 || away) return;
    const sig = perStep ? runId + "." + shown + "." + revs[shown] + "." + focus : "v" + viewsRev + "." + shown + "." + focus;
    if (drawn.get(box) === sig) return;
    drawn.set(box, sig);
    const fig = perStep ? stepFigure(key, f) : cursorFigure(views[key], f);
    Plotly.react(box, fig.data, Object.assign({}, fig.layout, {height: box.clientHeight || fig.layout.height}), config);
    if (!clickable.has(box) && typeof box.on === "function") {
      clickable.add(box);
      box.on("plotly_click", (e) => clicked(key, e.points && e.points[0]));
    }
  }

  function stepFigure(key, f) {
    const fig = key === "eye" ? eyeRow(f) : f[key];
    if (focus === null) return fig;
    const node = f.nodes[focus];
    if (key === "tree") {
      for (const t of fig.data) {
        const k = (t.customdata || []).findIndex((d) => Array.isArray(d) && d[4] === focus);
        if (k >= 0) {
          return {layout: fig.layout, data: [...fig.data, {type: "scatter", x: [t.x[k]], y: [t.y[k]], mode: "markers",
            name: "focus: node " + focus, hoverinfo: "skip",
            marker: {size: 28, symbol: "circle-open", line: {width: 4, color: focusColor}}}]};
        }
      }
    } else if (key === "mask" && node[2].length) {
      const shapes = node[2].map((r, k) => ({type: "rect", xref: "paper", x0: 0, x1: 1, yref: "y",
        y0: r + f.shift - 0.5, y1: r + f.shift + 0.5, line: {color: focusColor, width: k ? 2 : 3, dash: k ? "dash" : "solid"}}));
      return {data: fig.data, layout: Object.assign({}, fig.layout, {shapes})};
    } else if (key === "eye" && fig.data.length) {
      const bars = fig.data[0], width = (bars.customdata || []).map((d) => (d[3] === focus ? 2 : 0));
      return {layout: fig.layout, data: [Object.assign({}, bars, {marker: Object.assign({}, bars.marker,
        {line: {color: focusColor, width}})})]};
    }
    return fig;
  }
  function eyeRow(f) {  // the row that decided the focused node, or where the walk stopped
    const node = focus === null ? null : f.nodes[focus];
    const row = node && Number.isInteger(node[3]) ? node[3] : f.eye.length - 1;
    return f.eye[Math.min(row, f.eye.length - 1)];
  }

  // A view of the whole run, with the shown step marked (components/frames.py run_views says how).
  function cursorFigure(view, f) {
    const c = view.cursor, fig = view.figure;
    if (!c || !fig.data.length) return fig;
    let data = fig.data;
    const layout = Object.assign({}, fig.layout), shapes = [];
    if (c.bands) data = [...(f.bands || []), ...(focus !== null && focus === f.end ? f.focus_bands || [] : []), ...data];
    if (c.marks) {
      data = data.slice();
      c.marks.forEach((t, k) => {
        const [x, y] = (f.cursor && f.cursor.marks[k]) || [[], []];
        if (data[t]) data[t] = Object.assign({}, data[t], {x, y});
      });
    }
    if (c.bar) {
      const bar = data[0], on = f.cursor ? f.cursor.accepted : null;
      data = [Object.assign({}, bar, {text: bar.x.map((x) => (x === on ? c.bar.text : "")),
        marker: Object.assign({}, bar.marker, {color: bar.x.map((x) => (x === on ? c.bar.on : c.bar.off))})}),
        ...data.slice(1)];
    }
    if (c.line) shapes.push({type: "line", xref: c.line.xref, yref: c.line.yref, x0: f.step, x1: f.step, y0: 0, y1: 1,
      line: {color: INK, width: 1, dash: "dot"}});
    if (c.cells) {
      for (let k = Math.max(offsets[shown], c.cells.first); k < offsets[shown + 1]; k++) {
        const row = Math.floor((k - c.cells.first) / c.cells.wrap), col = (k - c.cells.first) % c.cells.wrap;
        shapes.push({type: "rect", xref: "x", yref: "y", x0: col - 0.5, x1: col + 0.5, y0: row - 0.5, y1: row + 0.5,
          line: {color: focusColor, width: 2}});
      }
    }
    layout.shapes = shapes;
    const w = c.window;
    if (w && w.hi - w.lo + 1 > w.size) {
      const lo = Math.max(w.lo, Math.min(f.step - w.size + 1, w.hi - w.size + 1)) - 0.5;
      layout[w.axis] = Object.assign({}, layout[w.axis], {range: [lo, lo + w.size], autorange: false});
    }
    return {data, layout};
  }

  // A click in a view focuses what it names: a tree node, a block row's node, the node whose masks a lens cell
  // reads, a draft checked in the eye; a token of the strip or the text goes to the step that emitted it.
  function clicked(key, p) {
    const f = frames[shown], d = p && p.customdata;
    if (!p) return;
    if (key === "tree" && Array.isArray(d)) focusNode(d[4]);
    else if (key === "lens" && Array.isArray(d)) focusNode(d[1]);
    else if (key === "eye" && Array.isArray(d) && d[3] >= 0) focusNode(d[3]);
    else if (key === "commit" && Array.isArray(d)) goToken(d[1]);
    else if (key === "mask") {
      const row = /^(\d+):/.exec(String(p.y === undefined ? "" : p.y));
      if (row) focusNode(f.nodes.findIndex((n) => n[2].includes(Number(row[1]))));
    }
  }
  function goToken(index) {
    const at = tokenAt(index);
    if (!at) return;
    const t = frames[at[0]].tokens[at[1]];
    pause();
    show(at[0]);
    focusNode(t[2], t[3]);
  }

  // ------------------------------------------------------------ playback
  function speed() {
    const box = part("speed"), value = box ? Number(box.value) : NaN;
    if (!(value > 0)) return 1000 / opts.period;
    return Math.min(Math.max(value, Number(box.min) || value), Number(box.max) || value);
  }
  function pause() {
    clearTimeout(timer); timer = null;
    setText(part("play"), PLAY); setText(part("pace"), "");
  }
  function play() {
    if (timer) return pause();
    if (shown >= last()) show(0);
    setText(part("play"), PAUSE);
    let due = performance.now() + 1000 / speed();  // when the next step is due
    const ticks = [];
    const tick = () => {
      show(shown + 1);
      if (shown >= last()) return pause();
      const now = performance.now();
      ticks.push(now);
      if (ticks.length > 8) ticks.shift();
      // Steps are never skipped: a device that draws slower than asked plays slower, and says so (a step
      // drawn late does not make the next ones hurry).
      const pace = ticks.length > 3 ? (1000 * (ticks.length - 1)) / (now - ticks[0]) : speed();
      setText(part("pace"), pace < 0.85 * speed() ? "playing slower: " + pace.toFixed(1) + " steps/s" : "");
      due = Math.max(due + 1000 / speed(), now);
      timer = setTimeout(tick, due - now);
    };
    timer = setTimeout(tick, due - performance.now());
  }

  // ------------------------------------------------------------ controls (found when used: on the app's page they
  // are drawn by the page after the player starts)
  const role = (e) => { const el = e.target.closest && e.target.closest("[data-role]"); return el && root.contains(el) ? el : null; };
  root.addEventListener("click", (e) => {
    const el = role(e);
    if (!el) return;
    const r = el.dataset.role;
    if (r === "prev" || r === "next") { pause(); show(shown + (r === "next" ? 1 : -1)); }
    else if (r === "play") play();
    else if (r === "theme") root.classList.toggle("dark");
    else if (r === "text") {
      const token = e.target.closest(".token");
      if (token) goToken(offsets[Number(token.dataset.step)] + Number(token.dataset.k));
    }
  });
  root.addEventListener("input", (e) => {
    const el = role(e);
    if (el && el.dataset.role === "scrub") { pause(); show(Number(el.value)); }
  });
  root.addEventListener("change", (e) => {
    const el = role(e);
    if (!el) return;
    if (el.dataset.role === "goto" && el.value !== "") { pause(); show(Number(el.value)); }
    else if (el.dataset.role === "focus") focusNode(el.value === "" ? null : Number(el.value));
  });
  root.addEventListener("keydown", (e) => {
    const el = role(e);
    if (el && el.dataset.role === "goto" && e.key === "Enter") { pause(); show(Number(el.value)); return; }
    const token = el && el.dataset.role === "text" && e.target.closest(".token");
    if (!token) return;
    const move = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1}[e.key];
    if (move) {  // the tokens' own keys: to the next or previous token shown, not another step
      e.preventDefault();
      const tokens = [...el.querySelectorAll("span[data-step]:not([hidden]) > .token")];
      const next = tokens[Math.max(0, Math.min(tokens.length - 1, tokens.indexOf(token) + move))];
      token.tabIndex = -1; next.tabIndex = 0; next.focus();
    } else if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      token.click();
    }
  });
  function onKey(e) {
    if (e.defaultPrevented || (e.target.matches && e.target.matches("input:not([type=range]), textarea, select, [contenteditable]"))) return;
    if (e.key === " " && e.target.closest && e.target.closest("button")) return;  // Space presses the focused button
    const keys = {ArrowRight: "next", PageDown: "next", ArrowLeft: "prev", PageUp: "prev", " ": "play"};
    const button = keys[e.key] && part(keys[e.key]);
    if (button) { e.preventDefault(); e.stopPropagation(); button.click(); }
  }
  if (opts.keys) opts.keys.addEventListener("keydown", onKey);
  if (part("theme") && darkPage()) root.classList.add("dark");

  function showFigures() {
    const box = part("figures");
    if (!box) return;
    for (const {title, figure} of run.figures || []) {
      const plot = document.createElement("div"), head = document.createElement("h3");
      head.textContent = title;
      plot.setAttribute("role", "figure");
      plot.setAttribute("aria-label", title);
      box.append(head, plot);
      Plotly.newPlot(plot, figure.data, figure.layout, config);
    }
  }
  root.espShow = show;
  root.espPause = pause;
  root.esp = {show, feed, focus: focusNode, step: () => shown, plotly: () => Plotly, pause};
  feed(Object.assign({reset: true}, run));
  espPlotly(opts.plotly, opts.version).then((p) => { Plotly = p; schedule(); showFigures(); }, (e) => {
    setText(part("words"), "This browser could not load Plotly.js (" + e + ").");
  });
  return () => { pause(); seen.disconnect(); if (opts.keys) opts.keys.removeEventListener("keydown", onKey); };
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
<script type="application/json" id="esp-run">{{run}}</script>
<script type="application/json" id="esp-figures">{{figures}}</script>
<script type="application/json" id="esp-first">{{first}}</script>
<script>{{script}}
const data = (id) => JSON.parse(document.getElementById(id).textContent);
const run = Object.assign(data("esp-run"), {figures: data("esp-figures")}, data("esp-first"));
espPlayer(document.body, run, {plotly: document.getElementById("esp-plotly").textContent, version: {{version}},
                               period: {{period}}, keys: document});
espFirstMinute(document.body, run);
</script>
</body></html>
"""
