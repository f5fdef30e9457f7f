"""Python Bub 0.6.0a3's side of the hook benchmarks (tests/benches/hooks.rs).

The same cases under the same names: N plugins p0…p(N-1) registered in
order (so p(N-1) runs first), one checked call before timing, and after
timing every plugin's call counter must equal the calls made (or 0 for the
plugins a case never reaches). Coroutines run on one ``asyncio.Runner``,
as Bub runs them. Each case: a warm-up, then ``ROUNDS`` rounds of ``k``
calls; the median nanoseconds per call is printed as one JSON line:

    {"case": …, "plugins": N, "iterations": k * ROUNDS, "ns_per_call": …}

Run with the venv ``bench/python/setup.sh`` makes (``scripts/bench.sh
--with-python`` does both):

    .venv/bin/python bench/python/hook_bench.py [--only SUBSTR]
"""

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pluggy
from loguru import logger

from bub import hookimpl
from bub.core.events import ToolCall, ToolCallDecision
from bub.framework import BubFramework
from bub.hooks.interception import PluginAgentHooks
from bub.hooks.runtime import HookRuntime
from bub.hooks.specs import BUB_HOOK_NAMESPACE, BubHookSpecs

logger.remove()
perf = time.perf_counter_ns
ROUNDS = 10
SIZES = (1, 10, 100)


def message() -> dict:
    return {"content": "hello", "channel": "bench", "chat_id": "42"}


# --- the plugins: one class per sync/async flavour, each counting its calls


class Counted:
    def __init__(self, index: int, answers: bool) -> None:
        self.index = index
        self.answers = answers
        self.calls = 0


class SyncPlugin(Counted):
    @hookimpl
    def resolve_session(self, message):
        self.calls += 1
        return f"session-{self.index}" if self.answers else None

    @hookimpl
    def load_state(self, message, session_id):
        self.calls += 1
        return {"plugin": self.index, "loaded": True}

    @hookimpl
    def system_prompt(self, prompt, state):
        self.calls += 1
        return f"<plugin_{self.index}>be helpful</plugin_{self.index}>"

    @hookimpl
    def before_tool_call(self, call, state):
        self.calls += 1
        return ToolCallDecision.proceed(arguments={**call.arguments, "hops": call.arguments["hops"] + 1})


class AsyncPlugin(Counted):
    @hookimpl
    async def resolve_session(self, message):
        self.calls += 1
        return f"session-{self.index}" if self.answers else None

    @hookimpl
    async def load_state(self, message, session_id):
        self.calls += 1
        return {"plugin": self.index, "loaded": True}

    @hookimpl
    async def before_tool_call(self, call, state):
        self.calls += 1
        return ToolCallDecision.proceed(arguments={**call.arguments, "hops": call.arguments["hops"] + 1})


class NoopPlugin:
    """The extra plugins of the turn cases: async load_state and sync
    render_outbound, both answering nothing (as tests/plugins/tp-noop)."""

    def __init__(self) -> None:
        self.calls = {"load_state": 0, "render_outbound": 0}

    @hookimpl
    async def load_state(self, message, session_id):
        self.calls["load_state"] += 1

    @hookimpl
    def render_outbound(self, message, session_id, state, model_output):
        self.calls["render_outbound"] += 1


class EchoModel:
    """``run_model`` answering the prompt (as plugins/echo-model with no
    prefix): the framework's defaults do session, prompt and outbound."""

    def __init__(self) -> None:
        self.calls = {"run_model": 0}

    @hookimpl
    def run_model(self, prompt, session_id, state):
        self.calls["run_model"] += 1
        return prompt if isinstance(prompt, str) else str(prompt)


