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


# --- discovery -----------------------------------------------------------


def _varnames(function: Any) -> tuple[str, ...]:
    """pluggy's argument names of a hookimpl (without ``self``)."""
    try:
        from pluggy._hooks import varnames  # the exact rule pluggy applies
    except ImportError:  # pragma: no cover - pluggy is Bub's dependency
        sig = inspect.signature(function)
        return tuple(
            n
            for n, p in sig.parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY) and p.default is p.empty
        )
    return varnames(function)[0]


def hookimpls(plugin: Any) -> list[tuple[str, str, tuple[str, ...], Any]]:
    """The hookimpls of ``plugin``: (hook, marker, argnames, function).
    Markers are pluggy's ``bub_impl`` options; wrappers are reported as
    such."""
    found = []
    for name in dir(plugin):
        try:
            attr = getattr(plugin, name)
        except Exception:  # noqa: BLE001 - a property that fails is not a hook
            continue
        opts = getattr(attr, PROJECT + "_impl", None)
        if not isinstance(opts, dict):
            continue
        hook = opts.get("specname") or name
        if opts.get("hookwrapper") or opts.get("wrapper"):
            marker = "wrapper"
        elif opts.get("tryfirst"):
            marker = "tryfirst"
        elif opts.get("trylast"):
            marker = "trylast"
        else:
            marker = "normal"
        found.append((hook, marker, _varnames(attr), attr))
    return found


class EntryPointPlugin:
    __slots__ = ("name", "value", "dist", "version", "plugin", "error", "tools")

    def __init__(self, name: str, value: str, dist: str, version: str) -> None:
        self.name = name
        self.value = value
        self.dist = dist
        self.version = version
        self.plugin: Any = None
        self.error: str | None = None
        self.tools: list[Any] = []


def load_config(text: str) -> None:
    """What Bub's framework does at start (``configure.load(config_file)``)
    with the host's ``$BUB_HOME/config.json`` (read by the host under its
    trust rules; JSON is YAML): ``bub.ensure_config`` and ``bub.config``
    sections then read its sections, under the ``BUB_*`` environment, as
    under Bub."""
    import json

    from bub import configure

    data = json.loads(text) if text.strip() else {}
    configure._global_config.clear()
    configure._config_data.clear()
    if isinstance(data, dict):
        configure._config_data.update(data)


def discover(framework: Any) -> list[EntryPointPlugin]:
    """Bub's ``load_hooks``: load every entry point of group ``bub`` (in
    importlib's order), then call the callable ones with the framework. A
    plugin that fails keeps its error; the others load."""
    global FRAMEWORK
    FRAMEWORK = framework
    pending: list[tuple[EntryPointPlugin, Any]] = []
    out: list[EntryPointPlugin] = []
    registry = _registry()
    for ep in importlib.metadata.entry_points(group=PROJECT):
        dist = getattr(ep, "dist", None)
        rec = EntryPointPlugin(
            ep.name,
            ep.value,
            dist.metadata["Name"] if dist is not None else "",
            dist.version if dist is not None else "",
        )
        out.append(rec)
        before = set(registry)
        try:
            pending.append((rec, ep.load()))
        except BaseException as exc:  # noqa: BLE001
            rec.error = f"cannot import {ep.value}: {format_exception(exc)}"
        rec.tools.extend(registry[n] for n in registry if n not in before)
    for rec, plugin in pending:
        before = set(registry)
        try:
            if callable(plugin):
                plugin = plugin(framework)
            rec.plugin = plugin
        except BaseException as exc:  # noqa: BLE001
            rec.error = f"cannot create {rec.value}: {format_exception(exc)}"
        rec.tools.extend(registry[n] for n in registry if n not in before)
    return out


def skill_roots() -> list[str]:
    """The folders of the ``skills`` namespace package (Bub's
    ``_builtin_skills_root``: Bub's own skills and those plugins ship), in
    import order; none when there is no such package."""
    try:
        package = importlib.import_module("skills")
    except Exception:  # noqa: BLE001 - no skills package: no skills from it
        return []
    return [str(p) for p in getattr(package, "__path__", [])]


def _registry() -> dict:
    """Bub's tool registry (``bub.tool`` adds to it when a plugin module is
    imported): the tools each plugin brings are the ones that appear while
    it loads."""
    try:
        from bub.tools import REGISTRY
    except ImportError:
        return {}
    return REGISTRY


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


# --- host facades --------------------------------------------------------


