"""The plugin of the python bridge benchmark, run by both hosts: bub-rs
through the bridge (tests/benches/python_bridge.rs) and Bub 0.6.0a3 itself
(tests/python/bench_bub.py). Its hooks are hook_bench.py's plugins, one
class: every turn stage as ``AllStagesPlugin`` (same sync/async split),
``system_prompt`` as ``SystemPrompt`` and ``before_tool_call`` as
``BeforeToolSync``. Each hook counts its calls (read through
``onboard_config``, untimed)."""

from bub import hookimpl


class BenchPlugin:
    STAGES = ("resolve_session", "load_state", "build_prompt", "run_model", "save_state",
              "render_outbound", "dispatch_outbound", "system_prompt", "before_tool_call")

    def __init__(self, framework=None) -> None:
        self.counts = dict.fromkeys(self.STAGES, 0)
        self.block = "<plugin_0>be helpful</plugin_0>"

    @hookimpl
    def resolve_session(self, message):
        self.counts["resolve_session"] += 1
        return f"{message['channel']}:{message['chat_id']}"

    @hookimpl
    async def load_state(self, message, session_id):
        self.counts["load_state"] += 1
        return {"session_id": session_id}

    @hookimpl
    async def build_prompt(self, message, session_id, state):
        self.counts["build_prompt"] += 1
        return [message["content"]]

    @hookimpl
    async def run_model(self, prompt, session_id, state):
        self.counts["run_model"] += 1
        return "pong"

    @hookimpl
    async def save_state(self, session_id, state, message, model_output):
        self.counts["save_state"] += 1

    @hookimpl
    def render_outbound(self, message, session_id, state, model_output):
        self.counts["render_outbound"] += 1
        return [{"session_id": session_id, "channel": message["channel"],
                 "chat_id": message["chat_id"], "content": model_output}]

    @hookimpl
    async def dispatch_outbound(self, message):
        self.counts["dispatch_outbound"] += 1
        return True

    @hookimpl
    def system_prompt(self, prompt, state):
        self.counts["system_prompt"] += 1
        return self.block

    @hookimpl
    def before_tool_call(self, call, state):
        from bub.core.events import ToolCallDecision

        self.counts["before_tool_call"] += 1
        args = call.arguments
        return ToolCallDecision.proceed(arguments={**args, "hops": args["hops"] + 1})

    @hookimpl
    def onboard_config(self, current_config):
        return dict(self.counts)