class AllStages:
    """Every turn stage, sync or async as Bub's builtin has it (as
    tests/plugins/tp-allstages)."""

    def __init__(self) -> None:
        self.calls = dict.fromkeys(
            ("resolve_session", "load_state", "build_prompt", "run_model", "save_state",
             "render_outbound", "dispatch_outbound"), 0)

    @hookimpl
    def resolve_session(self, message):
        self.calls["resolve_session"] += 1
        return f"{message['channel']}:{message['chat_id']}"

    @hookimpl
    async def load_state(self, message, session_id):
        self.calls["load_state"] += 1
        return {"session_id": session_id}

    @hookimpl
    async def build_prompt(self, message, session_id, state):
        self.calls["build_prompt"] += 1
        return [message["content"]]

    @hookimpl
    async def run_model(self, prompt, session_id, state):
        self.calls["run_model"] += 1
        return "pong"

    @hookimpl
    async def save_state(self, session_id, state, message, model_output):
        self.calls["save_state"] += 1

    @hookimpl
    def render_outbound(self, message, session_id, state, model_output):
        self.calls["render_outbound"] += 1
        return [{"content": model_output, "session_id": session_id,
                 "channel": message["channel"], "chat_id": message["chat_id"]}]

    @hookimpl
    async def dispatch_outbound(self, message):
        self.calls["dispatch_outbound"] += 1
        return True


# --- measuring


class Bench:
    def __init__(self, only: str | None) -> None:
        self.only = only
        self.runner = asyncio.Runner()

    def wanted(self, case: str) -> bool:
        return self.only is None or self.only in case

    def run(self, case: str, n: int, call, k: int, is_async: bool) -> int:
        """Times ``call`` and prints its line; returns how many calls were made."""

        if is_async:
            async def loop(count):
                t0 = perf()
                for _ in range(count):
                    await call()
                return perf() - t0

            once = lambda count: self.runner.run(loop(count))  # noqa: E731
        else:
            def once(count):
                t0 = perf()
                for _ in range(count):
                    call()
                return perf() - t0

        once(min(k, 200))
        per_call = [once(k) / k for _ in range(ROUNDS)]
        print(json.dumps({"case": case, "plugins": n, "iterations": k * ROUNDS,
                          "ns_per_call": round(statistics.median(per_call), 1)}), flush=True)
        return min(k, 200) + k * ROUNDS


def plugins(n: int, cls, answers) -> tuple[HookRuntime, list]:
    pm = pluggy.PluginManager(BUB_HOOK_NAMESPACE)
    pm.add_hookspecs(BubHookSpecs)
    made = [cls(i, answers(i)) for i in range(n)]
    for i, p in enumerate(made):
        pm.register(p, name=f"p{i}")
    return HookRuntime(pm), made


def check_counts(case: str, made: list, before: list, calls: int, ran) -> None:
    for i, p in enumerate(made):
        expected = calls if ran(i) else 0
        got = p.calls - before[i]
        assert got == expected, f"{case} N={len(made)}: plugin {i} ran {got} times, expected {expected}"


def case(bench: Bench, name: str, n: int, made: list, call, check, ran, k: int, is_async: bool) -> None:
    """One case: a checked call (``check(answer)`` must hold), the timing,
    then every plugin's counter (``ran(i)``: plugin i runs on each call)."""
    if not bench.wanted(name):
        return
    before = [p.calls for p in made]
    first = bench.runner.run(call()) if is_async else call()
    assert check(first), f"{name} N={n}: {first!r}"
    calls = 1 + bench.run(name, n, call, k, is_async)
    check_counts(name, made, before, calls, ran)


