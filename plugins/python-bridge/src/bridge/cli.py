# A plugin's Typer commands: the app ``register_cli_commands`` receives and
# how ``bub <command>`` runs one.
#
# Executed into the ``bub_rs_bridge`` module after the parts before it
# (``interp.rs`` lists the order): the names of ``core.py`` and of the
# earlier parts are this file's globals.

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
