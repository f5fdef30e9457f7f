//! `http-channel`: an HTTP channel for `bub gateway`.
//!
//! `POST /v1/messages` with `{"content": "...", "session_id"?, "chat_id"?,
//! "sender"?, "context"?, "kind"?, "stream"?}` hands the message to the
//! gateway and answers with what became of it:
//!
//! ```json
//! {"status": "processed", "session_id": "http:default", "reply": "…", "outbounds": [...]}
//! ```
//!
//! With `"stream": true` (or `Accept: text/event-stream`) the answer is a
//! server-sent event stream of the turn's model events (`text`, `tool_call`,
//! …, named by their kind) ending with one `reply` event carrying the JSON
//! above. `GET /v1/health` answers `ok`.
//!
//! The same listener speaks OpenAI's APIs behind the same token (`POST
//! /v1/chat/completions`, `POST /v1/responses`, `GET /v1/models`; see
//! `openai/`),
//! so any OpenAI client talks to the agent. Install the plugin a second
//! time with `name=openai-api` for an endpoint (and channel) of its own.
//!
//! Status codes: 200 processed; 202 steered (folded into the session's
//! running turn, which answers it); 409 dropped by admission; 422 ignored;
//! 500 the turn failed; 503 the gateway is stopping (retry later) or the
//! turn was cancelled; 400 a malformed request (or a `context` key starting
//! with `_`: those are the host's routing keys); 401 a missing or wrong
//! token; 403 a session the channel's `sessions` rule does not allow.
//!
//! **Every request carries a token by default.** Loopback is no trust
//! boundary on a machine with other users: without a configured `token`,
//! the channel generates one at its first start into
//! `<data dir>/token` (mode 0600, readable only by the user; its path is
//! logged, the token printed once), and requests must send
//! `Authorization: Bearer <token>`. `auth=none` turns that off, and only on
//! a loopback address (logged as a warning).
//!
//! Config (`bub plugins config http-channel key=value`, or
//! `BUB_HTTP_CHANNEL__<KEY>`): `name` (the channel's name, default `http`;
//! install it twice under two names for two endpoints), `debounce` (`true`:
//! a session's quick messages are batched into one turn, Bub's debounce),
//! `bind` (default `127.0.0.1:8787`; port 0
//! picks a free one), `token` (the bearer token every request must carry;
//! an empty or blank value is no token), `auth` (`token`, the default, or
//! `none`), `sessions` (which session ids a request may name: a list of
//! patterns where a trailing `*` matches any rest, e.g. `["http:*"]`;
//! default `["*"]`, any session, since the token already says the caller
//! is the user), `command_prefix` (`,`: content starting with it is sent as
//! `kind: command`, which a debounced channel passes at once), `admission` (`follow_up`,
//! the default: a session's messages queue behind its running turn, so
//! replies come in order; `process`: run concurrently; `steer`: fold into
//! the running turn). The address it listens on is logged and written to
//! the plugin's data folder (`address`), for scripts.
//!
//! Bounds (each a config key; over one, the client gets a JSON error that
//! names it): `max_connections` (256 open at once; more are answered 503
//! and closed), `header_timeout_seconds` (30: a request's head must arrive
//! within it, and an idle keep-alive connection is closed after it),
//! `body_timeout_seconds` (30: the body must arrive within it, else 408),
//! `max_body_bytes` (1 MiB, else 413).

mod openai;

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use axum::{
    body::Body,
    extract::State,
    http::{header, HeaderMap, StatusCode},
    response::{
        sse::{Event, Sse},
        IntoResponse, Response,
    },
    routing::{get, post},
    Json, Router,
};
use bub_abi::{
    resources::{clients::MessageHandlerClient, Channel, Fut},
    types::{AdmitAction, AdmitDecision, ChannelInfo, Delivery, Envelope, StreamEvent, TurnSnapshot},
    BoxError, Object, Plugin, PluginContext,
};
use bub_kit::channel::same_secret;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};

/// The plugin.
pub struct HttpChannelPlugin {
    config: Config,
    data_dir: PathBuf,
}

