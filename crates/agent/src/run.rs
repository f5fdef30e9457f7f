//! Runs and steps (semantics §A2.2–§A2.10).
//!
//! [`Agent::start`] forks the session tape, answers commands at once, and
//! otherwise emits `RunStarted` and hands back a [`RunStream`]. The steps
//! run on a task that feeds the stream; when the consumer drops the stream
//! the task notices, abandons the step in flight (no `LLMCallFinished`, no
//! `ChatFinished` for it) and ends the run as `cancelled`. Whatever the
//! outcome, `RunFinished` is emitted once and the fork is merged.

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::Instant,
};

use bub_abi::{
    types::{LlmCallResult, StreamEvent},
    TurnState,
};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::{
    budget::message_bytes,
    command, context,
    events::{ChatFinished, Event, EventContext, Status},
    fold,
    message::{CallRequest, Message, Shared},
    provider::{Delta, ModelRequest, ModelResponse, ProviderError, ToolDef},
    tape::RunTape,
    tools::{self, Exposure, PlannedCall},
    Agent, AgentError, PromptContext,
};

/// How a run is started.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// The session tape.
    pub tape: String,
    /// The turn state every event, tool and hook sees.
    pub state: TurnState,
    /// Merge the fork into the store when the run ends.
    pub merge_back: bool,
    /// Recorded with `loop.start`.
    pub metadata: Map<String, Value>,
    /// The model (else the agent's).
    pub model: Option<String>,
    /// Chat options over the agent's.
    pub options: Map<String, Value>,
}

/// The events of a run, as they happen; a failed run ends with `Err`.
pub struct RunStream {
    rx: mpsc::UnboundedReceiver<Result<StreamEvent, AgentError>>,
}

impl RunStream {
    /// A stream of `events` already known (a refusal, a command's answer).
    pub fn fixed(events: Vec<StreamEvent>) -> RunStream {
        let (tx, rx) = mpsc::unbounded_channel();
        for e in events {
            let _ = tx.send(Ok(e));
        }
        RunStream { rx }
    }

    /// The next event; `None` at the end.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, AgentError>> {
        self.rx.recv().await
    }

    /// Reads to the end: every event, or the error that ended the run.
    pub async fn collect(mut self) -> (Vec<StreamEvent>, Option<AgentError>) {
        let mut events = Vec::new();
        while let Some(item) = self.next().await {
            match item {
                Ok(e) => events.push(e),
                Err(e) => return (events, Some(e)),
            }
        }
        (events, None)
    }
}

/// A stream event of `kind` with `data`.
pub fn event(kind: &str, data: Value) -> StreamEvent {
    StreamEvent { kind: kind.into(), data }
}

type Tx = mpsc::UnboundedSender<Result<StreamEvent, AgentError>>;

fn run_id() -> String {
    stamped_id("run-")
}

/// `prefix` and now to the microsecond (`run-20261205T214640123456Z`):
/// the ids of a step's model call and of a fold's summary call.
pub(crate) fn stamped_id(prefix: &str) -> String {
    format!("{prefix}{}Z", jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%6f"))
}

/// Whether a failure reads as "the context is too long" (semantics §A2.9).
///
/// Besides Bub's patterns, a bare HTTP 413 counts: a proxy in front of the
/// provider refuses an oversized request with "413 Request Entity Too
/// Large" and no word of context, and Bub then fails the turn; here the
/// run folds its context and retries as for any other overflow.
pub fn is_context_overflow(message: &str) -> bool {
    if is_rate_limit(message) {
        return false;
    }
    let s = message.to_lowercase();
    if s.contains("provider returned http 413")
        || s.contains("request entity too large")
        || s.contains("payload too large")
    {
        return true;
    }
    let near = |a: &str, b: &str, gap: usize| {
        s.match_indices(a).any(|(i, _)| {
            let rest = &s[i + a.len()..];
            (0..=gap.min(rest.len())).any(|g| rest.is_char_boundary(g) && rest[g..].starts_with(b))
        })
    };
    let tokens_max = s.match_indices("token").any(|(i, _)| {
        let rest = s[i + 5..].trim_start_matches('s').trim_start();
        let Some(rest) = rest.strip_prefix('>') else { return false };
        let rest = rest.trim_start();
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        digits > 0 && rest[digits..].trim_start().starts_with("maximum")
    });
    near("context", "length", 20)
        || near("context", "window", 20)
        || near("maximum", "context", 20)
        || near("token", "limit", 10)
        || near("prompt", "too long", 10)
        || tokens_max
}

/// Whether a step failed because its request was too long: the provider's
/// HTTP 413, or an error text [`is_context_overflow`] recognizes. A rate
/// limit never is, whatever its words ("exceeded token rate limit"): it
/// is retried with backoff by the provider client, and folding would
/// only lose context.
fn refused_as_too_long(e: &AgentError) -> bool {
    if matches!(e, AgentError::Provider(ProviderError::Status { status: 429, .. })) {
        return false;
    }
    matches!(e, AgentError::Provider(ProviderError::Status { status: 413, .. })) || is_context_overflow(&e.to_string())
}

/// Whether a failure reads as a rate limit or an exhausted quota, in any
/// provider's words: OpenAI's "Rate limit reached … tokens per min" and
/// "You exceeded your current quota", Azure's "exceeded token rate
/// limit", Anthropic's `rate_limit_error`.
pub fn is_rate_limit(message: &str) -> bool {
    let s = message.to_lowercase();
    ["rate limit", "rate_limit", "ratelimit", "rate-limit", "too many requests", "current quota", "insufficient_quota"]
        .iter()
        .any(|w| s.contains(w))
}

fn is_empty_item(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
            o.get("text").and_then(Value::as_str).is_none_or(str::is_empty)
        }
        Value::Null => true,
        _ => false,
    }
}