def dispatch(bench: Bench) -> None:
    msg = message()
    state = {"session_id": "bench:42"}
    every = lambda i: True  # noqa: E731
    for n in SIZES:
        k = max(100, 20000 // n)
        # Only p0 answers, so every plugin runs (p(N-1) first).
        for name, cls in (("call_first/resolve_session/all_run/sync_impl", SyncPlugin),
                          ("call_first/resolve_session/all_run/async_impl", AsyncPlugin)):
            rt, made = plugins(n, cls, lambda i: i == 0)
            case(bench, name, n, made, lambda: rt.call_first("resolve_session", message=msg),
                 lambda r: r == "session-0", every, k, True)
        rt, made = plugins(n, SyncPlugin, every)
        case(bench, "call_first/resolve_session/first_answers/sync_impl", n, made,
             lambda: rt.call_first("resolve_session", message=msg),
             lambda r: r == f"session-{n - 1}", lambda i: i == n - 1, k, True)
        rt, made = plugins(n, SyncPlugin, lambda i: i == 0)
        case(bench, "call_first_sync/resolve_session/all_run/sync_impl", n, made,
             lambda: rt.call_first_sync("resolve_session", message=msg),
             lambda r: r == "session-0", every, k, False)
        expected = [{"plugin": i, "loaded": True} for i in reversed(range(n))]
        for name, cls in (("call_many/load_state/small_dict/async_impl", AsyncPlugin),
                          ("call_many/load_state/small_dict/sync_impl", SyncPlugin)):
            rt, made = plugins(n, cls, every)
            case(bench, name, n, made, lambda: rt.call_many("load_state", message=msg, session_id="bench:42"),
                 lambda r: r == expected, every, k, True)
        blocks = [f"<plugin_{i}>be helpful</plugin_{i}>" for i in reversed(range(n))]
        rt, made = plugins(n, SyncPlugin, every)
        case(bench, "call_many_sync/system_prompt/str/sync_impl", n, made,
             lambda: rt.call_many_sync("system_prompt", prompt="hello", state=state),
             lambda r: r == blocks, every, k, False)
        tool_call = ToolCall(run_id="run-1", tool="fs.read", arguments={"path": "README.md", "limit": 100, "hops": 0})
        for name, cls in (("before_tool_call/proceed_args/async_impl", AsyncPlugin),
                          ("before_tool_call/proceed_args/sync_impl", SyncPlugin)):
            rt, made = plugins(n, cls, every)
            hooks = PluginAgentHooks(rt)
            case(bench, name, n, made, lambda: hooks.before_tool_call(tool_call, state),
                 lambda r: r[0].arguments["hops"] == n and r[1].action == "proceed", every, k, True)


def loading(bench: Bench) -> None:
    if bench.wanted("register/noop_plugin"):
        for n in (10, 100):
            def load(n=n):
                pm = pluggy.PluginManager(BUB_HOOK_NAMESPACE)
                pm.add_hookspecs(BubHookSpecs)
                for i in range(n):
                    pm.register(NoopPlugin(), name=f"p{i:03}")
                assert len(pm.hook.load_state.get_hookimpls()) == n
            bench.run("register/noop_plugin", n, load, max(20, 2000 // n), False)
    if bench.wanted("plugin_manager/new+add_hookspecs"):
        def new():
            pm = pluggy.PluginManager(BUB_HOOK_NAMESPACE)
            pm.add_hookspecs(BubHookSpecs)
        bench.run("plugin_manager/new+add_hookspecs", 0, new, 2000, False)


def turns(bench: Bench) -> None:
    home = Path(tempfile.mkdtemp())
    for name, main, stream, output in (("process_inbound/model_plus_noops", EchoModel, False, "hello"),
                                       ("process_inbound/all_stages_plus_noops", AllStages, False, "pong"),
                                       ("process_inbound/stream/model_plus_noops", EchoModel, True, "hello")):
        if not bench.wanted(name):
            continue
        for n in (0, 10):
            fw = BubFramework(config_file=home / "no-such-config.yml")
            made = [main()] + [NoopPlugin() for _ in range(n)]
            for i, p in enumerate(made):
                fw._plugin_manager.register(p, name=f"{i:03}")
            turn = lambda fw=fw: fw.process_inbound(message(), stream_output=stream)  # noqa: E731
            before = [dict(p.calls) for p in made]
            first = bench.runner.run(turn())
            assert first.model_output == output and first.session_id == "bench:42", first
            assert first.outbounds == [{"content": output, "session_id": "bench:42", "channel": "bench",
                                        "chat_id": "42"}], first.outbounds
            calls = 1 + bench.run(name, n, turn, 500, True)
            for p, b in zip(made, before):
                for stage, count in p.calls.items():
                    assert count - b[stage] == calls, f"{name} N={n}: {stage} ran {count - b[stage]} of {calls}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run only the cases whose name contains this")
    bench = Bench(parser.parse_args().only)
    dispatch(bench)
    loading(bench)
    turns(bench)
    return 0


if __name__ == "__main__":
    sys.exit(main())
