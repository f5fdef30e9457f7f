#!/usr/bin/env python3
"""A scripted chat-completions server for the agent benchmark (stdlib only).

Every request is answered from its messages alone, so any number of clients
can share it: while fewer than STEPS-1 tool messages follow the last user
message, the answer is one tool call `fs_read {"path": "a.txt"}`; then the
text "done". Streams SSE chunks with usage and `[DONE]`, like OpenAI.

    python3 scripts/scripted_provider.py [STEPS]     # prints the port, serves until killed
"""
import json
import socket  # noqa: F401  (TCP_NODELAY via disable_nagle_algorithm)
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def chunks(body):
    messages = body.get("messages", [])
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    tools_since = sum(1 for m in messages[last_user + 1:] if m.get("role") == "tool")
    n = len(messages)
    if tools_since < STEPS - 1:
        call = {"index": 0, "id": f"call_{n}", "type": "function",
                "function": {"name": "fs_read", "arguments": '{"path": "a.txt"}'}}
        yield {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]}
        yield {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    else:
        yield {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "done"}}]}
        yield {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    yield {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in one segment: without it, a kept-alive
    # connection waits for the client's delayed ACK (~40 ms) on every reply.
    disable_nagle_algorithm = True

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        out = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks(body)) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
