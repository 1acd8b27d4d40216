// ESP Explorer's page script (loaded by app.py through launch(head=...), after the player's, components/lecture.py
// PLAYER_JS): the page's player, fed what the server sends, presenter keys, the URL state and the run's link, Copy
// link, present mode, the tour's spotlight, the light / dark switch, the phone layout's toggle, the tree's keys,
// and a lesson room's follower letting go of the presenter when its student picks a step. Elements it expects
// (elem_ids in app.py): #views (the player's root), #next, #prev, #play (the player's buttons), #copy-link, #theme
// (buttons), #link-note, #controls (the controls column), #tree-plot, #follow (the room's box), and the views a
// tour stop names. The first screen (issue 47): the opening run's story on the player (components/story_player.py
// espFirstMinute, in #first-minute), with the rest of the page (the dashboard: assets/first.css hides it while
// <html> has the class esp-first) one click away (#dashboard). Python wiring calls window.espExplorer.* from event `js=` callbacks; nothing here sends
// anything to the server (a step picked, a click on a figure, a key: all drawn by the player).
(() => {
  const TYPING = "input:not([type=range]), textarea, select, [contenteditable]:not([contenteditable=false])";
  const KEYS = { ArrowRight: "next", PageDown: "next", ArrowLeft: "prev", PageUp: "prev", " ": "play" };
  const SPOT = "esp-spotlight", TOUR_LIT = "esp-tour-lit";
  // While the first screen tells its story, the arrows turn its pages (and Space does nothing) instead of stepping
  // the run.
  const STORY_KEYS = { next: "story-next", prev: "story-back" };
  // The player's views as the story names them (components/story.py VIEWS, and predict mode's), by element id.
  const VIEWS = { tree: "tree-plot", mask: "mask-plot", eye: "eye-plot", lens: "lens-plot", text: "text-view",
    words: "step-words" };
  // The address's keys that name the run on screen (explorer/recipe.py RUN_KEYS: a shipped trace, or a run's
  // recipe); "step" follows the shown step, and only with a run to belong to.
  const RUN_KEYS = ["trace", "prompt", "model", "method", "k", "bc", "lam", "tree", "init", "dtype", "mode",
    "temperature", "top_p", "seed", "max_new", "layouts"];
  const byId = (id) => document.getElementById(id);
  const smooth = () => (matchMedia("(prefers-reduced-motion: reduce)").matches ? "auto" : "smooth");

  // The page opens on the story unless its link names something the story is not: a step, a tab, a room, a run's
  // recipe, another shipped run, present mode, or the dashboard itself (dashboard=1).
  const params = new URLSearchParams(location.search);
  let first = !["step", "tab", "room", "present", "dashboard", ...RUN_KEYS.filter((k) => k !== "trace")]
    .some((key) => params.has(key)) && [null, window.ESP_OPENING].includes(params.get("trace"));
  let told = false;  // the opening run's story was opened once
  document.documentElement.classList.toggle("esp-first", first);

  // A presenter's remote sends these keys; typed in a text box they keep their usual meaning, and a key that a
  // focused part of the page already used (the text's tokens, the tree's nodes) is not a step too.
  const ours = (e) => KEYS[e.key] && !e.defaultPrevented
    && !(e.ctrlKey || e.metaKey || e.altKey || e.target.closest?.(TYPING));
  document.addEventListener("keydown", (e) => {
    const telling = first && byId("views")?.espFirst?.open();
    const button = ours(e) && byId(telling ? STORY_KEYS[KEYS[e.key]] : KEYS[e.key]);
    if (!button) return;
    e.preventDefault();
    if (!e.repeat || e.key !== " ") button.click();
  });
  // A focused button clicks itself when Space is released: with Space taken for play / pause above, that
  // would be a second action (a focused "next" would also step), so the release does nothing.
  document.addEventListener("keyup", (e) => {
    if (e.key === " " && ours(e) && byId(KEYS[e.key])) e.preventDefault();
  }, true);

  function query(state, params = new URLSearchParams(location.search)) {
    for (const [key, value] of Object.entries(state)) {
      if (value === null || value === undefined || value === "") params.delete(key);
      else params.set(key, String(value));
    }
    return params.toString();
  }

  function write(qs) {
    history.replaceState(null, "", qs ? `${location.pathname}?${qs}${location.hash}` : location.pathname);
    if (window.parent !== window) window.parent.postMessage({ queryString: qs }, "https://huggingface.co");
    return qs;
  }

  const api = {
    // Write step / tab / trace into the address bar in place (no history entry). On a Space the page runs in
    // an iframe, so the Space's own page is told too (huggingface.co/docs/hub/spaces-handle-url-parameters).
    setState(state) {
      return write(query(state));
    },

    // The run on screen: its link's query from the server ("trace=..." or its recipe), or "" when it has none
    // (a run still decoding, one opened from a file, one too long for a link: #link-note says why). Its keys
    // replace the last run's in the address, with the shown step; without a link the address names no run and
    // no step, so that it never opens another run at this step.
    run: null,
    step: null,
    setRun(runQuery) {
      api.run = runQuery || "";
      if (!api.linked) return null;
      const params = new URLSearchParams(location.search);
      [...RUN_KEYS, "step"].forEach((key) => params.delete(key));
      new URLSearchParams(api.run).forEach((value, key) => params.set(key, value));
      if (api.run && api.step !== null && !first) params.set("step", String(api.step));
      return write(params.toString());
    },
    showStep(step) {
      api.step = step;
      return api.linked && api.run && !first ? api.setState({ step }) : null;
    },

    // The first screen: true while the page shows the story alone. dashboard() opens the whole page (the story
    // closes; the address takes the shown step, as on the dashboard any step does).
    first: () => first,
    dashboard() {
      if (!first) return false;
      first = false;
      document.documentElement.classList.remove("esp-first");
      const root = byId("views");
      if (root?.espFirst?.open()) root.espFirst.story(false);
      if (api.step !== null) api.showStep(api.step);
      // The figures drawn at the story's width take their columns' width now.
      requestAnimationFrame(() => window.dispatchEvent(new Event("resize")));
      return true;
    },

    // The page's player: started with the first message from the server (the hidden #player-data's watch calls
    // feed; app.py FEED_JS), on the views' column, drawing with the Plotly.js app.py serves (window.ESP_PLOTLY).
    player: null,
    feed(data) {
      if (data) pending.push(data);
      if (!api.player && !startPlayer()) {  // the page is still being drawn: soon
        if (!waiting) waiting = setTimeout(() => { waiting = null; api.feed(null); }, 50);
        return false;
      }
      while (pending.length) {
        const next = pending.shift();
        moving = !!next.room;  // the room moved this page: its student did not pick the step
        api.player.feed(next);
        if (next.reset || "predict" in next) firstMinute(next);
        moving = false;
      }
      return true;
    },
    // The step the player shows (What-if, Export and the room send it: app.py shown_js), or null before any.
    shown() {
      const step = api.player ? api.player.step() : -1;
      return step >= 0 ? step : null;
    },

    async copyLink() {
      const button = byId("copy-link");
      if (api.linked && !api.run) {  // no link to this run: say so instead of copying one to another run
        if (button) flash(button, "No link: see the note");
        byId("link-note")?.scrollIntoView({ block: "center" });
        return null;
      }
      try {
        await navigator.clipboard.writeText(location.href);
        if (button) flash(button, "Copied");
      } catch {
        window.prompt("Copy this link:", location.href);  // no clipboard access (http, or a denied permission)
      }
      return location.href;
    },

    // The tour: exactly one view carries the spotlight, scrolled to just below the tour's card (which stays at
    // the top of the screen: app.css), so that the card and what it names are in view together.
    spotlight(view) {
      api.clearSpotlight();
      const el = byId(view);
      if (!el) return false;
      el.classList.add(SPOT, TOUR_LIT);
      const card = byId("tour-panel");
      el.style.scrollMarginTop = `${card && card.offsetParent !== null ? card.offsetHeight + 12 : 0}px`;
      el.scrollIntoView({ block: "start" });  // at once: a glide moves the sticky card's buttons under the pointer
      return true;
    },
    clearSpotlight() {
      document.querySelectorAll(`.${SPOT}, .${TOUR_LIT}`).forEach((el) => el.classList.remove(SPOT, TOUR_LIT));
    },
    // True once per browser: the tour is offered on a first visit only.
    firstVisit() {
      if (localStorage.getItem("esp-tour-seen")) return false;
      localStorage.setItem("esp-tour-seen", "1");
      return true;
    },

    // Gradio's own dark mode is the class "dark" on <body>; the choice is remembered in this browser.
    toggleTheme() {
      const dark = document.body.classList.toggle("dark");
      localStorage.setItem("esp-theme", dark ? "dark" : "light");
      return dark ? "dark" : "light";
    },
  };

  const pending = [];
  let moving = false, waiting = null;
  let plotly = null;

  function loadPlotly() {
    plotly = plotly || new Promise((done, fail) => {
      const code = document.createElement("script");
      code.src = window.ESP_PLOTLY.src;
      code.onload = () => done(window.Plotly);  // ours, whatever Plotly.js Gradio loads for its own plots
      code.onerror = () => fail(new Error(`could not load ${code.src}`));
      document.head.append(code);
    });
    return plotly;
  }

  function startPlayer() {
    const root = byId("views");
    if (!root || typeof espPlayer !== "function" || !window.ESP_PLOTLY) return false;
    espPlayer(root, { frames: [] }, { plotly: loadPlotly(), version: window.ESP_PLOTLY.version, period: 500,
      keys: null });
    api.player = root.esp;
    // The story and predict mode, given each run's data as it comes (firstMinute); closing the story (its ✕, a
    // closing action, a guess, a step picked) opens the dashboard.
    if (typeof espFirstMinute === "function" && byId("story-panel")) {
      espFirstMinute(root, {}, { views: VIEWS, actions: { prompt: tryPrompt } });
      root.addEventListener("esp-story", (e) => { if (!e.detail.open) api.dashboard(); });
    }
    root.addEventListener("esp-step", (e) => {
      api.showStep(e.detail.step);
      // A student's own step lets go of the presenter (the Follow box unticked, as the box's own click does).
      const follow = document.querySelector("#follow input[type=checkbox]");
      if (!moving && follow?.checked && follow.offsetParent !== null) follow.click();
    });
    treeKeys();
    return true;
  }

  // A run's story, guesses and figure texts (explorer.views.player_data) to the story's script: every run opened
  // brings its own, a live run at its end; the opening run's story is told on the first screen.
  function firstMinute(data) {
    const root = byId("views");
    if (!root?.espFirst) return;
    root.espFirst.set(data);
    if (first && data.story && !told) {
      told = true;
      root.espFirst.story(true);
    }
  }
  // The story's closing action "Try your own prompt": the dashboard, at the prompt box.
  function tryPrompt() {
    api.dashboard();
    const box = document.querySelector("#prompt textarea");
    box?.scrollIntoView({ block: "center", behavior: smooth() });
    box?.focus();
  }

  function flash(button, text) {
    const old = button.textContent;
    button.textContent = text;
    setTimeout(() => { button.textContent = old; }, 1500);
  }

  function start() {
    const params = new URLSearchParams(location.search);
    if (params.get("present") === "1") document.body.classList.add("esp-present");
    const theme = params.get("__theme") || localStorage.getItem("esp-theme");
    if (theme) document.body.classList.toggle("dark", theme === "dark");
    // On the document: Gradio may draw the button again after this script ran, dropping a listener on it.
    document.addEventListener("click", (e) => {
      if (e.target.closest?.("#copy-link")) api.copyLink();
      if (e.target.closest?.("#dashboard, #tour")) api.dashboard();  // the tour walks the whole page
    });
    // A control used below the story (assets/first.css keeps them there on a wide page): the whole page, to run.
    document.addEventListener("focusin", (e) => { if (e.target.closest?.("#controls")) api.dashboard(); });
    // Phones: the controls wait behind this toggle, at the top of the page (app.css hides them there).
    const controls = byId("controls");
    if (controls && !byId("controls-toggle")) {
      const toggle = document.createElement("button");
      toggle.id = "controls-toggle";
      toggle.type = "button";
      toggle.textContent = "⚙ Controls";
      toggle.setAttribute("aria-expanded", "false");
      // On #controls itself: Gradio scopes the app's CSS inside @media to its container, so a class on <body>
      // could not be seen there.
      toggle.addEventListener("click", () => {
        toggle.setAttribute("aria-expanded", String(controls.toggleAttribute("data-shown")));
      });
      controls.before(toggle);
    }
    treeKeys();
  }

  // The tree by keyboard: Tab reaches it; ← → (↑ ↓) move between its nodes in index order, each outlined in
  // place with its token read out (#tree-cursor, polite); Enter focuses it as a click would.
  function treeNodes(plot) {
    const nodes = [];
    (plot.data || []).forEach((trace, curve) => (trace.customdata || []).forEach((d, point) => {
      if (Array.isArray(d) && Number.isInteger(d[4])) nodes.push({ node: d[4], text: String(d[0]), curve, point });
    }));
    return nodes.sort((a, b) => a.node - b.node);
  }
  function markTreeNode(holder, plot, at) {
    holder.querySelectorAll(".esp-cursor").forEach((el) => el.classList.remove("esp-cursor"));
    const trace = plot.querySelectorAll(".scatterlayer .trace")[at.curve];
    trace?.querySelectorAll(".points path")[at.point]?.classList.add("esp-cursor");
    try {  // the node's own hover label, as the mouse shows it
      api.player?.plotly()?.Fx?.hover(plot, [{ curveNumber: at.curve, pointNumber: at.point }]);
    } catch { /* no hover label: the outline and the words below still say where the cursor is */ }
    let said = byId("tree-cursor");
    if (!said) {  // on <body>: Gradio redraws the figure's own block
      said = document.createElement("div");
      said.id = "tree-cursor";
      said.className = "esp-sr";
      said.setAttribute("aria-live", "polite");
      document.body.append(said);
    }
    said.textContent = `Node ${at.node}: ${at.text} (Enter focuses it)`;
  }
  function treeKeys() {
    const holder = byId("tree-plot");
    if (!holder || holder.espKeys) return;
    holder.espKeys = true;
    holder.tabIndex = 0;
    holder.setAttribute("aria-label", "Draft tree: left and right arrows move between its nodes, Enter focuses one");
    holder.addEventListener("keydown", (e) => {
      const plot = holder.querySelector(".js-plotly-plot");
      const nodes = plot ? treeNodes(plot) : [];
      const move = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[e.key];
      if (!nodes.length || e.target !== holder || (move === undefined && e.key !== "Enter")) return;
      e.preventDefault();
      let at = nodes.findIndex((n) => n.node === api.treeNode);
      if (e.key === "Enter") {
        if (at >= 0) api.player?.focus(nodes[at].node);
        return;
      }
      at = at < 0 ? (move > 0 ? 0 : nodes.length - 1) : (at + move + nodes.length) % nodes.length;
      api.treeNode = nodes[at].node;
      markTreeNode(holder, plot, nodes[at]);
    });
  }

  window.espExplorer = api;
  // Gradio renders the page after this script runs: wait for the controls column to exist.
  let tries = 0;
  const ready = () => (byId("controls") || ++tries > 100 ? start() : setTimeout(ready, 100));
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