#[derive(Clone, Debug)]
struct Config {
    // The channel's name: messages carry `"channel": <name>`.
    name: String,
    debounce: bool,
    bind: String,
    token: Option<String>,
    auth: bool,
    sessions: Vec<String>,
    command_prefix: String,
    admission: Admission,
    limits: bub_kit::server::Limits,
    // The model the OpenAI-compatible API names (`GET /v1/models`).
    model_name: String,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Admission {
    FollowUp,
    Process,
    Steer,
}

/// A config value as text; an empty or blank string, `""` included, is no
/// value (`BUB_HTTP_CHANNEL__TOKEN=` must not become a two-character token).
fn text(config: &Map<String, Value>, key: &str) -> Option<String> {
    let text = match config.get(key)? {
        Value::String(s) => s.trim().to_owned(),
        Value::Null => return None,
        other => other.to_string(),
    };
    let unquoted = text.trim_matches(|c| c == '"' || c == '\'' || char::is_whitespace(c));
    (!unquoted.is_empty()).then_some(text)
}

/// A positive number from the config (a JSON number or its text), or
/// `default`.
fn number(config: &Map<String, Value>, key: &str, default: f64) -> Result<f64, BoxError> {
    let Some(text) = text(config, key) else { return Ok(default) };
    match text.parse::<f64>() {
        Ok(n) if n > 0.0 && n.is_finite() => Ok(n),
        _ => Err(format!("http-channel: {key}={text} must be a number greater than 0").into()),
    }
}

/// Whether session `id` matches one of `patterns` (`*` at the end: any rest).
fn session_allowed(patterns: &[String], id: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => id.starts_with(prefix),
        None => p == id,
    })
}

impl Config {
    fn from(config: &Map<String, Value>) -> Result<Config, BoxError> {
        let bind = text(config, "bind").unwrap_or_else(|| "127.0.0.1:8787".into());
        let address: SocketAddr = bind
            .parse()
            .map_err(|e| format!("http-channel: bind={bind:?} is not an address like 127.0.0.1:8787 ({e})"))?;
        let token = text(config, "token");
        let auth = match text(config, "auth").as_deref() {
            None | Some("token") => true,
            Some("none") => false,
            Some(other) => return Err(format!("http-channel: auth={other:?}; use token (the default) or none").into()),
        };
        if !address.ip().is_loopback() && (token.is_none() || !auth) {
            return Err(format!(
                "http-channel: refusing to listen on {address} without a token: anyone who can reach it could run \
                 turns. Set one with `bub plugins config http-channel token=...` (or BUB_HTTP_CHANNEL__TOKEN), \
                 or bind 127.0.0.1"
            )
            .into());
        }
        let sessions = match config.get("sessions") {
            None | Some(Value::Null) => vec!["*".to_owned()],
            Some(Value::Array(items)) => items.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
            Some(Value::String(s)) => s.split(',').map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect(),
            Some(other) => {
                return Err(
                    format!("http-channel: sessions={other} must be a list of patterns like [\"http:*\"]").into()
                )
            }
        };
        let admission = match text(config, "admission").as_deref() {
            None | Some("follow_up") => Admission::FollowUp,
            Some("process") => Admission::Process,
            Some("steer") => Admission::Steer,
            Some(other) => {
                return Err(format!("http-channel: admission={other:?}; use follow_up, process or steer").into())
            }
        };
        let name = text(config, "name").unwrap_or_else(|| "http".into());
        let debounce = matches!(config.get("debounce"), Some(Value::Bool(true)))
            || text(config, "debounce").is_some_and(|d| d == "true");
        let command_prefix = text(config, "command_prefix").unwrap_or_else(|| ",".into());
        let d = bub_kit::server::Limits::default();
        let seconds = |key, default: std::time::Duration| -> Result<std::time::Duration, BoxError> {
            let n = number(config, key, default.as_secs_f64())?;
            Ok(std::time::Duration::try_from_secs_f64(n).unwrap_or(std::time::Duration::MAX))
        };
        let limits = bub_kit::server::Limits {
            max_connections: number(config, "max_connections", d.max_connections as f64)?.min(1e6) as usize,
            header_timeout: seconds("header_timeout_seconds", d.header_timeout)?,
            body_timeout: seconds("body_timeout_seconds", d.body_timeout)?,
            max_body_bytes: number(config, "max_body_bytes", d.max_body_bytes as f64)?.min(1e12) as usize,
            write_timeout: seconds("write_timeout_seconds", d.write_timeout)?,
        };
        let model_name = text(config, "model_name").unwrap_or_else(|| "bub".into());
        Ok(Config { name, debounce, bind, token, auth, sessions, command_prefix, admission, limits, model_name })
    }
}

