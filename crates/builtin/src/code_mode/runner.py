"""bub-rs code mode: the child process that runs the model's code.

bub runs this file with `python3 -u -c` in the workspace; it uses only the
standard library. JSON lines both ways, as Bub 0.6's runner:

- bub -> child: first {"type": "run", "code", "filename", "tools"}, then
  {"type": "result", "id", "value"} or {"type": "error", "id", "message"}
  for each tool call.
- child -> bub: {"type": "call", "id", "name", "arguments"} per tool call,
  {"type": "output", "data"} for what the code prints, and last
  {"type": "done"} or {"type": "failed", "error", "traceback"}.

The code also gets a `republic` module (preset as a global and importable),
as Bub's runner gives it: media values, messages, and models whose calls go
to bub as tool calls named `republic.<operation>`, so the credentials stay
in bub. Republic values cross as JSON objects with a "$republic" key.
"""

import ast
import asyncio
import base64
import builtins
import inspect
import io
import itertools
import json
import linecache
import sys
import threading
import time
import traceback
import types

FLUSH_SIZE = 1 << 13
FLUSH_INTERVAL = 0.2


class BubError(Exception):
    """A tool call failed, or a hook denied it, on bub's side (Bub's name
    for it; its text is `[kind] message`)."""


REPUBLIC_KEY = "$republic"


class _Media:
    kind = "media"

    def __init__(self, media_type, data=None, url=None):
        if data is None and url is None:
            raise ValueError(f"{type(self).__name__} needs data or a url")
        self.media_type = media_type
        self.data = data
        self.url = url

    @property
    def base64_data(self):
        if self.data is None:
            raise ValueError(f"This {self.kind} has no inline data")
        return base64.b64encode(self.data).decode("ascii")

    @property
    def data_url(self):
        if self.url is not None:
            return self.url
        return f"data:{self.media_type};base64,{self.base64_data}"

    def __eq__(self, other):
        return type(other) is type(self) and (self.media_type, self.data, self.url) == (
            other.media_type,
            other.data,
            other.url,
        )

    def __hash__(self):
        return hash((type(self), self.media_type, self.data, self.url))

    def __repr__(self):
        source = f"url={self.url!r}" if self.url is not None else f"data=<{len(self.data or b'')} bytes>"
        return f"{type(self).__name__}(media_type={self.media_type!r}, {source})"

    def to_json(self):
        data = None if self.data is None else self.base64_data
        return {REPUBLIC_KEY: self.kind, "media_type": self.media_type, "data": data, "url": self.url}


class Image(_Media):
    kind = "image"


class Audio(_Media):
    kind = "audio"


class Video(_Media):
    kind = "video"


MEDIA = {"image": Image, "audio": Audio, "video": Video}


class Message:
    """A chat message whose content mixes text and media."""

    def __init__(self, role, content):
        self.role = role
        self.content = content

    @property
    def text(self):
        return "".join(item for item in self.content if isinstance(item, str))

    def __repr__(self):
        return f"Message(role={self.role!r}, content={self.content!r})"

    def to_json(self):
        return {REPUBLIC_KEY: "message", "role": self.role, "content": self.content}


def system(text):
    return Message("system", [text])


def user(*content):
    return Message("user", list(content))


def assistant(*content):
    return Message("assistant", list(content))


class _Question:
    kind = "question"

    def __init__(self, instructions, criteria=None):
        self.instructions = instructions
        self.criteria = criteria

    def __repr__(self):
        return f"{type(self).__name__}(instructions={self.instructions!r}, criteria={self.criteria!r})"

    def to_json(self):
        return {REPUBLIC_KEY: self.kind, "instructions": self.instructions, "criteria": self.criteria}


class Noul(_Question):
    """A yes/no question answered with the probability of yes."""

    kind = "noul"


class Choice(_Question):
    """Pick one option; `criteria` maps options to descriptions or lists option names."""

    kind = "choice"

    def __init__(self, instructions, criteria):
        super().__init__(instructions, criteria)


class Score(_Question):
    """Rate along ordered levels, from lowest to highest."""

    kind = "score"

    def __init__(self, instructions, criteria):
        super().__init__(instructions, criteria)


class _Record(types.SimpleNamespace):
    """A result whose fields are attributes."""


class DecisionResponse(_Record):
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.__dict__["answers"][name]
        except KeyError:
            raise AttributeError(name) from None


class EmbeddingResponse(_Record):
    @property
    def vector(self):
        return self.vectors[0]


def record(value, kind=_Record):
    if isinstance(value, dict) and REPUBLIC_KEY not in value:
        return kind(**{key: record(item) for key, item in value.items()})
    return value


def json_default(value):
    if isinstance(value, (_Media, Message, _Question)):
        return value.to_json()
    if isinstance(value, (set, frozenset)):
        return list(value)
    return repr(value)


