//! `openai-chat`: an OpenAI-compatible chat model (`run_model_stream`).
//!
//! An example of a plugin that *replaces* the builtin agent (the latest
//! plugin with a model hook wins, as in Bub): one chat completion per turn,
//! no tools, no tape. For the agent itself with OpenAI-compatible servers,
//! set `BUB_MODEL=openai:<model>` instead (docs/agent.md). It uses the same
//! HTTP and event-stream crates as the builtin's providers.
//!
//! POSTs `{model, messages, stream: true}` to `<base_url>/chat/completions`
//! and turns the server-sent events into Bub stream events: `text` deltas,
//! `usage`, then `final {ok, text}`. An HTTP error, a broken connection or a
//! timeout ends the stream with an error (`provider: …`, `network: …`,
//! `timeout: …`), so the turn fails with that reason (`on_error`, and `bub
//! run` exits non-zero) instead of answering nothing.
//!
//! Settings, from the plugin's config, else the environment:
//!
//! | config | environment | default |
//! |---|---|---|
//! | `base_url` | `OPENAI_BASE_URL` | `https://api.openai.com/v1` |
//! | `api_key` | the variable named by `api_key_env` (default `OPENAI_API_KEY`) | none |
//! | `model` | `OPENAI_MODEL` | `gpt-4o-mini` |
//! | `timeout_ms` (no byte for this long) | | 60000 |
//! | `system` (a system message) | | none |

use std::time::Duration;

use bub_abi::{
    types::{Prompt, StreamEvent},
    BoxError, EventSender, ModelStream, Object, Plugin, PluginContext,
};
use serde_json::{json, Value};

/// The plugin.
pub struct OpenAiChat {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    idle_timeout: Duration,
    system: Option<String>,
}

fn setting(ctx: &PluginContext, key: &str, env: &str) -> Option<String> {
    ctx.config.get(key).and_then(Value::as_str).map(str::to_owned).or_else(|| std::env::var(env).ok())
}

/// The prompt as OpenAI message content: text, or content parts.
fn content(prompt: &Prompt) -> Value {
    match prompt {
        Prompt::Array(parts) => Value::Array(
            parts
                .iter()
                .map(|p| match p {
                    Value::String(s) => json!({"type": "text", "text": s}),
                    Value::Object(b) if b.get("type").and_then(Value::as_str) == Some("image") => {
                        json!({"type": "image_url", "image_url": {"url": b.get("url").cloned().unwrap_or_default()}})
                    }
                    other => other.clone(),
                })
                .collect(),
        ),
        other => Value::String(other.as_str().map(str::to_owned).unwrap_or_else(|| other.to_string())),
    }
}

fn event_of(kind: &str, data: Value) -> StreamEvent {
    StreamEvent { kind: kind.into(), data }
}

impl OpenAiChat {
    /// Runs one chat completion, sending events until done or closed.
    async fn stream(&self, body: Value, tx: EventSender) {
        let mut text = String::new();
        match self.exchange(body, &tx, &mut text).await {
            Ok(()) => {
                let _ = tx.send(event_of("final", json!({"ok": true, "text": text}))).await;
            }
            // The turn fails with the reason (`bub run` exits non-zero):
            // an unreachable or refusing provider is not an empty answer.
            Err((kind, message)) => {
                tracing::warn!(kind, %message, "chat completion failed");
                let _ = tx.fail(bub_abi::HookError::new(bub_abi::ErrorKind::ERROR, format!("{kind}: {message}"))).await;
            }
        }
    }

