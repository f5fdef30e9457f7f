//! Long sessions (semantics §A2.9): a session that outgrows the model's
//! window keeps working. The model here has a window and counts tokens
//! its own way (one per four bytes of the request body, not the agent's
//! estimate), refuses what passes the window with OpenAI's documented
//! `context_length_exceeded` error, and summarizes a fold's transcript by
//! keeping its `remember:` facts, as a summarizer keeps what matters.

use std::sync::{
    atomic::{AtomicU64, AtomicUsize, Ordering},
    Arc,
};

use bub_abi::types::{TapeEntry, TapeQuery};
use bub_host::agent::{fold, Agent, AgentTool, Exposure, ModelSettings, RunOptions, Store};
use bub_tests::provider::{chat, Provider, Reply, Request};
use serde_json::{json, Map, Value};

/// What a tool returns each turn: 2 KB.
const RESULT_BYTES: usize = 2_048;

/// A model with a window, on loopback.
pub(crate) struct Windowed {
    pub provider: Provider,
    /// Requests refused as past the window.
    pub refusals: Arc<AtomicUsize>,
    /// The largest request it accepted, in its tokens.
    pub largest: Arc<AtomicU64>,
    /// Summary calls answered.
    pub summaries: Arc<AtomicUsize>,
}

/// The model's own count of a request.
fn tokens(request: &Request) -> u64 {
    request.body.to_string().len() as u64 / 4
}

fn content(m: &Value) -> String {
    fold::text_of(m.get("content"))
}

/// A model whose window is `window` tokens (its count): it refuses past
/// it; answers a fold's summary call with the transcript's `remember:`
/// facts; answers a user message with a call of `blob`, and a tool result
/// with "done".
pub(crate) fn windowed(window: u64) -> Windowed {
    let (refusals, largest, summaries) = <(Arc<AtomicUsize>, Arc<AtomicU64>, Arc<AtomicUsize>)>::default();
    let (r, l, s) = (refusals.clone(), largest.clone(), summaries.clone());
    let provider = Provider::respond(move |request| {
        let asked = tokens(request);
        if asked > window {
            r.fetch_add(1, Ordering::SeqCst);
            return chat::context_length_exceeded(window, asked);
        }
        l.fetch_max(asked, Ordering::SeqCst);
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        if messages.first().is_some_and(|m| content(m) == fold::SUMMARY_PROMPT) {
            s.fetch_add(1, Ordering::SeqCst);
            let transcript = messages.last().map(content).unwrap_or_default();
            let mut facts: Vec<&str> = transcript.split_whitespace().filter(|w| w.starts_with("remember:")).collect();
            facts.sort_unstable();
            facts.dedup();
            return chat::text_counted(&format!("The user asked me to {}", facts.join(" ")), asked);
        }
        match messages.last().and_then(|m| m["role"].as_str()) {
            Some("tool") => chat::text_counted("done", asked),
            _ => chat::tool_call_counted("c1", "blob", "{}", asked),
        }
    });
    Windowed { provider, refusals, largest, summaries }
}

/// An agent on `provider` over `store`, with the `blob` tool (2 KB per
/// call) and, when given, a context budget.
pub(crate) fn agent(provider: &Provider, store: Store, budget: Option<u64>) -> Agent {
    let mut file = Map::new();
    file.insert("model".into(), json!("openai:m"));
    file.insert("api_base".into(), json!(provider.base_url));
    file.insert("client_args".into(), json!({"retry_delay": 0.01, "max_retry_delay": 0.02}));
    if let Some(b) = budget {
        file.insert("context_budget_tokens".into(), json!(b));
    }
    let settings = ModelSettings::from_sources(vec![], &file).unwrap();
    let mut agent = Agent::new(settings, store);
    agent.add_tool(AgentTool::native(
        "blob",
        "Returns 2 KB of text.",
        json!({"type": "object", "properties": {}}),
        Exposure::Auto,
        |_args, _cx| async move { Ok(json!("b".repeat(RESULT_BYTES))) },
    ));
    agent
}

