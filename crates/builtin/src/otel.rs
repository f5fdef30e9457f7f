//! OTLP traces, as Bub's `bub[trace]` extra exports them (`bub.tracing`):
//! with `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`
//! set and `OTEL_SDK_DISABLED` not `true`, every agent run is an
//! `invoke_agent <agent>` span, each model call a `chat <model>` span
//! (kind client) and each tool call an `execute_tool <tool>` span below it,
//! with the same `gen_ai.*` and OpenInference attribute keys, over
//! OTLP/HTTP protobuf (another `OTEL_EXPORTER_OTLP_*PROTOCOL` is refused, as
//! Bub refuses it). The OpenTelemetry SDK reads the other standard
//! variables (headers, timeout, resource attributes).
//!
//! Off unless configured, and then free: no handler is subscribed, so a run
//! pays one look at two variables when its agent is built. The spans are
//! built from the agent's events (a subscriber on its bus), and the batch
//! exporter runs on a thread of its own; [`shutdown`] flushes it when the
//! process ends.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, OnceLock},
};

use bub_agent::events::{handler, Event, EventBus, Filter, Status};
use bub_kit::python::python_json;
use bub_runtime::settings::Environment;
use opentelemetry::{
    trace::{Span as _, SpanKind, Status as SpanStatus, TraceContextExt as _, Tracer as _, TracerProvider as _},
    Context, KeyValue, Value as OtelValue,
};
use opentelemetry_sdk::trace::{SdkTracerProvider, Span, Tracer};
use serde_json::{json, Value};

/// The agent name Bub reports (`BubAgent`'s).
pub const AGENT_NAME: &str = "bub";

static PROVIDER: OnceLock<Option<SdkTracerProvider>> = OnceLock::new();