class PluginManagerFacade:
    """The part of pluggy's PluginManager Bub plugins read, and
    ``subset_hook_caller`` for Bub's call-parent idiom."""

    def __init__(self, plugins: dict[str, Any], host: Any) -> None:
        self._plugins = plugins
        self._host = host

    def subset_hook_caller(self, name: str, remove_plugins: Any) -> "RestCaller":
        """pluggy's caller of ``name`` without ``remove_plugins``, for the
        idiom plugins use it for: a hook calling the implementations after
        its own (``[self]``), e.g. to decorate the builtin's prompt. Those
        run in the host, after the plugin in call order (implementations
        before it are not called: under Bub they would call it again)."""
        removed = list(remove_plugins or ())
        names = [n for n, p in self._plugins.items() if any(p is r for r in removed)]
        if len(removed) != 1 or len(names) != 1:
            raise NotImplementedError(
                "PluginManager.subset_hook_caller: bub-rs's python bridge supports removing exactly the calling "
                "plugin (`subset_hook_caller(name, [self])`: the rest of the chain after it); see "
                "docs/python-plugins.md"
            )
        return RestCaller(self._host, names[0], name)

    def get_plugin(self, name: str) -> Any:
        return self._plugins.get(name)

    def list_name_plugin(self) -> list[tuple[str, Any]]:
        return list(self._plugins.items())

    def has_plugin(self, name: str) -> bool:
        return name in self._plugins


class RestCaller:
    """``subset_hook_caller``'s answer: called with the hook's arguments by
    name, it answers as pluggy's would (the first non-None answer of a
    first-result hook, else the list); an awaitable for an async hook."""

    __slots__ = ("_host", "_plugin", "name")

    def __init__(self, host: Any, plugin: str, name: str) -> None:
        self._host = host
        self._plugin = plugin
        self.name = name

    def __call__(self, **kwargs: Any) -> Any:
        return self._host.call_rest(self._plugin, self.name, kwargs)

    def __repr__(self) -> str:
        return f"<bub-rs rest of {self.name!r} after {self._plugin!r}>"


# The code objects of the hookimpls, by plugin and hook: what names the
# plugin when one ends the process with ``os._exit`` (no signal, no atexit:
# the host's crash handlers never see it).
_hook_codes: dict[Any, tuple[str, str]] = {}
_crash_file: str | None = None
_real_exit = os._exit


def register_hook(func: Any, plugin: str, hook: str) -> None:
    """Remembers ``func`` as ``plugin``'s implementation of ``hook``."""
    code = getattr(getattr(func, "__func__", func), "__code__", None)
    if code is not None:
        _hook_codes[code] = (plugin, hook)


def _exit_named(status: int) -> None:
    """``os._exit`` as plugins call it, leaving ``$BUB_HOME/.last-crash``
    first, as the host's handlers do for a segfault: the next ``bub``
    command names the plugin and the hook."""
    try:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code not in _hook_codes:
            frame = frame.f_back
        if frame is not None and _crash_file:
            plugin, hook = _hook_codes[frame.f_code]
            fd = os.open(_crash_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, f"ended the process (os._exit({status}))\n{plugin}\t{hook}\n".encode())
            finally:
                os.close(fd)
    except Exception:  # noqa: BLE001 - never keep the process from ending
        pass
    _real_exit(status)


def _turn_depth(frame: Any) -> int | None:
    """How deep the turn whose hook called us was born inside other turns:
    the ``state`` of the nearest hook frame (its ``_inbound_depth``, 0 when
    it came from a channel); None outside a turn."""
    state = _turn_state(frame)
    return None if state is None else int(state.get("_inbound_depth") or 0)


# Bub 0.6's ``BubFramework`` members the facade does not provide: asking
# for one says so by name (NotImplementedError), not a bare AttributeError,
# so a plugin's failure tells what bub-rs lacks. Methods answer with a
# function that raises when called (``hasattr`` still holds, as under Bub).
_FRAMEWORK_METHODS = frozenset(
    "load_builtin_hooks load_hooks create_cli_app build_prompt continue_prompt build_state resolve_session "
    "hook_report bind_channel_router dispatch_via_channel_router quit_via_channel_router admit_message "
    "steer_message get_channels get_environment get_tape_store get_tape_sidecars "
    "get_agent_hooks get_system_prompt build_tape_context collect_onboard_config".split()
)
_FRAMEWORK_ATTRIBUTES = frozenset(
    "config_file _hook_runtime _agent_hooks _plugin_status _channel_router _tape_store "
    "_steering_inbox _environments".split()
)


def _not_provided(name: str, owner: str = "BubFramework") -> NotImplementedError:
    return NotImplementedError(
        f"{owner}.{name} is not provided by bub-rs's python bridge (the {owner} a plugin gets is a facade); "
        "see docs/python-plugins.md for what it has"
    )


