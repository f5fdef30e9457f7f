//! OTLP traces as Bub's `bub[trace]` exports them, side by side with
//! Python Bub 0.6.0a3 (with its trace extra) on one turn with a tool call:
//! both export to one OTLP/HTTP receiver that decodes the requests with
//! the official `opentelemetry-proto` package, and the span trees (names,
//! kinds, parents) and each span's attribute keys must be the same.

use std::{collections::BTreeSet, path::Path, process::Command};

use bub_tests::{
    bub_bin,
    provider::{chat, Provider},
};
use serde_json::{json, Value};

/// An OTLP/HTTP receiver: every span of every `POST /v1/traces`, decoded
/// with opentelemetry-proto, as one JSON line in `argv[2]`.
const RECEIVER: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
out = open(sys.argv[2], "a")
class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    out.write(json.dumps({
                        "path": self.path, "content_type": self.headers.get("content-type"),
                        "scope": scope.scope.name, "name": span.name, "kind": span.kind,
                        "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent": span.parent_span_id.hex(), "status": span.status.code,
                        "attributes": {a.key: a.value.WhichOneof("value") for a in span.attributes},
                        "values": {a.key: getattr(a.value, a.value.WhichOneof("value") or "string_value", None)
                                   for a in span.attributes if a.value.WhichOneof("value") in ("string_value", "int_value", "bool_value")},
                    }) + "\n")
        out.flush()
        data = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"#;

struct Receiver(std::process::Child, u16, std::path::PathBuf);