/// Runs turns `turns` on tape `tape` (turn 0 says `remember:kumquat`);
/// every one must end well with "done".
pub(crate) async fn session(agent: Arc<Agent>, tape: &str, turns: std::ops::Range<usize>) {
    for k in turns {
        let prompt = if k == 0 { "turn 0: remember:kumquat".to_owned() } else { format!("turn {k}: go on") };
        let options = RunOptions { tape: tape.into(), merge_back: true, ..Default::default() };
        let stream = agent.start(vec![json!(prompt)], options).await.unwrap();
        let (events, error) = stream.collect().await;
        assert!(error.is_none(), "turn {k} failed: {error:?}");
        assert_eq!(events.last().map(|e| e.data["text"].clone()), Some(json!("done")), "turn {k}: {events:?}");
    }
}

/// Checks the tape of a finished `turns`-turn session: every user message,
/// tool result and answer is there, and the folds' anchors, each smaller
/// after than before. Returns the fold anchors.
pub(crate) fn every_entry_kept(entries: &[TapeEntry], turns: usize) -> Vec<TapeEntry> {
    let messages = |role: &str| {
        entries
            .iter()
            .filter(|e| e.kind == "message" && e.payload["role"] == role && e.meta.get("fold").is_none())
            .count()
    };
    assert_eq!(messages("user"), turns, "every prompt is on the tape");
    assert_eq!(messages("assistant"), turns, "every answer is on the tape");
    let results = entries.iter().filter(|e| e.kind == "tool_result").count();
    assert_eq!(results, turns, "every tool result is on the tape");
    let folds: Vec<TapeEntry> =
        entries.iter().filter(|e| e.kind == "anchor" && e.payload["name"] == fold::ANCHOR).cloned().collect();
    for f in &folds {
        let t = &f.payload["state"]["tokens"];
        assert!(t["after"].as_u64() < t["before"].as_u64(), "a fold that did not shrink: {f:?}");
    }
    let events = entries.iter().filter(|e| e.kind == "event" && e.payload["name"] == fold::EVENT).count();
    assert_eq!(events, folds.len(), "one context.fold event per fold");
    folds
}

fn whole_tape(store: &Store, tape: &str) -> Vec<TapeEntry> {
    bub_tests::block_on(store.fetch_all(&TapeQuery { tape: tape.into(), ..Default::default() })).unwrap()
}

/// 300 turns with a 2 KB tool result each, a budget of 4,000 tokens and a
/// model whose window is 6,000: every turn ends well, the model never
/// refuses nor sees more than the budget, the tape keeps everything, and
/// the fact said in the first turn is still in the last turn's context
/// (carried from summary to summary).
#[test]
fn a_300_turn_session_keeps_to_its_budget_and_keeps_every_entry() {
    let model = windowed(6_000);
    let store = Store::memory();
    let agent = Arc::new(agent(&model.provider, store.clone(), Some(4_000)));
    bub_tests::block_on(session(agent.clone(), "long", 0..299));
    model.provider.clear();
    bub_tests::block_on(session(agent, "long", 299..300));
    assert_eq!(model.refusals.load(Ordering::SeqCst), 0, "the budget kept every request inside the window");
    let largest = model.largest.load(Ordering::SeqCst);
    assert!(largest <= 4_000, "the model saw {largest} tokens, past the budget");
    let entries = whole_tape(&store, "long");
    let folds = every_entry_kept(&entries, 300);
    assert!(folds.len() >= 40, "{} folds", folds.len());
    assert_eq!(model.summaries.load(Ordering::SeqCst), folds.len());
    let last = model.provider.requests();
    let context = last[0].body["messages"].to_string();
    assert!(context.contains("remember:kumquat"), "the first turn's fact was lost: {context}");
    assert!(context.contains(fold::SUMMARY_HEAD), "{context}");
}

