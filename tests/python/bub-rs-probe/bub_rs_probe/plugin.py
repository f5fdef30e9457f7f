"""A Bub plugin exercising the hook kinds the python bridge forwards.

Every hook appends a line to ``$BUB_PROBE_TRACE`` (when set) so tests can
see the call order; behaviour is deterministic.
"""

from __future__ import annotations

import asyncio
import os
import threading

from bub import hookimpl, tool
from bub.envelope import field_of
from bub.tools import ToolContext


def trace(line: str) -> None:
    path = os.environ.get("BUB_PROBE_TRACE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


class Counter:
    """A live object kept in the turn state (not data: it has a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def bump(self) -> int:
        with self.lock:
            self.count += 1
            return self.count


async def _flood(self, session_id) -> None:
    """What a careless plugin does: hand messages back to the host from
    inside its turn, each of which is a turn that hands back more."""
    for i in range(int(os.environ.get("BUB_PROBE_FLOOD", "0"))):
        try:
            await self.framework.process_inbound(
                {"session_id": session_id, "channel": "courier", "chat_id": "1", "content": f"py:flood {i}"}
            )
        except Exception as e:  # noqa: BLE001 - traced for the test
            trace(f"flood refused: {e}")


async def _run_model(self, prompt, session_id, state):
    if os.environ.get("BUB_PROBE_FLOOD"):
        trace(f"flood turn depth={state.get('_inbound_depth', 0)}")
        await _flood(self, session_id)
        return "flooded"
    counter = state.get("probe_counter")
    n = counter.bump() if isinstance(counter, Counter) else -1
    trace(f"run_model seen={state.get('probe_prompt_seen')} n={n}")
    notes = state.get("probe_notes")
    if isinstance(notes, list):
        # In place, as plugins do: Bub's hooks of a turn share one dict.
        notes.append("run_model")
    if "boom" in str(prompt):
        raise ValueError("probe exploded on purpose")
    running = asyncio.get_running_loop() is not None
    # This coroutine never waits: the bridge runs it in one step, yet
    # inside a task, as Bub awaits it inside its caller's.
    in_task = asyncio.current_task() is not None
    return f"python says: {prompt} (count {n}, loop {running}, task {in_task})"


class Probe:
    def __init__(self, framework) -> None:
        self.framework = framework
        self.counter = Counter()
        self.loop_thread = None
        trace(f"init framework={type(framework).__name__}")

    @hookimpl(tryfirst=True)
    def resolve_session(self, message):
        trace("resolve_session")
        self.loop_thread = threading.current_thread().name
        chat = field_of(message, "chat_id", "")
        content = str(field_of(message, "content", ""))
        if content.startswith("py:framework "):
            # What a plugin reaching into Bub's framework meets here.
            name = content.split()[1]
            try:
                member = getattr(self.framework, name)
                if callable(member):
                    member()
            except Exception as e:  # noqa: BLE001 - traced for the test
                trace(f"framework.{name}: {type(e).__name__}: {e}")
        if content.startswith("py:"):
            return f"probe:{chat}"
        return None

    @hookimpl
    async def load_state(self, message, session_id):
        if "hang" in str(field_of(message, "content", "")):
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                trace("load_state cancelled")
                raise
        await asyncio.sleep(0)
        if str(field_of(message, "content", "")).startswith("py:options"):
            options = await self.framework.get_model_options(session_id=session_id)
            trace(f"options current={options.current_model} models={[m.id for m in options.models]}")
        trace(f"load_state {session_id}")
        return {"probe_counter": self.counter, "probe_loaded": True}

    @hookimpl
    async def build_prompt(self, message, session_id, state):
        trace(f"build_prompt live={type(state.get('probe_counter')).__name__}")
        content = field_of(message, "content", "")
        if "exit the process" in str(content):
            os._exit(7)
        if "block the loop" in str(content):
            # What a careless plugin does: block the loop in an async hook.
            import time

            time.sleep(float(os.environ.get("BUB_PROBE_BLOCK_SECONDS", "30")))
        if not str(content).startswith("py:"):
            return None
        state["probe_prompt_seen"] = True
        state["probe_notes"] = ["build_prompt"]
        return f"[probe] {content[3:]}"

    @hookimpl(trylast=True)
    def system_prompt(self, prompt, state):
        return "You are probed."

    if os.environ.get("BUB_PROBE_MODEL"):
        # The model only when asked for: without it, the host's own model
        # (and command mode) answers.
        run_model = hookimpl(_run_model)

    @hookimpl
    def save_state(self, session_id, state, message, model_output):
        trace(f"save_state {session_id} output={model_output!r} notes={state.get('probe_notes')}")

    @hookimpl
    def on_error(self, stage, error, message):
        trace(f"on_error {stage} {type(error).__name__}: {error}")

    @hookimpl
    def onboard_config(self, current_config):
        return {"probe": {"enabled": True}}


@tool(name="probe.echo", context=True)
def probe_echo(text: str, *, context: ToolContext) -> str:
    """Echo text with the session's live counter."""
    counter = context.state.get("probe_counter")
    n = counter.bump() if isinstance(counter, Counter) else -1
    return f"echo {text} (counter {n}, tape {context.tape.name})"