impl Receiver {
    fn start(venv: &Path, dir: &Path) -> Receiver {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let script = dir.join("receiver.py");
        std::fs::write(&script, RECEIVER).unwrap();
        let out = dir.join("spans.jsonl");
        let child = Command::new(venv.join("bin/python"))
            .arg(&script)
            .arg(port.to_string())
            .arg(&out)
            .spawn()
            .expect("start the OTLP receiver");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "the OTLP receiver did not listen");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Receiver(child, port, out)
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.2).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One turn (a tool call, then the answer) of `program` with traces on.
fn traced_turn(program: &Path, receiver: &Receiver, dir: &Path, extra: &[(&str, &str)]) -> Vec<Value> {
    let provider = Provider::start(vec![
        chat::tool_calls("", &[("call_1", "fs_read", r#"{"path": "a.txt"}"#)]),
        chat::text("the file says hello"),
    ]);
    let (home, ws) = (dir.join("home"), dir.join("ws"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "hello\n").unwrap();
    let before = receiver.spans().len();
    let mut cmd = Command::new(program);
    cmd.args(["run", "what does a.txt say?"]).current_dir(&ws);
    for (k, _) in std::env::vars() {
        if k.starts_with("BUB_") || k.starts_with("OPENAI_") || k.starts_with("OTEL_") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    cmd.envs([
        ("BUB_HOME", home.to_str().unwrap()),
        ("BUB_MODEL", "openai:m"),
        ("BUB_API_KEY", "k"),
        ("BUB_API_BASE", provider.base_url.as_str()),
        ("BUB_CLIENT_ARGS", r#"{"api_format": "chat"}"#),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://127.0.0.1:{}", receiver.1)),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ]);
    cmd.envs(extra.iter().copied());
    let out = cmd.output().expect("run a turn");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("the file says hello"), "{}: {text}", program.display());
    // The exporter sent its batch before the process ended.
    receiver.spans().split_off(before)
}

/// A span as compared: its name, kind, its parent's name, and its
/// attribute keys with their types.
fn shape(spans: &[Value]) -> BTreeSet<String> {
    spans
        .iter()
        .map(|s| {
            let parent = spans
                .iter()
                .find(|p| p["span_id"] == s["parent"] && !s["parent"].as_str().unwrap_or("").is_empty())
                .map_or("-".to_owned(), |p| p["name"].as_str().unwrap_or("").to_owned());
            let keys: BTreeSet<String> = s["attributes"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| format!("{k}:{}", v.as_str().unwrap_or("")))
                .collect();
            // The keys in any order: each host sets them in its own.
            let keys: Vec<String> = keys.into_iter().collect();
            format!("{} (kind {}) under {parent}: {}", s["name"].as_str().unwrap_or(""), s["kind"], keys.join(" "))
        })
        .collect()
}

/// With `OTEL_EXPORTER_OTLP_ENDPOINT` set, a turn with a tool call exports
/// the same span tree as Python Bub's: `invoke_agent bub` with a `chat m`
/// (client) per model call and an `execute_tool fs_read` below it, in one
/// trace, with the same attribute keys (gen_ai.* and OpenInference), over
/// OTLP/HTTP protobuf to `/v1/traces`; with `OTEL_SDK_DISABLED=true`,
/// nothing is sent.
#[test]
fn a_turn_is_traced_as_python_bub_traces_it() {
    let Some(venv) = bub_tests::python::bub_trace_venv_or_skip("a_turn_is_traced_as_python_bub_traces_it") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(venv, dir.path());
    let py = traced_turn(&venv.join("bin/bub"), &receiver, &dir.path().join("py"), &[]);
    let rs = traced_turn(&bub_bin(), &receiver, &dir.path().join("rs"), &[]);
    // `OTEL_SDK_DISABLED=true` turns it off, as under Bub.
    let off = traced_turn(&bub_bin(), &receiver, &dir.path().join("off"), &[("OTEL_SDK_DISABLED", "true")]);
    assert!(off.is_empty(), "spans were sent with OTEL_SDK_DISABLED=true: {off:?}");
    let names = |spans: &[Value]| {
        let mut n: Vec<String> = spans.iter().map(|s| s["name"].as_str().unwrap_or("").to_owned()).collect();
        n.sort();
        n
    };
    assert!(!py.is_empty(), "Python Bub exported no span");
    assert_eq!(names(&rs), names(&py), "the spans differ");
    assert!(rs.iter().all(|s| s["path"] == "/v1/traces" && s["content_type"] == "application/x-protobuf"));
    assert_eq!(rs.iter().map(|s| s["trace_id"].to_string()).collect::<BTreeSet<_>>().len(), 1, "one trace per turn");
    let (py_shape, rs_shape) = (shape(&py), shape(&rs));
    let only_py: Vec<_> = py_shape.difference(&rs_shape).collect();
    let only_rs: Vec<_> = rs_shape.difference(&py_shape).collect();
    assert!(only_py.is_empty() && only_rs.is_empty(), "Python Bub's only:\n{only_py:#?}\nbub-rs's only:\n{only_rs:#?}");
    // Every entry of the turn's tape names its trace and an open span, as
    // Bub stamps them (the bootstrap anchor included).
    for (who, spans) in [("py", &py), ("rs", &rs)] {
        let ids: BTreeSet<String> = spans.iter().map(|s| s["span_id"].as_str().unwrap().to_owned()).collect();
        let tapes = std::fs::read_dir(dir.path().join(who).join("home/tapes")).unwrap();
        let entries: Vec<Value> = tapes
            .map(|f| f.unwrap().path())
            .filter(|p| !p.to_string_lossy().contains("__sidecar__"))
            .flat_map(|p| std::fs::read_to_string(p).unwrap().lines().map(str::to_owned).collect::<Vec<_>>())
            .map(|l| serde_json::from_str(&l).unwrap())
            .collect();
        assert!(!entries.is_empty(), "{who}: no tape");
        for e in &entries {
            assert_eq!(e["meta"]["trace_id"], spans[0]["trace_id"], "{who}: {e}");
            assert!(ids.contains(e["meta"]["span_id"].as_str().unwrap_or("")), "{who}: {e}");
        }
    }
    let tool = rs.iter().find(|s| s["name"] == "execute_tool fs_read").expect("the tool's span");
    assert_eq!(tool["values"]["gen_ai.tool.call.id"], json!("call_1"));
    assert_eq!(
        tool["values"]["gen_ai.conversation.id"],
        py.iter().find(|s| s["name"] == "execute_tool fs_read").unwrap()["values"]["gen_ai.conversation.id"]
    );
}
