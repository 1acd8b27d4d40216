"""The first minute, inside the player (components/lecture.py): one step told as a story whose phases light the
views they name, a predict mode in which the learner marks the drafts they think the verifier keeps before the
verdict shows, and a text equivalent of every figure for screen readers.

It plugs into the player through two hooks the player provides: `root.espShow(i)` shows step i, and the
player dispatches `esp-step` (detail: {step}) on its root after every step it shows. The views it lights or
veils are the player's boxes by key (tree, mask, eye, lens, text, words), found by data-figure or id in the root unless
`opts.views` maps a key to another element or element id (a page with other ids). Every text it shows comes from
the run data as JSON and is set as text, never as markup. A page whose run changes (the app's) hands each new
run's data to `root.espFirst.set(run)`, and hears the story open and close through the `esp-story` event.
"""
from __future__ import annotations

import html
from typing import Mapping, Sequence

from esp.trace import StepTrace

from . import palette
from .common import as_steps
from .describe import step_texts
from .predict import predict_data
from .story import story


def story_run(steps: Sequence[StepTrace | dict], meta: Mapping, actions: Sequence[str] = ("play",)) -> dict:
    """The keys this module adds to the player's run data: `story` (None when the run has no step to tell;
    `actions` are offered at its end, story.ACTIONS), `predict` and `alt` (per step, each figure view's text
    equivalent)."""
    steps = as_steps(steps)
    return {"story": story(steps, meta, actions=actions), "predict": predict_data(steps, meta),
            "alt": step_texts(steps)}


def story_markup(told: dict | None) -> str:
    """The story's panel (its text and buttons, when the run has a story), the predict toggle in the same row,
    and the predict panel."""
    story_buttons = ""
    if told:
        actions = "".join(f'<button id="story-{html.escape(a["id"])}" data-action="{html.escape(a["id"])}" hidden>'
                          f'{html.escape(a["label"])}</button>' for a in told["actions"])
        story_buttons = (f'<button id="story-back">◀ back</button><button id="story-next">next ▶</button>{actions}'
                         f'<button id="story-open" hidden>Tell the story of step {int(told["step"])}</button>')
    closer = '<button id="story-close" aria-label="Close the story">✕</button>' if told else ""
    text = STORY_TEXT if told else ""
    return (f'<section id="story-panel" aria-label="One step, told as a story">{text}\n'
            f' <div class="fm-controls">{story_buttons}<button id="predict" aria-pressed="false" '
            f'title="Guess which drafts the verifier keeps before it shows">Guess first</button>{closer}</div>\n'
            f'</section>\n{PREDICT_PANEL}')


STORY_TEXT = """<div id="story" aria-live="polite"><h2 id="story-title"></h2><p id="story-text"></p></div>"""

PREDICT_PANEL = """<section id="predict-panel" aria-labelledby="predict-title" hidden>
 <h2 id="predict-title">Which drafts will the verifier keep?</h2>
 <p id="guess-ask"></p>
 <div id="guess-tree" role="group" aria-label="The draft tree: mark the drafts you think are kept"></div>
 <div class="fm-controls"><button id="reveal">Reveal</button><button id="guess-next">next step ▶</button></div>
 <p id="guess-result" aria-live="polite"></p>
 <ul id="guess-hints"></ul>
 <p id="guess-score"></p>
 <p class="note" id="guess-notice"></p>
</section>"""

