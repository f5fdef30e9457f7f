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
