"""The Python half of bub-rs's python bridge.

Runs inside the interpreter the bridge embeds, with the plugin venv's
site-packages on ``sys.path``. It finds Bub's plugins the way Bub 0.6 does
(``importlib.metadata.entry_points(group="bub")``, in that order, callable
entry points called with the framework), reads their pluggy hookimpls and
runs every call on one asyncio loop thread, as Bub runs everything on its
loop. The Rust half (``lib.rs``) turns each plugin into a plugin of the
host and converts arguments and results.
"""


import asyncio
import contextlib
import dataclasses
import dis
import functools
import importlib
import importlib.metadata
import inspect
import os
import selectors
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

PROJECT = "bub"

_loop: asyncio.AbstractEventLoop | None = None
_loop_thread: int | None = None
_ready = threading.Event()

# The loop's turn: held by the loop thread except while it waits in its
# selector. A host thread that takes it (without waiting) runs a call right
# there, as exclusively as one of the loop's own callbacks, and without the
# cost of a thread hop; when the loop is busy the call goes to the loop.
_turn = threading.Lock()


# When the loop last left its selector (0.0 while it waits in it), and the
# submitted call whose first step it runs now: what ``holder()`` reports
# when a call waits too long for the loop.
_busy_since = 0.0
_holder: str | None = None


class _Selector(selectors.DefaultSelector):
    def select(self, timeout=None):  # type: ignore[override]
        global _busy_since
        _busy_since = 0.0
        _turn.release()
        try:
            return super().select(timeout)
        finally:
            _turn.acquire()
            _busy_since = time.monotonic()


def holder() -> tuple[str, float] | None:
    """What keeps the loop from its other calls, and for how many seconds:
    the submitted call running its first step (a blocking call such as
    ``time.sleep`` in an ``async def`` hook blocks there), else the task
    the loop runs; None while the loop waits for work."""
    since = _busy_since
    if since == 0.0:
        return None
    what = _holder
    if what is None and _loop is not None:
        task = asyncio.current_task(_loop)
        if task is not None and task is not _host_task:
            coro = task.get_coro()
            what = getattr(coro, "__qualname__", None) or repr(task)
    return (what or "the loop's own work", time.monotonic() - since)


_host_task: asyncio.Task | None = None


async def _host() -> None:
    """The task a coroutine that never waits runs in (``current_task()``
    inside it), as a Bub hook runs inside its caller's task: it waits for
    ever, and a plugin cancelling it does not end it."""
    while True:
        try:
            assert _loop is not None
            await _loop.create_future()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()


def never_suspends(code: Any) -> bool:
    """Whether a coroutine of ``code`` can never suspend: its frame has no
    ``YIELD_VALUE`` (every ``await``, ``async for`` and ``async with``
    compiles to one), so one step runs it to its end and it needs no task
    of its own."""
    return not any(i.opname == "YIELD_VALUE" for i in dis.get_instructions(code))


def run_loop() -> None:
    """The loop thread's body: one event loop for every Python call."""
    global _loop, _loop_thread, _host_task
    _turn.acquire()
    loop = asyncio.SelectorEventLoop(_Selector())
    asyncio.set_event_loop(loop)
    _loop = loop
    _loop_thread = threading.get_ident()
    _host_task = loop.create_task(_host(), name="bub-rs host")
    _ready.set()
    try:
        loop.run_forever()
    finally:
        loop.close()
        _turn.release()


def wait_ready(timeout: float) -> bool:
    return _ready.wait(timeout)


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


# How long a call waits behind cancellations that have not reached their
# task (one that suppresses its CancelledError must not hold up the rest).
CANCEL_WAIT = 1.0


def cancelling() -> bool:  # replaced by the Rust side at import
    return False


def run_call(fn: Any, args: tuple, kwargs: dict, sync_only: bool) -> tuple[str, Any]:  # replaced by the Rust side
    """Runs one call as a loop callback (``event_loop.rs``): ("done",
    result), ("running", task), ("cancelled", "cancelled") or ("error",
    traceback)."""
    raise NotImplementedError