def _lacking(facade: Any, name: str, known: frozenset, owner: str, what: str) -> Exception:
    """What a facade's ``__getattr__`` raises for ``name``: a member of
    Bub's ``owner`` (``known``) it lacks is named (NotImplementedError);
    anything else is an AttributeError, as Bub's object would raise."""
    if name in known:
        return _not_provided(name, owner)
    return AttributeError(f"{type(facade).__name__!r} (bub-rs's {what} facade) has no attribute {name!r}")


class Framework:
    """What a Python plugin's constructor receives instead of Bub's
    ``BubFramework``: the workspace, the plugin list, ``process_inbound``
    (through the message handler the host gave the bridge's channels) and
    the rest of a hook's chain (``_plugin_manager.subset_hook_caller``). A
    member of Bub's framework it lacks raises a NotImplementedError naming
    it."""

    def __getattr__(self, name: str) -> Any:
        if name in _FRAMEWORK_METHODS:

            def missing(*args: Any, **kwargs: Any) -> Any:
                del args, kwargs
                raise _not_provided(name)

            missing.__name__ = name
            return missing
        raise _lacking(self, name, _FRAMEWORK_ATTRIBUTES, "BubFramework", "framework")

    def __init__(self, workspace: str, home: str, host: Any) -> None:
        global _crash_file, _agent
        self.workspace = Path(workspace)
        self.home = Path(home)
        _crash_file = str(self.home / ".last-crash")
        os._exit = _exit_named
        self._plugins: dict[str, Any] = {}
        self._host = host
        self.plugin_manager = PluginManagerFacade(self._plugins, host)
        self._plugin_manager = self.plugin_manager
        _agent = Agent(self)

    async def process_inbound(self, inbound: Any, stream_output: bool = False) -> Any:
        """Bub's ``process_inbound``: the message's turn, run by the host
        (through its message handler, so it queues behind its session's
        running turn), and its ``TurnResult`` (the session, the model's
        output, the outbounds; ``prompt`` and ``state`` stay in the host).

        Called from inside a turn (a tool such as ``schedule.trigger``
        handing a message to its own session), the message is queued and
        the answer is an empty ``TurnResult``: its turn runs after the one
        that asked, which cannot wait for it."""
        del stream_output
        depth = _turn_depth(sys._getframe(1))
        message, lifespan = await inbound_form(inbound)
        if depth is not None and isinstance(message, dict):
            message["_inbound_depth"] = depth + 1
            if lifespan is None:
                await self._host.handle(message)
            else:
                # Around the queued turn, which this call does not wait for.
                await _around_turn(lifespan, self._host.submit(message))
            return _turn_result({"session_id": _session_of(message)})
        if lifespan is not None:
            outcome, closing = await _around_turn(lifespan, self._host.submit(message))
            await closing
            delivery = outcome.result()
        else:
            delivery = await self._host.submit(message)
        failure = _turn_failure(delivery)
        if failure is not None:
            raise failure
        return _turn_result(delivery)

    @contextlib.asynccontextmanager
    async def running(self) -> Any:
        """Bub's ``running()``: the host holds the stores and lifespans for
        as long as it runs, so this scope only hands over an exit stack."""
        async with contextlib.AsyncExitStack() as stack:
            yield stack

    async def get_model_options(self, *, session_id: str, workspace: Any = None) -> Any:
        """Bub's ``get_model_options``: every ``provide_model_options``
        answer (Rust and Python plugins alike, through the host), merged as
        Bub merges them."""
        resolved = self.workspace if workspace is None else Path(workspace).expanduser().resolve()
        results = await self._host.call_all(
            "provide_model_options", {"session_id": session_id, "workspace": str(resolved)}
        )
        from bub.model_selection import ModelChoice, ModelOptions

        merged = ModelOptions()
        for result in results or []:
            if result is None:
                continue
            if isinstance(result, ModelOptions):
                models, current = list(result.models), result.current_model
            else:
                models = [m if isinstance(m, ModelChoice) else ModelChoice(**dict(m)) for m in result.get("models") or []]
                current = result.get("current_model")
            merged = ModelOptions(models=[*merged.models, *models], current_model=merged.current_model or current)
        return merged

    def get_steering_inbox(self) -> Any:
        """The steering inbox of the turn this is called from (the state's
        ``_runtime_steering_inbox``), else None."""
        state = _turn_state(sys._getframe(1))
        return None if state is None else state.get("_runtime_steering_inbox")

    def __repr__(self) -> str:
        return f"<bub-rs framework (python bridge) workspace={str(self.workspace)!r}>"


