"""A fake Feishu (Lark) open platform on loopback, for the published
bub-feishu plugin: the long-connection event endpoint and the REST calls a
bot makes, as Feishu documents them.

- `POST /callback/ws/endpoint` ({"AppID", "AppSecret"}) answers the
  WebSocket URL (with `device_id` and `service_id`) and the client config;
- the WebSocket speaks Feishu's `pbbp2.Frame` protobuf (the frame the
  official SDK's own generated module decodes): data frames of type
  `event` carry an event's JSON, the client acknowledges each with the same
  frame whose payload is `{"code": 200}`; control frames `ping` are
  answered `pong`;
- `POST /open-apis/auth/v3/tenant_access_token/internal` answers a token;
  every other `/open-apis/...` call must carry it as a bearer;
- `GET /open-apis/contact/v3/users/<id>` answers the sender's name;
- `POST /open-apis/im/v1/messages/<id>/reply` and `POST
  /open-apis/im/v1/messages` take the bot's messages.

Run with the interpreter of a venv that has lark-oapi (for its frame
module) and websockets: `python fake_feishu.py <state file>`. It prints
its HTTP origin on one line; `POST /fake/push` with an event's JSON sends it
to the connected client; every call is appended to the state file as one
JSON line (`{"call": ..., "body": ...}`; acknowledgements as `{"ack": ...}`).
"""

import asyncio
import json
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import websockets
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

APP_ID = "cli_fake_app"
APP_SECRET = "fake-secret"
TOKEN = "t-fake-tenant-token"
SERVICE_ID = 7

state_file = open(sys.argv[1], "a", buffering=1)
clients = set()
loop = asyncio.new_event_loop()


def record(item):
    state_file.write(json.dumps(item, ensure_ascii=False) + "\n")


def data_frame(payload):
    frame = Frame()
    frame.SeqID = 1
    frame.LogID = 1
    frame.service = SERVICE_ID
    frame.method = 1  # data
    for key, value in (("type", "event"), ("message_id", uuid.uuid4().hex), ("sum", "1"), ("seq", "0"),
                       ("trace_id", uuid.uuid4().hex)):
        header = frame.headers.add()
        header.key, header.value = key, value
    frame.payload = json.dumps(payload).encode()
    return frame.SerializeToString()


async def serve_ws(connection):
    clients.add(connection)
    record({"connected": connection.request.path})
    try:
        async for message in connection:
            frame = Frame()
            frame.ParseFromString(message)
            kind = next((h.value for h in frame.headers if h.key == "type"), "")
            if frame.method == 0 and kind == "ping":
                pong = Frame()
                pong.CopyFrom(frame)
                pong.headers[0].value = "pong"
                await connection.send(pong.SerializeToString())
            elif frame.method == 1:
                record({"ack": json.loads(frame.payload or b"{}")})
    finally:
        clients.discard(connection)


class Http(BaseHTTPRequestHandler):
    ws_origin = ""

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            return json.loads(raw or b"null")
        except ValueError:
            return raw.decode(errors="replace")

    def do_GET(self):
        self.handle_call("GET", None)

    def do_POST(self):
        self.handle_call("POST", self.body())

    def handle_call(self, method, body):
        path = self.path
        if path == "/fake/push":
            for connection in list(clients):
                asyncio.run_coroutine_threadsafe(connection.send(data_frame(body)), loop).result(10)
            return self.answer(200, {"sent": len(clients)})
        record({"call": f"{method} {path.split('?')[0]}", "query": path.partition("?")[2], "body": body})
        if path.startswith("/callback/ws/endpoint"):
            if body != {"AppID": APP_ID, "AppSecret": APP_SECRET}:
                return self.answer(200, {"code": 514, "msg": "auth failed"})
            url = f"{self.ws_origin}/ws?device_id=fake-device&service_id={SERVICE_ID}"
            config = {"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0, "PingInterval": 120}
            return self.answer(200, {"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": config}})
        if path.startswith("/open-apis/auth/v3/tenant_access_token/internal"):
            if body != {"app_id": APP_ID, "app_secret": APP_SECRET}:
                return self.answer(200, {"code": 10014, "msg": "app secret invalid"})
            return self.answer(200, {"code": 0, "msg": "ok", "tenant_access_token": TOKEN, "expire": 7200})
        if self.headers.get("authorization") != f"Bearer {TOKEN}":
            return self.answer(200, {"code": 99991663, "msg": "tenant access token invalid"})
        if path.startswith("/open-apis/contact/v3/users/"):
            return self.answer(200, {"code": 0, "msg": "success", "data": {"user": {"name": "Ann Example"}}})
        if method == "POST" and path.startswith("/open-apis/im/v1/messages"):
            message = {"message_id": f"om_bot_{uuid.uuid4().hex[:8]}", "msg_type": body.get("msg_type"),
                       "body": {"content": body.get("content")}}
            return self.answer(200, {"code": 0, "msg": "success", "data": message})
        return self.answer(200, {"code": 230002, "msg": f"not served by the fake: {method} {path}"})

    def log_message(self, *args):
        pass


async def main():
    async with websockets.serve(serve_ws, "127.0.0.1", 0) as server:
        ws_port = server.sockets[0].getsockname()[1]
        Http.ws_origin = f"ws://127.0.0.1:{ws_port}"
        http = ThreadingHTTPServer(("127.0.0.1", 0), Http)
        threading.Thread(target=http.serve_forever, daemon=True).start()
        print(f"http://127.0.0.1:{http.server_address[1]}", flush=True)
        await asyncio.Future()


asyncio.set_event_loop(loop)
loop.run_until_complete(main())
