"""The app's runtime below the page: per-session state, the GPU calls and the handlers that join them.

`app.py` lays out the page and wires its events to `explorer.calls`; nothing here builds a layout.
- `session`: one browser session's run and its cross-process stop token;
- `gpu`: where GPU work runs (in-process, ZeroGPU's `spaces.GPU`, or its emulation) and for how long;
- `emulation`: ZeroGPU's forked, pickling worker, rebuilt for the CPU tests (ESP_EMULATE_ZEROGPU=1);
- `worker`: the functions that run inside a GPU call (plain data in, plain data out);
- `views`: the data the page's player takes (a run's frames and views) and the status line (main process only);
- `requests`: every value a request may carry (kind, bounds, choices) and the check each handler runs first;
- `calls`: the event handlers: validate, call the GPU, rebuild the session, make the player's data.
"""
