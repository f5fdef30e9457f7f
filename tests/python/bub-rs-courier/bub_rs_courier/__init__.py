"""A Bub channel plugin of bub-rs's tests.

The ``courier`` channel hands one message (``$BUB_COURIER_MESSAGE``) to the
host's message handler when it starts, from a task on the loop, and traces
what the host sends back; the plugin also traces the interception hooks.
Traces go to ``$BUB_PROBE_TRACE``.
"""

import asyncio
import os

import dataclasses

from bub import hookimpl
from bub.core.events import LLMCallDecision, LLMCallRequest, ToolCall, ToolCallDecision


def trace(line: str) -> None:
    path = os.environ.get("BUB_PROBE_TRACE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


class Courier:
    name = "courier"

    def __init__(self, handler) -> None:
        self.handler = handler
        self.task = None

    @property
    def needs_debounce(self) -> bool:
        return False

    async def start(self, stop_event: asyncio.Event) -> None:
        trace("courier.start")
        text = os.environ.get("BUB_COURIER_MESSAGE")
        if text:
            self.task = asyncio.get_running_loop().create_task(self._deliver(text))

    async def _deliver(self, text: str) -> None:
        if os.environ.get("BUB_COURIER_AS") == "channel_message":
            await self.handler(channel_message(text))
        else:
            await self.handler(
                {"session_id": "courier:1", "channel": "courier", "chat_id": "1", "content": text}
            )
        trace("courier.delivered")

    async def stop(self) -> None:
        trace("courier.stop")

    async def send(self, message) -> None:
        content = message.get("content") if isinstance(message, dict) else getattr(message, "content", "")
        trace(f"courier.send {content}")


# The 1x1 PNG a ``data_fetcher`` hands over (as feishu's and telegram's do).
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


class Typing:
    """A message's lifespan as discord.py's ``channel.typing()`` is one: an
    async context manager entered around the message's turn."""

    async def __aenter__(self):
        trace("typing.enter")
        return self

    async def __aexit__(self, kind, error, tb):
        trace(f"typing.exit {kind.__name__ if kind else None}")
        return False


def channel_message(text: str):
    """A ``ChannelMessage`` built the way bub-discord and bub-feishu build
    theirs: a typing lifespan, and media only a ``data_fetcher`` can get."""
    from bub.channels.message import ChannelMessage, MediaItem

    async def fetch() -> bytes:
        trace("media.fetched")
        return PIXEL

    return ChannelMessage(
        session_id="courier:1",
        channel="courier",
        chat_id="1",
        content=text,
        media=[
            MediaItem(type="image", mime_type="image/png", filename="pixel.png", data_fetcher=fetch),
            MediaItem(type="image", mime_type="image/png", filename="nothing.png"),
        ],
        lifespan=Typing(),
    )


class CourierPlugin:
    def __init__(self, framework) -> None:
        self.framework = framework

    @hookimpl
    def provide_channels(self, message_handler):
        return [Courier(message_handler)]

    @hookimpl
    def system_prompt(self, prompt, state):
        """With ``$BUB_COURIER_REST``, the call-parent idiom from a sync hook:
        the rest of the chain answers at once (a list, as pluggy's)."""
        if not os.environ.get("BUB_COURIER_REST"):
            return None
        agent = state.get("_runtime_agent")
        rest = agent.framework._plugin_manager.subset_hook_caller("system_prompt", [self])
        answers = rest(prompt=prompt, state=state)
        trace(f"rest.system_prompt {type(answers).__name__} {len(answers)} probed={'You are probed.' in answers}")
        return None

    @hookimpl
    def onboard_config(self, current_config):
        """Asks as Bub's ``inquirer`` does: through an event loop of its own."""

        async def ask() -> str:
            await asyncio.sleep(0)
            return os.environ.get("BUB_COURIER_ONBOARD", "")

        answer = asyncio.run(ask())
        if not answer:
            return None
        return {"courier": {"greeting": answer}}

    @hookimpl
    def before_tool_call(self, call, state):
        assert isinstance(call, ToolCall), type(call)
        trace(f"before_tool_call {call.tool} {dict(call.arguments)}")
        text = call.arguments.get("text")
        if text == "forbidden":
            return ToolCallDecision.deny("courier says no")
        if text == "rewrite":
            return ToolCallDecision.proceed({"text": "rewritten"})
        if text == "replace":
            return ToolCallDecision.replace("replaced by the courier")
        return None

    @hookimpl
    async def after_tool_call(self, call, result, state):
        trace(f"after_tool_call {call.tool}")
        return None

    @hookimpl
    def before_llm_call(self, request, state):
        assert isinstance(request, LLMCallRequest), type(request)
        trace(f"before_llm_call {request.model}")
        finish = os.environ.get("BUB_COURIER_FINISH")
        if finish:
            return LLMCallDecision.finish(finish)
        model = os.environ.get("BUB_COURIER_MODEL")
        if model:
            return dataclasses.replace(request, model=model)
        return None

    @hookimpl
    def after_llm_call(self, request, result, state):
        trace(f"after_llm_call {result.text}")


# --- resources, each only when its variable is set (read at import) ---------


class JsonTapeStore:
    """Bub's sync ``TapeStore`` protocol over a JSON file in the home."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _load(self) -> dict:
        import json

        try:
            with open(self.path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def _save(self, tapes: dict) -> None:
        import json

        with open(self.path, "w", encoding="utf-8") as f:
            json.dump(tapes, f)

    def list_tapes(self):
        return sorted(self._load())

    def reset(self, tape):
        tapes = self._load()
        tapes.pop(tape, None)
        self._save(tapes)

    def fetch_all(self, query):
        from bub.core.tape import TapeEntry

        trace(f"store.fetch_all {query.tape}")
        rows = self._load().get(query.tape, [])
        entries = [TapeEntry(**row) for row in rows]
        if query._query:
            entries = [e for e in entries if query._query in str(e.payload)]
        return entries

    def append(self, tape, entry):
        tapes = self._load()
        rows = tapes.setdefault(tape, [])
        rows.append({"id": len(rows) + 1, "kind": entry.kind, "payload": entry.payload, "meta": entry.meta, "date": entry.date})
        self._save(tapes)
        trace(f"store.append {entry.kind}")


async def _lifespan():
    trace("lifespan.enter")
    try:
        yield
    finally:
        trace("lifespan.exit")


async def _stream(prompt):
    from bub.streaming import StreamEvent

    text = prompt if isinstance(prompt, str) else str(prompt)
    for word in ["streamed:", text[-12:]]:
        await asyncio.sleep(0)
        yield StreamEvent("text", {"delta": word + " "})


if os.environ.get("BUB_COURIER_STORE"):

    def _provide_tape_store(self):
        return JsonTapeStore(os.path.join(os.environ["BUB_HOME"], "courier-tapes.json"))

    CourierPlugin.provide_tape_store = hookimpl(_provide_tape_store)

if os.environ.get("BUB_COURIER_LIFESPAN"):

    def _provide_lifespan(self):
        return _lifespan()

    CourierPlugin.provide_lifespan = hookimpl(_provide_lifespan)

if os.environ.get("BUB_COURIER_STREAM"):

    def _run_model_stream(self, prompt, session_id, state):
        return _stream(prompt)

    CourierPlugin.run_model_stream = hookimpl(_run_model_stream)
