//! The builtin `cli` channel: a terminal conversation (`bub chat`).
//!
//! `start` runs a line editor (rustyline: editing, history in
//! `$BUB_HOME/chat_history`) on its own thread. Each line goes to the host's
//! message handler, which returns when the turn is over, so the prompt comes
//! back only after the answer. Ctrl-C at the prompt clears the line; Ctrl-D
//! (or end of input) tells the handler to `close`. A streamed answer is
//! printed as it comes (`stream_event`, the framework's stream router);
//! outbounds arrive through the builtin `dispatch_outbound` and are printed
//! (an answer already shown live just ends its line).

use std::{
    collections::HashMap,
    io::Write,
    path::PathBuf,
    sync::{Arc, Mutex, Weak},
};

use bub_abi::{
    resources::{clients::MessageHandlerClient, Channel, Fut},
    types::{AdmitAction, AdmitDecision, ChannelInfo, ChannelRole, Envelope, StreamEvent, TurnSnapshot},
    Object,
};
use serde_json::{json, Value};

/// The channels one builtin instance started, by name: its
/// `dispatch_outbound`'s router. One per builtin instance (per host), so two
/// hosts in one process never print each other's messages.
#[derive(Default)]
pub struct StartedChannels {
    started: Mutex<HashMap<String, Weak<CliInner>>>,
}

impl StartedChannels {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<CliInner>>> {
        bub_abi::sync::lock(&self.started)
    }

    /// Sends `message` to the started channel it names (`output_channel`,
    /// else `channel`); false when no such channel is running (as Bub's
    /// builtin without a bound router).
    pub fn route(&self, message: &Envelope) -> bool {
        let Some(name) = bub_kit::envelope::target_channel(message) else { return false };
        let target = self.lock().get(name).and_then(Weak::upgrade);
        match target {
            Some(channel) => {
                channel.print(message);
                true
            }
            None => false,
        }
    }
}

struct CliInner {
    // The lines that end the session (`,quit`, `,exit`).
    quit: [String; 2],
    handler: Object,
    history: Option<PathBuf>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    // Text already shown live for the running turn.
    streamed: Mutex<String>,
    // The cursor is not at the start of a line (streamed text without a newline).
    mid_line: std::sync::atomic::AtomicBool,
}

impl CliInner {
    fn print(&self, message: &Envelope) {
        let content = message.get("content").map(bub_kit::envelope::py_str).unwrap_or_default();
        let streamed = std::mem::take(&mut *bub_abi::sync::lock(&self.streamed));
        self.mid_line.store(false, std::sync::atomic::Ordering::Relaxed);
        let mut out = std::io::stdout().lock();
        // The answer was shown as it streamed: just end its line.
        if !streamed.is_empty() && streamed == content {
            let _ = writeln!(out);
        } else {
            if !streamed.is_empty() {
                let _ = writeln!(out);
            }
            let _ = writeln!(out, "{}", bub_kit::terminal::shown(&content));
        }
        let _ = out.flush();
    }

    fn show(&self, event: &StreamEvent) {
        if event.kind != "text" {
            return self.show_activity(event);
        }
        let delta = match &event.data["delta"] {
            Value::String(s) => s.clone(),
            Value::Null => return,
            other => other.to_string(),
        };
        bub_abi::sync::lock(&self.streamed).push_str(&delta);
        self.mid_line.store(!delta.ends_with('\n'), std::sync::atomic::Ordering::Relaxed);
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{}", bub_kit::terminal::shown(&delta));
        let _ = out.flush();
    }
}

impl CliInner {
    /// Tool calls, their results and errors, one short line each, so the
    /// user sees what the agent does while it works.
    fn show_activity(&self, event: &StreamEvent) {
        let short = |v: &Value| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let line = text.lines().next().unwrap_or("").to_owned();
            let more = text.lines().nth(1).is_some() || line.chars().count() > 160;
            let line: String = line.chars().take(160).collect();
            if more {
                format!("{line} …")
            } else {
                line
            }
        };
        let lines: Vec<String> = match event.kind.as_str() {
            "tool_call" => (event.data["tool_calls"].as_array().into_iter().flatten())
                .map(|c| format!("  -> {} {}", c["name"].as_str().unwrap_or("?"), short(&c["arguments"])))
                .collect(),
            "tool_result" => (event.data["tool_results"].as_array().into_iter().flatten())
                .map(|r| format!("  <- {}", short(r)))
                .collect(),
            "error" => vec![format!("  ! {}", event.data["message"].as_str().unwrap_or("error"))],
            _ => return,
        };
        let mut out = std::io::stdout().lock();
        if self.mid_line.swap(false, std::sync::atomic::Ordering::Relaxed) {
            let _ = writeln!(out);
        }
        for line in lines {
            let _ = writeln!(out, "{}", bub_kit::terminal::shown(&line));
        }
        let _ = out.flush();
    }
}

