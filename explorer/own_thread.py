"""Model work on a thread of its own that ends with the call (the local mode's GPU functions, the model's loading).

A thread that has run torch on the CPU keeps its GNU OpenMP pool for as long as it lives, and once a process holds
more pool threads than there are cores, libgomp's workers stop spinning between parallel regions: every forward
of every thread then waits on the kernel to wake them. On two cores one idle pool (a server thread that had
decoded once) made the next run's forwards 1.5x slower (docs/history.md). The server's request threads live long
and take turns, so the work they ask for runs here instead, and its pool goes when it is done.
"""
from __future__ import annotations

import functools
import inspect
import queue
import threading
from typing import Callable

_END = object()


def own_thread(fn: Callable) -> Callable:
    """`fn` (a function, or a generator function) run on a new thread per call; its result, items and exceptions
    come back to the caller. Closing the caller's iterator closes `fn`'s generator after the item in progress."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            items: queue.SimpleQueue = queue.SimpleQueue()
            closed = threading.Event()

            def pump() -> None:
                gen = fn(*args, **kwargs)
                try:
                    for item in gen:
                        items.put((item, None))
                        if closed.is_set():
                            break
                except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
                    items.put((_END, e))
                    return
                finally:
                    gen.close()
                items.put((_END, None))

            threading.Thread(target=pump, name=f"esp-{fn.__name__}", daemon=True).start()
            try:
                while True:
                    item, error = items.get()
                    if error is not None:
                        raise error
                    if item is _END:
                        return
                    yield item
            finally:
                closed.set()
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        out: list = []

        def run() -> None:
            try:
                out.append((fn(*args, **kwargs), None))
            except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
                out.append((None, e))

        worker = threading.Thread(target=run, name=f"esp-{fn.__name__}", daemon=True)
        worker.start()
        worker.join()
        result, error = out[0]
        if error is not None:
            raise error
        return result
    return call