/// Without a budget of its own (the default is far above this model's
/// window), the model's refusal folds the context and the turn goes on;
/// the refusal caps the budget, so it is refused once, not every turn.
#[test]
fn a_refusal_folds_and_caps_the_budget_so_no_turn_fails() {
    let model = windowed(3_000);
    let store = Store::memory();
    let agent = Arc::new(agent(&model.provider, store.clone(), None));
    bub_tests::block_on(session(agent, "refused", 0..60));
    assert_eq!(model.refusals.load(Ordering::SeqCst), 1, "refused once, then the capped budget kept it inside");
    let entries = whole_tape(&store, "refused");
    let folds = every_entry_kept(&entries, 60);
    assert_eq!(folds[0].payload["state"]["reason"], "context_length_exceeded");
    assert!(folds[0].payload["state"]["error"].as_str().unwrap().contains("maximum context length is 3000"));
    assert!(folds[1..].iter().all(|f| f.payload["state"]["reason"] == "budget"), "{folds:?}");
}

/// The summary call is a model call the plugins see: answering it with a
/// finish decision replaces the summary, and `after_llm_call` records it.
#[test]
fn a_plugin_answers_the_summary_call_and_sees_it_finish() {
    use bub_host::agent::events::{handler, Event, Filter};
    let model = windowed(100_000);
    let store = Store::memory();
    let mut agent = agent(&model.provider, store.clone(), Some(2_000));
    let finished = Arc::new(AtomicUsize::new(0));
    agent.events.on(
        Filter::Any,
        handler(|event, _cx| {
            if let Event::LlmCallStarted { request, decision } = event {
                if request.run_id.starts_with(fold::RUN_ID_PREFIX) {
                    *decision = Some(bub_abi::types::LlmCallDecision::finish("my own summary"));
                }
            }
            Box::pin(async { Ok(()) })
        }),
    );
    let f = finished.clone();
    agent.events.on(
        Filter::Kind("LLMCallFinished"),
        handler(move |event, _cx| {
            if let Event::LlmCallFinished { request, .. } = event {
                if request.run_id.starts_with(fold::RUN_ID_PREFIX) {
                    f.fetch_add(1, Ordering::SeqCst);
                }
            }
            Box::pin(async { Ok(()) })
        }),
    );
    bub_tests::block_on(session(Arc::new(agent), "own", 0..12));
    assert_eq!(model.summaries.load(Ordering::SeqCst), 0, "the model was never asked for a summary");
    let folds = every_entry_kept(&whole_tape(&store, "own"), 12);
    assert!(!folds.is_empty());
    assert!(folds.iter().all(|f| f.payload["state"]["summary"] == "my own summary"));
    // A decision ends the call without the provider: no LLMCallFinished,
    // as for any other call a plugin answers.
    assert_eq!(finished.load(Ordering::SeqCst), 0);
}

/// A summary call that fails (the model refuses even the transcript)
/// still folds, with a summary made without the model, and the turn goes
/// on.
#[test]
fn a_failed_summary_call_still_folds_and_the_turn_goes_on() {
    let provider = Provider::respond(|request| {
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        if messages.first().is_some_and(|m| content(m) == fold::SUMMARY_PROMPT) {
            return Reply::Status(500, "summaries are down".into(), vec![]);
        }
        match messages.last().and_then(|m| m["role"].as_str()) {
            Some("tool") => chat::text_counted("done", tokens(request)),
            _ => chat::tool_call_counted("c1", "blob", "{}", tokens(request)),
        }
    });
    let store = Store::memory();
    let agent = Arc::new(agent(&provider, store.clone(), Some(1_500)));
    bub_tests::block_on(session(agent, "fallback", 0..8));
    let folds = every_entry_kept(&whole_tape(&store, "fallback"), 8);
    assert!(!folds.is_empty());
    let state = &folds[0].payload["state"];
    assert!(state["summary"].as_str().unwrap().contains("Made without the model"), "{state}");
    assert!(state["summary"].as_str().unwrap().contains("remember:kumquat"), "{state}");
    assert!(state["summary_error"].as_str().unwrap().contains("summaries are down"), "{state}");
}

