# Finding Bub's plugins as Bub 0.6 does (entry points of group ``bub``, in
# order), reading their pluggy hookimpls, and the config and skill folders
# they read.
#
# Executed into the ``bub_rs_bridge`` module after the parts before it
# (``interp.rs`` lists the order): the names of ``core.py`` and of the
# earlier parts are this file's globals.

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