/// Whether `env` asks for traces (Bub's rule).
pub fn configured(env: &Environment) -> bool {
    let set = |k: &str| env.get(k).is_some_and(|v| !v.is_empty());
    (set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") || set("OTEL_EXPORTER_OTLP_ENDPOINT"))
        && !env.get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn provider(env: &Environment) -> Option<&'static SdkTracerProvider> {
    PROVIDER
        .get_or_init(|| {
            let protocol = env
                .get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                .or_else(|| env.get("OTEL_EXPORTER_OTLP_PROTOCOL"))
                .unwrap_or("http/protobuf");
            if protocol != "http/protobuf" {
                tracing::warn!(
                    target: "bub::otel",
                    "OTLP instrumentation disabled: bub-rs exports OTLP http/protobuf only, not {protocol:?}"
                );
                return None;
            }
            // TLS for an https endpoint: ring, the tree's provider.
            let _ = rustls::crypto::ring::default_provider().install_default();
            match opentelemetry_otlp::SpanExporter::builder().with_http().build() {
                Ok(exporter) => Some(SdkTracerProvider::builder().with_batch_exporter(exporter).build()),
                Err(e) => {
                    tracing::warn!(target: "bub::otel", "OTLP instrumentation disabled: {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// Flushes and stops the exporter, if traces were on: call before the
/// process exits (a batch not yet sent would be lost).
pub fn shutdown() {
    if let Some(Some(provider)) = PROVIDER.get() {
        if let Err(e) = provider.shutdown() {
            tracing::debug!(target: "bub::otel", "OTLP shutdown: {e}");
        }
    }
}

/// Traces the runs of the agent whose bus this is, when `env` asks for it.
pub fn subscribe(bus: &mut EventBus, env: &Environment) {
    if !configured(env) {
        return;
    }
    let Some(provider) = provider(env) else { return };
    let trace = Arc::new(Mutex::new(Trace { tracer: Some(provider.tracer("bub")), ..Default::default() }));
    bus.on(
        Filter::Any,
        handler(move |event, cx| {
            let trace = trace.clone();
            let session = cx.state.get::<String>("session_id").ok().flatten().unwrap_or_else(|| cx.tape.name().to_owned());
            let tape = cx.tape.name().to_owned();
            let definitions: Vec<Value> = cx
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "parameters": *t.parameters, "type": "function"}))
                .collect();
            let run_tape = cx.tape.clone();
            Box::pin(async move {
                let correlation = {
                    let mut trace = bub_abi::sync::lock(&trace);
                    trace.observe(event, &session, &tape, &definitions);
                    trace.correlation()
                };
                // Every entry the run appends carries the open span's ids.
                run_tape.set_correlation(correlation).await;
                Ok(())
            })
        }),
    );
}

#[derive(Default)]
struct Trace {
    tracer: Option<Tracer>,
    runs: Vec<Run>,
    chat: Option<(Span, String)>,
    /// Calls the last model answer asked for, not yet started: `(id, name)`.
    pending: VecDeque<(String, String)>,
    /// Running tool spans: tool, arguments, span.
    tools: Vec<(String, String, Span)>,
}

struct Run {
    cx: Context,
    output: Vec<Value>,
    calls: Vec<Value>,
    text: String,
}

impl Trace {
    /// The innermost open span's `trace_id` and `span_id`, as Bub's
    /// `tracing.correlation()` writes them into tape entries' meta.
    fn correlation(&self) -> Option<serde_json::Map<String, Value>> {
        let context = if let Some((_, _, span)) = self.tools.last() {
            span.span_context().clone()
        } else if let Some((span, _)) = &self.chat {
            span.span_context().clone()
        } else {
            self.runs.last()?.cx.span().span_context().clone()
        };
        if !context.is_valid() {
            return None;
        }
        let mut meta = serde_json::Map::new();
        meta.insert("trace_id".into(), json!(format!("{:032x}", context.trace_id())));
        meta.insert("span_id".into(), json!(format!("{:016x}", context.span_id())));
        Some(meta)
    }

    fn observe(&mut self, event: &mut Event, session: &str, tape: &str, definitions: &[Value]) {
        let Some(tracer) = self.tracer.clone() else { return };
        let parent = self.runs.last().map(|r| r.cx.clone()).unwrap_or_default();
        match event {
            Event::RunStarted { prompt, .. } => {
                let mut span = tracer
                    .span_builder(format!("invoke_agent {AGENT_NAME}"))
                    .with_kind(SpanKind::Internal)
                    .start_with_context(&tracer, &parent);
                set(&mut span, "gen_ai.operation.name", json!("invoke_agent"));
                set(&mut span, "gen_ai.agent.name", json!(AGENT_NAME));
                set(&mut span, "gen_ai.conversation.id", json!(session));
                set(&mut span, "openinference.span.kind", json!("AGENT"));
                let input = vec![json!({"role": "user", "content": prompt.clone()})];
                messages(&mut span, "input", &input, false);
                set(&mut span, "gen_ai.tool.definitions", json!(python_json(&Value::Array(definitions.to_vec()))));
                let cx = Context::new().with_span(span);
                self.runs.push(Run { cx, output: Vec::new(), calls: Vec::new(), text: String::new() });
            }
            Event::LlmCallStarted { request, .. } => {
                let (provider, model) = request.model.split_once(':').unwrap_or(("", request.model.as_str()));
                let mut span = tracer
                    .span_builder(format!("chat {model}"))
                    .with_kind(SpanKind::Client)
                    .start_with_context(&tracer, &parent);
                set(&mut span, "gen_ai.operation.name", json!("chat"));
                set(&mut span, "openinference.span.kind", json!("LLM"));
                set(&mut span, "gen_ai.provider.name", json!(provider));
                set(&mut span, "llm.provider", json!(provider));
                set(&mut span, "gen_ai.request.model", json!(model));
                set(&mut span, "llm.model_name", json!(model));
                if let Some(max) = request.max_tokens {
                    set(&mut span, "gen_ai.request.max_tokens", json!(max));
                }
                set(&mut span, "gen_ai.conversation.id", json!(session));
                set(&mut span, "bub.run_id", json!(request.run_id));
                set(&mut span, "bub.tape", json!(tape));
                let sent: Vec<Value> = request.messages.iter().map(|m| m.json().clone()).collect();
                messages(&mut span, "input", &sent, true);
                set(&mut span, "gen_ai.tool.definitions", json!(python_json(&Value::Array(definitions.to_vec()))));
                self.chat = Some((span, request.run_id.clone()));
            }
            Event::LlmCallFinished { result, response, .. } => {
                let Some((mut span, _)) = self.chat.take() else { return };
                if let Some(model) = &response.model {
                    set(&mut span, "gen_ai.response.model", json!(model));
                    set(&mut span, "llm.model_name", json!(model));
                }
                if let Some(id) = &response.id {
                    set(&mut span, "gen_ai.response.id", json!(id));
                }
                if let Some(reason) = &response.finish_reason {
                    let reasons = opentelemetry::Array::String(vec![reason.clone().into()]);
                    span.set_attribute(KeyValue::new("gen_ai.response.finish_reasons", OtelValue::Array(reasons)));
                }
                let usage = result.usage.clone().unwrap_or(Value::Null);
                for (key, alias, field) in [
                    ("gen_ai.usage.input_tokens", "llm.token_count.prompt", "input_tokens"),
                    ("gen_ai.usage.output_tokens", "llm.token_count.completion", "output_tokens"),
                ] {
                    if let Some(n) = usage.get(field).filter(|v| !v.is_null()) {
                        set(&mut span, key, n.clone());
                        set(&mut span, alias, n.clone());
                    }
                }
                let text = result.text.clone().unwrap_or_default();
                let answer = json!({"role": "assistant", "content": text, "tool_calls": result.tool_calls});
                messages(&mut span, "output", &[answer], true);
                if let Some(e) = &result.error {
                    fail(&mut span, &e.message, e.kind.as_str());
                }
                span.end();
                self.pending = result.tool_calls.iter().map(|c| (text_of(&c["id"]), text_of(&c["name"]))).collect();
                if let Some(run) = self.runs.last_mut() {
                    run.text.push_str(&text);
                    if !result.tool_calls.is_empty() {
                        run.output.push(json!({"role": "assistant", "content": std::mem::take(&mut run.text),
                                               "tool_calls": result.tool_calls}));
                        run.calls = result.tool_calls.clone();
                    }
                }
            }
            Event::ToolCallStarted { call, .. } => {
                if call.code_mode {
                    return;
                }
                let id = self.pending.pop_front().map(|(id, _)| id).unwrap_or_default();
                // Bub names a tool as the model does (`fs_read`).
                let name = bub_agent::tools::model_name(&call.tool);
                let mut span = tracer
                    .span_builder(format!("execute_tool {name}"))
                    .with_kind(SpanKind::Internal)
                    .start_with_context(&tracer, &parent);
                set(&mut span, "gen_ai.operation.name", json!("execute_tool"));
                set(&mut span, "openinference.span.kind", json!("TOOL"));
                set(&mut span, "gen_ai.tool.name", json!(name));
                set(&mut span, "tool.name", json!(name));
                set(&mut span, "gen_ai.tool.type", json!("function"));
                set(&mut span, "gen_ai.tool.call.id", json!(id));
                set(&mut span, "bub.run_id", json!(call.run_id));
                set(&mut span, "gen_ai.conversation.id", json!(session));
                let arguments: Value = serde_json::from_str(&call.arguments.to_json()).unwrap_or(Value::Null);
                io_value(&mut span, "gen_ai.tool.call.arguments", "input", &arguments);
                self.tools.push((call.tool.clone(), call.arguments.to_json(), span));
            }
            Event::ToolCallFinished { call, result } => {
                let arguments = call.arguments.to_json();
                let Some(at) = self.tools.iter().position(|(t, a, _)| *t == call.tool && *a == arguments) else {
                    return;
                };
                let (_, _, mut span) = self.tools.remove(at);
                let value = match (&result.result, &result.error) {
                    (_, Some(e)) => {
                        fail(&mut span, &e.message, e.kind.as_str());
                        result.result.clone().unwrap_or_else(|| json!({"kind": e.kind.as_str(), "message": e.message}))
                    }
                    (Some(v), None) => v.clone(),
                    (None, None) => Value::Null,
                };
                io_value(&mut span, "gen_ai.tool.call.result", "output", &value);
                span.end();
                if let Some(run) = self.runs.last_mut() {
                    let id = run
                        .calls
                        .iter()
                        .find(|c| c["name"].as_str() == Some(bub_agent::tools::model_name(&call.tool).as_str()))
                        .map(|c| c["id"].clone())
                        .unwrap_or(json!(""));
                    run.output.push(json!({"role": "tool", "tool_call_id": id, "content": value}));
                }
            }
            Event::RunFinished { status, error, .. } => {
                let Some(mut run) = self.runs.pop() else { return };
                if !run.text.is_empty() {
                    run.output.push(json!({"role": "assistant", "content": std::mem::take(&mut run.text)}));
                }
                let span = run.cx.span();
                let output = python_json(&normalized(&run.output));
                span.set_attribute(KeyValue::new("gen_ai.output.messages", output.clone()));
                span.set_attribute(KeyValue::new("output.value", output));
                span.set_attribute(KeyValue::new("output.mime_type", "application/json"));
                match status {
                    Status::Error => {
                        let message = error.clone().unwrap_or_else(|| "agent failed".into());
                        span.set_status(SpanStatus::error(message));
                        span.set_attribute(KeyValue::new("error.type", "RuntimeError"));
                    }
                    Status::Cancelled => span.set_attribute(KeyValue::new("bub.cancelled", true)),
                    _ => {}
                }
                span.end();
            }
            _ => {}
        }
    }
}

fn text_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Sets one attribute as Bub's `Span.set` does: a string, bool or number as
/// it is, anything else as its `json.dumps`.
fn set(span: &mut Span, key: &'static str, value: Value) {
    let v: OtelValue = match value {
        Value::String(s) => s.into(),
        Value::Bool(b) => b.into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64().unwrap_or_default().into(),
        },
        Value::Null => return,
        other => python_json(&other).into(),
    };
    span.set_attribute(KeyValue::new(key, v));
}

/// A value in (`input`) or out (`output`) of a tool: under `key`, and as
/// OpenInference's `<direction>.value` with its mime type.
fn io_value(span: &mut Span, key: &'static str, direction: &str, value: &Value) {
    set(span, key, value.clone());
    let (text, mime) = match value {
        Value::String(s) => (s.clone(), "text/plain"),
        other => (python_json(other), "application/json"),
    };
    span.set_attribute(KeyValue::new(format!("{direction}.value"), text));
    span.set_attribute(KeyValue::new(format!("{direction}.mime_type"), mime));
}

fn fail(span: &mut Span, message: &str, kind: &str) {
    span.set_status(SpanStatus::error(message.to_owned()));
    span.set_attribute(KeyValue::new("error.type", kind.to_owned()));
}

/// Messages as Bub's `_parts` normalizes them: `{role, parts}`, text and
/// tool calls and tool answers as parts, media named but not copied.
fn normalized(messages: &[Value]) -> Value {
    Value::Array(
        messages
            .iter()
            .map(|m| {
                let mut parts = Vec::new();
                let content = m.get("content").cloned().unwrap_or(Value::Null);
                if m["role"] == "tool" {
                    parts.push(json!({"type": "tool_call_response", "id": m.get("tool_call_id").cloned().unwrap_or(json!("")),
                                      "response": content}));
                } else {
                    match &content {
                        Value::String(s) if !s.is_empty() => parts.push(json!({"type": "text", "content": s})),
                        Value::Array(items) => {
                            for p in items {
                                match p.get("type").and_then(Value::as_str) {
                                    Some("text") => parts.push(json!({"type": "text", "content": p.get("text").cloned().unwrap_or(json!(""))})),
                                    Some(kind) => parts.push(json!({"type": "text", "content": format!("[{kind} omitted]")})),
                                    None => {}
                                }
                            }
                        }
                        _ => {}
                    }
                    for call in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                        let arguments = match call.get("arguments") {
                            Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
                            Some(v) => v.clone(),
                            None => json!({}),
                        };
                        parts.push(json!({"type": "tool_call", "id": call.get("id").cloned().unwrap_or(json!("")),
                                          "name": call.get("name").cloned().unwrap_or(json!("")), "arguments": arguments}));
                    }
                }
                json!({"role": m.get("role").cloned().unwrap_or(json!("user")), "parts": parts})
            })
            .collect(),
    )
}

/// `gen_ai.<direction>.messages`, `<direction>.value` and its mime type,
/// and for a chat span OpenInference's `llm.<direction>_messages.N.…`.
fn messages(span: &mut Span, direction: &str, raw: &[Value], chat: bool) {
    let normalized = normalized(raw);
    let text = python_json(&normalized);
    let key = if direction == "input" { "gen_ai.input.messages" } else { "gen_ai.output.messages" };
    span.set_attribute(KeyValue::new(key, text.clone()));
    span.set_attribute(KeyValue::new(format!("{direction}.value"), text));
    span.set_attribute(KeyValue::new(format!("{direction}.mime_type"), "application/json"));
    if !chat {
        return;
    }
    let mut attributes = Vec::new();
    for (index, message) in normalized.as_array().into_iter().flatten().enumerate() {
        let prefix = format!("llm.{direction}_messages.{index}.message");
        attributes.push(KeyValue::new(format!("{prefix}.role"), text_of(&message["role"])));
        let mut texts: Vec<String> = Vec::new();
        let mut call_index = 0;
        for part in message["parts"].as_array().into_iter().flatten() {
            match part["type"].as_str() {
                Some("text") => texts.push(text_of(&part["content"])),
                Some("tool_call_response") => {
                    attributes.push(KeyValue::new(format!("{prefix}.tool_call_id"), text_of(&part["id"])));
                    texts.push(match &part["response"] {
                        Value::String(s) => s.clone(),
                        other => python_json(other),
                    });
                }
                Some("tool_call") => {
                    let call = format!("{prefix}.tool_calls.{call_index}.tool_call");
                    attributes.push(KeyValue::new(format!("{call}.id"), text_of(&part["id"])));
                    attributes.push(KeyValue::new(format!("{call}.function.name"), text_of(&part["name"])));
                    attributes
                        .push(KeyValue::new(format!("{call}.function.arguments"), python_json(&part["arguments"])));
                    call_index += 1;
                }
                _ => {}
            }
        }
        if !texts.is_empty() {
            attributes.push(KeyValue::new(format!("{prefix}.content"), texts.join("\n")));
        }
    }
    span.set_attributes(attributes);
}
