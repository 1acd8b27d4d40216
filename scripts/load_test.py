"""A short load test of the app: many clients at once mixing runs, Compare, trace uploads and scrubs.

    python -m scripts.load_test                       # 24 clients for 60 s
    python -m scripts.load_test --clients 32 --seconds 90

It starts its own `python app.py` on a free loopback port (127.0.0.1 only; nothing else is contacted),
warms it with one run, lets every client loop over a random mix of requests until the time is up (or
each has sent --requests; a client told "busy" waits BACKOFF_S), then stops the server. It prints the requests answered (a run, a trace, a
step, or a one-line ⚠️ refusal), those refused because the queue was full ("busy"), the errors (anything
else: Gradio's bare "Error", a dropped connection), and the server's resident memory before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from gradio_client import Client, handle_file
from gradio_client.utils import QueueError

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "assets" / "trace_copy.json"
PROMPTS = ["Count from 1 to 20.", "Fix the typo: teh cat sat on the mat.", "Name three colours.",
           "Write a haiku about rain.", "What is 12 times 7?"]
SHORT = dict(k=2, bc=30, lam=0.1)
# The mix of requests, by weight: scrubs are the most frequent action on the page, Compare the heaviest.
MIX = {"run": 3, "compare": 1, "upload": 2, "scrub": 6}
BACKOFF_S = 1.0  # a client told "busy" waits this long before its next request, as a person would


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` in MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def start_server(port: int) -> subprocess.Popen:
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False", "ESP_APP_LOCAL_UNLIMITED": "1"}  # its clients share one address
    return subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def wait_for(url: str, server: subprocess.Popen, timeout: float = 300) -> Client:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            said = server.stderr.read()[-2000:] if server.stderr else f"exit status {server.returncode}"
            raise SystemExit(f"app.py exited: {said}")
        try:
            return Client(url, verbose=False)
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(1)
    raise SystemExit(f"app.py did not answer within {timeout:.0f} s")


def one_request(client: Client, action: str, rng: random.Random) -> str:
    """Send one request; the status line it was answered with."""
    if action == "run":
        out = client.predict(prompt=rng.choice(PROMPTS), max_new_tokens=16, api_name="/generate", **SHORT)
    elif action == "compare":
        out = client.predict(prompt=rng.choice(PROMPTS), max_new_tokens=8, api_name="/compare", **SHORT)
    elif action == "upload":
        out = client.predict(handle_file(str(TRACE)), api_name="/open_trace")
    else:
        out = client.predict(rng.randint(0, 6), api_name="/show_step")
    return out[0]


def worker(url: str, n: int, stop_at: float, requests: int, counts: Counter, lock: threading.Lock) -> None:
    rng = random.Random(n)
    client = Client(url, verbose=False)
    actions, weights = zip(*MIX.items())
    for n_sent in range(requests):
        if time.monotonic() >= stop_at:
            break
        action = "upload" if n_sent == 0 else rng.choices(actions, weights)[0]  # a session starts with a trace
        try:
            line = one_request(client, action, rng)
            outcome = "refused" if str(line).startswith("⚠️") else "answered"
        except QueueError:
            outcome = "busy"
            time.sleep(BACKOFF_S)
        except Exception as e:  # noqa: BLE001 - counted, and the first of each kind is shown
            outcome = "error"
            with lock:
                if not counts[f"error:{type(e).__name__}"]:
                    print(f"error in {action}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                counts[f"error:{type(e).__name__}"] += 1
        with lock:
            counts[outcome] += 1
            counts[f"{action}:{outcome}"] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--requests", type=int, default=200, help="most requests per client")
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    server = start_server(port)
    try:
        first = wait_for(url, server)
        first.predict(prompt=PROMPTS[0], max_new_tokens=8, api_name="/generate", **SHORT)  # the model is warm
        before = rss_mb(server.pid)
        counts: Counter = Counter()
        lock = threading.Lock()
        started = time.monotonic()
        threads = [threading.Thread(target=worker, args=(url, n, started + args.seconds, args.requests, counts, lock))
                   for n in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        alive = first.predict(1, api_name="/show_step")[0]  # the server still serves
        after = rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    summary = {"clients": args.clients, "seconds": round(elapsed, 1), "answered": counts["answered"],
               "refused": counts["refused"], "busy": counts["busy"], "errors": counts["error"],
               "rss_before_mb": round(before), "rss_after_mb": round(after),
               "still_serving": not str(alive).startswith("⚠️") and "step" in str(alive),
               "by_action": {k: v for k, v in sorted(counts.items()) if ":" in k}}
    print(f"{summary['answered']} answered, {summary['refused']} refused in one line, {summary['busy']} busy, "
          f"{summary['errors']} errors from {args.clients} clients in {elapsed:.0f} s; server RSS "
          f"{before:.0f} MB before, {after:.0f} MB after")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
