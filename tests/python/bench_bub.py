"""The python bridge benchmark's Python side: Bub 0.6.0a3 itself calling
``bub_rs_bench.BenchPlugin`` (the plugin bub-rs calls through the bridge in
tests/benches/python_bridge.rs), case for case: one asyncio runner,
the same message, median of 10 rounds. Prints one JSON line per case
(case, plugins, iterations, ns_per_call). Run with the bench venv's python:

    target/python-bench-venv/bin/python tests/python/bench_bub.py
"""

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import pluggy
from loguru import logger

from bub.core.events import ToolCall
from bub.framework import BubFramework
from bub.hooks.interception import PluginAgentHooks
from bub.hooks.runtime import HookRuntime
from bub.hooks.specs import BUB_HOOK_NAMESPACE, BubHookSpecs
from bub_rs_bench import BenchPlugin

logger.remove()
perf = time.perf_counter_ns
MESSAGE = {"content": "hello", "channel": "bench", "chat_id": "42"}
ROUNDS = 10


def runtime(plugin):
    pm = pluggy.PluginManager(BUB_HOOK_NAMESPACE)
    pm.add_hookspecs(BubHookSpecs)
    pm.register(plugin, name="bench")
    return HookRuntime(pm)


def timed(runner, make, k):
    async def loop():
        t0 = perf()
        for _ in range(k):
            await make()
        return perf() - t0

    return runner.run(loop())


def timed_sync(fn, k):
    t0 = perf()
    for _ in range(k):
        fn()
    return perf() - t0


def measure(name, once, k):
    once(200)  # warm-up
    per_call = [once(k) / k for _ in range(ROUNDS)]
    print(json.dumps({"case": name, "plugins": 1, "iterations": k * ROUNDS,
                      "ns_per_call": round(statistics.median(per_call), 1)}))


def main():
    runner = asyncio.Runner()
    plugin = BenchPlugin()
    rt = runtime(plugin)
    hooks = PluginAgentHooks(rt)
    call = ToolCall(run_id="run-1", tool="fs.read", arguments={"path": "README.md", "limit": 100, "hops": 0})
    state = {"session_id": "bench:42"}
    assert runner.run(rt.call_first("resolve_session", message=MESSAGE)) == "bench:42"
    measure("python_bridge/call_first/resolve_session/sync_impl",
            lambda k: timed(runner, lambda: rt.call_first("resolve_session", message=MESSAGE), k), 2000)
    measure("python_bridge/call_many/load_state/small_dict/async_impl",
            lambda k: timed(runner, lambda: rt.call_many("load_state", message=MESSAGE, session_id="bench:42"), k),
            2000)
    measure("python_bridge/call_many_sync/system_prompt/str/sync_impl",
            lambda k: timed_sync(lambda: rt.call_many_sync("system_prompt", prompt="hello", state=state), k), 2000)
    measure("python_bridge/before_tool_call/proceed_args/sync_impl",
            lambda k: timed(runner, lambda: hooks.before_tool_call(call, state), k), 2000)
    tmp = Path(tempfile.mkdtemp())
    fw = BubFramework(config_file=tmp / "no-such-config.yml")
    fw._plugin_manager.register(BenchPlugin(), name="bench")
    result = runner.run(fw.process_inbound(dict(MESSAGE)))
    assert result.model_output == "pong", result
    measure("python_bridge/process_inbound/all_stages",
            lambda k: timed(runner, lambda: fw.process_inbound(dict(MESSAGE)), k), 500)


if __name__ == "__main__":
    main()