/// The shared state of one run.
struct Run {
    agent: Arc<Agent>,
    cx: EventContext,
    model: String,
    options: Map<String, Value>,
    // Shared by the steps, their prompt contexts and events: a big prompt
    // is held once here, not once per holder.
    prompt: Arc<[Value]>,
    steps: AtomicU32,
    started: Instant,
    // The last provider call's usage (for StepFinished and continue_prompt).
    usage: std::sync::Mutex<Option<Value>>,
    // The estimate (tokens) and size (bytes) of the last request sent,
    // and the refusal that makes the next step fold first (see `fold`).
    last_estimate: std::sync::atomic::AtomicU64,
    last_bytes: std::sync::atomic::AtomicUsize,
    fold_next: std::sync::Mutex<Option<String>>,
}

impl Run {
    fn last_usage(&self) -> Option<Value> {
        bub_abi::sync::lock(&self.usage).clone()
    }
}

impl Agent {
    /// Starts a run of `prompt` (user content items) on `options.tape`.
    pub async fn start(self: &Arc<Self>, prompt: Vec<Value>, options: RunOptions) -> Result<RunStream, AgentError> {
        if prompt.iter().all(is_empty_item) {
            return Ok(RunStream::fixed(vec![
                event("text", json!({"delta": "error: empty prompt"})),
                event("final", json!({"text": "error: empty prompt", "ok": false})),
            ]));
        }
        let tape = RunTape::fork(self.store.clone(), &options.tape, &self.sidecars, options.merge_back)
            .with_contexts(self.contexts.clone())
            .with_rescue(self.rescue.clone());
        // Entries an earlier run could not store go first, so the run reads
        // the whole conversation (see `rescue`).
        if let Some(rescue) = &self.rescue {
            if let Err(e) = rescue.restore(&self.store, tape.tapes()).await {
                tracing::warn!(target: "bub::tape", "tape {}: rescued entries are not stored yet: {e}", options.tape);
            }
        }
        let tape = Arc::new(tape);
        tape.ensure_bootstrap().await?;
        // The tape's record says whose session it is (see `sessions`); a
        // run that is not kept (`temp/…`) leaves no tape to own. Without a
        // record the tape is found by the open channels' searches only, so
        // a store that cannot write it costs the run nothing.
        if options.merge_back {
            if let Some(Value::String(session)) = options.state.get_value("session_id") {
                if let Err(e) = self.sessions.ensure_recorded(&self.store, &options.tape, &session).await {
                    tracing::warn!(target: "bub::tape", "writing the session record of tape {}: {e}", options.tape);
                }
            }
        }
        // A bare prefix (`,`) fails before its command is recorded, as in
        // Bub (which has bootstrapped the tape by then, as here).
        if command::command_line(&prompt, self.command_prefix.as_deref()).is_some_and(|l| l.is_empty()) {
            tape.merge().await?;
            return Err(AgentError::value("empty command"));
        }
        let cx = EventContext {
            state: options.state.clone(),
            tape: tape.clone(),
            tools: self.tools.clone(),
            tool_timeout: self.tool_timeout,
        };
        if let Some(line) = command::command_line(&prompt, self.command_prefix.as_deref()) {
            let outcome = self.run_command(&line, &cx).await;
            tape.merge().await?;
            let output = outcome?;
            return Ok(RunStream::fixed(vec![
                event("text", json!({"delta": output})),
                event("final", json!({"text": output, "ok": true})),
            ]));
        }
        let Some(model) = options.model.clone().or_else(|| self.model.clone()) else {
            tape.merge().await?;
            return Err(AgentError::value("no model to run: pass model to the run or to the agent"));
        };
        let mut started = Event::RunStarted {
            model: model.clone(),
            prompt: user_content(&prompt),
            metadata: options.metadata.clone(),
        };
        let emitted = self.events.emit(&mut started, &cx).await;
        drop(started);
        if let Err(e) = emitted {
            tape.merge().await?;
            return Err(e);
        }
        // As Bub's `chat_options`: `max_tokens` comes from the run's own
        // options, else the settings; the completion args' is dropped.
        let mut call_options = self.options.clone();
        call_options.shift_remove("max_tokens");
        call_options.extend(options.options);
        let run = Arc::new(Run {
            agent: self.clone(),
            cx,
            model,
            options: call_options,
            prompt: prompt.into(),
            steps: AtomicU32::new(0),
            started: Instant::now(),
            usage: Default::default(),
            last_estimate: Default::default(),
            last_bytes: Default::default(),
            fold_next: Default::default(),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let live = Live::enter();
        tokio::spawn(async move {
            drive(run, tx).await;
            drop(live);
        });
        Ok(RunStream { rx })
    }

    async fn run_command(&self, line: &str, cx: &EventContext) -> Result<String, AgentError> {
        let started = Instant::now();
        let parsed = command::parse(line, |name| self.tools.iter().find(|t| t.name == name).cloned());
        let outcome = match parsed {
            Err(e) => Err(e),
            Ok(parsed) => {
                let tool = self.tools.iter().find(|t| t.name == parsed.name).cloned();
                let call =
                    PlannedCall { id: String::new(), tool, name: parsed.name.clone(), arguments: parsed.arguments };
                match tools::run_one(&self.events, cx, "run_command", call, tools::Origin::Command).await {
                    Err(e) => Err(e),
                    Ok(o) => match o.failed {
                        Some(e) => Err(AgentError::Bub { kind: e.kind, message: e.message, details: e.details }),
                        None => Ok(match o.value {
                            Value::String(s) => s,
                            Value::Null => String::new(),
                            other if other.get("type").and_then(Value::as_str) == Some("tool_content") => {
                                tools::describe_content(&other)
                            }
                            other => other.to_string(),
                        }),
                    },
                }
            }
        };
        let name = line.split_whitespace().next().unwrap_or("").to_owned();
        let (status, output) = match &outcome {
            Ok(o) => (Status::Ok, o.clone()),
            Err(e) => (Status::Error, e.to_string()),
        };
        let mut finished = Event::CommandFinished {
            line: line.to_owned(),
            name,
            status,
            elapsed_ms: started.elapsed().as_millis() as u64,
            output,
        };
        self.events.emit(&mut finished, cx).await?;
        outcome
    }
}

/// The run's task: steps until done, failed or abandoned; then
/// `RunFinished`, the merge, and the error (if any) to the consumer.
/// The runs of this process whose task is still going: a cancelled run
/// still records its `RunFinished` and merges its fork, after its stream
/// was dropped. A command that exits on Ctrl-C waits for them
/// ([`settled`]) so the tape keeps the run.
struct Live;

fn live() -> &'static (std::sync::atomic::AtomicUsize, tokio::sync::Notify) {
    static LIVE: std::sync::OnceLock<(std::sync::atomic::AtomicUsize, tokio::sync::Notify)> =
        std::sync::OnceLock::new();
    LIVE.get_or_init(Default::default)
}

impl Live {
    fn enter() -> Live {
        live().0.fetch_add(1, Ordering::SeqCst);
        Live
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if live().0.fetch_sub(1, Ordering::SeqCst) == 1 {
            live().1.notify_waiters();
        }
    }
}

/// Waits (at most `limit`) until every run started in this process has
/// finished recording; false if some had not by then.
pub async fn settled(limit: std::time::Duration) -> bool {
    let wait = async {
        loop {
            let mut notified = std::pin::pin!(live().1.notified());
            notified.as_mut().enable();
            if live().0.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    };
    tokio::time::timeout(limit, wait).await.is_ok()
}

async fn drive(run: Arc<Run>, tx: Tx) {
    use futures_util::FutureExt as _;
    // A panic in a step (a bug of ours or of code we call) fails the run
    // like any error: the caller sees it, the tape keeps the run and its
    // RunFinished(error). Before, the task died silently and the turn
    // "succeeded" with an empty answer and nothing on the tape.
    let guarded = std::panic::AssertUnwindSafe(steps(&run, &tx)).catch_unwind().map(|r| {
        r.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            tracing::error!(target: "bub::agent", "the run panicked: {what}");
            Err(AgentError::value(format!("internal error: the run panicked: {what}")))
        })
    });
    let outcome = tokio::select! {
        r = guarded => Some(r),
        _ = tx.closed() => None,
    };
    let (status, error) = match &outcome {
        Some(Ok(())) => (Status::Ok, None),
        Some(Err(e)) => (Status::Error, Some(e.to_string())),
        None => (Status::Cancelled, None),
    };
    let mut finished = Event::RunFinished {
        status,
        steps: run.steps.load(Ordering::SeqCst),
        elapsed_ms: run.started.elapsed().as_millis() as u64,
        error,
    };
    let emitted = run.agent.events.emit(&mut finished, &run.cx).await;
    let merged = run.cx.tape.merge().await;
    let failure = match (outcome, emitted, merged) {
        (Some(Err(e)), _, _) => Some(e),
        (_, Err(e), _) | (_, _, Err(e)) => Some(e),
        _ => None,
    };
    if let Some(e) = failure {
        let _ = tx.send(Err(e));
    }
}

