//! The tape recorder (Bub's `TapeRecorder`): subscribed first on every
//! agent's bus, it writes loop events and model steps to the run's tape
//! (semantics §A4.2, §A4.4).

use bub_kit::tape::now;
use serde_json::{json, Map};

use super::{
    events::{handler, ChatFinished, Event, EventBus, EventContext, Filter},
    tape::RunTape,
    AgentError,
};

/// Subscribes the recorder.
pub fn subscribe(bus: &mut EventBus) {
    bus.on(Filter::Tape, handler(|event, cx| Box::pin(record(event, cx))));
}

async fn record(event: &mut Event, cx: &EventContext) -> Result<(), AgentError> {
    let tape = &cx.tape;
    let none = Map::new;
    match event {
        Event::RunStarted { model, prompt, metadata } => {
            let prompt = bub_kit::prompt::to_part_dicts(prompt);
            let mut data = json!({"model": model, "prompt": prompt});
            for (k, v) in metadata.iter() {
                data[k] = v.clone();
            }
            tape.record_event("loop.start", data, none()).await?;
        }
        Event::StepStarted { step, prompt } => {
            let prompt = prompt.as_ref().map(bub_kit::prompt::to_part_dicts);
            tape.record_event("loop.step.start", json!({"step": step, "prompt": prompt}), none()).await?;
        }
        Event::StepFinished { step, status, elapsed_ms, error, .. } => {
            let mut data = json!({"step": step, "elapsed_ms": elapsed_ms, "status": status.as_str(), "date": now()});
            if let Some(e) = error {
                data["error"] = json!(e);
            }
            tape.record_event("loop.step", data, none()).await?;
        }
        Event::RunFinished { status, steps, elapsed_ms, error } => {
            let mut data = json!({"status": status.as_str(), "steps": steps, "elapsed_ms": elapsed_ms, "date": now()});
            if let Some(e) = error {
                data["error"] = json!(e);
            }
            tape.record_event("loop.finish", data, none()).await?;
        }
        Event::CommandFinished { line, name, status, elapsed_ms, output } => {
            let data = json!({"raw": line, "name": name, "status": status.as_str(), "elapsed_ms": elapsed_ms,
                "output": output, "date": now()});
            tape.record_event("command", data, none()).await?;
        }
        Event::ChatFinished(chat) => record_chat(tape, chat).await?,
        _ => {}
    }
    Ok(())
}

/// Bub's `record_chat`: system, context error, new user messages, then the
/// tool call and its results or the assistant message, then `run`.
async fn record_chat(tape: &RunTape, chat: &ChatFinished) -> Result<(), AgentError> {
    let meta = || {
        let mut m = Map::new();
        m.insert("run_id".into(), json!(chat.run_id));
        m
    };
    if let Some(system) = &chat.system_prompt {
        tape.record("system", json!({"content": system}), meta()).await?;
    }
    if let Some(e) = &chat.context_error {
        tape.record("error", e.clone(), meta()).await?;
    }
    for m in &chat.new_messages {
        tape.record("message", m.clone(), meta()).await?;
    }
    if chat.context_error.is_none() {
        if !chat.tool_calls.is_empty() {
            let mut payload =
                json!({"calls": chat.tool_calls, "content": chat.response_text.clone().unwrap_or_default()});
            for (k, v) in &chat.assistant_fields {
                payload[k] = v.clone();
            }
            tape.record("tool_call", payload, meta()).await?;
            tape.record("tool_result", json!({"results": chat.tool_results.clone().unwrap_or_default()}), meta())
                .await?;
        } else {
            let mut payload = json!({"role": "assistant", "content": chat.response_text.clone().unwrap_or_default()});
            for (k, v) in &chat.assistant_fields {
                payload[k] = v.clone();
            }
            tape.record("message", payload, meta()).await?;
        }
    }
    if let Some(e) = &chat.error {
        tape.record("error", e.clone(), meta()).await?;
    }
    let failed = chat.error.is_some() || chat.context_error.is_some();
    let mut run = json!({"status": if failed { "error" } else { "ok" }, "model": chat.model});
    if let Some(u) = &chat.usage {
        run["usage"] = u.clone();
    }
    if let Some(p) = &chat.provider {
        run["provider"] = json!(p);
    }
    tape.record_event("run", run, meta()).await?;
    Ok(())
}