/// The same 300-turn session on each tape store (the builtin JSONL file,
/// tape-sqlite, tape-postgres where a server can start), loaded through
/// the real loader: the folds and every entry land in the store.
#[test]
fn a_300_turn_session_keeps_every_entry_in_every_tape_store() {
    crate::tape_stores::each_store("a_300_turn_session_keeps_every_entry_in_every_tape_store", |name, fw| async move {
        let store = Store::Host(fw.get_tape_store().expect("a store"));
        let model = windowed(6_000);
        let agent = Arc::new(agent(&model.provider, store.clone(), Some(4_000)));
        session(agent, "long", 0..300).await;
        assert_eq!(model.refusals.load(Ordering::SeqCst), 0, "{name}");
        let entries = store.fetch_all(&TapeQuery { tape: "long".into(), ..Default::default() }).await.unwrap();
        let folds = every_entry_kept(&entries, 300);
        assert!(folds.len() >= 40, "{name}: {} folds", folds.len());
        let ids: Vec<u64> = entries.iter().map(|e| e.id).collect();
        assert_eq!(ids, (1..=entries.len() as u64).collect::<Vec<_>>(), "{name}: ids 1..n in order");
        Ok(())
    });
}

/// A tool result that alone passes the budget reaches the model shortened
/// (its head and tail, and a note), so the request fits; the tape keeps it
/// whole.
#[test]
fn a_tool_result_past_the_budget_is_shortened_in_the_request_only() {
    let model = windowed(6_000);
    let store = Store::memory();
    let mut agent = agent(&model.provider, store.clone(), Some(4_000));
    agent.add_tool(AgentTool::native(
        "blob",
        "Returns 40 KB of text.",
        json!({"type": "object", "properties": {}}),
        Exposure::Auto,
        |_args, _cx| async move { Ok(json!(format!("head{}tail", "b".repeat(40_000)))) },
    ));
    bub_tests::block_on(session(Arc::new(agent), "huge", 0..3));
    assert_eq!(model.refusals.load(Ordering::SeqCst), 0);
    let requests = model.provider.requests();
    let answered: Vec<&Value> =
        requests.iter().filter_map(|r| r.body["messages"].as_array()?.last()).filter(|m| m["role"] == "tool").collect();
    assert_eq!(answered.len(), 3, "each turn's tool result reached the model");
    for m in answered {
        let text = m["content"].as_str().unwrap();
        assert!(text.starts_with("head") && text.contains("tail\n[This tool result was shortened"), "{text:.200}");
        assert!(text.len() < 9_000, "{}", text.len());
    }
    let entries = whole_tape(&store, "huge");
    let kept: Vec<usize> = entries
        .iter()
        .filter(|e| e.kind == "tool_result")
        .map(|e| e.payload["results"][0].as_str().unwrap().len())
        .collect();
    assert_eq!(kept, [40_008; 3], "the tape keeps every result whole");
}

/// An agent whose model has a `context_window` of `window` tokens (so the
/// budget is three quarters of it), with the 2 KB `blob` tool.
fn agent_with_window(provider: &Provider, store: Store, window: u64) -> Agent {
    let mut file = Map::new();
    file.insert("model".into(), json!("openai:m"));
    file.insert("api_base".into(), json!(provider.base_url));
    file.insert("client_args".into(), json!({"retry_delay": 0.01, "max_retry_delay": 0.02, "context_window": window}));
    let settings = ModelSettings::from_sources(vec![], &file).unwrap();
    let mut agent = Agent::new(settings, store);
    agent.add_tool(AgentTool::native(
        "blob",
        "Returns 2 KB of text.",
        json!({"type": "object", "properties": {}}),
        Exposure::Auto,
        |_args, _cx| async move { Ok(json!("b".repeat(RESULT_BYTES))) },
    ));
    agent
}

