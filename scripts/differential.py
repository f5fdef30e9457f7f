#!/usr/bin/env python3
"""Differential test: the same scripted provider replies, through `bub run`,
to Python Bub 0.6.0a3 and to bub-rs; compares what each sent the provider,
printed, and recorded on the session tape, after normalising what must
differ (dates, run ids, durations, system prompts, tool lists).

    python3 scripts/differential.py BUB_RS PYTHON_BUB [--only SUBSTRING]   (scripts/differential.sh sets these up)

Aspects compared per scenario: `output` (what `bub run` printed, and
whether it succeeded), `requests` (every request body the provider got:
messages except the system prompt, model, streaming and token keys),
`tape` (every session-tape entry: kind, payload, meta keys; system prompts
blanked), `tools` (the tool names offered to the model), `spans` (the OTLP
span tree of scenarios with traces on: names, kinds, parents, attribute
keys).

Scenarios: tests/differential/scenarios.json. Deliberate differences:
tests/differential/known-differences.json ({scenario or "*": {aspect: reason}});
a difference not listed there fails the run.
"""
import argparse
import base64
import hashlib
import json
import time
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "tests" / "differential"


def responses_sse(reply):
    """A Responses API stream, as Codex's backend sends one: each output
    item added, its text or arguments, done; then the completed response."""
    items = []
    if reply.get("text"):
        items.append({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": reply["text"], "annotations": []}]})
    for cid, name, args in reply.get("tool_calls", []):
        items.append({"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": name,
                      "arguments": args, "status": "completed"})
    events = [{"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}]
    for i, item in enumerate(items):
        events.append({"type": "response.output_item.added", "output_index": i, "item": {**item, "content": []} if item["type"] == "message" else {**item, "arguments": ""}})
        if item["type"] == "message":
            events.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": i,
                           "content_index": 0, "delta": reply["text"]})
        else:
            events.append({"type": "response.function_call_arguments.delta", "item_id": item["id"],
                           "output_index": i, "delta": item["arguments"]})
        events.append({"type": "response.output_item.done", "output_index": i, "item": item})
    usage = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
    events.append({"type": "response.completed",
                   "response": {"id": "resp_1", "status": "completed", "output": items, "usage": usage}})
    return 200, "".join(f"data: {json.dumps(e)}\n\n" for e in events), "text/event-stream"


def sse(reply, path=""):
    if "status" in reply:
        return reply["status"], reply.get("body", ""), "application/json"
    if path.endswith("/responses"):
        return responses_sse(reply)
    chunks = []
    if reply.get("text"):
        chunks.append({"choices": [{"index": 0, "delta": {"role": "assistant", "content": reply["text"]}}]})
    for i, (cid, name, args) in enumerate(reply.get("tool_calls", [])):
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return 200, body, "text/event-stream"


class Server:
    def __init__(self):
        self.replies, self.requests = [], []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                # Headers the Codex backend checks (who, which account, which client).
                headers = {k.lower(): v for k, v in self.headers.items()
                           if k.lower() in ("authorization", "chatgpt-account-id", "originator", "openai-beta")}
                outer.requests.append({"path": self.path, "body": body, "headers": headers})
                reply = outer.replies.pop(0) if outer.replies else {"status": 500, "body": "script exhausted"}
                status, text, ctype = sse(reply, self.path)
                data = text.encode()
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


class OtlpReceiver:
    """An OTLP/HTTP endpoint keeping each export's protobuf body as sent."""

    def __init__(self):
        self.bodies = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                outer.bodies.append(self.rfile.read(int(self.headers.get("content-length", 0))))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"


# Decodes export bodies (base64 lines on stdin) with the official
# opentelemetry-proto package: one JSON span per line.
DECODE_SPANS = """
import base64, json, sys
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
for line in sys.stdin:
    request = ExportTraceServiceRequest()
    request.ParseFromString(base64.b64decode(line))
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                print(json.dumps({"name": span.name, "kind": span.kind, "span_id": span.span_id.hex(),
                                  "parent": span.parent_span_id.hex(),
                                  "attributes": sorted(f"{a.key}:{a.value.WhichOneof('value')}" for a in span.attributes)}))
"""


# A fastmcp server from PyPI that demands a bearer token (its own
# StaticTokenVerifier), over `transport`: streamable HTTP, or the older
# SSE transport alone.
GUARDED_MCP_SERVER = """
import sys
from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
transport, port = sys.argv[1], int(sys.argv[2])
auth = StaticTokenVerifier(tokens={"s3cret-token": {"client_id": "bub-diff", "scopes": []}})
mcp = FastMCP("guarded", auth=auth)
@mcp.tool
def whoami(text: str) -> str:
    \"\"\"Answers who it is.\"\"\"
    return f"guarded over {transport}: {text}"
mcp.run(transport=transport, host="127.0.0.1", port=port, show_banner=False)
"""


def guarded_mcp_servers(workdir):
    """Starts the guarded servers (streamable HTTP behind `auth`, SSE behind
    an `Authorization` header) and answers their processes and the
    `mcp.json` that names them as bub-mcp reads it."""
    import socket
    script = workdir / "guarded_mcp.py"
    script.write_text(GUARDED_MCP_SERVER)
    python = Path(os.environ["BUB_RS_PYTHON_VENV"]) / "bin" / "python"
    procs, urls = [], {}
    for transport in ("http", "sse"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs.append(subprocess.Popen([str(python), str(script), transport, str(port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"the fastmcp {transport} server did not listen")
                time.sleep(0.1)
        urls[transport] = f"http://127.0.0.1:{port}/{'sse' if transport == 'sse' else 'mcp'}"
    config = {"mcpServers": {
        "tokened": {"url": urls["http"], "auth": "s3cret-token"},
        "older": {"url": urls["sse"], "transport": "sse", "headers": {"Authorization": "Bearer s3cret-token"}},
    }}
    return procs, config


def span_view(bodies):
    """Each span as its name, kind, its parent's name and its attribute
    keys with their types (values differ: ids, durations, prompts)."""
    if not bodies:
        return []
    python = Path(os.environ["BUB_RS_PYTHON_VENV"]) / "bin" / "python"
    decoded = subprocess.run([str(python), "-c", DECODE_SPANS], input="\n".join(base64.b64encode(b).decode() for b in bodies),
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": os.environ["BUB_RS_TRACE_SITE"]})
    spans = [json.loads(line) for line in decoded.stdout.splitlines()]
    names = {s["span_id"]: s["name"] for s in spans}
    return sorted(f"{s['name']} (kind {s['kind']}) under {names.get(s['parent'], '-')}: {' '.join(s['attributes'])}"
                  for s in spans)


DATE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
RUN_ID = re.compile(r"run-\d{8}T\d{6}\d*Z")
# The random file name run_code gives the model's code (both sides).
CODE_FILE = re.compile(r"<run_code-[0-9a-f]{8}>")
# A spilled tool result's random handle (`uuid4().hex` on both sides).
SPILL_HANDLE = re.compile(r"\b[0-9a-f]{32}\b")


def norm_text(s):
    s = SPILL_HANDLE.sub("<handle>", s)
    return CODE_FILE.sub("<run_code>", RUN_ID.sub("<run_id>", DATE.sub("<date>", s)))


def norm(v):
    if isinstance(v, str):
        return norm_text(v)
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k in ("elapsed_ms", "duration_ms", "date", "elapsed_seconds"):
                continue
            # A subagent's loop.start: Bub records `list(set)`, whose order
            # varies from run to run; the names are what counts.
            if k == "allowed_tools" and isinstance(x, list):
                x = sorted(x)
            out[k] = norm(x)
        return out
    return v


def tape_view(home):
    entries = []
    tapes = sorted((home / "tapes").glob("*.jsonl")) if (home / "tapes").exists() else []
    for f in tapes:
        if "__sidecar__" in f.name:
            continue
        for line in f.read_text().splitlines():
            if not line.strip():
                continue
            e = json.loads(line)
            p = e["payload"]
            if e["kind"] == "system":
                p = {"content": "<system prompt>"}
            entries.append({"kind": e["kind"], "payload": norm(p), "meta": sorted(e.get("meta", {}))})
    return entries


def request_view(req):
    body = req["body"]
    msgs = []
    for m in body.get("messages", []):
        if m.get("role") == "system":
            msgs.append({"role": "system"})
            continue
        msgs.append(norm(m))
    view = {"path": req["path"], "messages": msgs}
    if "/backend-api/codex/" in req["path"]:
        view["headers"] = req["headers"]
        # The Responses input, the system prompt blanked as above.
        view["input"] = [{"role": "system"} if isinstance(i, dict) and i.get("role") in ("system", "developer")
                         else norm(i) for i in body.get("input", [])]
        # The keys the backend is sent, and the values that say how to answer.
        view["keys"] = sorted(body)
        for k in ("store", "include", "parallel_tool_calls", "tool_choice", "reasoning", "text"):
            if k in body:
                view[k] = body[k]
    # The last six: what model-written code's `republic` models send
    # (embeddings, System One decisions, chat options).
    for k in ("model", "stream", "stream_options", "max_completion_tokens", "max_tokens",
              "input", "encoding_format", "dimensions", "state", "questions", "temperature"):
        if k in body and k not in view:
            view[k] = body[k]
    return view


def run_impl(impl, binary, scenario, server, workdir):
    home = workdir / f"home-{impl}"
    ws = workdir / "ws"
    shutil.rmtree(ws, ignore_errors=True)
    ws.mkdir()
    (ws / "a.txt").write_text("hello file\n")
    for rel, text in scenario.get("files", {}).items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUB_", "OPENAI_", "ANTHROPIC_", "CODEX_", "OTEL_"))}
    client_args = {"api_format": "chat", "retry_delay": 0.01, "max_retry_delay": 0.05}
    env.update({"BUB_HOME": str(home), "BUB_MODEL": "openai:m", "BUB_API_KEY": "k", "BUB_API_BASE": server.base,
                "BUB_CLIENT_ARGS": json.dumps(client_args), "NO_COLOR": "1"})
    if scenario.get("codex"):
        # A ChatGPT login as the Codex CLI writes it, fresh (refreshing one
        # is compared in the suite, where the token endpoint can be
        # stubbed for both), and Codex's backend at the scripted server.
        codex_home = workdir / f"codex-{impl}"
        codex_home.mkdir()
        # The same token for both (it expires in 2100).
        account = {"exp": 4102444800, "email": "ann@example.com",
                   "https://api.openai.com/auth": {"chatgpt_account_id": "acct-1", "chatgpt_plan_type": "plus"}}
        token = ".".join(base64.urlsafe_b64encode(json.dumps(p).encode()).decode().rstrip("=")
                         for p in ({"alg": "RS256", "typ": "JWT"}, account)) + ".c2ln"
        login = {"OPENAI_API_KEY": None, "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "tokens": {"id_token": token, "access_token": token, "refresh_token": "rt-1", "account_id": "acct-1"}}
        (codex_home / "auth.json").write_text(json.dumps(login, indent=2) + "\n")
        (codex_home / "auth.json").chmod(0o600)
        root = server.base.removesuffix("/v1")
        env.pop("BUB_API_KEY")
        env.update({"BUB_MODEL": "codex:gpt-5.1-codex", "BUB_API_BASE": f"{root}/backend-api/codex",
                    "CODEX_HOME": str(codex_home),
                    "BUB_CLIENT_ARGS": json.dumps({"retry_delay": 0.01, "max_retry_delay": 0.05})})
    mcp_procs = []
    if scenario.get("mcp_servers"):
        # Servers behind a token: bub-mcp (from PyPI) under Python Bub, the
        # native `mcp` plugin under bub-rs, one mcp.json.
        mcp_procs, mcp_config = guarded_mcp_servers(workdir)
        (home / "mcp.json").write_text(json.dumps(mcp_config))
        (home / "mcp.json").chmod(0o600)
    receiver = None
    if scenario.get("otlp"):
        # Traces on (Bub's `bub[trace]` extra on the Python side), to a
        # receiver of this scenario's own.
        receiver = OtlpReceiver()
        env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"})
    plugin = scenario.get("plugin")
    # `bridge`: bub-rs runs the very same Python plugin through the python
    # bridge (pointed at Python Bub's venv, with the same PYTHONPATH)
    # instead of its Rust twin. `pypi`: both load the PyPI plugins fetched
    # into PYPI_SITE (bub-schedule) as well.
    bridge = scenario.get("bridge") or scenario.get("pypi")
    paths = []
    if plugin and (impl == "python" or bridge):
        site = workdir / "pysite"
        dist = site / "bubdiff-0.0.0.dist-info"
        dist.mkdir(parents=True, exist_ok=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bubdiff\nVersion: 0.0.0\n")
        (dist / "entry_points.txt").write_text("[bub]\nbubdiff = bubdiff_plugin:Plugin\n")
        shutil.copy(HERE / "bubdiff_plugin.py", site / "bubdiff_plugin.py")
        paths.append(str(site))
        env["BUBDIFF_MODE"] = plugin
    if scenario.get("pypi"):
        # `true`: bub-schedule's site; a name: that package set's site.
        kind = scenario["pypi"]
        paths.append(os.environ["BUB_RS_PYPI_SITE" if kind is True else f"BUB_RS_PYPI_{kind.upper()}_SITE"])
    if receiver is not None and impl == "python":
        paths.append(os.environ["BUB_RS_TRACE_SITE"])
    if mcp_procs and impl == "python":
        paths.append(os.environ["BUB_RS_PYPI_MCP_SITE"])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    if impl == "rust" and mcp_procs:
        lib = Path(os.environ["BUB_RS_TARGET"]).resolve() / "libmcp.so"
        subprocess.run([binary, "plugins", "install", str(lib)], env=env, check=True, capture_output=True)
    if impl == "rust" and bridge:
        install_bridge(binary, home, env)
    elif impl == "rust" and plugin:
        install_rust_plugin(binary, home, plugin, env)
    outputs, requests_before = [], len(server.requests)
    for turn in scenario["turns"]:
        server.replies = list(turn["replies"])
        if scenario.get("media"):
            env["BUBDIFF_MEDIA"] = json.dumps(scenario["media"])
        if scenario.get("chat"):
            outputs.append(chat_session(binary, ws, env, turn["message"]))
            continue
        if scenario.get("steer") or scenario.get("media"):
            # No CLI steers from a script: a driver runs `bub run`'s turn with
            # the messages already in the scope's inbox.
            driver = [str(Path(binary).parent / "python"), str(HERE / "steer_run.py")] if impl == "python" else [os.environ["BUB_RS_STEER_RUN"]]
            cmd = driver + [turn["message"], *scenario.get("steer", [])]
        else:
            cmd = [binary, "run", turn["message"]]
        p = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=120)
        out = p.stdout.strip().splitlines()
        outputs.append({"ok": p.returncode == 0, "stdout": norm_text("\n".join(out[1:]) if out[:1] == ["[cli:local]"] else "\n".join(out))})
    raw = server.requests[requests_before:]
    requests = [request_view(r) for r in raw]
    # Chat completions name a tool under `function`; the Responses API at its top.
    tools = sorted({t.get("function", t)["name"] for r in raw for t in r["body"].get("tools", [])})
    for proc in mcp_procs:
        proc.kill()
        proc.wait()
    spans = []
    if receiver is not None:
        receiver.httpd.shutdown()
        spans = span_view(receiver.bodies)
    return {"output": outputs, "requests": requests, "tape": tape_view(home), "tools": tools, "spans": spans}


def chat_session(binary, ws, env, line):
    """`bub chat` on a pseudo-terminal: types `line`, waits for the answer
    (output idle), then `,quit`. The terminal rendering differs between the
    two (prompt_toolkit / rustyline), so only success is compared here; the
    requests and the tape carry the session and context."""
    import pty
    import select
    import signal
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(ws)
        os.execve(binary, [binary, "chat"], env)

    def drain(idle, limit):
        end, quiet = time.time() + limit, time.time() + idle
        while time.time() < min(end, quiet):
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    if not os.read(fd, 65536):
                        return
                except OSError:
                    return
                quiet = time.time() + idle
    drain(2.0, 20)
    os.write(fd, line.encode() + b"\r")
    drain(2.5, 60)
    os.write(fd, b",quit\r")
    drain(1.0, 20)
    deadline = time.time() + 20
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"ok": os.waitstatus_to_exitcode(status) == 0, "stdout": "<terminal>"}
        drain(0.2, 0.5)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return {"ok": False, "stdout": "<chat did not quit>"}


def apply_known(name, aspect, view, known):
    """A known difference that is a line only one side prints (`drop_lines`,
    in any text of that aspect): those lines are left out of both, the rest
    compared."""
    rule = known.get(name, {}).get(aspect)
    if not isinstance(rule, dict):
        return view
    drop = tuple(rule.get("drop_lines", []))

    def strip(v):
        if isinstance(v, str):
            return "\n".join(l for l in v.split("\n") if l.strip() not in drop)
        if isinstance(v, list):
            return [strip(x) for x in v]
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items()}
        return v
    return strip(view)


def install_bridge(binary, home, env):
    """The python bridge, pointed at Python Bub's own venv."""
    target = Path(os.environ["BUB_RS_TARGET"]).resolve()
    venv = Path(os.environ["BUB_RS_PYTHON_VENV"]).resolve()
    subprocess.run([binary, "plugins", "install", str(target / "libpython_bridge.so")], env=env, check=True, capture_output=True)
    subprocess.run([binary, "plugins", "config", "python-bridge", f"venv={venv}"], env=env, check=True, capture_output=True)


def install_rust_plugin(binary, home, plugin, env):
    target = Path(os.environ["BUB_RS_TARGET"]).resolve()
    if plugin in ("deny", "replace"):
        rule = {"tool": "fs_read", "deny": "no reading"} if plugin == "deny" else {"tool": "fs_read", "replace": "replaced result"}
        lib = target / "libtool_policy.so"
        subprocess.run([binary, "plugins", "install", str(lib)], env=env, check=True, capture_output=True)
        subprocess.run([binary, "plugins", "config", "tool-policy", "rules=" + json.dumps([rule])], env=env, check=True, capture_output=True)
    elif plugin == "finish":
        lib = target / "libtp_scripted.so"
        subprocess.run([binary, "plugins", "install", str(lib), "--name", "finish"], env=env, check=True, capture_output=True)
        hooks = {"before_llm_call": {"return": {"decision": {"action": "finish", "text": "budget exhausted"}}}}
        subprocess.run([binary, "plugins", "config", "finish", "hooks=" + json.dumps(hooks)], env=env, check=True, capture_output=True)


def diff(a, b, path=""):
    """The first few differing paths between two JSON values."""
    out = []
    if type(a) is not type(b):
        return [f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"]
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'python' if k in a else 'rust'}: {json.dumps(a.get(k, b.get(k)))[:200]}")
            else:
                out += diff(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append(f"{path}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff(x, y, f"{path}[{i}]")
    elif a != b:
        out.append(f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rust_bub")
    ap.add_argument("python_bub")
    ap.add_argument("--only")
    ap.add_argument("--report", help="write the full comparison (JSON) here")
    args = ap.parse_args()
    args.rust_bub, args.python_bub = (str(Path(shutil.which(b) or b).resolve()) for b in (args.rust_bub, args.python_bub))
    scenarios = json.loads((HERE / "scenarios.json").read_text())
    known = json.loads((HERE / "known-differences.json").read_text())
    failed, report = False, {}
    for sc in scenarios:
        if args.only and args.only not in sc["name"]:
            continue
        server = Server()
        with tempfile.TemporaryDirectory(prefix="bub-diff-") as tmp:
            # The same workspace path for both, so the session tape names match.
            py = run_impl("python", args.python_bub, sc, server, Path(tmp))
            rs = run_impl("rust", args.rust_bub, sc, server, Path(tmp))
        server.httpd.shutdown()
        report[sc["name"]] = {"python": py, "rust": rs}
        for aspect in ("output", "requests", "tape", "tools", "spans"):
            pa, ra = (apply_known(sc["name"], aspect, x[aspect], known) for x in (py, rs))
            d = diff(pa, ra, aspect)
            reason = known.get(sc["name"], {}).get(aspect) or known.get("*", {}).get(aspect)
            if isinstance(reason, dict):
                print(f"{sc['name']:28} {aspect:9} {'same' if not d else 'DIFFERS'} (leaving out: {reason['reason']})")
                failed |= bool(d)
                for line in d[:8]:
                    print(f"    {line}")
                continue
            if not d:
                print(f"{sc['name']:28} {aspect:9} same")
            elif reason:
                print(f"{sc['name']:28} {aspect:9} differs (known: {reason})")
            else:
                failed = True
                print(f"{sc['name']:28} {aspect:9} DIFFERS")
                for line in d[:8]:
                    print(f"    {line}")
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