#[bub_abi::plugin]
impl Plugin for HttpChannelPlugin {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        Ok(HttpChannelPlugin { config: Config::from(&ctx.config)?, data_dir: ctx.data_dir.clone() })
    }

    /// The `http` channel.
    fn provide_channels(&self, message_handler: Object) -> Option<Vec<Object>> {
        let channel = HttpChannel(Arc::new(Shared {
            config: self.config.clone(),
            data_dir: self.data_dir.clone(),
            handler: message_handler,
            token: std::sync::OnceLock::new(),
            streams: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            server: Mutex::new(None),
            response_ids: std::sync::OnceLock::new(),
        }));
        Some(vec![Object::channel(channel)])
    }
}

bub_abi::export_plugin!(HttpChannelPlugin);

/// The token in `<data_dir>/token`, generated (32 random bytes, hex) and
/// written owner-only at the first start; printed that once.
fn generated_token(data_dir: &std::path::Path) -> Result<String, BoxError> {
    let path = data_dir.join("token");
    match bub_kit::files::read_trusted(&path, 4096) {
        Ok(bytes) => {
            let token = String::from_utf8_lossy(&bytes).trim().to_owned();
            if token.is_empty() {
                return Err(format!("http-channel: {} is empty; remove it to get a new token", path.display()).into());
            }
            tracing::info!("http channel: requests need `Authorization: Bearer <the token in {}>`", path.display());
            Ok(token)
        }
        Err(bub_kit::files::TrustError::Missing) => {
            let bytes = bub_kit::random::secret::<32>()
                .map_err(|e| format!("http-channel: cannot read /dev/urandom for a token: {e}"))?;
            let token = bub_kit::random::hex(&bytes);
            bub_kit::files::create_private_dir(data_dir)
                .and_then(|()| bub_kit::files::write_private(&path, format!("{token}\n").as_bytes()))
                .map_err(|e| format!("http-channel: cannot write the token to {}: {e}", path.display()))?;
            eprintln!(
                "http channel: generated a token into {} (only you can read it); send it as \
                 `Authorization: Bearer {token}`",
                path.display()
            );
            Ok(token)
        }
        Err(e) => Err(format!("http-channel: refusing the token file: {e}").into()),
    }
}

/// Events of a streamed answer queued for a client that reads slowly.
const STREAM_QUEUE: usize = 256;

struct Shared {
    config: Config,
    data_dir: PathBuf,
    handler: Object,
    // The token requests must carry: configured, or generated at start.
    token: std::sync::OnceLock<String>,
    // Open event streams, by request id (the message's `context._http_request`).
    streams: Mutex<HashMap<String, mpsc::Sender<StreamEvent>>>,
    next_id: AtomicU64,
    server: Mutex<Option<Server>>,
    // Makes and reads the OpenAI responses' ids, which carry their
    // session (`openai/ids.rs`); keyed at start.
    response_ids: std::sync::OnceLock<openai::ResponseIds>,
}

struct Server {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Shared {
    fn streams(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<StreamEvent>>> {
        bub_abi::sync::lock(&self.streams)
    }
}

struct HttpChannel(Arc<Shared>);

impl Channel for HttpChannel {
    fn name(&self) -> String {
        self.0.config.name.clone()
    }

    /// Binds and serves in the background; returns once listening.
    fn start(&self) -> impl Fut<()> {
        let shared = self.0.clone();
        async move {
            // The token first (generated at the first start, not when the
            // plugin is merely listed), so no request is ever served without.
            if shared.config.auth {
                let token = match &shared.config.token {
                    Some(token) => token.clone(),
                    None => generated_token(&shared.data_dir)?,
                };
                let _ = shared.token.set(token);
            } else {
                tracing::warn!(
                    "http-channel: auth=none: every local user can run turns (and whatever tools they reach) as you"
                );
            }
            let key = match shared.token.get() {
                Some(token) => token.as_bytes().to_vec(),
                None => openai::key_file(&shared.data_dir)?,
            };
            let _ = shared.response_ids.set(openai::ResponseIds::new(&key));
            let bind = shared.config.bind.clone();
            let listener = tokio::net::TcpListener::bind(&bind).await.map_err(|e| {
                format!("cannot listen on {bind}: {e} (choose another with `bub plugins config http-channel bind=127.0.0.1:PORT`)")
            })?;
            let address = listener.local_addr()?;
            write_address(&shared.data_dir, address);
            let app = Router::new()
                .route("/v1/messages", post(post_message))
                .route("/v1/chat/completions", post(openai::chat_completions))
                .route("/v1/responses", post(openai::responses))
                .route("/v1/models", get(openai::models))
                .route("/v1/models/{id}", get(openai::model))
                .route("/v1/health", get(|| async { "ok" }))
                .fallback(openai::unknown)
                .method_not_allowed_fallback(openai::wrong_method)
                .with_state(shared.clone());
            let (stop, stopped) = oneshot::channel::<()>();
            let task = tokio::spawn(bub_kit::server::serve(
                listener,
                app,
                shared.config.limits,
                stopped,
                bub_kit::server::Named { who: "http channel", connections_setting: "max_connections" },
            ));
            *bub_abi::sync::lock(&shared.server) = Some(Server { stop, task });
            tracing::info!("http channel listening on http://{address}");
            Ok(())
        }
    }

