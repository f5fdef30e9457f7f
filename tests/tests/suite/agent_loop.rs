//! The agent as a library (`bub_host::agent`): an embedder's [`Agent`] with
//! its own handlers on the bus, against a scripted provider (behaviours of
//! `docs/semantics.md` §A2).

use bub_host::WithBuiltin as _;
use std::sync::{Arc, Mutex};

use bub_abi::{types::LlmCallDecision, TurnState};
use bub_host::agent::{
    events::{handler, Event, Filter},
    Agent, AgentTool, Exposure, ModelSettings, RunOptions, Store,
};
use bub_tests::{
    block_on,
    provider::{chat, Provider, Reply},
};
use serde_json::{json, Map, Value};

fn agent(provider: &Provider) -> Agent {
    let mut file = Map::new();
    file.insert("model".into(), json!("openai:m"));
    file.insert("api_base".into(), json!(provider.base_url));
    file.insert("client_args".into(), json!({"retry_delay": 0.01, "max_retry_delay": 0.02}));
    let settings = ModelSettings::from_sources(vec![], &file).unwrap();
    let mut agent = Agent::new(settings, Store::memory());
    agent.add_tool(AgentTool::native(
        "echo.back",
        "Returns its text.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        Exposure::Auto,
        |args, _cx| async move { Ok(args.get("text").cloned().unwrap_or_default()) },
    ));
    agent
}

/// Records every event's name (and StepFinished's status).
fn record(agent: &mut Agent) -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    agent.events.on(
        Filter::Any,
        handler(move |event, _cx| {
            let name = match event {
                Event::StepFinished { status, .. } => format!("StepFinished({})", status.as_str()),
                Event::RunFinished { status, .. } => format!("RunFinished({})", status.as_str()),
                other => other.name().to_owned(),
            };
            s.lock().unwrap().push(name);
            Box::pin(async { Ok(()) })
        }),
    );
    seen
}

fn options(tape: &str) -> RunOptions {
    RunOptions { tape: tape.into(), state: TurnState::new(), merge_back: true, ..Default::default() }
}

fn run(agent: Agent, prompt: &str) -> (Vec<(String, Value)>, Option<String>) {
    let agent = Arc::new(agent);
    block_on(async move {
        let stream = agent.start(vec![json!(prompt)], options("t")).await.unwrap();
        let (events, error) = stream.collect().await;
        (events.into_iter().map(|e| (e.kind, e.data)).collect(), error.map(|e| e.to_string()))
    })
}