async fn steps(run: &Run, tx: &Tx) -> Result<(), AgentError> {
    let agent = &run.agent;
    let mut next_prompt: Option<Arc<[Value]>> = Some(run.prompt.clone());
    let mut refusals_left = 1;
    let mut output_refusals_left = 1;
    let mut step = 0;
    loop {
        step += 1;
        if agent.max_steps.is_some_and(|max| step > max) {
            return Err(AgentError::value(format!("max_steps_reached={}", step - 1)));
        }
        run.steps.store(step, Ordering::SeqCst);
        let started = Instant::now();
        // Dropped once emitted: its copy of the prompt is not kept through
        // the step.
        let mut ev = Event::StepStarted { step, prompt: next_prompt.as_deref().map(user_content) };
        agent.events.emit(&mut ev, &run.cx).await?;
        drop(ev);
        let elapsed = || started.elapsed().as_millis() as u64;
        let outcome = one_step(run, next_prompt.clone(), tx).await;
        // How a step that failed is told: its status, the error, the prompt
        // it had.
        let failed = |status: Status, error: String| Event::StepFinished {
            step,
            status,
            elapsed_ms: elapsed(),
            error: Some(error),
            next_prompt: None,
            prompt: next_prompt.as_deref().map(<[Value]>::to_vec),
            usage: run.last_usage(),
        };
        let should_continue = match outcome {
            Ok(c) => c,
            Err(e) if output_refusals_left > 0 && super::budget::output_refusal(&e.to_string()).is_some() => {
                // The answer's tokens were refused (a server that counts
                // them against the window, or a model's output limit): what
                // the refusal named is learned, and the step is tried again
                // asking for fewer; the context is folded only if the prompt
                // then leaves too little room.
                output_refusals_left -= 1;
                if let Some(refusal) = super::budget::output_refusal(&e.to_string()) {
                    let bytes = run.last_bytes.load(Ordering::SeqCst);
                    run.cx.tape.contexts().calibrations.update(&run.model, |c| c.output_refused(&refusal, bytes));
                }
                let mut ev = failed(Status::Continue, e.to_string());
                agent.events.emit(&mut ev, &run.cx).await?;
                continue;
            }
            Err(e) if refusals_left > 0 && refused_as_too_long(&e) => {
                // Folded at the next try (semantics §A2.9): the budget is
                // capped under what this request was estimated at, and the
                // step is tried again with the same prompt.
                refusals_left -= 1;
                let refused = run.last_estimate.load(Ordering::SeqCst);
                if refused > 0 {
                    let error = e.to_string();
                    run.cx.tape.contexts().calibrations.update(&run.model, |c| c.refused(refused, &error));
                }
                *bub_abi::sync::lock(&run.fold_next) = Some(e.to_string());
                let mut ev = failed(Status::AutoHandoff, e.to_string());
                agent.events.emit(&mut ev, &run.cx).await?;
                continue;
            }
            Err(e) => {
                let mut ev = failed(Status::Error, e.to_string());
                agent.events.emit(&mut ev, &run.cx).await?;
                return Err(e);
            }
        };
        let pending = match (&agent.pending, should_continue) {
            (Some(check), false) => check(run.cx.state.clone()).await?,
            _ => false,
        };
        if !should_continue && !pending {
            let mut ev = Event::StepFinished {
                step,
                status: Status::Ok,
                elapsed_ms: elapsed(),
                error: None,
                next_prompt: None,
                prompt: next_prompt.as_deref().map(<[Value]>::to_vec),
                usage: run.last_usage(),
            };
            agent.events.emit(&mut ev, &run.cx).await?;
            return Ok(());
        }
        let mut ev = Event::StepFinished {
            step,
            status: Status::Continue,
            elapsed_ms: elapsed(),
            error: None,
            next_prompt: None,
            prompt: next_prompt.as_deref().map(<[Value]>::to_vec),
            usage: run.last_usage(),
        };
        agent.events.emit(&mut ev, &run.cx).await?;
        next_prompt = match ev {
            Event::StepFinished { next_prompt, .. } => next_prompt.map(Arc::from),
            _ => None,
        };
        if agent.max_steps.is_some_and(|max| step >= max) {
            return Err(AgentError::value(format!("max_steps_reached={step}")));
        }
    }
}