    /// Stops accepting; requests in flight finish (the gateway stops
    /// channels after its turns).
    fn stop(&self) -> impl Fut<()> {
        let server = bub_abi::sync::lock(&self.0.server).take();
        async move {
            if let Some(server) = server {
                let _ = server.stop.send(());
                let _ = tokio::time::timeout(std::time::Duration::from_secs(5), server.task).await;
            }
            Ok(())
        }
    }

    /// Replies travel back in each request's response; nothing to push.
    fn send(&self, message: Envelope) -> impl Fut<()> {
        tracing::debug!(session = ?message.get("session_id"), "outbound");
        async { Ok(()) }
    }

    /// A model event of a streamed request: to its event stream.
    fn stream_event(&self, message: Envelope, event: StreamEvent) -> impl Fut<()> {
        let id = message.pointer("/context/_http_request").and_then(Value::as_str).map(str::to_owned);
        let shared = self.0.clone();
        async move {
            let Some(id) = id else { return Ok(()) };
            let Some(sender) = shared.streams().get(&id).cloned() else { return Ok(()) };
            // Backpressure: a client reading slowly slows the events it is
            // sent (the queue holds STREAM_QUEUE). One that stops reading
            // for write_timeout is cut off: its stream goes, and the turn
            // runs on to its end and its tape.
            let sent = sender.send_timeout(event, shared.config.limits.write_timeout).await;
            if sent.is_err() && shared.streams().remove(&id).is_some() {
                tracing::warn!(
                    "http channel: a client stopped reading its event stream for {:?} (write_timeout_seconds); \
                     cut off, the turn runs on",
                    shared.config.limits.write_timeout
                );
            }
            Ok(())
        }
    }

    /// A plain channel; debounced if configured.
    fn info(&self) -> impl Fut<ChannelInfo> {
        let info = ChannelInfo { needs_debounce: self.0.config.debounce, ..Default::default() };
        async move { Ok(info) }
    }

    /// Per session, one turn at a time by default (replies in order).
    fn admit_message(
        &self,
        _session_id: String,
        _message: Envelope,
        turn: TurnSnapshot,
    ) -> impl Fut<Option<AdmitDecision>> {
        let action = match self.0.config.admission {
            Admission::Process => None,
            Admission::FollowUp => Some(AdmitAction::FollowUp),
            Admission::Steer => Some(AdmitAction::Steer),
        };
        let decision = action
            .filter(|_| turn.is_running)
            .map(|action| AdmitDecision { action, reason: Some("http session is already generating".into()) });
        async move { Ok(decision) }
    }
}

/// Writes `<data_dir>/address` (whole or not at all).
fn write_address(data_dir: &std::path::Path, address: SocketAddr) {
    let write = || -> std::io::Result<()> {
        bub_kit::files::create_private_dir(data_dir)?;
        bub_kit::files::write_private(&data_dir.join("address"), format!("{address}\n").as_bytes())
    };
    if let Err(e) = write() {
        tracing::warn!("could not write {}/address: {e}", data_dir.display());
    }
}

/// The request body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    content: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    chat_id: Option<String>,
    #[serde(default)]
    sender: Option<String>,
    #[serde(default)]
    context: Option<Map<String, Value>>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    media: Option<Vec<Value>>,
    #[serde(default)]
    stream: Option<bool>,
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"status": "error", "error": message.into()}))).into_response()
}

