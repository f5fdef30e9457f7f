//! `bub chat` driven as a user would, through a pseudo-terminal: line
//! editing, a streamed turn, Ctrl-C at the prompt and during a turn, Ctrl-D
//! to quit, history kept in `$BUB_HOME/chat_history`.

use std::{
    io::{Read, Write},
    os::unix::process::CommandExt,
    process::{Child, Command},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use bub_tests::{bub_bin, lib, Home};
use serde_json::{json, Value};

/// A `bub chat` on a pseudo-terminal.
pub(crate) struct Terminal {
    child: Child,
    master: std::fs::File,
    screen: Arc<Mutex<String>>,
}

impl Terminal {
    pub(crate) fn open(home: &Home) -> Terminal {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let winsize = rustix::termios::Winsize { ws_row: 24, ws_col: 100, ws_xpixel: 0, ws_ypixel: 0 };
        rustix::termios::tcsetwinsize(&master, winsize).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave = std::fs::OpenOptions::new().read(true).write(true).open(name.to_str().unwrap()).unwrap();
        let mut cmd = Command::new(bub_bin());
        cmd.arg("--home")
            .arg(home.path())
            .arg("chat")
            .env("TERM", "xterm")
            .env_remove("RUST_LOG")
            .env_remove("BUB_PLUGIN_PATH")
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // SAFETY: only async-signal-safe calls between fork and exec: a new
        // session whose controlling terminal is the pty (so Ctrl-C is SIGINT).
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::setsid()?;
                rustix::process::ioctl_tiocsctty(std::io::stdin())?;
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn bub chat");
        let master = std::fs::File::from(master);
        let screen = Arc::new(Mutex::new(String::new()));
        let (mut reader, mut replier, sink) =
            (master.try_clone().unwrap(), master.try_clone().unwrap(), screen.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                // A line editor may ask where the cursor is.
                if text.contains("\x1b[6n") {
                    let _ = replier.write_all(b"\x1b[1;1R");
                }
                sink.lock().unwrap().push_str(&text);
            }
        });
        Terminal { child, master, screen }
    }

    pub(crate) fn send(&mut self, bytes: &str) {
        self.master.write_all(bytes.as_bytes()).unwrap();
    }

    /// Waits until the screen, after `from`, contains `text`; returns the
    /// screen length after it.
    pub(crate) fn expect(&self, from: usize, text: &str) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen.lock().unwrap().clone();
            if let Some(i) = screen.get(from..).and_then(|s| s.find(text)) {
                return from + i + text.len();
            }
            assert!(Instant::now() < deadline, "timed out waiting for {text:?}; screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn wait(mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("bub chat did not exit; screen:\n{}", self.screen.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A turn through the `cli` channel, line editing, Ctrl-C at the prompt,
/// Ctrl-D to quit, history saved. The chat runs in Bub's own
/// chat session (`cli_session`), which is every message's `thread_id`.
#[test]
fn chat_turns_editing_and_quit() {
    let home = Home::new();
    home.install("echo", &lib("echo-model"), json!({}));
    // The scope is held for the whole session: entered once, exited at the end.
    home.scripted("life", "", json!({"provide_lifespan": {"object": {"kind": "lifespan", "name": "L"}}}));
    let mut term = Terminal::open(&home);
    let at = term.expect(0, "> ");
    // Typo, backspace, then the line: the editor fixes it before sending.
    term.send("helo\x7f\x7fllo there\r");
    let at = term.expect(at, "echo: thread_id=cli_session|channel=$cli|chat_id=local");
    let at = term.expect(at, "hello there");
    let at = term.expect(at, "> ");
    // Ctrl-C at the prompt clears the line and keeps the chat.
    term.send("never sent\x03");
    let at = term.expect(at, "> ");
    term.send("second\r");
    let at = term.expect(at, "second");
    term.expect(at, "> ");
    term.send("\x04");
    let screen = term.screen.clone();
    assert!(term.wait().success());
    let screen = screen.lock().unwrap();
    assert!(!screen.contains("never sent\r\n"), "{screen}");
    // Streamed live, then not printed again when dispatched.
    assert_eq!(screen.matches("hello there").count(), 1, "{screen}");
    let scope: Vec<String> = home.trace().into_iter().filter(|l| l.starts_with("life:L.")).collect();
    assert_eq!(scope, ["life:L.enter", "life:L.exit(none)"]);
    let history = std::fs::read_to_string(home.path().join("chat_history")).unwrap();
    assert!(history.contains("hello there") && history.contains("second") && !history.contains("never sent"));
}

/// As Bub's cli channel, `,quit` and `,exit` at the prompt end the chat:
/// no turn runs (the differential harness checks the tape side by side).
#[test]
fn chat_quit_and_exit_end_the_session() {
    for line in [",quit\r", ",exit\r"] {
        let home = Home::new();
        home.install("echo", &lib("echo-model"), json!({}));
        let mut term = Terminal::open(&home);
        term.expect(0, "> ");
        term.send(line);
        assert!(term.wait().success(), "{line:?} did not end the chat");
        let tapes = home.path().join("tapes");
        let commands = std::fs::read_dir(&tapes)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path()).ok())
            .filter(|text| text.contains("\"command\""))
            .count();
        assert_eq!(commands, 0, "{line:?} ran as a command turn");
    }
}

