"""A module entry point (not callable): module-level hookimpls, as
bub-web-search writes them."""

from bub import hookimpl


@hookimpl
def provide_model_options(session_id, workspace):
    return None


@hookimpl
def dispatch_outbound(message):
    from bub.envelope import field_of

    from bub_rs_probe.plugin import trace

    trace(f"dispatch_outbound {field_of(message, 'content', '')!r}")
    return True