# Verdict colours and the focus colour from the page's palette (components/palette.py); in dark mode a lighter
# focus pink, so that the outline keeps 3:1 against the dark background (WCAG 2.2, non-text contrast).
STORY_CSS = """
.esp-player #story-panel { margin: .3em 0; }
.esp-player.esp-story-on #story-panel { position: sticky; top: var(--esp-bar, 0px); z-index: 2; background: inherit;
  border: 1px solid rgba(128,128,128,.6); border-radius: 8px; padding: .2em .8em .4em; }
.esp-player #story-title { font-size: 1em; margin: .3em 0; }
.esp-player #figures h3 { font-size: 1em; }
.esp-player #story-text { margin: .2em 0 .4em; line-height: 1.45; }
.esp-player .fm-controls { display: flex; gap: .5em; align-items: center; flex-wrap: wrap; }
.esp-player #story-close { position: absolute; top: .3em; right: .4em; padding: .1em .5em; }
.esp-player #story-title { padding-right: 2.2em; }
.esp-player .fm-controls [aria-disabled="true"] { opacity: .6; cursor: default; }
.esp-player #predict[aria-pressed="true"], #first-minute .fm-controls > #predict[aria-pressed="true"] {
  background: {{mark}}; color: #fff; border-color: {{mark}}; }
/* Pressed or not at once: a fade through mid tones would show text that does not read on its background. */
.esp-player #predict, #first-minute .fm-controls > button { transition: none; }
.esp-player.esp-story-on #words { display: none; }
.esp-player .esp-veiled { visibility: hidden; }
.esp-player .esp-spotlight { outline: 3px solid {{focus}}; outline-offset: 4px; border-radius: 6px; }
.esp-player :focus-visible { outline: 3px solid {{focus}}; outline-offset: 2px; }
.esp-player.dark .esp-spotlight, .esp-player.dark :focus-visible { outline-color: {{focus_dark}}; }
.esp-player [data-figure], .esp-player #text { scroll-margin-top: var(--esp-sticky, 0px); }
.esp-player #predict-panel { border: 1px solid rgba(128,128,128,.6); border-radius: 8px; padding: .2em .8em .5em;
  margin: .3em 0; }
.esp-player #predict-title { font-size: 1em; margin: .3em 0; }
.esp-player #guess-tree { display: flex; flex-direction: column; gap: .4em; margin: .4em 0; }
.esp-player .guess-level { display: flex; flex-wrap: wrap; gap: .35em; align-items: center; }
.esp-player .guess-level > span { font-size: .85em; min-width: 7em; }
.esp-player .guess-node { font-family: ui-monospace, Menlo, monospace; font-size: .9em; padding: .25em .5em;
  border: 2px solid currentColor; border-radius: 6px; background: transparent; color: inherit; white-space: pre;
  cursor: pointer; }
.esp-player .guess-node .tok { display: inline-block; max-width: 9em; overflow: hidden; text-overflow: ellipsis;
  vertical-align: bottom; }
.esp-player .guess-node[aria-pressed="true"] { background: {{mark}}; border-color: {{mark}}; color: #fff; }
.esp-player .guess-node.kept { border: 3px solid {{kept}}; }
.esp-player .guess-node.lost { border: 3px dashed {{lost}}; }
.esp-player #guess-hints { margin: .2em 0; padding-left: 1.2em; }
@media (prefers-reduced-motion: no-preference) {
  .esp-player .esp-spotlight { transition: outline-color .3s; }
}
@media (max-width: 600px) {
  /* A phone: the title, the prompt and the story in smaller type, so that the tree starts on the first screen. */
  body.esp-player h1 { font-size: 1.05em; margin: .3em 0; overflow-wrap: anywhere; }
  body.esp-player main > p { margin: .4em 0; font-size: .95em; }
  .esp-player #story-text { font-size: .95em; line-height: 1.35; }
}
"""
STORY_CSS = (STORY_CSS.replace("{{mark}}", palette.SOURCES["esp"]).replace("{{kept}}", palette.ACCEPTED)
             .replace("{{lost}}", palette.REJECTED).replace("{{focus}}", palette.FOCUS)
             .replace("{{focus_dark}}", palette.FOCUS_DARK))