/// A model with a 3,500-token window whose summaries use every token
/// they are allowed (`max_tokens`, at four bytes a token): before, the
/// 2,048-token summary alone left no room and every turn after the first
/// fold failed. Now the summary keeps to a quarter of the budget, and 20
/// turns all end well inside the window.
#[test]
fn a_3500_token_window_with_full_length_summaries_keeps_every_turn_working() {
    let refusals = Arc::new(AtomicUsize::new(0));
    let r = refusals.clone();
    let provider = Provider::respond(move |request| {
        let asked = tokens(request);
        if asked > 3_500 {
            r.fetch_add(1, Ordering::SeqCst);
            return chat::context_length_exceeded(3_500, asked);
        }
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        if messages.first().is_some_and(|m| content(m) == fold::SUMMARY_PROMPT) {
            let allowed = request.body["max_completion_tokens"].as_u64().unwrap_or(4096);
            return chat::text_counted(&"summary ".repeat(allowed as usize / 2), asked);
        }
        match messages.last().and_then(|m| m["role"].as_str()) {
            Some("tool") => chat::text_counted("done", asked),
            _ => chat::tool_call_counted("c1", "blob", "{}", asked),
        }
    });
    let store = Store::memory();
    let agent = Arc::new(agent_with_window(&provider, store.clone(), 3_500));
    bub_tests::block_on(session(agent, "small", 0..20));
    assert_eq!(refusals.load(Ordering::SeqCst), 0, "every request inside the window");
    let folds = every_entry_kept(&whole_tape(&store, "small"), 20);
    assert!(folds.len() >= 3, "{} folds", folds.len());
    let summary_calls: Vec<u64> = provider
        .requests()
        .iter()
        .filter(|r| r.body["messages"][0]["content"] == fold::SUMMARY_PROMPT)
        .map(|r| r.body["max_completion_tokens"].as_u64().unwrap())
        .collect();
    assert!(
        summary_calls.iter().all(|m| *m <= 3_500 / 4 * 3 / 4),
        "a quarter of the budget at most: {summary_calls:?}"
    );
}

/// A summary made huge (256 KiB, by a plugin answering the summary call)
/// is bounded to its share of the budget, and every turn after it works.
#[test]
fn a_huge_summary_is_bounded_and_the_session_goes_on() {
    use bub_host::agent::events::{handler, Event, Filter};
    let model = windowed(6_000);
    let store = Store::memory();
    let mut agent = agent(&model.provider, store.clone(), Some(4_000));
    agent.events.on(
        Filter::Any,
        handler(|event, _cx| {
            if let Event::LlmCallStarted { request, decision } = event {
                if request.run_id.starts_with(fold::RUN_ID_PREFIX) {
                    *decision = Some(bub_abi::types::LlmCallDecision::finish("huge ".repeat(256 * 1024 / 5)));
                }
            }
            Box::pin(async { Ok(()) })
        }),
    );
    bub_tests::block_on(session(Arc::new(agent), "huge-summary", 0..12));
    assert_eq!(model.refusals.load(Ordering::SeqCst), 0);
    let folds = every_entry_kept(&whole_tape(&store, "huge-summary"), 12);
    assert!(!folds.is_empty());
    for f in &folds {
        let summary = f.payload["state"]["summary"].as_str().unwrap();
        assert!(summary.len() < 4_000, "bounded to a quarter of the budget: {} bytes", summary.len());
    }
}

/// A user message far past the window (a pasted 200 KB text) reaches the
/// model shortened, so the turn works; the tape keeps it whole.
#[test]
fn a_user_message_past_the_window_is_shortened_in_the_request_only() {
    let model = windowed(6_000);
    let store = Store::memory();
    let agent = Arc::new(agent(&model.provider, store.clone(), Some(4_000)));
    let pasted = format!("start{}end", "p".repeat(200_000));
    bub_tests::block_on(async {
        let options = RunOptions { tape: "pasted".into(), merge_back: true, ..Default::default() };
        let (events, error) = agent.start(vec![json!(pasted)], options).await.unwrap().collect().await;
        assert!(error.is_none(), "{error:?}");
        assert_eq!(events.last().map(|e| e.data["text"].clone()), Some(json!("done")));
    });
    assert_eq!(model.refusals.load(Ordering::SeqCst), 0);
    let first = model.provider.requests()[0].body["messages"].to_string();
    assert!(first.contains("start") && first.contains("was shortened to fit the context budget"), "{first:.300}");
    let entries = whole_tape(&store, "pasted");
    let user = entries.iter().find(|e| e.kind == "message" && e.payload["role"] == "user").unwrap();
    assert_eq!(user.payload["content"].as_str().unwrap().len(), 200_008, "the tape keeps it whole");
}