/// `CliChannel`: Bub's `cli` channel.
pub struct CliChannel {
    inner: Arc<CliInner>,
    router: Arc<StartedChannels>,
}

impl CliChannel {
    /// A channel feeding `handler`, keeping its history in `history`, and
    /// reachable through `router` while it runs; `<prefix>quit` and
    /// `<prefix>exit` end it.
    pub fn new(handler: Object, history: Option<PathBuf>, router: Arc<StartedChannels>, prefix: &str) -> Self {
        let inner = CliInner {
            quit: [format!("{prefix}quit"), format!("{prefix}exit")],
            handler,
            history,
            thread: Mutex::new(None),
            streamed: Mutex::new(String::new()),
            mid_line: Default::default(),
        };
        CliChannel { inner: Arc::new(inner), router }
    }
}

fn read_loop(inner: Arc<CliInner>) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bub chat: cannot start the input loop: {e}");
            return;
        }
    };
    let handler = MessageHandlerClient(&inner.handler);
    let report = |r: Result<(), bub_abi::resources::MethodError>| {
        if let Err(e) = r {
            eprintln!("error: {}", e.error);
        }
    };
    let close = || report(rt.block_on(handler.close()));
    let mut editor = match rustyline::DefaultEditor::new() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bub chat: cannot open the terminal: {e}");
            close();
            return;
        }
    };
    if let Some(h) = &inner.history {
        let _ = editor.load_history(h);
    }
    loop {
        match editor.readline("> ") {
            Ok(line) => {
                let content = line.trim();
                if content.is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(content);
                if let Some(h) = &inner.history {
                    let _ = editor.save_history(h);
                }
                // As Bub's cli channel: the session ends here, no turn runs.
                if inner.quit.iter().any(|q| q == content) {
                    break;
                }
                // The chat command adds the session, chat and `thread_id`, as
                // Bub's cli channel does (no sender: the terminal is you).
                let message = json!({"channel": "cli", "content": content});
                report(rt.block_on(handler.handle(&message)));
            }
            // Ctrl-C at the prompt: a fresh line, as a shell does.
            Err(rustyline::error::ReadlineError::Interrupted) => continue,
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("bub chat: input failed: {e}");
                break;
            }
        }
    }
    close();
}

impl Channel for CliChannel {
    fn name(&self) -> String {
        "cli".into()
    }

    fn start(&self) -> impl Fut<()> {
        let inner = self.inner.clone();
        self.router.lock().insert("cli".into(), Arc::downgrade(&inner));
        async move {
            let reader = inner.clone();
            let thread = std::thread::Builder::new()
                .name("bub-cli-input".into())
                .spawn(move || read_loop(reader))
                .map_err(|e| format!("cannot start the input thread: {e}"))?;
            *bub_abi::sync::lock(&inner.thread) = Some(thread);
            Ok(())
        }
    }

    fn stop(&self) -> impl Fut<()> {
        let inner = self.inner.clone();
        self.router.lock().retain(|_, w| !std::ptr::eq(w.as_ptr(), Arc::as_ptr(&inner)));
        async { Ok(()) }
    }

    fn send(&self, message: Envelope) -> impl Fut<()> {
        self.inner.print(&message);
        async { Ok(()) }
    }

    fn stream_event(&self, _message: Envelope, event: StreamEvent) -> impl Fut<()> {
        self.inner.show(&event);
        async { Ok(()) }
    }

    /// An interface: `bub gateway` runs it only when named.
    fn info(&self) -> impl Fut<ChannelInfo> {
        async { Ok(ChannelInfo { role: ChannelRole::Interface, ..Default::default() }) }
    }

    /// A line typed while a turn runs steers it (Bub's CLI channel).
    fn admit_message(
        &self,
        _session_id: String,
        _message: Envelope,
        turn: TurnSnapshot,
    ) -> impl Fut<Option<AdmitDecision>> {
        let decision = turn.is_running.then(|| AdmitDecision {
            action: AdmitAction::Steer,
            reason: Some("cli session is already generating".into()),
        });
        async move { Ok(decision) }
    }
}
