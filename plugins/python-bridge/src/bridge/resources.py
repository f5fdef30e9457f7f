# Resource objects (tape stores, lifespans, inboxes, environments, streams)
# called by method name from the host.
#
# Executed into the ``bub_rs_bridge`` module after the parts before it
# (``interp.rs`` lists the order): the names of ``core.py`` and of the
# earlier parts are this file's globals.

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
