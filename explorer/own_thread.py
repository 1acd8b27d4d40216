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
from typing import Callable, Iterator

_END = object()


def own_thread(fn: Callable) -> Callable:
    """`fn` (a function, or a generator function) run on a new thread per call; its result, items and exceptions
    come back to the caller. Closing the caller's iterator closes `fn`'s generator after the item in progress."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            yield from _relayed(fn(*args, **kwargs), fn.__name__)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        [result] = _relayed(_once(fn, args, kwargs), fn.__name__)  # to its end: the thread has ended
        return result
    return call


def _once(fn: Callable, args: tuple, kwargs: dict) -> Iterator:
    yield fn(*args, **kwargs)


def _relayed(gen: Iterator, name: str) -> Iterator:
    """`gen`'s items, run on a thread of its own ahead of the reader (an item at a time into a queue); its exception,
    if it raises, once the thread has ended. Closed early, the thread closes `gen` after the item in progress (not
    waited for: Gradio closes a streaming handler's iterator from its event loop)."""
    items: queue.SimpleQueue = queue.SimpleQueue()
    closed = threading.Event()

    def pump() -> None:
        error = None
        try:
            for item in gen:
                items.put((item, None))
                if closed.is_set():
                    break
        except BaseException as e:  # noqa: BLE001 - raised again in the reader's thread
            error = e
        finally:
            gen.close()
        items.put((_END, error))

    worker = threading.Thread(target=pump, name=f"esp-{name}", daemon=True)
    worker.start()
    try:
        while True:
            item, error = items.get()
            if item is _END:
                worker.join()
                if error is not None:
                    raise error
                return
            yield item
    finally:
        closed.set()