/// A refusal that names no numbers caps the budget by a guess; refused
/// three times in a row, the guesses compound, and before they were never
/// lifted, so the session folded on most turns. Now the cap is lifted
/// once the model has taken enough calls: the last turns fold no more.
#[test]
fn a_guessed_refusal_cap_is_lifted_and_folding_stops() {
    let refusals = Arc::new(AtomicUsize::new(0));
    let r = refusals.clone();
    let provider = Provider::respond(move |request| {
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        if messages.first().is_some_and(|m| content(m) == fold::SUMMARY_PROMPT) {
            return chat::text_counted("a summary", tokens(request));
        }
        // A proxy's bare refusal of the first request of turns 1 to 3, on a
        // model whose window is far larger.
        let last = messages.last().map(content).unwrap_or_default();
        let turn = ["turn 1:", "turn 2:", "turn 3:"].iter().position(|t| last.contains(t));
        if let Some(t) = turn {
            if r.fetch_max(t + 1, Ordering::SeqCst) < t + 1 {
                return Reply::Status(413, "Request Entity Too Large".into(), vec![]);
            }
        }
        match messages.last().and_then(|m| m["role"].as_str()) {
            Some("tool") => chat::text_counted("done", tokens(request)),
            _ => chat::tool_call_counted("c1", "blob", "{}", tokens(request)),
        }
    });
    let store = Store::memory();
    let agent = Arc::new(agent(&provider, store.clone(), None));
    bub_tests::block_on(session(agent, "guessed", 0..30));
    assert_eq!(refusals.load(Ordering::SeqCst), 3, "turns 1 to 3 each met a refusal");
    let entries = whole_tape(&store, "guessed");
    let is_fold = |e: &TapeEntry| e.kind == "anchor" && e.payload["name"] == fold::ANCHOR;
    let folds = entries.iter().filter(|e| is_fold(e)).count();
    let last_fold = entries.iter().rposition(is_fold).unwrap();
    let turns_after = entries[last_fold..]
        .iter()
        .filter(|e| e.kind == "message" && e.payload["role"] == "user" && e.meta.get("fold").is_none())
        .count();
    assert!(turns_after >= 10, "the last {turns_after} turns folded no more ({folds} folds in all)");
}

/// Rate limits are not overflows: Azure's "exceeded token rate limit",
/// OpenAI's "Rate limit reached … tokens per min" and Anthropic's
/// `rate_limit_error` (their documented 429 bodies) are retried with
/// backoff and never folded; one that outlasts the retries fails the turn
/// with the provider's words, still without a fold, and the next turn
/// works.
#[test]
fn rate_limits_are_retried_and_never_folded() {
    let azure = r#"{"error":{"code":"429","message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current AIServices S0 pricing tier. Please retry after 1 second."}}"#;
    let openai = r#"{"error": {"message": "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 1s.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}"#;
    let anthropic = r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 40,000 input tokens per minute."}}"#;
    for body in [azure, openai, anthropic] {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let limited = body.to_owned();
        let provider = Provider::respond(move |request| {
            // Turn 0: two 429s, then served. Turn 1: 429 on every try.
            let n = c.fetch_add(1, Ordering::SeqCst);
            if n < 2 || (4..7).contains(&n) {
                return Reply::Status(429, limited.clone(), vec![("retry-after".into(), "0".into())]);
            }
            let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
            match messages.last().and_then(|m| m["role"].as_str()) {
                Some("tool") => chat::text_counted("done", tokens(request)),
                _ => chat::tool_call_counted("c1", "blob", "{}", tokens(request)),
            }
        });
        let store = Store::memory();
        let agent = Arc::new(agent(&provider, store.clone(), Some(4_000)));
        bub_tests::block_on(async {
            session(agent.clone(), "limited", 0..1).await;
            let options = RunOptions { tape: "limited".into(), merge_back: true, ..Default::default() };
            let (_, error) = agent.start(vec![json!("turn 1")], options).await.unwrap().collect().await;
            let error = error.expect("a rate limit past the retries fails the turn").to_string();
            assert!(error.contains("429"), "{error}");
            session(agent.clone(), "limited", 2..3).await;
        });
        let entries = whole_tape(&store, "limited");
        assert!(
            !entries.iter().any(|e| e.kind == "anchor" && e.payload["name"] == fold::ANCHOR),
            "folded on a 429: {body}"
        );
    }
}