# espFirstMinute(root, run, opts): the story (run.story), predict mode (run.predict) and the figures' text
# equivalents (run.alt) on a player in `root` (espPlayer's, which provides root.espShow and the esp-step event).
# opts.views maps a view key to its element (or its id) where the ids differ; opts.actions[id] runs a story's
# closing action ("play" has its default here; a page with a prompt box adds "prompt"). It sets root.espFirst:
# set(run) takes another run's data (a page whose run changes), story(open) and predict(on) turn them on or off,
# open() says whether the story is open; `root` gets the event "esp-story" ({detail: {open}}) when the story
# opens or closes. espScore is the one scoring rule of a guess.
STORY_JS = r"""
function espScore(marked, kept) {
  // A guess against the verdict: the drafts marked and kept (right), marked but rejected (wrong), kept but not
  // marked (missed); exact when the marks are exactly the kept path.
  const m = new Set(marked), k = new Set(kept);
  const right = [...m].filter((i) => k.has(i)), wrong = [...m].filter((i) => !k.has(i));
  const missed = [...k].filter((i) => !m.has(i));
  return {right, wrong, missed, exact: !wrong.length && !missed.length};
}

function espFirstMinute(root, run, opts) {
  opts = opts || {};
  const $ = (id) => root.querySelector("#" + id);
  const view = (key) => {
    const named = opts.views && opts.views[key];
    if (named) return typeof named === "string" ? document.getElementById(named) : named;
    return root.querySelector('[data-figure="' + key + '"]') || $(key);
  };
  let STORY = run.story, PREDICT = run.predict, ALT = run.alt || [];
  const VEILED = ["tree", "mask", "eye", "lens", "text", "words"];
  let step = null;
  const story = {open: !!STORY, phase: 0};
  const actionButtons = [...root.querySelectorAll("#story-panel [data-action]")];
  const guess = {on: false, marks: {}, results: {}, cursor: 0};

  // Sticky parts: the story sits under the player's bar; a lit view scrolls in below both.
  function sticky() {
    const bar = $("bar"), panel = $("story-panel");
    const barH = bar ? bar.offsetHeight : 0;
    root.style.setProperty("--esp-bar", barH + "px");
    root.style.setProperty("--esp-sticky", barH + (story.open && panel ? panel.offsetHeight : 0) + 8 + "px");
  }
  if (window.ResizeObserver) new ResizeObserver(sticky).observe($("bar") || root);

  // Each figure is named by its first words ("Draft tree, step 7") and described by the whole text, kept in a
  // hidden paragraph after it: a screen reader reads it as the figure's description (aria-describedby reads
  // hidden text), and it adds no words to the screen.
  function describe(i) {
    const alt = ALT[i] || {};
    for (const key of Object.keys(alt)) {
      const box = view(key);
      if (!box) continue;
      let text = $("alt-" + key);
      if (!text) {
        text = document.createElement("p");
        text.id = "alt-" + key;
        text.hidden = true;
        box.after(text);
        box.setAttribute("role", "figure");
        box.setAttribute("aria-describedby", text.id);
      }
      box.setAttribute("aria-label", alt[key].split(":")[0]);
      text.textContent = alt[key];
    }
  }

  function disable(el, off) { if (el) el.setAttribute("aria-disabled", off ? "true" : "false"); }
  function light(key, scroll) {
    for (const el of root.querySelectorAll(".esp-spotlight")) el.classList.remove("esp-spotlight");
    const el = key && view(key);
    if (!el) return;
    el.classList.add("esp-spotlight");
    // At once, not gliding: until the page has scrolled, the story's panel is not yet stuck under the bar and
    // moves with the page, so a glide would carry its next button from under the pointer for as long as it lasts
    // (a click in that time lands on the panel and is lost).
    if (scroll) el.scrollIntoView({block: "nearest"});
  }

  function tell(scroll) {
    const phases = STORY.phases, p = phases[story.phase], last = story.phase === phases.length - 1;
    $("story-title").textContent = `Step ${STORY.step} · ${story.phase + 1} of ${phases.length} · ${p.name}`;
    $("story-text").textContent = p.text;
    disable($("story-back"), story.phase === 0);
    disable($("story-next"), last);
    for (const b of actionButtons) b.hidden = !last;
    light(p.view, scroll);
    sticky();
  }
  // The story's parts shown or hidden as it is open or not (or the run has none to tell).
  function storyParts() {
    for (const id of ["story", "story-back", "story-next", "story-close"]) if ($(id)) $(id).hidden = !story.open;
    if (!story.open) for (const b of actionButtons) b.hidden = true;
    if ($("story-open")) {
      $("story-open").hidden = story.open || !STORY;
      if (STORY) $("story-open").textContent = "Tell the story of step " + STORY.step;
    }
    root.classList.toggle("esp-story-on", story.open);
  }
  function openStory(open) {
    if (!STORY || open === story.open && !open) return;
    story.open = open;
    storyParts();
    root.dispatchEvent(new CustomEvent("esp-story", {detail: {open}}));
    if (open) {
      if (guess.on) setPredict(false);
      story.phase = 0;
      if (step !== STORY.step) root.espShow(STORY.step);
      tell(false);
    } else {
      light(null);
      sticky();
    }
  }
  function phase(d) {
    const n = story.phase + d;
    if (n < 0 || n >= STORY.phases.length) return;
    story.phase = n;
    tell(true);
    if (story.phase === STORY.phases.length - 1 && actionButtons.length) actionButtons[0].focus();
  }
  const actions = Object.assign({
    play: () => { openStory(false); root.espShow(0); const play = $("play"); if (play) play.click(); },
  }, opts.actions || {});
  if ($("story-next")) {
    $("story-back").onclick = () => phase(-1);
    $("story-next").onclick = () => phase(1);
    $("story-close").onclick = () => { openStory(false); $("story-open").focus(); };
    $("story-open").onclick = () => { openStory(true); $("story-next").focus(); };
    for (const b of actionButtons) b.onclick = () => actions[b.dataset.action]();
    // Inside the story, the arrow keys turn its pages (not the player's steps).
    $("story-panel").addEventListener("keydown", (e) => {
      const d = story.open && {ArrowRight: 1, ArrowLeft: -1}[e.key];
      if (d) { e.preventDefault(); e.stopPropagation(); phase(d); }
    });
  }

  // ---- predict mode
  const quote = (t) => "“" + t + "”";
  const names = (d, ids) => ids.map((i) => quote(d.nodes.find((n) => n.i === i).word)).join(", ") || "none";
  function veil(on) {
    for (const key of VEILED) {
      for (const el of [view(key), $("alt-" + key)]) if (el) el.classList.toggle("esp-veiled", on);
    }
  }
  function marksOf(i) { return guess.marks[i] || (guess.marks[i] = new Set()); }
  function toggle(d, node) {
    // The verifier keeps one path from the root: marking a draft marks it and the drafts above it (and clears
    // any other branch); unmarking it clears it and the drafts below it.
    const marks = marksOf(step), byI = new Map(d.nodes.map((n) => [n.i, n]));
    const upFrom = (i) => {
      const out = [];
      for (let a = byI.get(i); a && a.i !== 0; a = byI.get(a.parent)) out.push(a.i);
      return out;
    };
    if (marks.has(node.i)) { for (const i of [...marks]) if (upFrom(i).includes(node.i)) marks.delete(i); }
    else { marks.clear(); upFrom(node.i).forEach((i) => marks.add(i)); }
  }

  function drawTree(d, result) {
    const box = $("guess-tree"), marks = marksOf(step), kept = new Set(d.kept);
    const focused = box.contains(document.activeElement);
    box.textContent = "";
    const nodes = d.nodes.filter((n) => n.i !== 0);
    const groups = new Map();
    for (const n of nodes) {
      const key = n.depth + ":" + (n.depth > 1 ? n.parent : 0);
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(n);
    }
    const buttons = [];
    for (const [key, level] of groups) {
      const row = document.createElement("div"), head = document.createElement("span");
      const [depth, parent] = key.split(":").map(Number);
      row.className = "guess-level";
      row.setAttribute("role", "group");
      head.textContent = depth === 1 ? "Next word:" : `then, after ${quote(d.nodes.find((n) => n.i === parent).word)}:`;
      row.setAttribute("aria-label", head.textContent);
      row.append(head);
      for (const n of level) {
        const b = document.createElement("button"), mark = marks.has(n.i);
        b.className = "guess-node";
        b.dataset.node = n.i;
        b.setAttribute("aria-pressed", mark ? "true" : "false");
        let verdict = "";
        if (result) {
          b.classList.add(kept.has(n.i) ? "kept" : "lost");
          verdict = kept.has(n.i) ? " ✓ kept" : " ✗";
          b.setAttribute("aria-disabled", "true");
        }
        const tok = document.createElement("span");
        tok.className = "tok";
        tok.textContent = n.text;
        b.append((mark ? "☑ " : "☐ "), tok, " " + n.cum.toFixed(2) + verdict);
        b.title = n.text + ": " + n.cum.toFixed(2) + " (how sure the masks were)";
        const said = result ? (kept.has(n.i) ? ", kept" : ", rejected") : "";
        b.setAttribute("aria-label", quote(n.word) + ", " + n.cum.toFixed(2) + said);
        b.tabIndex = -1;
        b.onclick = () => {
          if (result) return;
          guess.cursor = buttons.indexOf(b);
          toggle(d, n);
          drawTree(d, null);
        };
        buttons.push(b);
        row.append(b);
      }
      box.append(row);
    }
    guess.cursor = Math.min(guess.cursor, buttons.length - 1);
    if (buttons.length) buttons[Math.max(0, guess.cursor)].tabIndex = 0;
    if (focused && buttons.length) buttons[guess.cursor].focus();
    box._buttons = buttons;
    box._nodes = nodes;
  }
  // One tab stop for the tree; the arrows move between drafts (left / right along the order, up to the draft
  // above, down to the first below), Enter or Space marks, as on any button.
  $("guess-tree").addEventListener("keydown", (e) => {
    const box = $("guess-tree"), buttons = box._buttons || [], nodes = box._nodes || [];
    if (!buttons.length) return;
    let c = guess.cursor;
    const here = nodes[c];
    if (e.key === "ArrowRight") c = Math.min(buttons.length - 1, c + 1);
    else if (e.key === "ArrowLeft") c = Math.max(0, c - 1);
    else if (e.key === "ArrowUp") c = Math.max(0, nodes.findIndex((n) => n.i === here.parent));
    else if (e.key === "ArrowDown") { const k = nodes.findIndex((n) => n.parent === here.i); if (k >= 0) c = k; }
    else if (e.key === "Home") c = 0;
    else if (e.key === "End") c = buttons.length - 1;
    else if (e.key === " " || e.key === "Enter") { e.stopPropagation(); return; }
    else return;
    e.preventDefault();
    e.stopPropagation();
    buttons[guess.cursor].tabIndex = -1;
    guess.cursor = c;
    buttons[c].tabIndex = 0;
    buttons[c].focus();
  });

  function score() {
    const all = Object.values(guess.results);
    if (!all.length) return "No guess checked yet.";
    const exact = all.filter((r) => r.exact).length, found = all.reduce((s, r) => s + r.right.length, 0);
    const kept = all.reduce((s, r) => s + r.right.length + r.missed.length, 0);
    const wrong = all.reduce((s, r) => s + r.wrong.length, 0);
    return "Score: " + exact + " of " + all.length + " steps exactly right · found " + found + " of " + kept +
      " kept drafts · " + wrong + " wrong mark" + (wrong === 1 ? "" : "s") + ".";
  }
  function verdict(d, r) {
    const own = d.own ? ", then its own " + quote(d.own) + " (" + d.kind + ")" : "";
    const head = r.exact ? "Right! " : "";
    const kept = (d.kept.length ? "The verifier kept " + names(d, d.kept) : "The verifier kept no draft") + own;
    let mine = "";
    if (!r.exact) {
      const parts = [];
      if (r.right.length) parts.push("right: " + names(d, r.right));
      if (r.wrong.length) parts.push("wrong: " + names(d, r.wrong));
      if (r.missed.length) parts.push("missed: " + names(d, r.missed));
      mine = " Your marks, " + (parts.join("; ") || "none") + ".";
    }
    return head + kept + "." + mine;
  }
  function showGuess() {
    const i = step, d = PREDICT && PREDICT.steps[i], panel = $("predict-panel");
    if (guess.drawn !== i) { guess.drawn = i; guess.cursor = 0; }
    panel.hidden = !guess.on;
    if (!guess.on) { veil(false); return; }
    $("guess-notice").textContent = PREDICT.notice;
    $("guess-score").textContent = score();
    $("guess-hints").textContent = "";
    if (!d) {
      $("guess-ask").textContent = `Step ${i} has no draft to check (the prefill reads the prompt). Go on.`;
      $("guess-tree").textContent = "";
      $("guess-result").textContent = "";
      disable($("reveal"), true);
      veil(false);
      return;
    }
    const r = guess.results[i];
    $("guess-ask").textContent = `Step ${i}, after “${d.before}”: mark the drafts you think the model keeps` +
      (r ? "." : ", then press Reveal. The verdict views are hidden until then.");
    drawTree(d, r);
    disable($("reveal"), !!r);
    $("guess-result").textContent = r ? verdict(d, r) : "";
    for (const h of r ? d.hints : []) {
      const li = document.createElement("li");
      li.textContent = h;
      $("guess-hints").append(li);
    }
    veil(!r);
  }
  function reveal() {
    const d = PREDICT.steps[step];
    if (!d || guess.results[step]) return;
    guess.results[step] = espScore([...marksOf(step)], d.kept);
    showGuess();
    $("guess-next").focus();
  }
  function nextGuessable(from) {
    for (let i = from; i < PREDICT.steps.length; i++) if (PREDICT.steps[i]) return i;
    return from;
  }
  function setPredict(on, at) {
    guess.on = on;
    $("predict").setAttribute("aria-pressed", on ? "true" : "false");
    if (on) {
      // From the story (whose step is told already), guessing starts at the run's first drafts; otherwise on the
      // step shown (a presenter's, in a room), or the next one with drafts.
      if (story.open) { openStory(false); at = 1; }
      if (root.espPause) root.espPause();
      const target = at !== undefined ? nextGuessable(at) : (PREDICT.steps[step] ? step : nextGuessable(step + 1));
      if (target !== step) { root.espShow(target); return; }
    }
    showGuess();
  }
  $("predict").onclick = () => { if (PREDICT) setPredict(!guess.on); };
  $("reveal").onclick = reveal;
  $("guess-next").onclick = () => {
    root.espShow(nextGuessable(step + 1));
    const b = $("guess-tree").querySelector("[tabindex='0']");
    if (b) b.focus();
  };

  // Another run's data (the page opened another run): its story, guesses and texts; marks and scores start over.
  function set(next) {
    if (story.open && !next.story) openStory(false);
    STORY = next.story || null; PREDICT = next.predict || null; ALT = next.alt || [];
    guess.marks = {}; guess.results = {}; guess.drawn = null;
    $("predict").hidden = !PREDICT;
    storyParts();
    if (guess.on && !PREDICT) setPredict(false);
    else if (guess.on) showGuess();
    if (step !== null) describe(step);
  }
  root.espFirst = {set, story: openStory, predict: (on) => { if (PREDICT || !on) setPredict(on); },
                   open: () => story.open};

  function onStep(i) {
    if (story.open && step === null && i !== STORY.step) { step = i; root.espShow(STORY.step); return; }
    step = i;
    describe(i);
    if (story.open && i !== STORY.step) openStory(false);
    else if (story.open) tell(false);
    if (guess.on) showGuess();
  }
  root.addEventListener("esp-step", (e) => onStep(e.detail.step));
  storyParts();
  if (!PREDICT) $("predict").hidden = true;
  // A player that showed its first step before this script was attached: that step, as if just shown.
  if (root.esp && root.esp.step() >= 0) onStep(root.esp.step());
}
"""
