//! Folding the context into a summary (semantics §A2.9).
//!
//! A session left open for months outgrows any model's window. Before a
//! step's request would pass the context budget (see [`super::budget`]),
//! or after the provider refused one as too long, the older part of the
//! context is *folded*: one model call summarizes it, and the summary is
//! written to the tape as an anchor (`context/fold`, handoff-shaped: its
//! state holds the summary, what was folded and the token counts), an
//! event (`context.fold`) and the message that opens the context after
//! the anchor. The tape keeps every entry; only the context starts later.
//!
//! What stays out of the fold is the step's *open tail*: the model's last
//! tool calls and the results it has not seen yet. They go to the summary
//! call too (so the summary covers them), and this step's request carries
//! them verbatim after the summary, shortened only when they alone pass
//! the budget ([`shorten_tool_results`]). The steering messages and the
//! step's prompt are never folded.
//!
//! The summary call is a model call like any other: `before_llm_call`
//! and `after_llm_call` see it (its `run_id` starts with [`RUN_ID_PREFIX`]),
//! so a plugin replaces the summary by answering it with a finish
//! decision, or records it. It is not a step: nothing of it goes to the
//! consumer or into the chat entries. When it fails, the fold still
//! happens with a summary made without the model (the user's last
//! messages), so a turn never fails because its context grew.

use std::sync::Arc;

use bub_abi::types::LlmCallResult;
use serde_json::{json, Map, Value};

use super::{
    budget::{message_bytes, Calibration},
    events::{Event, EventContext},
    message::{CallRequest, Message, Shared},
    provider::ModelRequest,
    tape::context_false,
    Agent, AgentError,
};

/// The anchor a fold writes.
pub const ANCHOR: &str = "context/fold";
/// The tape event a fold writes (`{name: "context.fold", data}`).
pub const EVENT: &str = "context.fold";
/// How the summary call's `run_id` starts (`fold-20261205T…Z`).
pub const RUN_ID_PREFIX: &str = "fold-";
/// The answer the summary call may give, in tokens, at most: a quarter
/// of the budget below that ([`summary_tokens`]).
pub const SUMMARY_MAX_TOKENS: u64 = 2048;

/// The summary's size under `budget`: a quarter of it, between 128 and
/// [`SUMMARY_MAX_TOKENS`]. With a small window a 2,048-token summary
/// alone left no room for the turn, and every turn after the first fold
/// failed.
pub fn summary_tokens(budget: u64) -> u64 {
    (budget / 4).clamp(128, SUMMARY_MAX_TOKENS)
}

/// The summary call's system prompt.
pub const SUMMARY_PROMPT: &str = "You compress a conversation between a user and an AI assistant so that the \
assistant can go on as if it remembered everything that matters. Write a summary of the transcript you are given: \
the user's goals, requests and preferences; decisions made and why; facts learned, with names, paths, numbers, \
identifiers and URLs exactly as written; what the tools did and what they found; work still open and the next \
steps; and the last exchange in detail. If the transcript starts with an earlier summary, fold it in. Write in \
the conversation's language, as plain text, in at most 600 words, and add nothing the transcript does not say.";

/// How the message that opens the context after a fold starts.
pub const SUMMARY_HEAD: &str = "[Context folded] The conversation before this point no longer fit the context \
budget and was summarized below. Every message is still on the tape: tape.search finds them.";

/// Why a fold happens.
#[derive(Debug, Clone)]
pub enum Reason {
    /// The request would pass the budget.
    Budget,
    /// The provider refused the request as too long (its error).
    Refused(String),
}

/// What a step folds and keeps.
pub(crate) struct Plan<'a> {
    /// The context before the open tail: what is folded.
    pub older: &'a [Shared],
    /// The open tail: sent verbatim after the summary.
    pub tail: &'a [Shared],
    /// The rest of the request (system prompt, tool schemas, new
    /// messages), in bytes.
    pub fixed_bytes: usize,
    /// The estimate of the whole request before the fold.
    pub tokens_before: u64,
    /// The budget in force.
    pub budget: u64,
    /// The run's request, when the run has already recorded it (a fold
    /// past its first step): the summary message repeats it.
    pub current_request: Option<String>,
}

/// Where the open tail of `history` starts: the last assistant message
/// with tool calls, when only tool messages follow it; else the end.
pub fn open_tail(history: &[Shared]) -> usize {
    let results = history.iter().rev().take_while(|m| m.role() == "tool").count();
    let at = history.len() - results;
    if results > 0
        && at > 0
        && history[at - 1].role() == "assistant"
        && history[at - 1].json().get("tool_calls").is_some()
    {
        at - 1
    } else {
        history.len()
    }
}