/// A server that counts the prompt and the requested answer against its
/// window, as vLLM's OpenAI server does (and its refusals, in its words
/// and error shape): the prompt is its own count (one token per two and a
/// half bytes of the body, more than the agent's first estimate); a
/// request without `max_tokens` gets what the prompt leaves; a model
/// `output_cap`, when given, refuses more output tokens in OpenAI's words.
struct CountsTheAnswer {
    provider: Provider,
    /// Refusals of the prompt alone, and of prompt + answer.
    prompt_refusals: Arc<AtomicUsize>,
    output_refusals: Arc<AtomicUsize>,
    /// The largest prompt + max_tokens it accepted.
    largest: Arc<AtomicU64>,
}

fn vllm_error(message: String) -> Reply {
    let body = json!({"object": "error", "message": message, "type": "BadRequestError", "param": null, "code": 400});
    Reply::Status(400, body.to_string(), vec![])
}

fn counts_the_answer(window: u64, output_cap: Option<u64>) -> CountsTheAnswer {
    let (prompt_refusals, output_refusals) = <(Arc<AtomicUsize>, Arc<AtomicUsize>)>::default();
    let largest = Arc::new(AtomicU64::new(0));
    let (p, o, l) = (prompt_refusals.clone(), output_refusals.clone(), largest.clone());
    let provider = Provider::respond(move |request| {
        let input = (request.body.to_string().len() as f64 / 2.5) as u64;
        if input >= window {
            p.fetch_add(1, Ordering::SeqCst);
            return vllm_error(format!(
                "This model's maximum context length is {window} tokens. However, your request has {input} input \
                 tokens. Please reduce the length of the input messages."
            ));
        }
        let asked = ["max_completion_tokens", "max_tokens"].iter().find_map(|k| request.body[*k].as_u64());
        if let (Some(cap), Some(max)) = (output_cap, asked) {
            if max > cap {
                o.fetch_add(1, Ordering::SeqCst);
                let body = json!({"error": {"message": format!("max_tokens is too large: {max}. This model supports \
                    at most {cap} completion tokens, whereas you provided {max}."), "type": "invalid_request_error",
                    "param": "max_tokens", "code": "invalid_value"}});
                return Reply::Status(400, body.to_string(), vec![]);
            }
        }
        let max = asked.unwrap_or(window - input);
        if input + max > window {
            o.fetch_add(1, Ordering::SeqCst);
            return vllm_error(format!(
                "'max_tokens' or 'max_completion_tokens' is too large: {max}. This model's maximum context length \
                 is {window} tokens and your request has {input} input tokens ({max} > {window} - {input}). None"
            ));
        }
        l.fetch_max(input + max, Ordering::SeqCst);
        let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
        if messages.first().is_some_and(|m| content(m) == fold::SUMMARY_PROMPT) {
            return chat::text_counted("The user asked me to remember:kumquat", input);
        }
        match messages.last().and_then(|m| m["role"].as_str()) {
            Some("tool") => chat::text_counted("done", input),
            _ => chat::tool_call_counted("c1", "blob", "{}", input),
        }
    });
    CountsTheAnswer { provider, prompt_refusals, output_refusals, largest }
}