/// The tools the model is offered this step, in registry order: the
/// allowed ones (state `_runtime_allowed_tools`), deferred tools only once
/// `tool.describe` loaded them on this tape (`tool.loaded` events), and
/// `tool.describe` only while a deferred tool remains hidden.
async fn step_tools<'a>(agent: &'a Agent, cx: &EventContext) -> Result<Vec<&'a tools::AgentTool>, AgentError> {
    let allowed = tools::allowed_in(&cx.state);
    let mut loaded = std::collections::HashSet::new();
    if agent.tools.iter().any(|t| t.deferred) {
        let q = bub_abi::types::TapeQuery {
            tape: cx.tape.name().to_owned(),
            kinds: vec!["event".into()],
            ..Default::default()
        };
        for e in cx.tape.fetch(&q).await? {
            if e.payload.get("name") == Some(&json!("tool.loaded")) {
                for n in e.payload["data"]["names"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                    loaded.insert(n.to_owned());
                }
            }
        }
    }
    let hidden = agent.tools.iter().any(|t| t.deferred && allowed(t) && !loaded.contains(&t.name));
    // Code mode leaves the model its `direct` tools (`run_code` among them);
    // otherwise `run_code` is not offered (Bub's `_split_code_mode`). The
    // code tools' names go into the state for the builtin's unknown-tool
    // check (Bub's `_runtime_code_tools`).
    let code_tools = tools::code_tools(&agent.tools, &cx.state, &allowed);
    let code_mode = code_tools.is_some();
    match code_tools {
        Some(code) => {
            let names: Vec<String> = code.iter().map(|t| t.model_name()).collect();
            let _ = cx.state.set("_runtime_code_tools", &names);
        }
        None => {
            let _ = cx.state.remove("_runtime_code_tools");
        }
    }
    let offered = |t: &tools::AgentTool| match t.exposure {
        Exposure::Direct => code_mode || t.name != tools::RUN_CODE,
        Exposure::Auto => !code_mode,
        Exposure::Code | Exposure::Command => false,
    };
    Ok(agent
        .tools
        .iter()
        .filter(|t| offered(t))
        .filter(|t| !t.deferred || loaded.contains(&t.name))
        .filter(|t| t.name != "tool.describe" || hidden)
        .filter(|t| allowed(t))
        .collect())
}