/// Whether `older` holds anything a fold would shrink: more than the
/// summary of an earlier fold.
pub fn worth_folding(older: &[Shared]) -> bool {
    match older {
        [] => false,
        [only] => !is_summary(only),
        _ => true,
    }
}

fn is_summary(m: &Message) -> bool {
    m.role() == "user" && text_of(m.json().get("content")).starts_with(SUMMARY_HEAD)
}

/// Folds `plan.older`: the summary call, then the anchor, the event and
/// the summary message on the run's tape. Answers the summary message.
pub(crate) async fn fold(
    agent: &Agent,
    cx: &EventContext,
    model: &str,
    plan: &Plan<'_>,
    reason: &Reason,
    calibration: Calibration,
) -> Result<Shared, AgentError> {
    // The summary call's input keeps to three fifths of the budget.
    let input_limit = (plan.budget / 5 * 3).max(1_000);
    let lines: Vec<String> = plan.older.iter().chain(plan.tail).map(|m| render(m)).collect();
    let (transcript, left_out) = fit_transcript(lines, input_limit, calibration);
    // Its answer gets what the transcript leaves of a known window, too.
    let transcript_tokens = calibration.tokens(transcript.len() + SUMMARY_PROMPT.len() + 64);
    let window = calibration.known_window(agent.settings.context_window(model));
    let share = summary_tokens(plan.budget);
    let max_tokens =
        super::budget::output_tokens(share, window, transcript_tokens, calibration.max_output).unwrap_or(share);
    let (summary, summary_error) = match summarize(agent, cx, model, &transcript, max_tokens).await? {
        Ok(text) if !text.trim().is_empty() => (text, None),
        Ok(_) => (fallback_summary(plan.older), Some("the summary call answered nothing".to_owned())),
        Err(e) => (fallback_summary(plan.older), Some(e)),
    };
    // Bounded whoever wrote it (a model that ignores max_tokens, a
    // plugin's own summary): a summary past its share of the budget would
    // leave the next request no room, and be folded into itself forever.
    let room =
        (max_tokens as f64 / calibration.tokens_per_byte.unwrap_or(super::budget::DEFAULT_TOKENS_PER_BYTE)) as usize;
    let summary = shorten(summary.trim(), room.max(200));
    let summary = summary.as_str();
    let mut content = format!("{SUMMARY_HEAD}\n\n<summary>\n{summary}\n</summary>");
    if let Some(request) = &plan.current_request {
        content.push_str(&format!("\n\nThe request being worked on: {request}"));
    }
    let message = Message::new(json!({"role": "user", "content": content}));
    let tail_bytes: usize = plan.tail.iter().map(|m| message_bytes(m)).sum();
    let tokens_after = calibration.tokens(plan.fixed_bytes + message_bytes(&message) + tail_bytes);
    let folded_bytes: usize = plan.older.iter().map(|m| message_bytes(m)).sum();
    let mut state = json!({
        "summary": summary,
        "reason": match reason { Reason::Budget => "budget", Reason::Refused(_) => "context_length_exceeded" },
        "folded": {"messages": plan.older.len(), "tokens": calibration.tokens(folded_bytes),
            "left_out_of_summary": left_out},
        "tokens": {"before": plan.tokens_before, "after": tokens_after, "budget": plan.budget},
    });
    if let Reason::Refused(error) = reason {
        state["error"] = json!(error);
    }
    if let Some(e) = &summary_error {
        state["summary_error"] = json!(e);
        tracing::warn!(target: "bub::agent", "folding the context of {}: the summary call failed: {e}", cx.tape.name());
    }
    let tape = &cx.tape;
    tape.record("anchor", json!({"name": ANCHOR, "state": state.clone()}), Map::new()).await?;
    if let Some(s) = state.as_object_mut() {
        s.remove("summary");
        s.insert("summary_chars".into(), json!(summary.chars().count()));
    }
    tape.record_event(EVENT, state, context_false()).await?;
    let mut meta = Map::new();
    meta.insert("fold".into(), json!(true));
    tape.record("message", message.json().clone(), meta).await?;
    Ok(message)
}