/// With a known window (`context_window` 8,000) every request asks for at
/// most what its prompt leaves (before, 16,384 every time, and a server
/// counting both refused all 100 turns): 100 turns end well, nothing is
/// refused, and no accepted request passes the window.
#[test]
fn requests_fit_a_window_that_counts_the_answer() {
    let server = counts_the_answer(8_000, None);
    let store = Store::memory();
    let agent = Arc::new(agent_with_window(&server.provider, store.clone(), 8_000));
    bub_tests::block_on(session(agent, "vllm", 0..100));
    let refusals = (server.prompt_refusals.load(Ordering::SeqCst), server.output_refusals.load(Ordering::SeqCst));
    assert_eq!(refusals, (0, 0), "(prompt, output) refusals");
    assert!(server.largest.load(Ordering::SeqCst) <= 8_000);
    let asked: Vec<u64> =
        server.provider.requests().iter().filter_map(|r| r.body["max_completion_tokens"].as_u64()).collect();
    assert!(asked.iter().all(|m| *m < 8_000 && *m >= bub_host::agent::budget::OUTPUT_FLOOR), "{asked:?}");
    let folds = every_entry_kept(&whole_tape(&store, "vllm"), 100);
    assert!(!folds.is_empty(), "the prompts grew to the budget (three quarters of the window)");
}

/// Without a known window, the server's refusal of the answer's tokens is
/// learned from (its window, and the prompt's size in its tokens) and the
/// step is tried again asking for less, without folding: 60 turns end
/// well after one refusal, and the window the refusal named then bounds
/// the budget, so the prompt never grows into a refusal. A model's output
/// limit in OpenAI's words is learned the same way.
#[test]
fn a_refusal_of_the_answers_tokens_is_learned_once() {
    let server = counts_the_answer(8_000, None);
    let store = Store::memory();
    let learning = Arc::new(agent(&server.provider, store.clone(), None));
    bub_tests::block_on(session(learning, "learned", 0..60));
    let refusals = (server.prompt_refusals.load(Ordering::SeqCst), server.output_refusals.load(Ordering::SeqCst));
    assert_eq!(refusals, (0, 1), "(prompt, output) refusals: the first request only");
    let entries = whole_tape(&store, "learned");
    let folds = every_entry_kept(&entries, 60);
    assert!(!folds.is_empty() && folds.iter().all(|f| f.payload["state"]["reason"] == "budget"), "{folds:?}");

    let capped = counts_the_answer(1_000_000, Some(4_096));
    let learning = Arc::new(agent(&capped.provider, Store::memory(), None));
    bub_tests::block_on(session(learning, "capped", 0..5));
    assert_eq!(capped.output_refusals.load(Ordering::SeqCst), 1, "refused once, then 4,096 asked");
    let last = capped.provider.requests().last().unwrap().body["max_completion_tokens"].clone();
    assert_eq!(last, json!(4_096));
}

/// A prompt that would leave the answer less than the floor (a budget
/// set above the window) is not sent: it is folded as an overflow whose
/// reason names the floor, and the session goes on without a refusal.
#[test]
fn a_prompt_that_leaves_no_room_for_the_answer_is_folded_first() {
    let server = counts_the_answer(6_000, None);
    let store = Store::memory();
    let mut file = Map::new();
    file.insert("model".into(), json!("openai:m"));
    file.insert("api_base".into(), json!(server.provider.base_url));
    file.insert("client_args".into(), json!({"retry_delay": 0.01, "max_retry_delay": 0.02, "context_window": 6_000}));
    file.insert("context_budget_tokens".into(), json!(50_000));
    let settings = ModelSettings::from_sources(vec![], &file).unwrap();
    let mut agent = Agent::new(settings, store.clone());
    agent.add_tool(AgentTool::native(
        "blob",
        "Returns 2 KB of text.",
        json!({"type": "object", "properties": {}}),
        Exposure::Auto,
        |_args, _cx| async move { Ok(json!("b".repeat(RESULT_BYTES))) },
    ));
    bub_tests::block_on(session(Arc::new(agent), "floor", 0..30));
    let refusals = (server.prompt_refusals.load(Ordering::SeqCst), server.output_refusals.load(Ordering::SeqCst));
    assert_eq!(refusals, (0, 0), "(prompt, output) refusals");
    let folds = every_entry_kept(&whole_tape(&store, "floor"), 30);
    let error = folds[0].payload["state"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("under the floor of 256"), "{error}");
}