# Bub 0.6's ``BubAgent`` members: what ``state["_runtime_agent"]`` lacks
# says so by name.
_AGENT_MEMBERS = frozenset(
    "settings home tapes tape run run_stream build_prompt close model_options spill_dir".split()
)


class Agent:
    """``state["_runtime_agent"]`` as a Python hook sees it (Bub's
    ``BubAgent``): its ``framework`` is the facade, whose
    ``_plugin_manager.subset_hook_caller`` reaches the rest of a chain;
    the agent itself runs in the host."""

    def __init__(self, framework: Framework) -> None:
        self.framework = framework

    def __getattr__(self, name: str) -> Any:
        raise _lacking(self, name, _AGENT_MEMBERS, "BubAgent", "agent")

    def __repr__(self) -> str:
        return "<bub-rs agent (python bridge)>"


_agent: Agent | None = None


def runtime_agent() -> Any:
    """The agent facade (``{"$agent": "bub"}`` in the host's state)."""
    return _agent


def _turn_result(delivery: dict) -> Any:
    session_id = str(delivery.get("session_id") or "")
    model_output = str(delivery.get("model_output") or "")
    outbounds = list(delivery.get("outbounds") or [])
    try:
        from bub.turn import TurnResult
    except ImportError:
        return AttrDict(session_id=session_id, prompt=[], model_output=model_output, outbounds=outbounds, state={})
    return TurnResult(session_id=session_id, prompt=[], model_output=model_output, outbounds=outbounds, state={})


def _session_of(message: dict) -> str:
    session = message.get("session_id")
    if session:
        return str(session)
    return f"{message.get('channel', 'default')}:{message.get('chat_id', 'default')}"


# --- channel messages ------------------------------------------------------


async def inbound_form(message: Any) -> tuple[Any, Any]:
    """A message as it crosses into the host, field by field (Bub's
    ``ChannelMessage``, or a dict): media are fetched (``get_url``, so one
    with only a ``data_fetcher`` arrives as a data URL; one with no source
    is dropped, with a warning), private (``_``) fields stay behind, and
    the ``lifespan`` is returned apart: a live object the bridge enters
    and exits around the message's turn."""
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        fields = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
        fields = {k: v for k, v in fields.items() if not k.startswith("_")}
    elif isinstance(message, dict):
        fields = dict(message)
    else:
        return message, None
    lifespan = fields.pop("lifespan", None)
    media = fields.get("media")
    if media:
        fields["media"] = [m for m in [await _media_form(item) for item in media] if m is not None]
    return fields, lifespan


async def _media_form(item: Any) -> dict | None:
    if isinstance(item, dict):
        data = dict(item)
        fetch = data.pop("data_fetcher", None)
        url = data.get("url") or data.get("data")
        if not url and callable(fetch):
            raw = await fetch()
            if raw is not None:
                import base64

                url = f"data:{data.get('mime_type', 'application/octet-stream')};base64,{base64.b64encode(raw).decode()}"
                data["url"] = url
    else:
        get_url = getattr(item, "get_url", None)
        url = await get_url() if callable(get_url) else getattr(item, "url", None)
        data = {
            "type": getattr(item, "type", None),
            "mime_type": getattr(item, "mime_type", None),
            "filename": getattr(item, "filename", None),
            "url": url,
        }
    if not url:
        _log_warning(f"python bridge: a media item ({data.get('type')}, {data.get('mime_type')}) has no url and "
                     "no data; it is left out of the message")
        return None
    return data


def _log_warning(text: str) -> None:
    try:
        from loguru import logger

        logger.warning(text)
    except ImportError:
        print(text, file=sys.stderr)


_tasks: set[asyncio.Task] = set()


def _background(coro: Any) -> asyncio.Future:
    """Runs ``coro`` as a task kept alive until it ends."""
    task = asyncio.ensure_future(coro)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
    return task


def _turn_failure(delivery: Any) -> HostError | None:
    """The error of a turn the host reports as failed or cancelled."""
    if isinstance(delivery, dict) and delivery.get("status") in ("failed", "cancelled"):
        return HostError(delivery.get("error") or f"the turn {delivery.get('status')}")
    return None


async def _around_turn(lifespan: Any, submission: Any) -> tuple[asyncio.Future, asyncio.Future]:
    """Enters a message's ``lifespan``, hands the message over
    (``submission``, which answers when its turn is over) and exits the
    lifespan then, with the turn's failure, in the background: as Bub's
    builtin enters it before ``load_state`` and exits it in ``save_state``.
    Returns (the turn's answer, the exit)."""
    await lifespan.__aenter__()
    outcome = asyncio.ensure_future(submission)
    return outcome, _background(_exit_after(lifespan, outcome))