/// The body, read within the channel's deadline and size limit (after
/// the token is checked: a stranger's body is never read).
async fn read_body(limits: &bub_kit::server::Limits, body: Body) -> Result<axum::body::Bytes, Response> {
    use bub_kit::server::BodyError;
    bub_kit::server::read_body(limits, body).await.map_err(|e| match e {
        BodyError::TimedOut(after) => error(
            StatusCode::REQUEST_TIMEOUT,
            format!("the body did not arrive within {after:?} (the channel's body_timeout_seconds setting)"),
        ),
        BodyError::TooLarge(max) => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {max} bytes (the channel's max_body_bytes setting)"),
        ),
        BodyError::Failed(why) => error(StatusCode::BAD_REQUEST, why),
    })
}

/// Whether the request carries the channel's token (every route checks).
fn check_token(shared: &Shared, headers: &HeaderMap) -> Result<(), &'static str> {
    if !shared.config.auth {
        return Ok(());
    }
    let Some(token) = shared.token.get() else { return Err("the channel has no token yet") };
    // The scheme is case-insensitive (RFC 7235): `bearer` works too.
    let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| {
        let (scheme, rest) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(rest)
    });
    if !given.is_some_and(|g| same_secret(g.trim().as_bytes(), token.as_bytes())) {
        return Err("missing or wrong bearer token (Authorization: Bearer <token>)");
    }
    Ok(())
}

async fn post_message(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    if let Err(why) = check_token(&shared, &headers) {
        return error(StatusCode::UNAUTHORIZED, why);
    }
    let body = match read_body(&shared.config.limits, body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let request: Request = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body must be JSON like {{\"content\": \"hi\", \"session_id\": \"s1\"}}: {e}"),
            )
        }
    };
    let wants_events = request.stream.unwrap_or(false)
        || headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/event-stream"));

    let mut context = request.context.unwrap_or_default();
    // `_` keys are the host's and this channel's routing (`_http_request`
    // picks the event stream a turn's events go to): never the client's.
    if let Some(key) = context.keys().find(|k| k.starts_with('_')) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("context key {key:?} is reserved: keys starting with '_' are the host's"),
        );
    }
    if let Some(session) = &request.session_id {
        if !session_allowed(&shared.config.sessions, session) {
            return error(
                StatusCode::FORBIDDEN,
                format!(
                    "session {session:?} is not one this channel may name (its `sessions` setting allows {:?})",
                    shared.config.sessions
                ),
            );
        }
    }
    // The order requests reached the gateway (concurrent requests of one
    // session may overtake each other on the wire): logs and load tests
    // check a session's turns against it. Internal keys (`_`) stay out of
    // the prompt.
    context.insert("_http_seq".into(), json!(shared.next_id.fetch_add(1, Ordering::Relaxed)));
    if let Some(sender) = &request.sender {
        context.insert("sender_id".into(), json!(sender));
    }
    let mut message = json!({
        "channel": shared.config.name,
        "chat_id": request.chat_id.unwrap_or_else(|| "default".into()),
        "content": request.content,
        "is_active": true,
        // A command is marked as one, as Bub's channels do, so that a
        // debounced channel passes it at once.
        "kind": request.kind.unwrap_or_else(|| {
            let command = request.content.trim_start().starts_with(shared.config.command_prefix.as_str());
            if command { "command" } else { "normal" }.into()
        }),
    });
    if let Some(session) = request.session_id {
        message["session_id"] = json!(session);
    }
    if let Some(media) = request.media {
        message["media"] = json!(media);
    }

    if !wants_events {
        message["context"] = Value::Object(context);
        return match MessageHandlerClient(&shared.handler).submit(&message).await {
            Ok(delivery) => delivered(&shared.config.name, delivery),
            Err(e) => not_taken(&e),
        };
    }

    // Streamed: the turn's events come through `stream_event`, keyed by
    // this request's id; the stream ends with the delivery.
    let id = format!("{}-{}", std::process::id(), shared.next_id.fetch_add(1, Ordering::Relaxed));
    context.insert("_http_request".into(), json!(id));
    message["context"] = Value::Object(context);
    message["stream_output"] = json!(true);
    let (events, receiver) = mpsc::channel(STREAM_QUEUE);
    shared.streams().insert(id.clone(), events);
    let (done_tx, done_rx) = oneshot::channel();
    let submitter = shared.clone();
    let name = shared.config.name.clone();
    tokio::spawn(async move {
        let outcome = MessageHandlerClient(&submitter.handler).submit(&message).await;
        submitter.streams().remove(&id);
        let _ = done_tx.send(outcome.map_err(|e| e.to_string()));
    });
    let stream = futures_util::stream::unfold((receiver, Some(done_rx)), move |(mut events, done)| {
        let name = name.clone();
        async move {
            if let Some(event) = events.recv().await {
                let data = serde_json::to_string(&event.data).unwrap_or_default();
                return Some((
                    Ok::<_, std::convert::Infallible>(Event::default().event(event.kind).data(data)),
                    (events, done),
                ));
            }
            // The sender is gone: the turn is over; the last event is the reply.
            let done = done?;
            let reply = match done.await {
                Ok(Ok(delivery)) => reply_body(&name, &delivery),
                Ok(Err(e)) => json!({"status": "error", "error": e}),
                Err(_) => json!({"status": "cancelled"}),
            };
            Some((Ok(Event::default().event("reply").data(reply.to_string())), (events, None)))
        }
    });
    Sse::new(stream).into_response()
}

