// ESP Explorer's page script (loaded by app.py through launch(head=...)): presenter keys, the URL state,
// Copy link, present mode, the tour's spotlight, the light / dark switch and the phone layout's toggle.
// Elements it expects (elem_ids in app.py): #next, #prev, #play (buttons), #copy-link (button), #controls
// (the controls column), and the views a tour stop names. Python wiring calls window.espExplorer.* from
// event `js=` callbacks; nothing here talks to the server.
(() => {
  const TYPING = "input:not([type=range]), textarea, select, [contenteditable]:not([contenteditable=false])";
  const KEYS = { ArrowRight: "next", PageDown: "next", ArrowLeft: "prev", PageUp: "prev", " ": "play" };
  const SPOT = "esp-spotlight";
  const byId = (id) => document.getElementById(id);

  // A presenter's remote sends these keys; typed in a text box they keep their usual meaning.
  const ours = (e) => KEYS[e.key] && !(e.ctrlKey || e.metaKey || e.altKey || e.target.closest?.(TYPING));
  document.addEventListener("keydown", (e) => {
    const button = ours(e) && byId(KEYS[e.key]);
    if (!button) return;
    e.preventDefault();
    if (!e.repeat || e.key !== " ") button.click();
  });
  // A focused button clicks itself when Space is released: with Space taken for play / pause above, that
  // would be a second action (a focused "next" would also step), so the release does nothing.
  document.addEventListener("keyup", (e) => {
    if (e.key === " " && ours(e) && byId(KEYS[e.key])) e.preventDefault();
  }, true);

  function query(state) {
    const params = new URLSearchParams(location.search);
    for (const [key, value] of Object.entries(state)) {
      if (value === null || value === undefined || value === "") params.delete(key);
      else params.set(key, String(value));
    }
    return params.toString();
  }

  const api = {
    // Write step / tab / trace into the address bar in place (no history entry). On a Space the page runs in
    // an iframe, so the Space's own page is told too (huggingface.co/docs/hub/spaces-handle-url-parameters).
    setState(state) {
      const qs = query(state);
      history.replaceState(null, "", qs ? `${location.pathname}?${qs}${location.hash}` : location.pathname);
      if (window.parent !== window) window.parent.postMessage({ queryString: qs }, "https://huggingface.co");
      return qs;
    },

    async copyLink() {
      const button = byId("copy-link");
      try {
        await navigator.clipboard.writeText(location.href);
        if (button) flash(button, "Copied");
      } catch {
        window.prompt("Copy this link:", location.href);  // no clipboard access (http, or a denied permission)
      }
      return location.href;
    },

    // The tour: exactly one view carries the spotlight, scrolled into the middle of the screen.
    spotlight(view) {
      api.clearSpotlight();
      const el = byId(view);
      if (!el) return false;
      el.classList.add(SPOT);
      el.scrollIntoView({ block: "center", behavior: "smooth" });
      return true;
    },
    clearSpotlight() {
      document.querySelectorAll(`.${SPOT}`).forEach((el) => el.classList.remove(SPOT));
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
    byId("copy-link")?.addEventListener("click", () => api.copyLink());
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
  }

  // A click on a node of the draft tree focuses it: the node index (customdata[4] of the tree's node traces)
  // goes into the hidden #focus-click box, which the server answers like a choice in the Focus box. The tree
  // is redrawn at every step, so the handler is attached to whichever plot is there now.
  function listenToTree() {
    const plot = document.querySelector("#tree-plot .js-plotly-plot");
    if (!plot || plot.espListening || typeof plot.on !== "function") return;
    plot.espListening = true;
    plot.on("plotly_click", (event) => {
      const node = event.points?.[0]?.customdata?.[4];
      const box = document.querySelector("#focus-click textarea, #focus-click input");
      if (node === undefined || !box) return;
      box.value = `${node}:${Date.now()}`;  // a fresh value each click, so a repeated click still counts
      box.dispatchEvent(new Event("input", { bubbles: true }));
    });
  }
  setInterval(listenToTree, 500);

  window.espExplorer = api;
  // Gradio renders the page after this script runs: wait for the controls column to exist.
  let tries = 0;
  const ready = () => (byId("controls") || ++tries > 100 ? start() : setTimeout(ready, 100));
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