async def _exit_after(lifespan: Any, outcome: asyncio.Future) -> None:
    error: BaseException | None = None
    try:
        error = _turn_failure(await outcome)
    except BaseException as exc:  # noqa: BLE001 - handed to the lifespan's exit
        error = exc
    finally:
        try:
            await lifespan.__aexit__(type(error) if error else None, error, None)
        except Exception as exc:  # noqa: BLE001
            _log_warning(f"python bridge: a message's lifespan failed to exit: {format_exception(exc)}")


async def deliver(handler: Any, message: Any) -> None:
    """A Python channel's ``await handler(message)``: the message crosses
    field by field and is queued (Bub's ``on_receive``). One with a
    ``lifespan`` (a typing indicator) is entered now and exited when its
    turn is over; the channel does not wait for that."""
    fields, lifespan = await inbound_form(message)
    if lifespan is None:
        await handler._send("handle", fields)
        return
    await _around_turn(lifespan, handler._send("submit", fields))


def _turn_state(frame: Any) -> dict | None:
    """The turn state of the nearest hook or tool call on the stack (a
    hook's ``state``, a tool's ``context.state``), None outside a turn."""
    while frame is not None:
        code = frame.f_code
        if code in _hook_codes or code is _run_tool.__code__:
            if code in _hook_codes:
                state = frame.f_locals.get("state")
            else:
                state = getattr(frame.f_locals.get("context"), "state", None)
            return state if isinstance(state, dict) and "_runtime_workspace" in state else None
        frame = frame.f_back
    return None


class AttrDict(dict):
    """A dict whose keys also read as attributes: what the bridge hands
    Python for host maps (messages, requests), so ``msg["content"]``,
    ``msg.get("content")`` and ``msg.content`` all work."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# Bub 0.6's ``Tape`` members (``bub.core.tape``) the facade lacks.
_TAPE_MEMBERS = frozenset(
    "append append_event info query search handoff anchors entries reset fork merge read "
    "context store".split()
)


class TapeFacade:
    """``ToolContext.tape`` of a tool call made by bub-rs: the tape's name
    (the tape itself lives in the host). Bub's ``Tape`` methods raise a
    NotImplementedError naming them."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> Any:
        raise _lacking(self, name, _TAPE_MEMBERS, "Tape", "tape")

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"<bub-rs tape {self._name!r}>"


def tool_context(tape: str, run_id: str, state: dict, code_mode: bool, command: bool) -> Any:
    try:
        from bub.tools import ToolContext
    except ImportError:
        return AttrDict(tape=TapeFacade(tape), run_id=run_id, state=state, code_mode=code_mode, command=command)
    return ToolContext(tape=TapeFacade(tape), run_id=run_id, state=state, code_mode=code_mode, command=command)


def tool_spec(tool: Any) -> dict:
    return {
        "name": str(tool.name),
        "description": str(getattr(tool, "description", "") or ""),
        "parameters": dict(getattr(tool, "parameters", None) or {"type": "object", "properties": {}}),
        "context": bool(getattr(tool, "context", False)),
        "exposure": str(getattr(tool, "exposure", "auto") or "auto"),
    }


def run_tool(tool: Any, arguments: dict, context: Any, render: bool) -> Any:
    """Bub's ``ToolExecutor._invoke_normalized`` for one call: run, await,
    render with the tool's own renderer outside code mode."""
    return _run_tool(tool, arguments, context, render)


async def _run_tool(tool: Any, arguments: dict, context: Any, render: bool) -> Any:
    if getattr(tool, "context", False):
        value = await _maybe(tool.run(context=context, **arguments))
    else:
        value = await _maybe(tool.run(**arguments))
    if render and getattr(tool, "renderer", None) is not None:
        value = tool.render(value)
    return value


def error_object(kind: str, message: str, details: Any) -> BaseException:
    """The exception ``on_error`` receives: Bub's ``BubError`` when bub is
    installed, else a RuntimeError carrying ``kind``."""
    try:
        from bub.errors import BubError, ErrorKind

        try:
            error_kind = ErrorKind(kind)
        except ValueError:
            error_kind = ErrorKind.UNKNOWN if hasattr(ErrorKind, "UNKNOWN") else list(ErrorKind)[0]
        return BubError(error_kind, message, details=details)
    except Exception:  # noqa: BLE001
        exc = RuntimeError(message)
        exc.kind = kind  # type: ignore[attr-defined]
        exc.details = details  # type: ignore[attr-defined]
        return exc


async def channel_start(channel: Any, stop_event: asyncio.Event) -> None:
    await channel.start(stop_event)


async def channel_stop(channel: Any, stop_event: asyncio.Event) -> None:
    stop_event.set()
    stop = getattr(channel, "stop", None)
    if stop is not None:
        await _maybe(stop())


