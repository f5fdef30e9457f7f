"""The Python twin of the Rust plugins the differential scenarios install
(tool-policy's deny / replace rules, a before_llm_call finish decision);
which one is chosen by BUBDIFF_MODE."""
import os

from bub.core.events import LLMCallDecision, ToolCallDecision
from bub.hooks.specs import hookimpl

MODE = os.environ.get("BUBDIFF_MODE", "")


class Plugin:
    def __init__(self, framework=None):
        pass

    if MODE in ("deny", "replace"):
        @hookimpl(tryfirst=True)
        def before_tool_call(self, call, state):
            if call.tool != "fs_read":
                return None
            if MODE == "deny":
                return ToolCallDecision.deny("blocked by policy: no reading")
            return ToolCallDecision.replace("replaced result")

    if MODE == "finish":
        @hookimpl
        def before_llm_call(self, request, state):
            return LLMCallDecision.finish("budget exhausted")
