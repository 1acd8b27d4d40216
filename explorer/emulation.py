"""ZeroGPU's way of running a GPU function, rebuilt for a CPU (ESP_EMULATE_ZEROGPU=1; the tests' `zerogpu`
marker).

What `spaces` 0.51 does on a ZeroGPU Space (spaces/zero/wrappers.py and torch/patching.py) and is kept:
- each call runs in a process forked from the main one ('fork', as spaces does); its arguments reach it
  pickled through a pipe, and its result, or every item a generator yields, comes back pickled;
- the call's duration (a number, or a function of the call's arguments) is a hard limit: past it the
  worker is killed and the call raises "GPU task aborted", as when ZeroGPU takes the GPU back; a worker
  that dies raises the same;
- an exception in the worker comes back as a gr.Error naming its class only (its message stays there);
- when the caller closes a generator (a Gradio cancel), the worker stops at its next yield;
- in the main process `torch.cuda.is_available()` says True, as ZeroGPU's patch makes it; anything there
  that would initialise or use CUDA raises (ZeroGPU fakes some of it: stricter is safer here).
Not emulated: quotas, waiting for a GPU, reusing an idle worker for the next call (every call forks a
fresh one, the cold case), and the fake CUDA tensors of a `.to("cuda")` in the main process.
"""
from __future__ import annotations

import functools
import inspect
import logging
import multiprocessing
import os
import stat
import time
import traceback
from pathlib import Path
from typing import Callable, Iterator

import gradio as gr
import torch

log = logging.getLogger("esp.app")
_fork = multiprocessing.get_context("fork")
JOIN_S = 5.0  # a stopped worker's time to leave before it is killed

MAIN_PROCESS_CUDA = ("CUDA must not be initialised in the main process under ZeroGPU (emulated): "
                     "do it inside a GPU function. Reached: {}")


def _refuse(what: str) -> Callable:
    def refused(*_, **__):
        raise RuntimeError(MAIN_PROCESS_CUDA.format(what))
    return refused


def _refuse_cuda_moves(to: Callable, what: str) -> Callable:
    """`to` (Tensor.to / Module.to), raising when asked for a CUDA device."""
    @functools.wraps(to)
    def guarded(self, *args, **kwargs):
        try:
            device = torch._C._nn._parse_to(*args, **{k: v for k, v in kwargs.items() if k != "copy"})[0]
        except (TypeError, RuntimeError):
            device = None  # not a form that names a device; `to` itself will say what is wrong
        if device is not None and device.type == "cuda":
            raise RuntimeError(MAIN_PROCESS_CUDA.format(f"{what}({device})"))
        return to(self, *args, **kwargs)
    return guarded


def _patches() -> dict[tuple[object, str], object]:
    return {
        (torch.cuda, "is_available"): lambda: True,
        (torch.cuda, "_lazy_init"): _refuse("torch.cuda._lazy_init"),
        (torch.cuda, "synchronize"): _refuse("torch.cuda.synchronize"),
        (torch.cuda, "get_device_name"): _refuse("torch.cuda.get_device_name"),
        (torch.cuda, "get_device_capability"): _refuse("torch.cuda.get_device_capability"),
        (torch.cuda, "get_device_properties"): _refuse("torch.cuda.get_device_properties"),
        (torch.Tensor, "to"): _refuse_cuda_moves(torch.Tensor.to, "Tensor.to"),
        (torch.Tensor, "cuda"): _refuse("Tensor.cuda"),
        (torch.nn.Module, "to"): _refuse_cuda_moves(torch.nn.Module.to, "Module.to"),
        (torch.nn.Module, "cuda"): _refuse("Module.cuda"),
    }


_saved: dict[tuple[object, str], object] = {}


def guard_main_process() -> None:
    """Make CUDA in this (the main) process raise, until `unguard`. Idempotent."""
    if _saved:
        return
    for (owner, name), patched in _patches().items():
        _saved[(owner, name)] = getattr(owner, name)
        setattr(owner, name, patched)


def unguard() -> None:
    """Undo `guard_main_process` (in a worker, and when the emulation is switched off)."""
    for (owner, name), original in _saved.items():
        setattr(owner, name, original)
    _saved.clear()


def _close_inherited_sockets(keep: int) -> None:
    """Close the web server's sockets the fork copied (its listening socket, its visitors' connections), all but
    the worker's pipe `keep`. A copy held here keeps a connection open after the server closes it: the browser, never
    told, sends its next request (a Stop) on it, and nobody reads it."""
    fds = Path("/proc/self/fd")
    for fd in (int(p.name) for p in fds.iterdir()) if fds.is_dir() else ():
        try:
            if fd != keep and stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)
        except OSError:
            pass  # the listing's own descriptor, gone by now


def _serve(fn: Callable, conn, stop) -> None:
    """The worker: unpatch, take the pickled arguments, send back every result (or the error's class)."""
    _close_inherited_sockets(conn.fileno())
    unguard()
    try:
        args, kwargs = conn.recv()
        out = fn(*args, **kwargs)
        if inspect.isgenerator(out):
            for item in out:
                if stop.is_set():
                    out.close()
                    break
                conn.send(("item", item))
        else:
            conn.send(("item", out))
        conn.send(("end", None))
    except Exception as e:  # noqa: BLE001 - everything a worker raises goes back, as spaces does
        conn.send(("error", type(e).__name__, traceback.format_exc()))


def _exchange(fn: Callable, duration, args: tuple, kwargs: dict) -> Iterator:
    """Fork a worker for one call of `fn` and yield what it sends, within the call's duration."""
    seconds = duration(*args, **kwargs) if callable(duration) else duration
    guard_main_process()
    parent, child = _fork.Pipe()
    stop = _fork.Event()
    worker = _fork.Process(target=_serve, args=(fn, child, stop), daemon=True)
    worker.start()
    child.close()
    deadline = time.monotonic() + seconds
    try:
        parent.send((args, kwargs))
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not parent.poll(left):
                worker.kill()  # ZeroGPU takes the GPU back
                raise gr.Error(f"GPU task aborted (its {seconds:.0f} s ran out)", title="ZeroGPU worker error")
            try:
                kind, *message = parent.recv()
            except EOFError:
                raise gr.Error("GPU task aborted", title="ZeroGPU worker error") from None
            if kind == "end":
                return
            if kind == "error":
                log.error("GPU worker failed:\n%s", message[1])
                raise gr.Error(message[0], title="ZeroGPU worker error")
            try:
                yield message[0]
            except GeneratorExit:
                stop.set()
                raise
    finally:
        parent.close()
        worker.join(JOIN_S)
        if worker.is_alive():
            worker.kill()
            worker.join()


def worker_call(fn: Callable, duration) -> Callable:
    """`fn` as the emulation runs it: a generator function streams its items, a function returns one."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            yield from _exchange(fn, duration, args, kwargs)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        items = _exchange(fn, duration, args, kwargs)
        try:
            return next(items)
        finally:
            items.close()
    return call