async def channel_send(channel: Any, message: Any) -> None:
    send = getattr(channel, "send", None)
    if send is None:
        return
    try:
        from bub.channels.message import ChannelMessage

        fields = {f.name for f in dataclasses.fields(ChannelMessage)}
        if isinstance(message, dict) and {"content", "channel", "chat_id"} <= set(message):
            message = ChannelMessage(**{k: v for k, v in message.items() if k in fields})
    except Exception:  # noqa: BLE001 - a dict is what Bub's send accepts too
        pass
    await _maybe(send(message))


def channel_info(channel: Any) -> dict:
    return {
        "enabled": bool(getattr(channel, "enabled", True)),
        "needs_debounce": bool(getattr(channel, "needs_debounce", False)),
    }


def new_event() -> asyncio.Event:
    return asyncio.Event()


# --- Typer commands --------------------------------------------------------

FRAMEWORK: Any = None


def typer_app() -> Any:
    """The app a Python plugin's ``register_cli_commands`` receives: a
    Typer app like Bub's, whose context object is the framework."""
    import typer

    app = typer.Typer(name="bub", add_completion=False)

    @app.callback()
    def _main(ctx: typer.Context) -> None:
        ctx.obj = FRAMEWORK

    return app


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def typer_commands(app: Any) -> list[tuple[str, str]]:
    """(name, help) of every command and group the plugin added."""
    out = []
    for group in getattr(app, "registered_groups", []):
        info = getattr(group.typer_instance, "info", None)
        name = _text(group.name) or _text(getattr(info, "name", None))
        about = _text(group.help) or _text(getattr(info, "help", None))
        if name:
            out.append((name, about.strip().splitlines()[0] if about.strip() else ""))
    for command in getattr(app, "registered_commands", []):
        callback = command.callback
        name = _text(command.name) or (callback.__name__.replace("_", "-") if callback else "")
        about = _text(command.help) or (inspect.getdoc(callback) or "" if callback else "")
        if name:
            out.append((name, about.strip().splitlines()[0] if about.strip() else ""))
    return out


def run_typer(app: Any, argv: list[str]) -> int:
    """Runs the app's click command with ``argv`` (the subcommand first),
    on the calling thread (not the loop: Typer commands call
    ``asyncio.run``); returns the exit status."""
    import typer

    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="bub", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 0


# --- interception hooks ----------------------------------------------------


_EVENTS: Any = ...


def _events() -> Any:
    """``bub.core.events`` (None without Bub), imported once: every
    interception call needs it."""
    global _EVENTS
    if _EVENTS is ...:
        try:
            from bub.core import events
        except ImportError:
            events = None
        _EVENTS = events
    return _EVENTS


@functools.cache
def _builder(cls: type) -> Any:
    """A maker of ``cls`` instances from keyword arguments. For a plain
    frozen dataclass (no ``__post_init__``, no slots) it fills the
    instance's ``__dict__`` as the generated ``__init__`` would, without
    its per-field ``object.__setattr__`` (a third of the cost of building
    a ``ToolCall`` on every interception); anything else is ``cls`` itself."""
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__:
        return cls
    fields = dataclasses.fields(cls)
    if any(not f.init for f in fields):
        return cls
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    factories = [(f.name, f.default_factory) for f in fields if f.default_factory is not dataclasses.MISSING]
    names = {f.name for f in fields}
    new = object.__new__

    def build(**values: Any) -> Any:
        if not names.issuperset(values):
            return cls(**values)  # the dataclass's own error
        obj = new(cls)
        state = obj.__dict__
        state.update(defaults)
        for name, factory in factories:
            if name not in values:
                state[name] = factory()
        state.update(values)
        return obj

    return build


def _error(info: Any) -> Any:
    if not info:
        return None
    return error_object(info.get("kind", "unknown"), info.get("message", ""), info.get("details"))


def tool_call_types() -> Any:
    """(a maker of ``ToolCall``, ``ToolCallDecision``) for the Rust side's
    tool-call path (``src/interception.rs``); None without Bub."""
    ev = _events()
    if ev is None:
        return None
    return (_builder(ev.ToolCall), ev.ToolCallDecision)