def json_object(value):
    kind = value.get(REPUBLIC_KEY)
    if kind in MEDIA:
        data = value.get("data")
        return MEDIA[kind](value["media_type"], data=None if data is None else base64.b64decode(data), url=value.get("url"))
    if kind == "message":
        return Message(value["role"], list(value.get("content") or []))
    return value


class TextDelta(_Record):
    """`chunk` of answer text."""


class ReasoningDelta(_Record):
    """`chunk` of reasoning text, or its summary."""


class RefusalDelta(_Record):
    """`chunk` of text explaining why the model declines to answer."""


class UsageDelta(_Record):
    """`usage` added since the previous usage event."""


class ImageReady(_Record):
    """An `image` generated by the model."""


class CitationAdded(_Record):
    """A `citation` of a source."""


class Completed(_Record):
    """The last event, carrying the full `response`."""


class OtherEvent(_Record):
    """An `event` (its type name) that is not forwarded to code."""


EVENTS = {
    "text": TextDelta,
    "reasoning": ReasoningDelta,
    "refusal": RefusalDelta,
    "usage": UsageDelta,
    "image": ImageReady,
    "citation": CitationAdded,
    "completed": Completed,
}


def event_of(data):
    kind = data.pop("type")
    return EVENTS.get(kind, OtherEvent)(**{key: record(value) for key, value in data.items()})


def chat_arguments(spec, prompt, options):
    if isinstance(prompt, (str, Message)):
        prompt = [prompt]
    messages = [user(item) if isinstance(item, str) else item for item in prompt]
    return {"spec": spec, "messages": messages, "options": options}


class Stream:
    """An in-progress response: `async with` it, then `async for` its events.

    After the iteration ends, the full response is `stream.response`, with
    shortcuts `text`, `reasoning` and `token_usage`.
    """

    def __init__(self, call, arguments):
        self._call = call
        self._arguments = arguments
        self._id = None
        self._iterated = False
        self._response = None

    async def __aenter__(self):
        self._id = (await self._call("republic.stream_open", self._arguments))["stream"]
        return self

    async def __aexit__(self, *exc_info):
        if self._id is not None:
            stream_id, self._id = self._id, None
            await self._call("republic.stream_close", {"stream": stream_id})

    async def __aiter__(self):
        if self._id is None:
            raise RuntimeError("Enter the stream with 'async with' before iterating it")
        if self._iterated:
            raise RuntimeError("A stream can only be iterated once; read stream.response instead")
        self._iterated = True
        while True:
            batch = await self._call("republic.stream_next", {"stream": self._id})
            for data in batch["events"]:
                event = event_of(data)
                if isinstance(event, Completed):
                    self._response = event.response
                yield event
            if batch["done"]:
                self._id = None
                return

    @property
    def response(self):
        if self._response is None:
            raise RuntimeError("The stream has not been fully consumed")
        return self._response

    @property
    def text(self):
        return self.response.text

    @property
    def reasoning(self):
        return self.response.reasoning

    @property
    def token_usage(self):
        return self.response.token_usage


class _Model:
    def __init__(self, call, spec):
        self._call = call
        self.spec = spec

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        return None

    def __repr__(self):
        return f"{type(self).__name__}({self.spec!r})"


class ChatModel(_Model):
    """A chat model served by bub."""

    async def chat(self, prompt, **options):
        """Send the conversation and wait for the complete response."""
        return record(await self._call("republic.chat", chat_arguments(self.spec, prompt, options)))

    def stream(self, prompt, **options):
        """Stream the response. Use as `async with model.stream(...) as stream`."""
        return Stream(self._call, chat_arguments(self.spec, prompt, options))


class EmbeddingModel(_Model):
    """An embedding model served by bub."""

    async def embed(self, text, *, dimensions=None):
        """Embed one text; the vector is `response.vector`."""
        return await self.embed_many([text], dimensions=dimensions)

    async def embed_many(self, texts, *, dimensions=None):
        """Embed several texts in one request; `response.vectors` follows input order."""
        arguments = {"spec": self.spec, "texts": list(texts), "dimensions": dimensions}
        return record(await self._call("republic.embed", arguments), EmbeddingResponse)


class DecisionModel(_Model):
    """A decision model served by bub."""

    async def decide(self, state, *, questions):
        """Answer every question about `state`. Answers come back under the same ids."""
        result = await self._call("republic.decide", {"spec": self.spec, "state": state, "questions": questions})
        response = record(result, DecisionResponse)
        response.answers = {key: record(answer) for key, answer in result["answers"].items()}
        return response