async fn one_step(run: &Run, prompt: Option<Arc<[Value]>>, tx: &Tx) -> Result<bool, AgentError> {
    let agent = &run.agent;
    let cx = &run.cx;
    // 1–2. Tools, then the system prompt (before steering is drained).
    let offered = step_tools(agent, cx).await?;
    let tool_names: Vec<String> = offered.iter().map(|t| t.model_name()).collect();
    let pcx = PromptContext {
        prompt: prompt.clone().unwrap_or_else(|| Arc::from([])),
        state: cx.state.clone(),
        tools: tool_names.clone(),
        model: run.model.clone(),
    };
    let mut blocks = Vec::new();
    for section in &agent.sections {
        if let Some(text) = section(pcx.clone()).await? {
            if !text.is_empty() {
                blocks.push(text);
            }
        }
    }
    drop(pcx);
    let system = (!blocks.is_empty()).then(|| blocks.join("\n\n"));
    // 3. Pending (steering) messages.
    let mut pending = Event::MessagesPending { messages: Vec::new() };
    agent.events.emit(&mut pending, cx).await?;
    let Event::MessagesPending { messages: pending } = pending else { unreachable!("same event") };
    // 4–5. The messages.
    let run_id = run_id();
    let mut new_messages: Vec<Value> = pending
        .into_iter()
        .map(|c| match c {
            Value::Array(parts) => json!({"role": "user", "content": user_content(&parts)}),
            other => json!({"role": "user", "content": other}),
        })
        .collect();
    if let Some(p) = &prompt {
        new_messages.push(json!({"role": "user", "content": user_content(p)}));
    }
    let (history, list_slot) = match context::for_request(&cx.tape, &agent.context).await {
        Ok(h) => h,
        Err(e) => {
            let chat = ChatFinished {
                run_id: run_id.clone(),
                model: run.model.clone(),
                system_prompt: system.clone(),
                context_error: Some(serde_json::to_value(e.info()).unwrap_or_default()),
                ..Default::default()
            };
            agent.events.emit(&mut Event::ChatFinished(Box::new(chat)), cx).await?;
            return Err(e);
        }
    };
    // The context budget: fold the older context, then shorten tool
    // results, until the request fits (semantics §A2.9).
    let tool_bytes: usize = offered
        .iter()
        .map(|t| t.name.len() + t.description.len() + super::budget::json_bytes(&t.parameters) + 32)
        .sum();
    let fixed_bytes = system.as_ref().map_or(0, String::len) + tool_bytes;
    let (history, sent_new) = fit(run, history, fixed_bytes, &new_messages).await?;
    // The history is shared with the kept context (see `message`).
    let mut messages = Vec::with_capacity(history.len() + new_messages.len() + 1);
    if let Some(s) = &system {
        messages.push(Message::new(json!({"role": "system", "content": s})));
    }
    messages.extend(history);
    // Shared with the request, not copied into it (the recorder takes them
    // back once the provider is done, `given_back`), and sent once: their
    // wire text goes straight into the body, not kept.
    let new_messages: Vec<Shared> = new_messages.into_iter().map(Message::sent_once).collect();
    match sent_new {
        // Shortened copies for the request; the tape gets them whole.
        Some(shortened) => messages.extend(shortened),
        None => messages.extend(new_messages.iter().cloned()),
    }
    // 6. LLMCallStarted. The answer gets what the prompt leaves of a known
    // window (a server may count both against it).
    let configured = run.options.get("max_tokens").and_then(Value::as_u64).unwrap_or(agent.settings.max_tokens);
    let calibration = cx.tape.contexts().calibrations.get(&run.model);
    let prompt_bytes = tool_bytes + messages.iter().map(|m| message_bytes(m)).sum::<usize>();
    let prompt_tokens = calibration.tokens(prompt_bytes);
    let window = calibration.known_window(agent.settings.context_window(&run.model));
    let (max_tokens, no_room) =
        match super::budget::output_tokens(configured, window, prompt_tokens, calibration.max_output) {
            Ok(n) => (n, None),
            Err(no_room) => (configured, Some(no_room)),
        };
    let request = CallRequest {
        run_id: run_id.clone(),
        model: run.model.clone(),
        messages,
        tool_names: tool_names.clone(),
        max_tokens: Some(max_tokens),
        hosted_cache: Default::default(),
        list_slot,
    };
    let mut started = Event::LlmCallStarted { request, decision: None };
    agent.events.emit(&mut started, cx).await?;
    let Event::LlmCallStarted { mut request, decision } = started else { unreachable!("same event") };
    // 7. A finish decision answers without the provider.
    if let Some(d) = decision {
        let chat = ChatFinished {
            run_id,
            model: request.model.clone(),
            system_prompt: system,
            new_messages: given_back(new_messages),
            response_text: Some(d.text.clone()),
            ..Default::default()
        };
        agent.events.emit(&mut Event::ChatFinished(Box::new(chat)), cx).await?;
        let _ = tx.send(Ok(event("text", json!({"delta": d.text}))));
        let _ = tx.send(Ok(event("final", json!({"ok": true, "text": d.text}))));
        return Ok(false);
    }
    // 8. The provider.
    let defs: Vec<ToolDef> = offered
        .iter()
        .map(|t| ToolDef { name: t.model_name(), description: t.description.clone(), parameters: t.parameters.clone() })
        .collect();
    let mut options = run.options.clone();
    options.shift_remove("tools");
    options.shift_remove("max_tokens");
    // The messages are lent to the provider's request and taken back
    // after: not even a reference count per message (on a long session
    // each is a cache miss, see `message`).
    let model_request = ModelRequest {
        messages: std::mem::take(&mut request.messages),
        tools: defs,
        max_tokens: request.max_tokens,
        options,
    };
    let sent_bytes = tool_bytes + model_request.messages.iter().map(|m| message_bytes(m)).sum::<usize>();
    let calibrations = &cx.tape.contexts().calibrations;
    run.last_estimate.store(calibrations.get(&run.model).tokens(sent_bytes), Ordering::SeqCst);
    run.last_bytes.store(sent_bytes, Ordering::SeqCst);
    let call_started = Instant::now();
    let mut text_so_far = String::new();
    // A prompt that leaves the answer no room is not sent: it is answered
    // as the provider would, an overflow, and folded.
    let outcome = match no_room {
        Some(no_room) => Err(ProviderError::Config(no_room.to_string())),
        None => call_model(agent, &request.model, &model_request, Some(tx), &mut text_so_far).await,
    };
    let elapsed = call_started.elapsed();
    let result = LlmCallResult {
        run_id: run_id.clone(),
        text: match &outcome {
            Ok(r) => Some(if r.text.is_empty() { r.refusal.clone() } else { r.text.clone() }).filter(|t| !t.is_empty()),
            Err(_) => Some(text_so_far.clone()).filter(|t| !t.is_empty()),
        },
        tool_calls: outcome.as_ref().map(|r| r.tool_calls.iter().map(|c| c.to_json()).collect()).unwrap_or_default(),
        usage: outcome.as_ref().ok().map(|r| r.usage.unwrap_or_default().to_json()),
        error: outcome.as_ref().err().map(|e| AgentError::Provider(e.clone()).info()),
        duration_ms: elapsed.as_millis() as u64,
    };
    request.messages = model_request.messages;
    let model = request.model.clone();
    let response_meta = outcome.as_ref().map(|r| r.meta.clone()).unwrap_or_default();
    let mut finished = Event::LlmCallFinished { request, result, response: response_meta };
    agent.events.emit(&mut finished, cx).await?;
    drop(finished);
    let response = outcome?;
    // 9. Usage, which also calibrates the budget's estimate; a call taken
    // counts toward lifting a refusal's cap.
    let input_tokens = response.usage.map_or(0, |u| u.input_tokens);
    calibrations.update(&run.model, |c| {
        c.learn(sent_bytes, input_tokens);
        c.accepted();
    });
    let usage = response.usage.unwrap_or_default().to_json();
    *bub_abi::sync::lock(&run.usage) = Some(usage.clone());
    let _ = tx.send(Ok(event("usage", json!({"usage": usage, "elapsed_seconds": elapsed.as_secs_f64()}))));
    let text = if response.text.is_empty() { response.refusal.clone() } else { response.text.clone() };
    let mut assistant_fields = Map::new();
    if !response.reasoning.is_empty() {
        assistant_fields.insert("reasoning".into(), json!(response.reasoning));
    }
    if !response.provider_data.is_empty() {
        assistant_fields.insert("provider_data".into(), json!(response.provider_data));
    }
    let provider = model.split_once(':').map(|(p, _)| p.to_owned()).or(Some(model.clone()));
    if response.tool_calls.is_empty() {
        let chat = ChatFinished {
            run_id,
            model: model.clone(),
            system_prompt: system,
            new_messages: given_back(new_messages),
            response_text: Some(text.clone()),
            usage: Some(usage),
            provider,
            assistant_fields,
            ..Default::default()
        };
        agent.events.emit(&mut Event::ChatFinished(Box::new(chat)), cx).await?;
        let _ = tx.send(Ok(event("final", json!({"ok": true, "text": text}))));
        return Ok(false);
    }
    // 10. Resolve every call first: bad JSON fails the step before any tool runs.
    let mut planned = Vec::new();
    for c in &response.tool_calls {
        let arguments = match serde_json::from_str::<Value>(&c.arguments) {
            Ok(Value::Object(m)) => m,
            _ => {
                return Err(AgentError::bub(
                    "invalid_input",
                    "Expected a function tool call with JSON object arguments.",
                    None,
                ))
            }
        };
        let tool = offered.iter().find(|t| t.model_name() == c.name).map(|t| (*t).clone());
        planned.push(PlannedCall { id: c.id.clone(), tool, name: c.name.clone(), arguments });
    }
    let calls_json: Vec<Value> = response.tool_calls.iter().map(|c| c.to_json()).collect();
    let _ = tx.send(Ok(event("tool_call", json!({"tool_calls": calls_json}))));
    let _ = cx.state.set("_runtime_tool_names", &tool_names);
    let outcomes =
        tools::execute(&agent.events, cx, &run_id, planned, agent.max_tool_concurrency, tools::Origin::Model).await?;
    let results: Vec<Value> = outcomes.into_iter().map(|o| o.value).collect();
    // 11–12.
    let chat = ChatFinished {
        run_id,
        model: model.clone(),
        system_prompt: system,
        new_messages: given_back(new_messages),
        response_text: Some(text).filter(|t| !t.is_empty()),
        tool_calls: calls_json.clone(),
        tool_results: Some(results.clone()),
        usage: Some(usage),
        provider,
        assistant_fields,
        ..Default::default()
    };
    agent.events.emit(&mut Event::ChatFinished(Box::new(chat)), cx).await?;
    let _ = tx.send(Ok(event("tool_result", json!({"tool_results": results}))));
    let _ = tx.send(Ok(event("final", json!({"ok": true, "tool_calls": calls_json, "tool_results": results}))));
    Ok(true)
}