class Call:
    """One submitted call: cancellable from the Rust side."""

    __slots__ = ("task", "cancelled", "queued")

    def __init__(self) -> None:
        self.task: asyncio.Future | None = None
        self.cancelled = False
        self.queued: float | None = None

    def cancel(self) -> None:
        assert _loop is not None
        _loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()


def submit(fn: Any, args: tuple, kwargs: dict, done: Any, sync_only: bool, label: str = "") -> Call:
    """Runs ``fn(*args, **kwargs)`` on the loop thread; awaits an awaitable
    result (unless ``sync_only``: then, as Bub's ``call_*_sync``, it is
    skipped); calls ``done(ok, value)`` once, on the loop thread. ``label``
    (``plugin.hook``) names it while it holds the loop."""
    call = Call()
    assert _loop is not None
    _loop.call_soon_threadsafe(_start, call, fn, args, kwargs, done, sync_only, label)
    return call


def _start(call: Call, fn: Any, args: tuple, kwargs: dict, done: Any, sync_only: bool, label: str = "") -> None:
    """A submitted call, on the loop thread as one of its callbacks: the
    steps a host thread runs holding the loop's turn (``run_call``)."""
    if call.cancelled:
        done(False, "cancelled")
        return
    if cancelling():
        # A task the host cancelled has not seen its CancelledError yet:
        # this call runs after it, as after an asyncio ``wait_for``.
        now = time.monotonic()
        if call.queued is None:
            call.queued = now
        if now - call.queued < CANCEL_WAIT:
            assert _loop is not None
            _loop.call_soon(_start, call, fn, args, kwargs, done, sync_only, label)
            return
    global _holder
    _holder = label or None
    try:
        kind, value = run_call(fn, args, kwargs, sync_only)
    finally:
        _holder = None
    if kind == "running":
        call.task = value
        value.add_done_callback(lambda t: _finish(t, done))
    else:
        done(kind == "done", value)


def watch(task: asyncio.Future, done: Any) -> Call:
    """A task a call left running (its caller holds the loop's turn):
    ``done`` gets its end, on the loop thread."""
    call = Call()
    call.task = task
    task.add_done_callback(lambda t: _finish(t, done))
    return call


def _noop() -> None:
    pass


def wake() -> None:
    """Wakes the loop for work queued from a host thread."""
    assert _loop is not None
    _loop.call_soon_threadsafe(_noop)


def _finish(task: asyncio.Future, done: Any) -> None:
    if task.cancelled():
        done(False, "cancelled")
        return
    exc = task.exception()
    if exc is not None:
        done(False, format_exception(exc))
    else:
        done(True, task.result())


# --- values ----------------------------------------------------------------


def jsonable(value: Any) -> tuple[bool, Any]:
    """(True, a JSON-able form) for values Bub would serialize (pydantic
    models, dataclasses, paths, dates, sets), else (False, None): the value
    stays a live object."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return True, dump(mode="json")
        except Exception:  # noqa: BLE001
            return False, None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            return True, dataclasses.asdict(value)
        except Exception:  # noqa: BLE001
            return False, None
    if isinstance(value, Path):
        return True, str(value)
    iso = getattr(value, "isoformat", None)
    if callable(iso) and type(value).__module__ == "datetime":
        return True, iso()
    if isinstance(value, (set, frozenset)):
        return True, list(value)
    return False, None


def awaitable_result(fut: asyncio.Future, ok: bool, value: Any) -> None:
    """Completes a Python future with a host call's answer (loop thread)."""
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(HostError(value))


class HostError(RuntimeError):
    """A call into bub-rs failed."""


def new_future() -> asyncio.Future:
    assert _loop is not None
    return _loop.create_future()


def call_soon(fn: Any, *args: Any) -> None:
    assert _loop is not None
    _loop.call_soon_threadsafe(fn, *args)
