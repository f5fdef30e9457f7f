# What a plugin gets for the host's objects: the plugin manager, the
# framework, the agent, and the members of Bub's that bub-rs does not
# provide (each says so by name).
#
# Executed into the ``bub_rs_bridge`` module after the parts before it
# (``interp.rs`` lists the order): the names of ``core.py`` and of the
# earlier parts are this file's globals.

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