/// Ctrl-C during a turn cancels that turn; the chat goes on.
#[test]
fn chat_ctrl_c_cancels_the_running_turn() {
    let home = Home::new();
    home.scripted("slow", "", json!({"run_model_stream": {"async": true, "sleep_ms": 60_000, "return": "too late"}}));
    let mut term = Terminal::open(&home);
    let at = term.expect(0, "> ");
    term.send("take your time\r");
    // The model is running (chat streams; the plugin traced the first poll).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !home.trace().iter().any(|l| l == "slow:run_model_stream") {
        assert!(Instant::now() < deadline, "the model was never called");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    term.send("\x03");
    let at = term.expect(at, "turn cancelled");
    let at = term.expect(at, "> ");
    assert!(started.elapsed() < Duration::from_secs(10));
    term.send("\x04");
    let screen = term.screen.clone();
    assert!(term.wait().success());
    assert!(!screen.lock().unwrap()[at..].contains("too late"));
}

/// `bub chat` shows the agent's stream as it works
/// (tool calls, their results, the text); Ctrl-C while the provider hangs
/// cancels the run, which still ends on the tape (`loop.finish cancelled`)
/// before the prompt comes back: a Ctrl-D typed at once must not drop the
/// cancelled run's recording (it once did under load).
#[test]
fn chat_shows_the_agents_stream_and_ctrl_c_cancels_the_run() {
    use bub_tests::provider::{chat, Provider, Reply};
    let provider = Provider::start(vec![
        chat::tool_calls("Checking.", &[("c1", "bash", r#"{"command": "echo tool-output"}"#)]),
        chat::text("All done."),
        Reply::Hang(Duration::from_secs(30)),
    ]);
    let home = Home::new();
    let config = json!({"model": "openai:m", "api_base": provider.base_url, "api_key": "k"});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let mut term = Terminal::open(&home);
    let at = term.expect(0, "> ");
    term.send("run it\r");
    let at = term.expect(at, "Checking.");
    let at = term.expect(at, "-> bash {\"command\": \"echo tool-output\"}");
    let at = term.expect(at, "<- tool-output");
    let at = term.expect(at, "All done.");
    let at = term.expect(at, "> ");
    term.send("wait for me\r");
    let deadline = Instant::now() + Duration::from_secs(20);
    while provider.requests().len() < 3 {
        assert!(Instant::now() < deadline, "the third call never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    term.send("\x03");
    let at = term.expect(at, "turn cancelled");
    term.expect(at, "> ");
    term.send("\x04");
    assert!(term.wait().success());
    let tapes = std::fs::read_dir(home.path().join("tapes")).unwrap().flatten().map(|e| e.path());
    let text: String = tapes.map(|p| std::fs::read_to_string(p).unwrap()).collect();
    let finishes: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["payload"]["name"] == "loop.finish")
        .collect();
    assert_eq!(finishes.len(), 2, "{text}");
    assert_eq!(finishes[0]["payload"]["data"]["status"], "ok");
    assert_eq!(finishes[1]["payload"]["data"]["status"], "cancelled");
}

/// A plugin that hands a message to the chat's handler
/// from inside a turn (its `tell` tool) does not deadlock the chat: the
/// message is queued behind the running turn, which finishes, then it runs.
#[test]
fn a_message_handed_over_inside_a_turn_runs_after_it() {
    use bub_tests::provider::{chat, Provider};
    let provider = Provider::start(vec![
        chat::tool_calls("Forwarding.", &[("c1", "tell", r#"{"text": "from the tool [agent]"}"#)]),
        chat::text("First done."),
        chat::text("Second done."),
    ]);
    let home = Home::new();
    home.install("sdk", &bub_tests::lib("tp-sdk"), json!({}));
    let config = json!({"model": "openai:m", "api_base": provider.base_url, "api_key": "k"});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let mut term = Terminal::open(&home);
    let at = term.expect(0, "> ");
    // "[agent]": the test plugin's own model leaves the turn to the agent.
    term.send("forward it [agent]\r");
    let at = term.expect(at, "First done.");
    term.expect(at, "Second done.");
    term.send("\x04");
    assert!(term.wait().success());
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].body.to_string().contains("told"), "the tool answered: {}", requests[1].body);
    assert!(requests[2].body.to_string().contains("from the tool"), "{}", requests[2].body);
}

/// A sync hook blocking the turn's thread
/// cannot be cancelled, but a second Ctrl-C within 3 s ends bub at once.
#[test]
fn chat_second_ctrl_c_exits_even_when_a_sync_hook_hangs() {
    let home = Home::new();
    home.scripted("stuck", "", json!({"build_prompt": {"block_ms": 60_000, "return": "never"}}));
    let mut term = Terminal::open(&home);
    let at = term.expect(0, "> ");
    term.send("hello\r");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !home.trace().iter().any(|l| l == "stuck:build_prompt") {
        assert!(Instant::now() < deadline, "the hook was never called");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    term.send("\x03");
    std::thread::sleep(Duration::from_millis(300));
    term.send("\x03");
    term.expect(at, "^C again: bub exits now");
    let status = term.wait();
    assert_eq!(status.code(), Some(130));
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// A 100 KB line typed key by key (a paste in a terminal
/// without bracketed paste) reaches the turn whole, and the line editor
/// writes output linear in its length. rustyline 19 repainted the prompt and
/// the whole line each time a row filled: ~50 MB at this width, over a
/// minute in a real terminal (vendor/rustyline/PATCHED.md).
#[test]
fn a_long_line_typed_key_by_key_is_not_repainted_at_every_row() {
    let home = Home::new();
    home.install("echo", &lib("echo-model"), json!({}));
    let mut term = Terminal::open(&home);
    let at = term.expect(0, "> ");
    let line: String = (0..10_000).map(|i| format!("{:09} ", i % 1_000_000_000)).collect::<String>() + "END-OF-LINE";
    // Key by key: no bracketed-paste markers, so each byte is one key.
    for chunk in line.as_bytes().chunks(512) {
        term.send(std::str::from_utf8(chunk).unwrap());
    }
    let typed = term.screen.lock().unwrap().len();
    term.send("\r");
    // The answer echoes the line: it reached the turn whole.
    let end = term.expect(at, &format!("{}\r\n", &line[line.len() - 200..]));
    let screen = term.screen.lock().unwrap().clone();
    assert!(screen[at..].contains(&line), "the line did not reach the turn whole");
    // The editor's echo of the typed line: ~1 byte per key, plus a newline
    // and a carriage return per row (was ~50 MB: the line once per row).
    let written = end.max(typed) - at;
    assert!(written < 4 * line.len(), "{written} bytes written for a {}-byte line", line.len());
    // Ctrl-D at the next prompt (input typed before it may be flushed).
    term.expect(end, "> ");
    term.send("\x04");
    assert!(term.wait().success());
}