/// The summary call: `Ok(Ok(text))`, or `Ok(Err(why))` when no summary
/// came back; `Err` only when an event handler failed.
async fn summarize(
    agent: &Agent,
    cx: &EventContext,
    model: &str,
    transcript: &str,
    max_tokens: u64,
) -> Result<Result<String, String>, AgentError> {
    let run_id = super::run::stamped_id(RUN_ID_PREFIX);
    let messages = vec![
        Message::new(json!({"role": "system", "content": SUMMARY_PROMPT})),
        Message::new(json!({"role": "user", "content": format!("<transcript>\n{transcript}\n</transcript>")})),
    ];
    let request = CallRequest {
        run_id: run_id.clone(),
        model: model.to_owned(),
        messages,
        tool_names: Vec::new(),
        max_tokens: Some(max_tokens),
        hosted_cache: Default::default(),
        list_slot: Default::default(),
    };
    let mut started = Event::LlmCallStarted { request, decision: None };
    agent.events.emit(&mut started, cx).await?;
    let Event::LlmCallStarted { mut request, decision } = started else { unreachable!("same event") };
    if let Some(d) = decision {
        return Ok(Ok(d.text));
    }
    let model_request = ModelRequest {
        messages: std::mem::take(&mut request.messages),
        tools: Vec::new(),
        max_tokens: request.max_tokens,
        options: Map::new(),
    };
    let started_at = std::time::Instant::now();
    let mut text = String::new();
    let outcome = super::run::call_model(agent, &request.model, &model_request, None, &mut text).await;
    let result = LlmCallResult {
        run_id,
        text: outcome.as_ref().ok().map(|r| r.text.clone()).filter(|t| !t.is_empty()),
        tool_calls: Vec::new(),
        usage: outcome.as_ref().ok().map(|r| r.usage.unwrap_or_default().to_json()),
        error: outcome.as_ref().err().map(|e| AgentError::Provider(e.clone()).info()),
        duration_ms: started_at.elapsed().as_millis() as u64,
    };
    request.messages = model_request.messages;
    let mut finished = Event::LlmCallFinished { request, result, response: Default::default() };
    agent.events.emit(&mut finished, cx).await?;
    Ok(outcome.map(|r| r.text).map_err(|e| e.to_string()))
}

/// A summary made without the model: what was folded, and the user's last
/// messages in it.
fn fallback_summary(older: &[Shared]) -> String {
    let asked: Vec<String> =
        older.iter().filter(|m| m.role() == "user").map(|m| shorten(&text_of(m.json().get("content")), 300)).collect();
    let last = &asked[asked.len().saturating_sub(5)..];
    let mut out = format!("(Made without the model.) {} earlier messages were folded.", older.len());
    if !last.is_empty() {
        out.push_str(" The user's last messages in them:");
        for a in last {
            out.push_str(&format!("\n- {a}"));
        }
    }
    out
}

/// Keeps `lines` within `limit` tokens: each line shortened harder and
/// harder, then the oldest left out (an earlier summary first in line is
/// kept). Answers the transcript and how many lines were left out.
fn fit_transcript(lines: Vec<String>, limit: u64, calibration: Calibration) -> (String, usize) {
    let fits = |lines: &[String]| calibration.tokens(lines.iter().map(|l| l.len() + 2).sum()) <= limit;
    let mut shortened = lines.clone();
    for max in [4_000, 1_000, 300] {
        if fits(&shortened) {
            break;
        }
        shortened = lines.iter().map(|l| shorten(l, max)).collect();
    }
    let mut left_out = 0;
    let keep_first = shortened.first().is_some_and(|l| l.contains(SUMMARY_HEAD));
    let from = usize::from(keep_first);
    while !fits(&shortened) && shortened.len() > from + 1 {
        shortened.remove(from);
        left_out += 1;
    }
    if left_out > 0 {
        shortened.insert(from, format!("[{left_out} earlier messages left out of this transcript]"));
    }
    (shortened.join("\n\n"), left_out)
}

/// One message as a transcript line.
fn render(m: &Message) -> String {
    let json = m.json();
    let content = text_of(json.get("content"));
    match m.role() {
        "tool" => {
            let name = json.get("name").and_then(Value::as_str).unwrap_or("tool");
            format!("Tool result ({name}): {content}")
        }
        "assistant" => {
            let mut line = format!("Assistant: {content}");
            for call in json.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                let name = call.get("name").and_then(Value::as_str).unwrap_or("");
                let args = call.get("arguments").map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_owned));
                line.push_str(&format!("\n(called {name} with {})", args.unwrap_or_default()));
            }
            line
        }
        role => {
            let who = if role.is_empty() { "Message" } else { role };
            let mut who = who.to_owned();
            if let Some(first) = who.get_mut(..1) {
                first.make_ascii_uppercase();
            }
            format!("{who}: {content}")
        }
    }
}

