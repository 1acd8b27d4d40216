"""A class against the app as `python app.py` serves it (not a test; issue 48's bars, written to a results file).

    python -m scripts.class_run [--students 30] [--max-new-tokens 16] [--json docs/results/class_135m.json]
    python -m scripts.class_run --app-vs-engine 3      # also: one run through the app against esp.decode

It starts its own `python app.py` on a free loopback port with a Space's limits (ESP_APP_LOCAL_UNLIMITED unset; the
school's address named by X-Forwarded-For from a trusted proxy, as on a Space), warms it with one run from another
address, then `--students` sessions behind one school address each open the page, press Run (the page's defaults:
ESP, k=2, BC=30; the page's example prompts in turn) one after another, and check that their page holds every step
of their run to scrub (the player scrubs in the browser, issue 46). It reports, per run, the seconds from pressing
Run to its last update, the slowest and the median, and the runs refused or failed. With --app-vs-engine N: N
interleaved rounds, on the idle server, of one run through the app (gradio_client, to its last update) and the same
prompt through `esp.decode(..., views=True)` in this process, with the server's torch threads and with every core
(issue 48's bar: at most 1.10x).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gradio_client import Client

from components.frames import held
from esp.bench.provenance import provenance
from scripts.load_test import free_port, wait_for

ROOT = Path(__file__).resolve().parents[1]
SCHOOL = "198.51.100.50"
DEFAULTS = dict(k=2, bc=30, lam=0.1)


def prompts() -> list[str]:
    return [e["prompt"] for e in json.loads((ROOT / "assets" / "examples.json").read_text())]


def start_server(port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("ESP_APP_LOCAL_UNLIMITED", "ESP_EMULATE_ZEROGPU")}
    env.update(GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port), GRADIO_ANALYTICS_ENABLED="False",
               ESP_APP_TRUSTED_PROXIES="127.0.0.1")
    return subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def student(url: str, n: int, prompt: str, tokens: int, pressed: list, timeout: float) -> dict:
    """One session: open the page, press Run (its time kept in `pressed[n]`), wait for the last update, scrub."""
    client = Client(url, verbose=False, headers={"X-Forwarded-For": SCHOOL})
    try:
        client.predict(0, api_name="/show_step")
        while n and pressed[n - 1] is None:  # one after another, as a class presses Run
            time.sleep(0.01)
        pressed[n] = time.monotonic()
        job = client.submit(prompt=prompt, max_new_tokens=tokens, api_name="/generate", **DEFAULTS)
        try:
            final = job.result(timeout=timeout)[0]
        except Exception as e:  # noqa: BLE001 - a refusal or a failure, counted
            return {"n": n, "ok": False, "why": f"{type(e).__name__}: {str(e)[:200]}"}
        done = time.monotonic()
        waited = any(str(o[0]).startswith("**Waiting for the model**") for o in job.outputs())
        # The page's player scrubs in the browser what the run's messages held: every step, each with its figures.
        frames, steps = held([o[1] for o in job.outputs()]), re.search(r"(\d+) steps", final)
        holds = bool(steps) and len(frames) == int(steps.group(1)) and all(f.get("tree") and f.get("mask") for f in frames)
        return {"n": n, "ok": final.startswith("**Done**"), "status": final[:160], "seconds": done - pressed[n],
                "told_place": waited, "steps": len(frames), "scrubbed": holds}
    finally:
        client.close()


def the_class(url: str, students: int, tokens: int, timeout: float) -> list[dict]:
    texts = prompts()
    pressed: list = [None] * students
    with ThreadPoolExecutor(students) as pool:
        return list(pool.map(lambda n: student(url, n, texts[n % len(texts)], tokens, pressed, timeout),
                             range(students)))


def app_vs_engine(url: str, rounds: int, tokens: int) -> dict:
    """Interleaved rounds of one run through the app and the same call to esp.decode(views=True) here, with the
    server's torch threads (LIMITS.threads, ESP_APP_THREADS: by default every usable core) and with every core."""
    import torch

    import esp
    from esp.models.loader import load
    from explorer.requests import LIMITS

    lm = load()
    prompt = prompts()[6]
    client = Client(url, verbose=False, headers={"X-Forwarded-For": "203.0.113.9"})
    every = torch.get_num_threads()
    times: dict[str, list[float]] = {"app": [], "engine": [], "engine_every_core": []}

    def timed(key: str, call) -> None:
        t = time.monotonic()
        call()
        times[key].append(time.monotonic() - t)

    def engine() -> None:
        esp.decode(lm.model, lm.tokenizer, prompt, method="esp:k=2:bc=30:lam=0.1", max_new_tokens=tokens, views=True)

    for _ in range(rounds + 1):  # the first round warms each
        timed("app", lambda: client.predict(prompt=prompt, max_new_tokens=tokens, api_name="/generate", **DEFAULTS))
        torch.set_num_threads(LIMITS.threads)
        timed("engine", engine)
        torch.set_num_threads(every)
        timed("engine_every_core", engine)
    client.close()
    med = {k: statistics.median(v[1:]) for k, v in times.items()}
    # Each round's own ratio too: a round's runs share the machine's mood, which moves between rounds.
    paired = {k: statistics.median(a / b for a, b in zip(times["app"][1:], times[k][1:]))
              for k in ("engine", "engine_every_core")}
    return {"rounds": rounds, "threads": LIMITS.threads, "cores": every, **{f"{k}_s": v[1:] for k, v in times.items()},
            **{f"{k}_median": m for k, m in med.items()}, "ratio": med["app"] / med["engine"],
            "ratio_every_core": med["app"] / med["engine_every_core"], "paired_ratio": paired["engine"],
            "paired_ratio_every_core": paired["engine_every_core"]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m scripts.class_run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--students", type=int, default=30)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--timeout", type=float, default=900, help="the longest a run may take before it counts as failed")
    p.add_argument("--app-vs-engine", type=int, default=0, metavar="ROUNDS")
    p.add_argument("--json")
    a = p.parse_args(argv)
    made = provenance(argv, "python -m scripts.class_run")
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    server = start_server(port)
    try:
        warm = wait_for(url, server)
        warm.predict(prompt=prompts()[0], max_new_tokens=8, api_name="/generate", **DEFAULTS)  # the model is loaded
        warm.close()
        started = time.monotonic()
        runs = the_class(url, a.students, a.max_new_tokens, a.timeout)
        wall = time.monotonic() - started
        vs = app_vs_engine(url, a.app_vs_engine, a.max_new_tokens) if a.app_vs_engine else None
    finally:
        server.terminate()
        server.wait(timeout=60)
    served = [r for r in runs if r["ok"]]
    seconds = [r["seconds"] for r in served]
    out = {"provenance": made, "students": a.students, "max_new_tokens": a.max_new_tokens, "served": len(served),
           "failed": [r for r in runs if not r["ok"]], "slowest_s": max(seconds, default=None),
           "median_s": statistics.median(seconds) if seconds else None, "wall_s": wall,
           "told_place": sum(r["told_place"] for r in served), "all_scrubbed": all(r["scrubbed"] for r in served),
           "runs": runs, "app_vs_engine": vs}
    print(f"{len(served)} of {a.students} runs served ({len(out['failed'])} refused or failed); slowest "
          f"{out['slowest_s'] or 0:.1f} s, median {out['median_s'] or 0:.1f} s from pressing Run; {out['told_place']} "
          f"told their place; every page holds its run's steps to scrub: {out['all_scrubbed']}")
    if vs:
        print(f"one run through the app {vs['app_median']:.2f} s, esp.decode(views=True) with the server's "
              f"{vs['threads']} torch thread(s) {vs['engine_median']:.2f} s: {vs['ratio']:.3f}x; with all "
              f"{vs['cores']} cores {vs['engine_every_core_median']:.2f} s: {vs['ratio_every_core']:.3f}x "
              f"(medians of {vs['rounds']}; the median round's own ratio {vs['paired_ratio']:.3f}x and "
              f"{vs['paired_ratio_every_core']:.3f}x)")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
