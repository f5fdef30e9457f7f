#!/usr/bin/env python3
"""The agent benchmark, Python side: Bub 0.6.0a3's BubAgent (builtin hooks +
10 no-op plugins with the four interception hooks) runs 5-step runs (one
fs_read tool call per step, then a text step) against the scripted provider
in another process; reports the agent process's CPU time per step
(`time.process_time`), i.e. everything except waiting for the provider.

With TAPE_ENTRIES=N every run's session tape already holds N entries (the
same bytes as agent_bench.rs writes) before the run starts.

    BASE=http://127.0.0.1:PORT/v1 [TAPE_ENTRIES=N] python scripts/agent_bench.py [RUNS]   # inside Python Bub's venv (scripts/bub-venv.sh)
"""
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
TAPE_ENTRIES = int(os.environ.get("TAPE_ENTRIES", "0"))
STEPS = 5
home = Path(tempfile.mkdtemp(prefix="bub-agent-bench-"))
ws = home / "ws"
ws.mkdir()
(ws / "a.txt").write_text("hello file\n")
os.environ.update({
    "BUB_HOME": str(home),
    "BUB_MODEL": "openai:bench",
    "BUB_API_KEY": "k",
    "BUB_API_BASE": os.environ["BASE"],
    "BUB_CLIENT_ARGS": json.dumps({"api_format": "chat"}),
})
os.chdir(ws)

from loguru import logger  # noqa: E402

logger.remove()

from bub.builtin.agent import BubAgent  # noqa: E402
from bub.framework import BubFramework  # noqa: E402
from bub.hooks.specs import hookimpl  # noqa: E402


class Noop:
    def __init__(self):
        self.calls = 0

    @hookimpl
    def before_llm_call(self, request, state):
        self.calls += 1

    @hookimpl
    def after_llm_call(self, request, result, state):
        self.calls += 1

    @hookimpl
    def before_tool_call(self, call, state):
        self.calls += 1

    @hookimpl
    def after_tool_call(self, call, result, state):
        self.calls += 1


def prefill_line(i):
    if i == 1:
        kind, payload = "anchor", {"name": "session/start", "state": {"owner": "human"}}
    elif i % 2 == 0:
        kind, payload = "message", {"role": "user", "content": f"question {i}: " + "lorem ipsum " * 8}
    else:
        kind, payload = "message", {"role": "assistant", "content": f"answer {i}: " + "dolor sit amet " * 8}
    line = {"id": i, "kind": kind, "payload": payload, "meta": {}, "date": "2026-12-01T00:00:00+00:00"}
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n"


def prefill(runs, entries):
    """The tapes of sessions bench/0..runs, `entries` entries each."""
    if not entries:
        return
    from bub.core.tape import session_tape_name

    body = "".join(prefill_line(i) for i in range(1, entries + 1))
    tapes = home / "tapes"
    tapes.mkdir(exist_ok=True)
    for i in range(runs):
        path = tapes / f"{session_tape_name(f'bench/{i}', ws)}.jsonl"
        path.write_text(body)
        # On disk before the clock starts, as the Rust side does.
        with path.open("rb") as f:
            os.fsync(f.fileno())


async def one_run(agent, i, context_at_least=0):
    stream = await agent.run_stream(session_id=f"bench/{i}", prompt="read a.txt")
    kinds = []
    first_call = None
    async for event in stream:
        kinds.append(event.kind)
        if event.kind == "tool_call" and first_call is None:
            first_call = event.data["tool_calls"][0]["id"]
    # The provider names its first call after the number of messages it got.
    n = int(first_call.removeprefix("call_"))
    assert n >= context_at_least, (n, context_at_least)
    assert kinds.count("tool_result") == STEPS - 1 and kinds[-1] == "final", kinds


async def main():
    fw = BubFramework(config_file=home / "none.yml")
    fw.workspace = ws
    fw.load_builtin_hooks()
    noops = [Noop() for _ in range(10)]
    for i, p in enumerate(noops):
        fw.plugin_manager.register(p, name=f"p{i}")
    # Running: the builtin file tape store, as `bub run` has it.
    async with fw.running():
        agent = BubAgent(fw)
        for i in range(3):
            await one_run(agent, -1 - i)
        prefill(RUNS, TAPE_ENTRIES)
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        for i in range(RUNS):
            await one_run(agent, i, max(TAPE_ENTRIES - 1, 0))
        cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start_wall
    # 2 LLM hooks per step + 2 tool hooks per tool step, per plugin.
    expected = (RUNS + 3) * (STEPS * 2 + (STEPS - 1) * 2)
    assert all(p.calls == expected for p in noops), [p.calls for p in noops]
    steps = RUNS * STEPS
    print(json.dumps({"impl": "python", "tape_entries": TAPE_ENTRIES, "runs": RUNS, "steps": steps,
                      "cpu_us_per_step": round(cpu / steps * 1e6, 1), "wall_us_per_step": round(wall / steps * 1e6, 1)}))


asyncio.run(main())