/// Message content as text: a string as is; parts as their text, others
/// named (`[image_url]`).
pub fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.clone(),
                Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
                    o.get("text").and_then(Value::as_str).unwrap_or("").to_owned()
                }
                Value::Object(o) => format!("[{}]", o.get("type").and_then(Value::as_str).unwrap_or("part")),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// `text` in at most about `max` characters: its head and tail around a
/// note of what was left out.
pub fn shorten(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let head = max / 2;
    let tail = max - head;
    let h: String = text.chars().take(head).collect();
    let t: String = text.chars().skip(count - tail).collect();
    format!("{h}\n…[{} characters left out]…\n{t}", count - max)
}

/// Shortens the tool results among `messages` (copies: the tape keeps
/// them whole) until `fits` says the request fits, harder each round:
/// each tool message's text to 8,000, 2,000, then 500 characters. Answers
/// whether it fits in the end.
pub fn shorten_tool_results(messages: &mut [Shared], fits: impl Fn(&[Shared]) -> bool) -> bool {
    shorten_where(messages, |m| m.role() == "tool", "This tool result", &fits)
}

/// As [`shorten_tool_results`] for every other message but the system
/// prompt (user messages, answers, a fold's summary): for a request that
/// one message alone makes too long, which no fold can shrink (a pasted
/// book, a summary a plugin made huge).
pub fn shorten_other_messages(messages: &mut [Shared], fits: impl Fn(&[Shared]) -> bool) -> bool {
    shorten_where(messages, |m| !matches!(m.role(), "tool" | "system"), "This message", &fits)
}

fn shorten_where(
    messages: &mut [Shared],
    which: impl Fn(&Message) -> bool,
    what: &str,
    fits: &dyn Fn(&[Shared]) -> bool,
) -> bool {
    for max in [8_000, 2_000, 500] {
        if fits(messages) {
            return true;
        }
        for m in messages.iter_mut().filter(|m| which(m)) {
            let text = text_of(m.json().get("content"));
            if text.chars().count() <= max {
                continue;
            }
            let note = format!(
                "{}\n[{what} was shortened to fit the context budget; the tape keeps it whole.]",
                shorten(&text, max)
            );
            Arc::make_mut(m).json_mut()["content"] = json!(note);
        }
    }
    fits(messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(v: Value) -> Vec<Shared> {
        Message::all(v.as_array().unwrap().iter().cloned())
    }

    #[test]
    fn the_open_tail_is_the_last_calls_and_their_results() {
        let h = msgs(json!([
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "name": "f", "arguments": "{}"}]},
            {"role": "tool", "tool_call_id": "1", "name": "f", "content": "r"},
        ]));
        assert_eq!(open_tail(&h), 1);
        let done = msgs(json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]));
        assert_eq!(open_tail(&done), 2);
        assert!(!worth_folding(&[]));
        let summary = msgs(json!([{"role": "user", "content": format!("{SUMMARY_HEAD}\n\nx")}]));
        assert!(!worth_folding(&summary));
        assert!(worth_folding(&done));
    }

    #[test]
    fn a_transcript_past_its_limit_is_shortened_then_cut_from_the_oldest() {
        let lines: Vec<String> = (0..50).map(|i| format!("User: {i} {}", "x".repeat(5_000))).collect();
        let (t, left_out) = fit_transcript(lines, 2_000, Calibration::default());
        assert!(t.len() <= 6_000 + 100, "{}", t.len());
        assert!(left_out > 0 && t.contains("earlier messages left out"));
        assert!(t.contains("User: 49"), "the newest line stays");
    }

    #[test]
    fn tool_results_are_shortened_until_the_request_fits() {
        let mut h = msgs(json!([
            {"role": "user", "content": "y".repeat(3_000)},
            {"role": "tool", "tool_call_id": "1", "name": "f", "content": "z".repeat(30_000)},
        ]));
        let size = |m: &[Shared]| m.iter().map(|m| message_bytes(m)).sum::<usize>();
        assert!(shorten_tool_results(&mut h, |m| size(m) < 6_000));
        assert_eq!(text_of(h[0].json().get("content")).len(), 3_000, "user text is never shortened");
        assert!(text_of(h[1].json().get("content")).contains("shortened to fit"));
        assert!(!shorten_tool_results(&mut h, |m| size(m) < 100));
    }
}