def interception_arg(hook: str, name: str, value: Any) -> Any:
    """The host's request / result as Bub's own dataclasses
    (``bub.core.events``), so ``dataclasses.replace`` and ``isinstance``
    work as under Bub. Messages stay dicts (Bub's are ``republic.Message``).
    A tool call is built on the Rust side (``src/interception.rs``)."""
    ev = _events()
    if ev is None or not isinstance(value, dict):
        return value
    if name == "request":
        return _builder(ev.LLMCallRequest)(
            run_id=value.get("run_id", ""),
            model=value.get("model", ""),
            messages=list(value.get("messages") or []),
            tool_names=tuple(value.get("tool_names") or ()),
            max_tokens=value.get("max_tokens"),
        )
    if name == "result" and hook == "after_llm_call":
        return _builder(ev.LLMCallResult)(
            run_id=value.get("run_id", ""),
            text=value.get("text"),
            tool_calls=list(value.get("tool_calls") or []),
            usage=value.get("usage"),
            error=_error(value.get("error")),
            duration_ms=int(value.get("duration_ms") or 0),
        )
    if name == "result" and hook == "after_tool_call":
        return _builder(ev.ToolCallResult)(
            run_id=value.get("run_id", ""),
            tool=value.get("tool", ""),
            arguments=dict(value.get("arguments") or {}),
            result=value.get("result"),
            error=_error(value.get("error")),
            duration_ms=int(value.get("duration_ms") or 0),
        )
    return value


def interception_result(hook: str, value: Any) -> Any:
    """A ``before_llm_call`` answer in the host's form (a
    ``ToolCallDecision`` is read on the Rust side, ``src/interception.rs``);
    anything else is passed on for the host to reject as it rejects any
    plugin's."""
    ev = _events()
    if ev is None:
        return value
    if hook == "before_llm_call":
        if isinstance(value, ev.LLMCallRequest):
            return {
                "request": {
                    "run_id": value.run_id,
                    "model": value.model,
                    "messages": [m if isinstance(m, dict) else jsonable(m)[1] for m in value.messages],
                    "tool_names": list(value.tool_names),
                    "max_tokens": value.max_tokens,
                }
            }
        if isinstance(value, ev.LLMCallDecision):
            return {"decision": {"action": value.action, "text": value.text}}
    return value


# --- resources (tape stores, lifespans, inboxes, environments, streams) ----


class Unsupported(Exception):
    """A method the Python object does not have (the host reads it as
    "nothing to do" for optional methods)."""