/// A message the gateway did not take: 429 when its session's queue or
/// the backlog is full (retry in a second), 503 when it is stopping
/// (another gateway, or this one after its restart, takes it).
fn not_taken(e: &bub_abi::resources::MethodError) -> Response {
    let busy = e.error.kind != bub_abi::ErrorKind::CLOSED && e.error.message.contains("BUB_MAX_");
    let (status, after) =
        if busy { (StatusCode::TOO_MANY_REQUESTS, "1") } else { (StatusCode::SERVICE_UNAVAILABLE, "5") };
    let mut response = error(status, e.to_string());
    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static(after));
    response
}

/// The reply text: the first outbound for this channel, else the model output.
pub(crate) fn reply_text(channel: &str, delivery: &Delivery) -> Option<String> {
    delivery
        .outbounds
        .iter()
        .find(|o| {
            let target = o.get("output_channel").or_else(|| o.get("channel")).and_then(Value::as_str);
            target == Some(channel)
        })
        .and_then(|o| o.get("content").and_then(Value::as_str).map(str::to_owned))
        .or_else(|| delivery.model_output.clone())
}

/// The answer's JSON: the delivery's status, session, reply text and outbounds.
fn reply_body(channel: &str, delivery: &Delivery) -> Value {
    let reply = reply_text(channel, delivery);
    let mut body = json!({"status": delivery.status, "session_id": delivery.session_id, "reply": reply, "outbounds": delivery.outbounds});
    if let Some(e) = &delivery.error {
        body["error"] = json!(e);
    }
    body
}

fn delivered(channel: &str, delivery: Delivery) -> Response {
    let status = match delivery.status.as_str() {
        "processed" => StatusCode::OK,
        "steered" => StatusCode::ACCEPTED,
        "dropped" => StatusCode::CONFLICT,
        "ignored" => StatusCode::UNPROCESSABLE_ENTITY,
        "cancelled" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, Json(reply_body(channel, &delivery))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(v: Value) -> Result<Config, BoxError> {
        Config::from(v.as_object().unwrap())
    }

    #[test]
    fn a_public_bind_needs_a_token() {
        assert!(config(json!({})).is_ok(), "loopback without a token is fine");
        let err = config(json!({"bind": "0.0.0.0:8787"})).err().unwrap().to_string();
        assert!(err.contains("without a token"), "{err}");
        assert!(config(json!({"bind": "0.0.0.0:8787", "token": "   "})).is_err(), "a blank token counts as none");
        assert!(config(json!({"bind": "0.0.0.0:8787", "token": "t", "auth": "none"})).is_err());
        assert!(config(json!({"bind": "0.0.0.0:8787", "token": "t"})).is_ok());
        assert!(config(json!({"auth": "maybe"})).is_err());
    }

    #[test]
    fn session_patterns_and_token_comparison() {
        let patterns = vec!["http:*".to_owned(), "ops".to_owned()];
        assert!(session_allowed(&patterns, "http:42"));
        assert!(session_allowed(&patterns, "ops"));
        assert!(!session_allowed(&patterns, "ops2") && !session_allowed(&patterns, "cli:local"));
        assert!(same_secret(b"secret", b"secret"));
        assert!(!same_secret(b"secret", b"secreT") && !same_secret(b"secret", b"secret!"));
    }
}
