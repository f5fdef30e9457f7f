"""bub-rs code mode: the child process that runs the model's code.

bub runs this file with `python3 -u -c` in the workspace; it uses only the
standard library. JSON lines both ways, as Bub 0.6's runner:

- bub -> child: first {"type": "run", "code", "filename", "tools"}, then
  {"type": "result", "id", "value"} or {"type": "error", "id", "message"}
  for each tool call.
- child -> bub: {"type": "call", "id", "name", "arguments"} per tool call,
  {"type": "output", "data"} for what the code prints, and last
  {"type": "done"} or {"type": "failed", "error", "traceback"}.
"""

import ast
import asyncio
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


class Channel:
    def __init__(self, loop):
        self.loop = loop
        self.out = sys.stdout
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.pending = {}
        self.first = loop.create_future()

    def send(self, message):
        line = json.dumps(message, default=repr) + "\n"
        with self.lock:
            self.out.write(line)
            self.out.flush()

    def start(self):
        threading.Thread(target=self.read, daemon=True).start()
        return self.first

    def read(self):
        for line in sys.stdin:
            self.loop.call_soon_threadsafe(self.dispatch, json.loads(line))
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
    namespace = {"__name__": "__run_code__", "__builtins__": builtins, "tools": tools}
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