async def _maybe(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _entry_dict(entry: Any) -> dict:
    if isinstance(entry, dict):
        return entry
    return {
        "id": int(getattr(entry, "id", 0) or 0),
        "kind": str(getattr(entry, "kind", "")),
        "payload": dict(getattr(entry, "payload", {}) or {}),
        "meta": dict(getattr(entry, "meta", {}) or {}),
        "date": str(getattr(entry, "date", "") or ""),
    }


def _entry(value: dict) -> Any:
    try:
        from bub.core.tape import TapeEntry
    except ImportError:
        return AttrDict(value)
    return TapeEntry(
        id=int(value.get("id", 0) or 0),
        kind=value.get("kind", ""),
        payload=dict(value.get("payload") or {}),
        meta=dict(value.get("meta") or {}),
        date=value.get("date") or "",
    )


def _query(store: Any, q: dict) -> Any:
    from bub.core.store import TapeQuery

    return TapeQuery(
        tape=q.get("tape", ""),
        store=store,
        _query=q.get("query"),
        _after_anchor=q.get("after_anchor"),
        _after_last=bool(q.get("last_anchor")),
        _between_anchors=tuple(q["between_anchors"]) if q.get("between_anchors") else None,
        _between_dates=tuple(q["between_dates"]) if q.get("between_dates") else None,
        _kinds=tuple(q.get("kinds") or ()),
        _limit=q.get("limit"),
    )


async def _lifespan_enter(obj: Any, holder: dict) -> None:
    from contextlib import asynccontextmanager, contextmanager
    from collections.abc import AsyncIterator, Iterator

    if isinstance(obj, AsyncIterator):
        cm: Any = asynccontextmanager(lambda: obj)()
    elif isinstance(obj, Iterator):
        cm = contextmanager(lambda: obj)()
    else:
        cm = obj
    if hasattr(cm, "__aenter__"):
        await cm.__aenter__()
        holder["exit"] = cm.__aexit__
    elif hasattr(cm, "__enter__"):
        cm.__enter__()
        holder["exit"] = cm.__exit__
    else:
        holder["exit"] = None


async def _lifespan_exit(holder: dict, error: Any) -> None:
    exit_ = holder.pop("exit", None)
    if exit_ is None:
        return
    exc = _error(error)
    if exc is None:
        await _maybe(exit_(None, None, None))
    else:
        await _maybe(exit_(type(exc), exc, None))


async def _run_process(env: Any, request: dict) -> dict:
    command: Any = request.get("command") or list(request.get("argv") or [])
    env_vars = {k: str(v) for k, v in (request.get("env") or {}).items()}
    process = await env.spawn(command, cwd=request.get("cwd"), env=env_vars or None)
    close = getattr(process, "close_stdin", None)
    if close is not None:
        await _maybe(close())
    timeout = request.get("timeout_ms")
    try:
        out, err = await asyncio.wait_for(
            asyncio.gather(process.stdout.read(), process.stderr.read()),
            None if timeout is None else timeout / 1000,
        )
    except TimeoutError:
        kill = getattr(process, "kill", None) or getattr(process, "terminate", None)
        if kill is not None:
            await _maybe(kill())
        return {"returncode": None, "stdout": "", "stderr": "", "timed_out": True}
    code = await process.wait()
    return {
        "returncode": code,
        "stdout": out.decode("utf-8", errors="replace") if isinstance(out, bytes) else str(out),
        "stderr": err.decode("utf-8", errors="replace") if isinstance(err, bytes) else str(err),
        "timed_out": False,
    }


def _event_dict(event: Any) -> dict:
    if isinstance(event, dict):
        return {"kind": str(event.get("kind", "")), "data": event.get("data")}
    data = getattr(event, "data", None)
    ok, form = jsonable(data) if not isinstance(data, (dict, list, str, int, float, bool, type(None))) else (True, data)
    return {"kind": str(getattr(event, "kind", "")), "data": form if ok else repr(data)}


async def resource_call(kind: str, obj: Any, method: str, args: dict, holder: dict) -> Any:
    """One host method call on a Python resource, as Bub calls it."""
    if kind == "lifespan":
        if method == "enter":
            return await _lifespan_enter(obj, holder)
        if method == "exit":
            return await _lifespan_exit(holder, args.get("error"))
    elif kind == "tape_store":
        if method == "list_tapes":
            return list(await _maybe(obj.list_tapes()))
        if method == "reset":
            return await _maybe(obj.reset(args["tape"]))
        if method == "fetch_all":
            entries = await _maybe(obj.fetch_all(_query(obj, args["query"])))
            return [_entry_dict(e) for e in entries]
        if method == "append":
            entry = _entry(args["entry"])
            stored = await _maybe(obj.append(args["tape"], entry))
            # Bub's protocol returns None; a store that returns the entry
            # as stored (with its id) is read.
            return _entry_dict(stored if stored is not None else entry)
        if method in ("enter", "exit"):
            hook = getattr(obj, "__aenter__" if method == "enter" else "__aexit__", None)
            if hook is None:
                raise Unsupported(method)
            return await _maybe(hook() if method == "enter" else hook(None, None, None))
    elif kind == "steering_inbox":
        state = args.get("state") or {}
        if method == "enqueue_message":
            return await _maybe(obj.enqueue_message(args["message"], state))
        if method == "drain_messages":
            return list(await _maybe(obj.drain_messages(state)))
        if method == "message_count":
            return int(await _maybe(obj.message_count(state)))
    elif kind == "environment":
        if method == "workspace":
            value = getattr(obj, "workspace", None)
            return None if value is None else str(value)
        if method == "read_text":
            return await _maybe(obj.read_text(args["path"]))
        if method == "write_text":
            return await _maybe(obj.write_text(args["path"], args["content"]))
        if method == "resolve_path":
            return str(await _maybe(obj.resolve_path(args["path"])))
        if method == "run":
            return await _run_process(obj, args["request"])
        if method == "close":
            close = getattr(obj, "close", None) or getattr(obj, "aclose", None)
            if close is None:
                raise Unsupported(method)
            return await _maybe(close())
    elif kind == "stream":
        if method in ("next", "next_many"):
            try:
                event = await obj.__anext__()
            except StopAsyncIteration:
                return None if method == "next" else []
            return _event_dict(event) if method == "next" else [_event_dict(event)]
        if method == "close":
            aclose = getattr(obj, "aclose", None)
            if aclose is not None:
                await aclose()
            return None
    raise Unsupported(f"a Python {kind} has no method `{method}`")


def tape_context(value: Any) -> Any:
    """``build_tape_context``'s TapeContext as the host's spec, or None when
    it cannot be expressed (a ``select`` function)."""
    if getattr(value, "select", None) is not None:
        return None
    anchor = getattr(value, "anchor", None)
    if anchor is not None and not isinstance(anchor, str):
        anchor = "$last"
    return {"anchor": anchor}


def stream_of(value: Any) -> Any:
    """``run_model_stream``'s answer as an async iterator."""
    if hasattr(value, "__anext__"):
        return value
    if hasattr(value, "__aiter__"):
        return value.__aiter__()
    raise TypeError(f"run_model_stream must return an async iterator, got {type(value).__name__}")