/// The step's context kept within the budget: when the request (the
/// history, `fixed_bytes` of system prompt and tool schemas, and the
/// step's `new` messages) would pass it, or the provider refused the last
/// try, the older context is folded (only where the context starts after
/// the last anchor: a plugin's own context selection is its own to keep
/// small), then tool results are shortened, then (against a budget the
/// user or the provider gave, not the default guess) any other message,
/// then the step's new ones, until it fits. Everything shortened is a copy for
/// the request: the tape keeps it whole. Answers the history, and the new
/// messages to send when they had to be shortened.
async fn fit(
    run: &Run,
    mut history: Vec<Shared>,
    fixed_bytes: usize,
    new: &[Value],
) -> Result<(Vec<Shared>, Option<Vec<Shared>>), AgentError> {
    let (agent, cx) = (&run.agent, &run.cx);
    let calibration = cx.tape.contexts().calibrations.get(&run.model);
    let refused = bub_abi::sync::lock(&run.fold_next).take();
    let Some(budget) = calibration.budget(agent.settings.context_budget(&run.model)) else {
        return Ok((history, None));
    };
    let new_bytes: usize = new.iter().map(super::budget::json_bytes).sum();
    let size = |messages: &[Shared]| fixed_bytes + new_bytes + messages.iter().map(|m| message_bytes(m)).sum::<usize>();
    let tokens_before = calibration.tokens(size(&history));
    if refused.is_none() && tokens_before <= budget {
        return Ok((history, None));
    }
    let at = fold::open_tail(&history);
    let folds = agent.context.anchor.as_deref() == Some(bub_abi::types::TapeContextSpec::LAST_ANCHOR);
    if folds && fold::worth_folding(&history[..at]) {
        let current_request = (run.steps.load(Ordering::SeqCst) > 1)
            .then(|| fold::text_of(Some(&user_content(&run.prompt))))
            .filter(|t| !t.is_empty());
        let plan = fold::Plan {
            older: &history[..at],
            tail: &history[at..],
            fixed_bytes: fixed_bytes + new_bytes,
            tokens_before,
            budget,
            current_request,
        };
        let reason = refused.map_or(fold::Reason::Budget, fold::Reason::Refused);
        let summary = fold::fold(agent, cx, &run.model, &plan, &reason, calibration).await?;
        history.splice(..at, [summary]);
    }
    let fits = |m: &[Shared]| calibration.tokens(size(m)) <= budget;
    if fold::shorten_tool_results(&mut history, fits) {
        return Ok((history, None));
    }
    // Other messages only against a budget the user or the provider gave
    // (a setting, a window, a refusal), never the default guess.
    let known =
        agent.settings.knows_budget(&run.model) || calibration.refused_at.is_some() || calibration.window.is_some();
    if !known || fold::shorten_other_messages(&mut history, fits) {
        return Ok((history, None));
    }
    // The step's own messages alone pass the budget (a pasted book).
    let history_bytes: usize = history.iter().map(|m| message_bytes(m)).sum();
    let mut sent: Vec<Shared> = new.iter().cloned().map(Message::sent_once).collect();
    let fits_new = |m: &[Shared]| {
        calibration.tokens(fixed_bytes + history_bytes + m.iter().map(|m| message_bytes(m)).sum::<usize>()) <= budget
    };
    fold::shorten_other_messages(&mut sent, fits_new);
    Ok((history, Some(sent)))
}

