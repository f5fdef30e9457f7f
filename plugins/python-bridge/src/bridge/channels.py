# Channel messages crossing field by field (lifespans, media), delivery to
# the host's message handler, tool calls and channels run on the loop.
#
# Executed into the ``bub_rs_bridge`` module after the parts before it
# (``interp.rs`` lists the order): the names of ``core.py`` and of the
# earlier parts are this file's globals.

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