    async fn exchange(&self, body: Value, tx: &EventSender, text: &mut String) -> Result<(), (&'static str, String)> {
        let url = format!("{}/chat/completions", self.base_url.trim_end_matches('/'));
        let mut request = self.client.post(&url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let timeout = |what: &str| ("timeout", format!("no answer from {url} for {:?} ({what})", self.idle_timeout));
        let response = match tokio::time::timeout(self.idle_timeout, request.send()).await {
            Err(_) => return Err(timeout("waiting for the response")),
            Ok(Err(e)) => return Err(("network", format!("POST {url}: {e}"))),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        if !status.is_success() {
            // Only the head of an error body is shown: read no more (a
            // proxy can send an endless one).
            let mut response = response;
            const HEAD: usize = 64 * 1024;
            let mut head = Vec::new();
            while head.len() < HEAD {
                let next = tokio::time::timeout(self.idle_timeout, response.chunk()).await;
                let Ok(Ok(Some(chunk))) = next else { break };
                head.extend_from_slice(&chunk[..chunk.len().min(HEAD - head.len())]);
            }
            let detail: String = String::from_utf8_lossy(&head).chars().take(500).collect();
            return Err(("provider", format!("HTTP {status} from {url}: {detail}")));
        }
        // Server-sent events framed by the same parser as the builtin
        // agent's providers: linear, and bounded by its default limits.
        use futures_util::StreamExt;
        let mut events = bub_sse::EventStream::new(response.bytes_stream(), bub_sse::Limits::default());
        loop {
            let event = match tokio::time::timeout(self.idle_timeout, events.next()).await {
                Err(_) => return Err(timeout("reading the stream")),
                Ok(None) => return Ok(()),
                Ok(Some(Err(e))) => return Err(("network", format!("reading the stream from {url}: {e}"))),
                Ok(Some(Ok(event))) => event,
            };
            let data = event.data.trim();
            if data.is_empty() {
                continue;
            }
            if data == "[DONE]" {
                return Ok(());
            }
            let Ok(msg) = serde_json::from_str::<Value>(data) else {
                return Err(("provider", format!("malformed stream data: {data}")));
            };
            if let Some(err) = msg.get("error") {
                return Err(("provider", err.get("message").and_then(Value::as_str).unwrap_or("error").to_owned()));
            }
            if let Some(delta) = msg["choices"][0]["delta"]["content"].as_str() {
                text.push_str(delta);
                if tx.text(delta).await.is_err() {
                    return Ok(()); // the host closed the stream
                }
            }
            if let Some(usage) = msg.get("usage").filter(|u| !u.is_null()) {
                let _ = tx.send(event_of("usage", json!({"usage": usage}))).await;
            }
        }
    }
}

#[bub_abi::plugin]
impl Plugin for OpenAiChat {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let key_env = ctx.config.get("api_key_env").and_then(Value::as_str).unwrap_or("OPENAI_API_KEY");
        let timeout_ms = ctx.config.get("timeout_ms").and_then(Value::as_u64).unwrap_or(60_000);
        Ok(OpenAiChat {
            client: reqwest::Client::builder().connect_timeout(Duration::from_millis(timeout_ms)).build()?,
            base_url: setting(ctx, "base_url", "OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".into()),
            api_key: setting(ctx, "api_key", key_env),
            model: setting(ctx, "model", "OPENAI_MODEL").unwrap_or_else(|| "gpt-4o-mini".into()),
            idle_timeout: Duration::from_millis(timeout_ms),
            system: ctx.config.get("system").and_then(Value::as_str).map(str::to_owned),
        })
    }

    /// Streams the model's answer; returns at once, events follow.
    async fn run_model_stream(&self, prompt: Prompt) -> Option<Object> {
        let mut messages = Vec::new();
        if let Some(system) = &self.system {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.push(json!({"role": "user", "content": content(&prompt)}));
        let body = json!({"model": self.model, "messages": messages, "stream": true});
        let (tx, stream) = ModelStream::channel(64);
        // The request runs on the plugin's runtime; when the host drops the
        // stream, sending fails and the task ends (closing the connection).
        tokio::spawn(async move { self.stream(body, tx).await });
        Some(stream)
    }
}

bub_abi::export_plugin!(OpenAiChat);

#[cfg(test)]
mod tests {
    use std::{
        io::{BufRead, BufReader, Read, Write},
        net::TcpListener,
    };

    use bub_abi::{types::Prompt, TurnState};
    use bub_runtime::{testing::PluginTest, CallArgs};
    use serde_json::{json, Value};

    bub_abi::static_plugin!(super::OpenAiChat, fn module, name = "openai-chat", version = "0", description = "test");

    /// Text stays text; content parts become OpenAI's, an image part an
    /// `image_url`.
    #[test]
    fn prompts_become_openai_content() {
        assert_eq!(super::content(&Prompt::String("hi".into())), json!("hi"));
        let parts = Prompt::Array(vec![json!("a"), json!({"type": "image", "url": "http://x/i.png"})]);
        assert_eq!(
            super::content(&parts),
            json!([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "http://x/i.png"}}])
        );
    }

    /// One server on loopback answering one request with `status` and
    /// `body`; returns its base URL and the request it saw (line, body).
    fn serve_once(status: &'static str, body: &'static str) -> (String, std::thread::JoinHandle<(String, Value)>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut length = 0;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                if header.trim().is_empty() {
                    break;
                }
                if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut request = vec![0; length];
            reader.read_exact(&mut request).unwrap();
            let mut stream = reader.into_inner();
            write!(stream, "HTTP/1.1 {status}\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}")
                .unwrap();
            (line, serde_json::from_slice(&request).unwrap())
        });
        (base, seen)
    }

    async fn run(base: &str, prompt: &str) -> (String, Vec<bub_abi::types::ErrorInfo>, Result<(), String>) {
        let config = json!({"base_url": base, "api_key": "k", "model": "m", "system": "be brief"});
        let test = PluginTest::with_config("openai-chat", module(), config.as_object().unwrap().clone());
        assert!(test.loaded(), "{:?}", test.record());
        let rt = test.runtime();
        let args = CallArgs::run_model_stream(&json!(prompt), &"s".to_owned(), &TurnState::new()).unwrap();
        let stream = rt.run_model_stream(&args).await.unwrap().expect("a stream");
        match stream.collect_text().await {
            Ok((text, errors)) => (text, errors, Ok(())),
            Err(e) => (String::new(), Vec::new(), Err(e.to_string())),
        }
    }

    /// The request is OpenAI's streamed chat completion (system message,
    /// the prompt, `stream: true`); the deltas are the answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streams_a_chat_completion() {
        let (base, seen) = serve_once(
            "200 OK",
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
             data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\ndata: [DONE]\n\n",
        );
        let (text, errors, end) = run(&base, "hi").await;
        assert_eq!((text.as_str(), errors.len(), end), ("Hello", 0, Ok(())));
        let (line, body) = seen.join().unwrap();
        assert!(line.starts_with("POST /v1/chat/completions "), "{line}");
        assert_eq!(
            body,
            json!({"model": "m", "stream": true, "messages": [
                {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]})
        );
    }

    /// A refusing provider fails the stream with the status and its text,
    /// not an empty answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_provider_error_fails_the_stream() {
        let (base, _seen) = serve_once("401 Unauthorized", "bad key");
        let (_, _, end) = run(&base, "hi").await;
        let message = end.expect_err("the stream fails");
        assert!(message.contains("provider: HTTP 401") && message.contains("bad key"), "{message}");
    }
}
