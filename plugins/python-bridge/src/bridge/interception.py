# The interception hooks' arguments and results as Bub's own dataclasses
# (``ToolCall``, ``LLMCallRequest``, decisions), built from the host's values.
#
# Executed into the ``bub_rs_bridge`` module after the parts before it
# (``interp.rs`` lists the order): the names of ``core.py`` and of the
# earlier parts are this file's globals.

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