/// The JSON of messages shared with a request: moved out when the request
/// is gone (the usual case), copied when something still holds them.
fn given_back(messages: Vec<Shared>) -> Vec<Value> {
    messages.into_iter().map(|m| Arc::try_unwrap(m).map_or_else(|m| m.json().clone(), Message::into_json)).collect()
}

/// A prompt's user content: one string when it is a single text.
fn user_content(prompt: &[Value]) -> Value {
    match prompt {
        [Value::String(s)] => Value::String(s.clone()),
        parts => Value::Array(parts.to_vec()),
    }
}

/// Calls `spec`, then its fallbacks while a candidate fails before any
/// output; deltas go to the consumer (if any) as they come.
pub(crate) async fn call_model(
    agent: &Agent,
    spec: &str,
    request: &ModelRequest,
    tx: Option<&Tx>,
    text: &mut String,
) -> Result<ModelResponse, ProviderError> {
    let mut first_error = None;
    for candidate in agent.settings.candidates(spec) {
        let client = match agent.settings.client(&candidate) {
            Ok(c) => c,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        let mut produced = false;
        let mut on_delta = |d: Delta| {
            produced = true;
            let e = match d {
                Delta::Text(t) => {
                    text.push_str(&t);
                    event("text", json!({"delta": t}))
                }
                Delta::Reasoning(t) => event("reasoning", json!({"delta": t})),
            };
            if let Some(tx) = tx {
                let _ = tx.send(Ok(e));
            }
        };
        match client.call(request, &mut on_delta).await {
            Ok(r) => return Ok(r),
            Err(e) => {
                let opening =
                    matches!(e, ProviderError::Status { .. } | ProviderError::Connection(_) | ProviderError::Config(_));
                if produced || !opening {
                    return Err(e);
                }
                tracing::warn!(target: "bub::agent", "model {candidate} failed: {e}");
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| ProviderError::Config(format!("no model to call for {spec}"))))
}

#[cfg(test)]
mod tests {
    use super::is_context_overflow;

    #[test]
    fn context_overflow_texts_behaviour_159() {
        assert!(is_context_overflow("This model's maximum context length is 8192 tokens"));
        assert!(is_context_overflow("token limit reached"));
        assert!(is_context_overflow("Prompt is too long"));
        assert!(is_context_overflow("prompt: 9000 tokens > 8192 maximum"));
        assert!(!is_context_overflow("rate limit"));
        // A proxy's bare refusal of an oversized request.
        assert!(is_context_overflow("Provider returned HTTP 413: <html><body>Request Entity Too Large</body></html>"));
        assert!(is_context_overflow("Provider returned HTTP 413: "));
        assert!(!is_context_overflow("Provider returned HTTP 429: slow down"));
        // Rate limits in the providers' documented words are not overflows.
        let azure = r#"Provider returned HTTP 429: {"error":{"code":"429","message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current AIServices S0 pricing tier. Please retry after 6 seconds."}}"#;
        let openai = r#"Provider returned HTTP 429: {"error": {"message": "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}"#;
        let anthropic = r#"Provider returned HTTP 429: {"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 40,000 input tokens per minute."}}"#;
        for body in [azure, openai, anthropic] {
            assert!(!is_context_overflow(body), "{body}");
        }
    }
}