#[test]
fn event_order_of_a_tool_step_then_a_text_step_behaviour_133_134_135_136() {
    let provider =
        Provider::start(vec![chat::tool_calls("", &[("c1", "echo_back", r#"{"text":"hi"}"#)]), chat::text("ok")]);
    let mut agent = agent(&provider);
    let seen = record(&mut agent);
    let (events, error) = run(agent, "go");
    assert_eq!(error, None);
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["usage", "tool_call", "tool_result", "final", "text", "text", "usage", "final"]);
    // No usage reported: zeros (behaviour 134); reported: 3 + 2 (behaviour 133).
    assert_eq!(events[0].1["usage"]["total_tokens"], 0);
    assert_eq!(
        events[6].1["usage"],
        json!({"input_tokens": 3, "output_tokens": 2, "reasoning_tokens": 0, "cached_tokens": 0, "cache_write_tokens": 0, "total_tokens": 5})
    );
    assert_eq!(events[2].1, json!({"tool_results": ["hi"]}));
    assert_eq!(events[7].1, json!({"ok": true, "text": "ok"}));
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "RunStarted",
            "StepStarted",
            "MessagesPending",
            "LLMCallStarted",
            "LLMCallFinished",
            "ToolCallStarted",
            "ToolCallFinished",
            "ChatFinished",
            "StepFinished(continue)",
            "StepStarted",
            "MessagesPending",
            "LLMCallStarted",
            "LLMCallFinished",
            "ChatFinished",
            "StepFinished(ok)",
            "RunFinished(ok)"
        ]
    );
}

#[test]
fn an_empty_prompt_and_no_model_behaviour_96_101() {
    let provider = Provider::start(vec![]);
    let mut a = agent(&provider);
    let seen = record(&mut a);
    let (events, _) = run(a, "");
    assert_eq!(events[0], ("text".into(), json!({"delta": "error: empty prompt"})));
    assert_eq!(events[1], ("final".into(), json!({"text": "error: empty prompt", "ok": false})));
    assert!(seen.lock().unwrap().is_empty());
    let mut a = agent(&provider);
    a.model = None;
    let a = Arc::new(a);
    let err = block_on(async move { a.start(vec![json!("x")], options("t")).await.err().unwrap().to_string() });
    assert_eq!(err, "no model to run: pass model to the run or to the agent");
}

#[test]
fn max_steps_ends_the_run_behaviour_111_143() {
    let call = || chat::tool_calls("", &[("c1", "echo_back", r#"{"text":"again"}"#)]);
    let provider = Provider::start(vec![call(), call(), call()]);
    let mut a = agent(&provider);
    a.max_steps = Some(2);
    let seen = record(&mut a);
    let (_, error) = run(a, "loop");
    assert_eq!(error.as_deref(), Some("max_steps_reached=2"));
    assert_eq!(provider.requests().len(), 2);
    assert_eq!(seen.lock().unwrap().last().unwrap(), "RunFinished(error)");
    assert!(agent(&provider).with_max_tool_concurrency(Some(0)).is_err());
}

/// A session's context messages are shared by its requests and
/// keep their wire text. A handler that edits one gets its own copy: the
/// edit is sent, and the next run sends the message as the tape has it.
#[test]
fn an_edited_context_message_is_sent_edited_and_the_kept_one_stays_behaviour_123() {
    let replies = ["one", "two", "three", "four"].map(chat::text).to_vec();
    let provider = Provider::start(replies);
    let mut a = agent(&provider);
    let edit = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let e = edit.clone();
    a.events.on(
        Filter::Kind("LLMCallStarted"),
        handler(move |event, _cx| {
            if let (Event::LlmCallStarted { request, .. }, true) = (event, e.load(std::sync::atomic::Ordering::SeqCst))
            {
                let first = request.messages.iter().position(|m| m["content"] == "first").expect("the kept message");
                Arc::make_mut(&mut request.messages[first]).json_mut()["content"] = json!("edited");
            }
            Box::pin(async { Ok(()) })
        }),
    );
    let a = Arc::new(a);
    let turn = |prompt: &'static str, edited: bool| {
        edit.store(edited, std::sync::atomic::Ordering::SeqCst);
        let a = a.clone();
        block_on(async move {
            let (_, error) = a.start(vec![json!(prompt)], options("t")).await.unwrap().collect().await;
            assert!(error.is_none(), "{error:?}");
        })
    };
    // The second turn sends `first` from the kept context (it keeps its
    // wire text then), the third edits it, the fourth sends it again.
    turn("first", false);
    turn("second", false);
    turn("third", true);
    turn("fourth", false);
    let contents = |i: usize| -> Vec<Value> {
        let body = &provider.requests()[i].body;
        body["messages"].as_array().unwrap().iter().map(|m| m["content"].clone()).collect()
    };
    assert_eq!(contents(1), ["first", "one", "second"].map(|c| json!(c)));
    assert_eq!(contents(2), ["edited", "one", "second", "two", "third"].map(|c| json!(c)));
    assert_eq!(contents(3), ["first", "one", "second", "two", "third", "three", "fourth"].map(|c| json!(c)));
}

#[test]
fn handlers_rewrite_requests_and_results_behaviour_123_127_145_150() {
    let provider =
        Provider::start(vec![chat::tool_calls("", &[("c1", "echo_back", r#"{"text":"orig"}"#)]), chat::text("ok")]);
    let mut a = agent(&provider);
    a.events.on(
        Filter::Kind("LLMCallStarted"),
        handler(|event, _cx| {
            if let Event::LlmCallStarted { request, .. } = event {
                request.model = "openai:other".into();
                request.max_tokens = Some(42);
            }
            Box::pin(async { Ok(()) })
        }),
    );
    a.events.on(
        Filter::Kind("ToolCallStarted"),
        handler(|event, _cx| {
            if let Event::ToolCallStarted { call, .. } = event {
                call.arguments = bub_abi::Value::from(&json!({"text": "rewritten"}));
            }
            Box::pin(async { Ok(()) })
        }),
    );
    a.events.on(
        Filter::Kind("ToolCallFinished"),
        handler(|event, _cx| {
            if let Event::ToolCallFinished { result, .. } = event {
                let r = result.result.clone().unwrap_or_default();
                result.result = Some(json!(format!("bounded:{}", r.as_str().unwrap_or(""))));
            }
            Box::pin(async { Ok(()) })
        }),
    );
    let (events, error) = run(a, "go");
    assert_eq!(error, None);
    assert_eq!(events[2].1, json!({"tool_results": ["bounded:rewritten"]}));
    let requests = provider.requests();
    assert_eq!(requests[0].body["model"], "other");
    assert_eq!(requests[0].body["max_completion_tokens"], 42);

    // A finish decision: no provider call, later handlers do not run.
    let provider = Provider::start(vec![]);
    let mut a = agent(&provider);
    a.events.on(
        Filter::Kind("LLMCallStarted"),
        handler(|event, _cx| {
            if let Event::LlmCallStarted { decision, .. } = event {
                *decision = Some(LlmCallDecision::finish("budget exhausted"));
            }
            Box::pin(async { Ok(()) })
        }),
    );
    let later = Arc::new(Mutex::new(0));
    let l = later.clone();
    a.events.on(
        Filter::Kind("LLMCallStarted"),
        handler(move |_e, _cx| {
            *l.lock().unwrap() += 1;
            Box::pin(async { Ok(()) })
        }),
    );
    let (events, _) = run(a, "go");
    assert_eq!(
        events,
        [
            ("text".into(), json!({"delta": "budget exhausted"})),
            ("final".into(), json!({"ok": true, "text": "budget exhausted"}))
        ]
    );
    assert!(provider.requests().is_empty());
    assert_eq!(*later.lock().unwrap(), 0);
}

/// A session with one turn behind it ("hello" → "hi") whose next turn's
/// first model call is refused with `refusal`: the older context is folded
/// (the summary call answers "they said hello") and the retry answers
/// "fits now". Returns the provider and the tape, with the fold's anchor.
fn refused_once_then_fits(
    refusal: impl Fn() -> Reply,
) -> (Provider, Vec<bub_abi::types::TapeEntry>, bub_abi::types::TapeEntry) {
    let script = vec![chat::text("hi"), refusal(), chat::text("they said hello"), chat::text("fits now")];
    let provider = Provider::start(script);
    let a = Arc::new(agent(&provider));
    let store = a.store.clone();
    let (events, error) = block_on(async move {
        for prompt in ["hello", "big"] {
            let stream = a.start(vec![json!(prompt)], options("t")).await.unwrap();
            let (events, error) = stream.collect().await;
            if prompt == "big" {
                return (events, error.map(|e| e.to_string()));
            }
        }
        unreachable!()
    });
    assert_eq!(error, None);
    assert_eq!(events.last().unwrap().data["text"], "fits now");
    let entries =
        block_on(store.fetch_all(&bub_abi::types::TapeQuery { tape: "t".into(), ..Default::default() })).unwrap();
    let anchor = entries.iter().find(|e| e.kind == "anchor" && e.payload["name"] == "context/fold").unwrap().clone();
    (provider, entries, anchor)
}

/// The error of a second turn whose two model calls are both refused with
/// `refusal` (the fold between them answered).
fn refused_twice(refusal: impl Fn() -> Reply) -> String {
    let provider = Provider::start(vec![chat::text("hi"), refusal(), chat::text("summary"), refusal()]);
    let a = Arc::new(agent(&provider));
    block_on(async move {
        a.start(vec![json!("hello")], options("t")).await.unwrap().collect().await;
        let (_, error) = a.start(vec![json!("big")], options("t")).await.unwrap().collect().await;
        error.unwrap().to_string()
    })
}

/// A provider's "context too long" folds the older context into a summary
/// and tries the step once more with the same prompt (where Bub hands off
/// and drops the context: docs/agent.md lists the difference).
#[test]
fn context_overflow_folds_once_and_retries_behaviour_157_158() {
    let overflow = || Reply::Status(400, "This model's maximum context length is 8192 tokens".into(), vec![]);
    let (provider, entries, anchor) = refused_once_then_fits(overflow);
    assert_eq!(anchor.payload["state"]["reason"], "context_length_exceeded");
    assert_eq!(anchor.payload["state"]["summary"], "they said hello");
    assert_eq!(anchor.payload["state"]["folded"]["messages"], 2, "{anchor:?}");
    let statuses: Vec<&str> = entries
        .iter()
        .filter(|e| e.payload.get("name") == Some(&json!("loop.step")))
        .map(|e| e.payload["data"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["ok", "auto_handoff", "ok"]);
    let requests = provider.requests();
    let summary_call = requests[2].body["messages"].as_array().unwrap();
    assert!(summary_call[1]["content"].as_str().unwrap().contains("User: hello"), "{summary_call:?}");
    assert!(requests[2].body.get("tools").is_none(), "the summary call offers no tools");
    let retry = requests[3].body["messages"].as_array().unwrap();
    assert_eq!(retry.len(), 2, "the summary, then the prompt: {retry:?}");
    assert!(retry[0]["content"].as_str().unwrap().contains("they said hello"));
    assert_eq!(retry[1]["content"], "big", "the original prompt is sent again");

    assert!(refused_twice(overflow).contains("maximum context length"));
}

/// A proxy's bare 413 (no word of context in it) is a context overflow
/// too: the run folds and retries once instead of failing the turn (Bub
/// fails it; docs/agent.md lists the difference).
#[test]
fn a_bare_http_413_folds_and_retries_like_an_overflow() {
    let too_large =
        || Reply::Status(413, "<html><body><h1>413 Request Entity Too Large</h1></body></html>".into(), vec![]);
    let (provider, _, anchor) = refused_once_then_fits(too_large);
    assert!(anchor.payload["state"]["error"].as_str().unwrap().contains("HTTP 413"), "{anchor:?}");
    assert_eq!(provider.requests().len(), 4, "one fold, one retry, no more");

    // Two in a row still end the run, as two overflows do.
    assert!(refused_twice(too_large).contains("HTTP 413"));
}

#[test]
fn dropping_the_stream_cancels_the_run_behaviour_99_100() {
    let provider = Provider::start(vec![Reply::Hang(std::time::Duration::from_secs(20))]);
    let mut a = agent(&provider);
    let seen = record(&mut a);
    let a = Arc::new(a);
    let store = a.store.clone();
    block_on(async move {
        let stream = a.start(vec![json!("wait")], options("t")).await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while provider.requests().is_empty() {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        drop(stream);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !seen.lock().unwrap().iter().any(|s| s.starts_with("RunFinished")) {
            assert!(std::time::Instant::now() < deadline, "no RunFinished");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let names = seen.lock().unwrap().clone();
        assert_eq!(names.last().unwrap(), "RunFinished(cancelled)");
        assert!(!names.iter().any(|n| n == "LLMCallFinished" || n == "ChatFinished"), "{names:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let entries =
            store.fetch_all(&bub_abi::types::TapeQuery { tape: "t".into(), ..Default::default() }).await.unwrap();
        assert!(entries.iter().all(|e| e.kind != "message"), "no chat message, not even the prompt");
        assert!(entries.iter().any(|e| e.payload.get("name") == Some(&json!("loop.finish"))));
    });
}

/// With no limit set, the settings' default
/// (`BUB_MAX_TOOL_CONCURRENCY`, 16) bounds a response asking for 40 calls.
#[test]
fn tools_run_concurrently_up_to_the_limit_behaviour_142() {
    for (limit, count, expected) in [(Some(None), 3, 3), (Some(Some(2)), 3, 2), (Some(Some(1)), 3, 1), (None, 40, 16)] {
        let ids: Vec<String> = (0..count).map(|i| format!("call{i}")).collect();
        let calls: Vec<(&str, &str, &str)> = ids.iter().map(|id| (id.as_str(), "slow", "{}")).collect();
        let provider = Provider::start(vec![chat::tool_calls("", &calls), chat::text("ok")]);
        let mut a = match limit {
            Some(limit) => agent(&provider).with_max_tool_concurrency(limit).unwrap(),
            None => agent(&provider),
        };
        let (now, peak) = (Arc::new(Mutex::new(0)), Arc::new(Mutex::new(0)));
        let (n, p) = (now.clone(), peak.clone());
        a.add_tool(AgentTool::native(
            "slow",
            "",
            json!({"type": "object", "properties": {}}),
            Exposure::Auto,
            move |_a, _c| {
                let (n, p) = (n.clone(), p.clone());
                async move {
                    {
                        let mut cur = n.lock().unwrap();
                        *cur += 1;
                        let mut max = p.lock().unwrap();
                        *max = (*max).max(*cur);
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    *n.lock().unwrap() -= 1;
                    Ok(json!("done"))
                }
            },
        ));
        let (_, error) = run(a, "go");
        assert_eq!(error, None);
        assert_eq!(*peak.lock().unwrap(), expected, "limit {limit:?}");
    }
}

/// Steering (behaviours 107, 117, 153, 156): messages waiting in the scope's
/// inbox for this session are drained at the start of the step (through
/// `MessagesPending`, as `AgentPlugins.attach` wires it) and sent before the
/// prompt; another session's stay; a message arriving while a text-only
/// step runs keeps the run going for one more step.
#[test]
fn steering_messages_join_the_next_step_behaviour_107_117_153() {
    use bub_host::{builtin::agent as bub, framework::Framework, HostBuilder};
    let provider = Provider::start(vec![chat::text("first"), chat::text("second")]);
    let home = bub_tests::Home::new();
    let config = json!({"model": "openai:m", "api_base": provider.base_url, "api_key": "k"});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let ws = tempfile::tempdir().unwrap();
    let host = HostBuilder::new().home(home.path()).workspace(ws.path()).builtin().build();
    let fw = Framework::new(&host, ws.path());
    block_on(async {
        let scope = fw.running().await.unwrap();
        for (session, text) in [("user/s1", "P1"), ("other", "not mine"), ("user/s1", "P2")] {
            let mut state = Map::new();
            state.insert("session_id".into(), json!(session));
            let message = json!({"session_id": session, "content": text});
            assert!(fw.steer_message(message, session, &mut state, None).await.unwrap());
        }
        let (state, _) = fw.build_state(&json!({"session_id": "user/s1"}), "user/s1").await.unwrap();
        let stream = bub::run_stream(&fw, "user/s1", vec![json!("X")], state.clone()).await.unwrap();
        let (_, error) = stream.collect().await;
        assert!(error.is_none(), "{error:?}");
        let messages = provider.requests()[0].body["messages"].as_array().unwrap().clone();
        let users: Vec<&str> =
            messages.iter().filter(|m| m["role"] == "user").map(|m| m["content"].as_str().unwrap()).collect();
        assert_eq!(users, ["P1", "P2", "X"]);
        assert_eq!(provider.requests().len(), 1, "nothing pending: one step");
        // The other session's message is still there.
        let inbox = fw.get_steering_inbox().unwrap();
        let mut other = Map::new();
        other.insert("session_id".into(), json!("other"));
        assert_eq!(inbox.message_count(&other).await.unwrap(), 1);
        scope.exit(None).await.unwrap();
    });
}

#[test]
fn an_unknown_tool_without_hooks_fails_as_a_result_behaviour_139() {
    let provider = Provider::start(vec![chat::tool_calls("", &[("c1", "nope", "{}")]), chat::text("ok")]);
    let (events, error) = run(agent(&provider), "go");
    assert_eq!(error, None);
    assert_eq!(events[2].1, json!({"tool_results": [{"kind": "tool", "message": "Unknown tool name: nope."}]}));
}

/// Spilling (behaviours 208, 209): a 20,000-character result becomes a
/// reference under 2,000 characters when `spill_read` is offered, and
/// `spill.read` reassembles it exactly from the sidecar tape; without
/// `spill_read` among the step's tools the model gets the full text.
#[test]
fn oversized_results_are_spilled_and_read_back_behaviour_208_209() {
    use bub_host::{
        agent::RunTape,
        builtin::{own_tools, spill},
    };
    let big: String = (0..2000).map(|i| format!("line {i:04}\n")).collect::<String>().chars().take(20_000).collect();
    for offered in [true, false] {
        let provider = Provider::start(vec![chat::tool_calls("", &[("c1", "big", "{}")]), chat::text("ok")]);
        let mut a = agent(&provider);
        let b = big.clone();
        a.add_tool(AgentTool::native(
            "big",
            "",
            json!({"type": "object", "properties": {}}),
            Exposure::Auto,
            move |_a, _c| {
                let b = b.clone();
                async move { Ok(json!(b)) }
            },
        ));
        for t in own_tools::run_helper_tools().into_iter().filter(|t| t.name == "spill.read") {
            a.add_tool(t);
        }
        a.sidecars = vec![spill::SIDECAR.into()];
        spill::subscribe(&mut a.events, 4096);
        let store = a.store.clone();
        let a = Arc::new(a);
        let opts = options("t");
        if !offered {
            opts.state.set("_runtime_allowed_tools", &["big"]).unwrap();
        }
        let (_, error) = block_on(async move { a.start(vec![json!("go")], opts).await.unwrap().collect().await });
        assert!(error.is_none(), "{error:?}");
        let second = provider.requests()[1].body["messages"].as_array().unwrap().clone();
        let seen = second.last().unwrap()["content"].as_str().unwrap().to_owned();
        if !offered {
            assert_eq!(seen, big, "without spill_read the full output is kept");
            continue;
        }
        assert!(seen.starts_with("[tool output spilled: 20,000 bytes in 2 chunks; handle: "), "{seen}");
        assert!(seen.len() < 2000);
        let handle = seen.split("handle: ").nth(1).unwrap().split(']').next().unwrap().to_owned();
        let tape = RunTape::fork(store, "t", &[spill::SIDECAR.into()], false);
        let page = block_on(spill::read(&tape, &handle, 0, 4, false)).unwrap();
        let (head, content) = page.split_once("content:\n").unwrap();
        assert!(head.contains("chunks: 0-1\nnext_cursor: 2\ncomplete: true"), "{head}");
        assert_eq!(content, big);
    }
}

/// Behaviour 234: `PluginAgentHooks::subscribe` puts the interception hooks
/// on an agent's bus after what is there (the recorder) and before handlers
/// added later: a plugin's deny stops the event before a later handler.
#[test]
fn plugin_agent_hooks_subscribe_behaviour_234() {
    use bub_host::framework::PluginAgentHooks;
    let provider =
        Provider::start(vec![chat::tool_calls("", &[("c1", "echo_back", r#"{"text":"x"}"#)]), chat::text("ok")]);
    let home = bub_tests::Home::new();
    home.scripted("policy", "", json!({"before_tool_call": {"return": {"action": "deny", "message": "no"}}}));
    let mut a = agent(&provider);
    PluginAgentHooks::new(home.host().runtime()).subscribe(&mut a.events);
    let later = Arc::new(Mutex::new(0));
    let l = later.clone();
    a.events.on(
        Filter::Kind("ToolCallStarted"),
        handler(move |_e, _cx| {
            *l.lock().unwrap() += 1;
            Box::pin(async { Ok(()) })
        }),
    );
    let (events, error) = run(a, "go");
    assert_eq!(error, None);
    assert_eq!(events[2].1, json!({"tool_results": [{"kind": "tool", "message": "no"}]}));
    assert_eq!(*later.lock().unwrap(), 0, "the deny stopped delivery");
    // The scripted plugin implements every hook: all four ran, in the loop's order.
    assert_eq!(
        home.trace(),
        [
            "policy:before_llm_call",
            "policy:after_llm_call",
            "policy:before_tool_call",
            "policy:after_tool_call",
            "policy:before_llm_call",
            "policy:after_llm_call"
        ]
    );
}

/// A tool that hangs fails as a tool error after the tool timeout; the run
/// goes on and the model is told.
#[test]
fn a_hanging_tool_times_out_as_a_tool_failure() {
    let provider = Provider::start(vec![chat::tool_calls("", &[("c1", "stuck", "{}")]), chat::text("ok")]);
    let mut a = agent(&provider);
    a.tool_timeout = Some(std::time::Duration::from_millis(200));
    a.add_tool(AgentTool::native(
        "stuck",
        "",
        json!({"type": "object", "properties": {}}),
        Exposure::Auto,
        |_a, _c| async {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            Ok(json!("never"))
        },
    ));
    let (events, error) = run(a, "go");
    assert_eq!(error, None);
    assert_eq!(
        events[2].1,
        json!({"tool_results": [{"kind": "tool", "message": "Tool 'stuck' timed out after 0.2 seconds."}]})
    );
}

/// A big prompt is held once through a step: every system-prompt section reads the same prompt, not a copy
/// each; the request's new user message is the one the recorder is given
/// back, not a copy of it. The contents are still right (behaviours 115,
/// 117, 124).
#[test]
fn a_step_shares_its_prompt_with_sections_and_gives_its_messages_back_behaviour_115_117_124() {
    let provider = Provider::start(vec![chat::text("ok")]);
    let mut a = agent(&provider);
    let seen: Arc<Mutex<Vec<(&'static str, usize)>>> = Arc::default();
    let address = |v: &Value| v.as_str().expect("text content").as_ptr() as usize;
    for section in ["first section", "second section"] {
        let s = seen.clone();
        a.sections.push(Arc::new(move |pcx: bub_host::agent::PromptContext| {
            s.lock().unwrap().push((section, address(&pcx.prompt[0])));
            Box::pin(async { Ok(None) })
        }));
    }
    let s = seen.clone();
    a.events.on(
        Filter::Any,
        handler(move |event, _cx| {
            match event {
                Event::LlmCallStarted { request, .. } => {
                    let last = request.messages.last().expect("the prompt's message");
                    s.lock().unwrap().push(("request", address(&last["content"])));
                }
                Event::ChatFinished(chat) => {
                    s.lock().unwrap().push(("recorded", address(&chat.new_messages[0]["content"])));
                }
                _ => {}
            }
            Box::pin(async { Ok(()) })
        }),
    );
    let prompt = "a big prompt ".repeat(1000);
    let (events, error) = run(a, &prompt);
    assert_eq!(error, None);
    assert_eq!(events.last().unwrap().1, json!({"ok": true, "text": "ok"}));
    assert_eq!(provider.requests()[0].body["messages"].as_array().unwrap().last().unwrap()["content"], json!(prompt));
    let seen = seen.lock().unwrap().clone();
    let at = |what: &str| seen.iter().find(|(w, _)| *w == what).unwrap_or_else(|| panic!("no {what}: {seen:?}")).1;
    assert_eq!(at("first section"), at("second section"), "each section was given its own copy of the prompt");
    assert_eq!(at("request"), at("recorded"), "the recorder was given a copy of the request's message");
}

/// A run's flush gives its entries up as it sends them; a store that cannot append many (one built before ABI
/// 2.1) still gets every entry, in order, one by one, read back from the
/// list it was offered (behaviour 105: the fork is merged).
#[test]
fn a_run_is_flushed_entry_by_entry_to_a_store_without_append_many_behaviour_105() {
    use bub_host::agent::RunTape;
    let home = bub_tests::Home::new();
    let stored = json!({"id": 1, "kind": "event", "payload": {}, "meta": {}, "date": "2026-12-03T00:00:00Z"});
    home.scripted(
        "old-store",
        "",
        json!({"provide_tape_store": {"object": {"kind": "tape_store", "name": "store", "methods": {
            "append_many": {"unsupported": true},
            "append": {"trace_args": true, "return": stored},
        }}}}),
    );
    let fw = bub_host::framework::Framework::new(&home.host(), "/ws");
    block_on(fw.scoped(|fw| async move {
        let store = fw.get_tape_store().expect("the plugin's store");
        let run = RunTape::fork(Store::Host(store), "t", &[], true);
        for n in 1..=3 {
            run.record_event("step", json!({"n": n, "text": "x".repeat(1000)}), Map::new()).await.unwrap();
        }
        run.merge().await.unwrap();
        Ok(())
    }))
    .unwrap();
    let appended: Vec<Value> = home
        .trace()
        .iter()
        .filter_map(|l| l.strip_prefix("old-store:store.append("))
        .map(|args| serde_json::from_str::<Value>(args.strip_suffix(')').unwrap()).unwrap())
        .collect();
    let data: Vec<&Value> = appended.iter().map(|a| &a["entry"]["payload"]["data"]).collect();
    assert_eq!(data, [1, 2, 3].map(|n| json!({"n": n, "text": "x".repeat(1000)})).iter().collect::<Vec<_>>());
    assert!(appended.iter().all(|a| a["tape"] == "t" && a["entry"]["kind"] == "event"), "{appended:?}");
}