def republic_module(call):
    module = types.ModuleType("republic", "Republic models and media, served by bub.")
    events = types.ModuleType("republic.events")
    events.__dict__.update(
        TextDelta=TextDelta,
        ReasoningDelta=ReasoningDelta,
        RefusalDelta=RefusalDelta,
        UsageDelta=UsageDelta,
        ImageReady=ImageReady,
        CitationAdded=CitationAdded,
        Completed=Completed,
        OtherEvent=OtherEvent,
    )
    decisions = types.ModuleType("republic.decisions")
    decisions.__dict__.update(Noul=Noul, Choice=Choice, Score=Score, DecisionResponse=DecisionResponse)

    def get_model(spec=None):
        """A chat model for a `"provider:model"` spec; defaults to the model running this session."""
        return ChatModel(call, spec)

    def get_embedding_model(spec):
        """An embedding model for a `"provider:model"` spec."""
        return EmbeddingModel(call, spec)

    def get_decision_model(spec):
        """A decision model for a `"provider:model"` spec."""
        return DecisionModel(call, spec)

    module.__dict__.update(
        Image=Image,
        Audio=Audio,
        Video=Video,
        Message=Message,
        ChatModel=ChatModel,
        EmbeddingModel=EmbeddingModel,
        DecisionModel=DecisionModel,
        EmbeddingResponse=EmbeddingResponse,
        system=system,
        user=user,
        assistant=assistant,
        decisions=decisions,
        events=events,
        Stream=Stream,
        get_model=get_model,
        get_embedding_model=get_embedding_model,
        get_decision_model=get_decision_model,
    )
    return module


class Channel:
    def __init__(self, loop):
        self.loop = loop
        self.out = sys.stdout
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.pending = {}
        self.first = loop.create_future()

    def send(self, message):
        line = json.dumps(message, default=json_default) + "\n"
        with self.lock:
            self.out.write(line)
            self.out.flush()

    def start(self):
        threading.Thread(target=self.read, daemon=True).start()
        return self.first

    def read(self):
        for line in sys.stdin:
            self.loop.call_soon_threadsafe(self.dispatch, json.loads(line, object_hook=json_object))
        self.loop.call_soon_threadsafe(self.close)

    def dispatch(self, message):
        if not self.first.done():
            self.first.set_result(message)
            return
        future = self.pending.pop(message.get("id"), None)
        if future is None or future.done():
            return
        if message.get("type") == "result":
            future.set_result(message.get("value"))
        else:
            future.set_exception(BubError(message.get("message", "tool call failed")))

    def close(self):
        if not self.first.done():
            self.first.set_exception(EOFError("bub closed the connection"))
        for future in self.pending.values():
            if not future.done():
                future.set_exception(BubError("bub closed the connection"))
        self.pending.clear()

    async def call(self, name, arguments):
        call_id = next(self.ids)
        future = self.loop.create_future()
        self.pending[call_id] = future
        try:
            self.send({"type": "call", "id": call_id, "name": name, "arguments": arguments})
            return await future
        finally:
            self.pending.pop(call_id, None)


class Output(io.TextIOBase):
    """What the code prints, sent in chunks (and every 0.2 s, so blocking
    code's output survives a timeout)."""

    def __init__(self, channel):
        self.channel = channel
        self.parts = []
        self.size = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.tick, daemon=True).start()

    def writable(self):
        return True

    def write(self, text):
        with self.lock:
            self.parts.append(text)
            self.size += len(text)
            full = self.size >= FLUSH_SIZE
        if full:
            self.flush()
        return len(text)

    def flush(self):
        with self.lock:
            if self.parts:
                data = "".join(self.parts)
                self.parts.clear()
                self.size = 0
                self.channel.send({"type": "output", "data": data})

    def tick(self):
        while True:
            time.sleep(FLUSH_INTERVAL)
            self.flush()


def tool_function(channel, output, name):
    async def call(*args, **kwargs):
        if args:
            raise TypeError(f"tools.{name}() accepts keyword arguments only")
        output.flush()
        return await channel.call(name, kwargs)

    call.__name__ = name
    return call


async def main():
    channel = Channel(asyncio.get_running_loop())
    run = await channel.start()
    code, filename = run["code"], run["filename"]
    output = Output(channel)
    sys.stdout = output
    tools = types.SimpleNamespace(**{name: tool_function(channel, output, name) for name in run["tools"]})
    republic = sys.modules["republic"] = republic_module(channel.call)
    sys.modules["republic.decisions"] = republic.decisions
    sys.modules["republic.events"] = republic.events
    namespace = {"__name__": "__run_code__", "__builtins__": builtins, "tools": tools, "republic": republic}
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    try:
        compiled = compile(code, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(compiled, namespace)
        if inspect.iscoroutine(result):
            await result
    except (Exception, SystemExit) as exc:
        error = traceback.TracebackException.from_exception(exc)
        # Only the model's own frames: the runner's are noise to it.
        error.stack = traceback.StackSummary.from_list([f for f in error.stack if f.filename == filename])
        output.flush()
        channel.send({"type": "failed", "error": f"{type(exc).__name__}: {exc}", "traceback": "".join(error.format())})
    else:
        output.flush()
        channel.send({"type": "done"})


if __name__ == "__main__":
    asyncio.run(main())
