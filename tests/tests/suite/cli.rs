//! The `bub` binary as a user runs it: `bub hooks` (semantics §H3.4, behaviour 7)
//! and `bub plugins list`.

use std::process::Command;

use bub_tests::{bub_bin, lib, run_bub, Home};
use serde_json::{json, Value};

fn bub(home: &Home, args: &[&str]) -> (String, String, bool) {
    bub_tests::run_bub(home, args)
}

fn section_3_5(home: &Home) {
    let hooks = json!({"resolve_session": {}, "load_state": {}, "system_prompt": {}, "provide_channels": {}});
    home.scripted("a", "", hooks.clone()); // plays "builtin": registered first
    home.scripted("b", "", hooks.clone()); // A
    home.scripted("c", "first", hooks.clone()); // B (tryfirst)
    home.scripted("d", "last", hooks); // C (trylast)
}

/// Behaviour 7: stored order C, base, A, B is printed; one line per hook with
/// implementations, sorted by hook name.
#[test]
fn b07_bub_hooks_prints_pluggy_stored_order() {
    let home = Home::new();
    section_3_5(&home);
    let (out, err, ok) = bub(&home, &["hooks"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), bub_abi::HOOK_COUNT, "the scripted plugin implements every hook:\n{out}");
    assert!(lines.contains(&"resolve_session: d, builtin, a, b, c"), "{out}");
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);

    let (json_out, _, ok) = bub(&home, &["hooks", "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(v["resolve_session"], json!(["d", "builtin", "a", "b", "c"]));

    let (order, _, ok) = bub(&home, &["hooks", "--call-order"]);
    assert!(ok);
    assert!(
        order
            .lines()
            .any(|l| l
                == "resolve_session: c [tryfirst, sync] -> b [normal, sync] -> a [normal, sync] -> builtin [normal, sync] -> d [trylast, sync]"),
        "{order}"
    );
    let (order_json, _, _) = bub(&home, &["hooks", "--call-order", "--json"]);
    let v: Value = serde_json::from_str(&order_json).unwrap();
    assert_eq!(v["resolve_session"][0], json!({"plugin": "c", "marker": "tryfirst", "async": false}));
}

/// Behaviour 93: with only the builtin, one `<hook>: builtin` line per hook
/// it implements (ours: Bub's minus the interception hooks it leaves empty
/// and `register_cli_commands`; plus `continue_prompt` and
/// `provide_tools`); `bub hooks` is hidden from help.
#[test]
fn b93_bub_hooks_with_only_the_builtin() {
    let home = Home::new();
    let (out, _, ok) = bub(&home, &["hooks"]);
    assert!(ok);
    let expected = [
        "before_tool_call",
        "build_prompt",
        "build_tape_context",
        "continue_prompt",
        "dispatch_outbound",
        "load_state",
        "on_error",
        "onboard_config",
        "provide_channels",
        "provide_environment",
        "provide_lifespan",
        "provide_model_options",
        "provide_steering_inbox",
        "provide_tape_sidecar",
        "provide_tape_store",
        "provide_tools",
        "render_outbound",
        "resolve_session",
        "run_model",
        "run_model_stream",
        "save_state",
        "system_prompt",
    ];
    let lines: Vec<String> = expected.iter().map(|h| format!("{h}: builtin")).collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), lines);
    let (help, _, _) = bub(&home, &["--help"]);
    for command in ["run", "chat", "onboard", "plugins"] {
        assert!(help.contains(&format!("  {command} ")), "{help}");
    }
    assert!(!help.contains("  hooks "), "{help}");
}

/// `bub plugins list` shows every plugin in registration order, with
/// version, ABI, path, status and the failure detail; the command succeeds.
#[test]
fn plugins_list_shows_status_and_detail() {
    let home = Home::new();
    home.install("good", &lib("tp-sdk"), json!({}));
    home.install("nosym", &lib("tp-nosymbol"), json!({}));
    let (out, err, ok) = bub(&home, &["plugins", "list"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAME") && lines[0].contains("STATUS"), "{out}");
    assert!(lines[1].starts_with("builtin") && lines[1].contains("(built in)"), "{out}");
    assert!(
        lines[2].starts_with("good")
            && lines[2].contains("0.3.1")
            && lines[2].contains(bub_abi::ABI_VERSION)
            && lines[2].contains("loaded"),
        "{out}"
    );
    assert!(lines[3].starts_with("nosym") && lines[3].contains("failed"), "{out}");
    assert!(lines[4].trim_start().starts_with("error:") && lines[4].contains("is not a bub plugin"), "{out}");
    assert!(err.contains("plugin.load_failed plugin=nosym"), "failures are logged too: {err}");

    let (json_out, _, ok) = bub(&home, &["plugins", "list", "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&json_out).unwrap();
    let names: Vec<&str> = v.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["builtin", "good", "nosym"]);
    assert_eq!(v[1]["status"], "loaded");
    assert_eq!(v[1]["version"], "0.3.1");
    assert_eq!(v[1]["abi_version"], bub_abi::ABI_VERSION);
    assert!(v[1]["path"].as_str().unwrap().ends_with("libtp_sdk.so"));
    assert_eq!(v[2]["status"], "failed");
    assert!(v[2]["detail"].as_str().unwrap().contains("is not a bub plugin"));
}

/// `BUB_HOME` is honoured, `--home` overrides it.
#[test]
fn home_from_env_and_flag() {
    let env_home = Home::new();
    env_home.install("from-env", &lib("tp-sdk"), json!({}));
    let flag_home = Home::new();
    let run = |extra: &[&str]| {
        let out = Command::new(bub_bin())
            .args(extra)
            .args(["plugins", "list", "--json"])
            .env("BUB_HOME", env_home.path())
            .env_remove("BUB_PLUGIN_PATH")
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(run(&[]), ["builtin", "from-env"]);
    assert_eq!(run(&["--home", flag_home.path().to_str().unwrap()]), ["builtin"]);
}

/// Behaviour 94: `bub run hello` prints `[cli:local]` and the outbound content.
/// The message is a Bub channel message: its context names the channel
/// (`$<channel>`) and chat (§4.1, §7), and the prompt carries the date (§4.3).
#[test]
fn b94_bub_run_prints_outbounds() {
    let home = Home::new();
    home.install("echo", &lib("echo-model"), json!({}));
    let (out, err, ok) = bub(&home, &["run", "hello"]);
    assert!(ok, "{err}");
    // The builtin's build_prompt prefixes the message context (Bub's `context_str`).
    assert_eq!(
        bub_tests::mask_date(&out),
        "[cli:local]\necho: sender_id=human|channel=$cli|chat_id=local\n---Date: <now>---\nhello\n"
    );
    let (out, _, ok) = bub(&home, &["run", "hi", "--channel", "tg", "--chat-id", "7", "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["session_id"].as_str(), bub_tests::mask_date(v["model_output"].as_str().unwrap()).as_str()),
        (Some("tg:7"), "echo: sender_id=human|channel=$tg|chat_id=7\n---Date: <now>---\nhi")
    );

    // A failing turn exits non-zero with the reason.
    let failing = Home::new();
    failing.scripted("bad", "", json!({"build_prompt": {"error": "cannot build"}}));
    let (_, err, ok) = bub(&failing, &["run", "x"]);
    assert!(!ok && err.contains("the turn failed") && err.contains("cannot build"), "{err}");
}

/// `bub run` opens one `running()` scope around its one turn: a lifespan is
/// entered before the turn and exited after it.
#[test]
fn bub_run_holds_one_scope_around_the_turn() {
    let home = Home::new();
    home.scripted(
        "life",
        "",
        json!({"provide_lifespan": {"object": {"kind": "lifespan", "name": "L"}}, "load_state": {"return": null}}),
    );
    let (_, err, ok) = bub(&home, &["run", "hi"]);
    assert!(ok, "{err}");
    let trace: Vec<String> =
        home.trace().into_iter().filter(|l| l.starts_with("life:L.") || l == "life:load_state").collect();
    assert_eq!(trace, ["life:L.enter", "life:load_state", "life:L.exit(none)"]);
}

/// Config from the environment: `BUB_<NAME>__<KEY>` sets a key of a
/// plugin's config, over its manifest (and `config.json`).
#[test]
fn plugin_config_from_the_environment() {
    let home = Home::new();
    home.scripted("env-cfg", "", json!({"resolve_session": {"return": "from-manifest"}}));
    let run = |env: &[(&str, &str)]| {
        let out = Command::new(bub_bin())
            .arg("--home")
            .arg(home.path())
            .args(["run", "hi", "--json"])
            .envs(env.iter().copied())
            .env_remove("BUB_PLUGIN_PATH")
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["session_id"].as_str().unwrap().to_owned()
    };
    assert_eq!(run(&[]), "from-manifest");
    let hooks = r#"{"resolve_session": {"return": "from-env"}}"#;
    assert_eq!(run(&[("BUB_ENV_CFG__HOOKS", hooks)]), "from-env");
    // Another plugin's variable changes nothing.
    assert_eq!(run(&[("BUB_OTHER__HOOKS", hooks)]), "from-manifest");
}

/// Behaviour 41 and `register_cli_commands`: a plugin adds `bub greet`;
/// clap parses its arguments; it sees the resolved `-w` workspace.
#[test]
fn b41_plugin_subcommand() {
    let home = Home::new();
    home.install("sdk", &lib("tp-sdk"), json!({}));
    let ws = tempfile::tempdir().unwrap();
    let ws_arg = ws.path().join(".").display().to_string();
    let (out, err, ok) = bub(&home, &["-w", &ws_arg, "greet", "ann"]);
    assert!(ok, "{err}");
    assert_eq!(out, format!("hello ann from {}\n", ws.path().canonicalize().unwrap().display()));
    let (out, _, ok) = bub(&home, &["greet", "--shout", "ann"]);
    assert!(ok && out.starts_with("HELLO ANN FROM"), "{out}");
    let (help, _, _) = bub(&home, &["--help"]);
    assert!(help.contains("greet    Greets someone from the workspace (tp-sdk)"), "{help}");
    let (_, err, ok) = bub(&home, &["greet"]);
    assert!(!ok && err.contains("<name>"), "{err}");
    // Without the plugin, the command does not exist.
    let (_, err, ok) = bub(&Home::new(), &["greet", "ann"]);
    assert!(!ok && err.contains("unrecognized subcommand 'greet'"), "{err}");
}

/// `bub onboard`: fragments merged low priority first into the existing
/// config and saved; errors are Bub's ("Onboarding failed: …", exit 1).
#[test]
fn bub_onboard_collects_and_saves() {
    let home = Home::new();
    std::fs::write(home.path().join("config.json"), r#"{"kept": 1}"#).unwrap();
    home.scripted("1-first", "", json!({"onboard_config": {"trace_arg": 0, "return": {"first": {"enabled": true}}}}));
    home.scripted("2-second", "", json!({"onboard_config": {"return": {"second": true}}}));
    let (out, err, ok) = bub(&home, &["onboard"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("Saved config to {}", home.path().join("config.json").display()));
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(saved, json!({"kept": 1, "first": {"enabled": true}, "second": true}));
    // The builtin's interactive onboarding answered nothing (no input):
    // it changed nothing.
    assert_eq!(home.trace(), ["1-first:onboard_config:{\"kept\":1}", "2-second:onboard_config"]);

    let (_, err, ok) = bub(&home, &["onboard", "nope"]);
    assert!(!ok);
    assert!(
        err.contains(
            "Onboarding failed: No onboard_config hook found for plugin 'nope'. Available plugins: 1-first, 2-second, builtin"
        ),
        "{err}"
    );
}

/// `config.json` that is a FIFO or
/// `/dev/zero` is refused at once (not read forever); `bub run -` takes a
/// message larger than an argument can be from standard input.
#[test]
fn settings_files_must_be_small_regular_files_and_run_reads_stdin() {
    let home = Home::new();
    std::os::unix::fs::symlink("/dev/zero", home.path().join("config.json")).unwrap();
    let (out, err, ok) = bub(&home, &["run", ",echo hi"]);
    assert!(ok, "{err}");
    assert!(out.contains("hi"));
    assert!(err.contains("config.json cannot be read: is not a regular file"), "{err}");

    std::fs::remove_file(home.path().join("config.json")).unwrap();
    // Through the offline echo model: the answer repeats the message.
    let big = "y".repeat(200_000);
    let mut child = std::process::Command::new(bub_tests::bub_bin())
        .arg("--home")
        .arg(home.path())
        .args(["run", "--json", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), big.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(result["model_output"].as_str().unwrap().ends_with(&big));
}

/// A closed pipe ends `bub` quietly with status
/// 0; a full disk is one line and status 1 (no panic, no backtrace).
#[test]
fn closed_pipes_and_full_disks_are_not_panics() {
    let home = Home::new();
    let out = std::process::Command::new(bub_tests::bub_bin())
        .arg("--home")
        .arg(home.path())
        .args(["run", ",echo hi"])
        .stdout(std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim(), "error: cannot write the output: No space left on device (os error 28)");

    let mut child = std::process::Command::new(bub_tests::bub_bin())
        .arg("--home")
        .arg(home.path())
        .args(["run", "--json", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away before anything is written
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), "z".repeat(300_000).as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// A finished turn's answer is
/// printed before a slow scope exit, not after it.
#[test]
fn the_answer_is_printed_before_a_slow_scope_exit() {
    use std::io::BufRead;
    let home = Home::new();
    home.scripted(
        "slow-exit",
        "",
        json!({"provide_lifespan": {"object": {"kind": "lifespan", "name": "L", "methods": {"exit": {"sleep_ms": 4000}}}}}),
    );
    bub_tests::bub_bin();
    let started = std::time::Instant::now();
    let mut child = std::process::Command::new(bub_tests::bub_bin())
        .arg("--home")
        .arg(home.path())
        .args(["run", ",echo early"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answered = None;
    for line in lines.by_ref() {
        if line.unwrap().contains("early") {
            answered = Some(started.elapsed());
            break;
        }
    }
    assert!(child.wait().unwrap().success());
    let (answered, ended) = (answered.expect("the answer"), started.elapsed());
    assert!(ended >= std::time::Duration::from_secs(4), "the scope exit ran ({ended:?})");
    assert!(ended - answered >= std::time::Duration::from_secs(3), "answered at {answered:?}, ended at {ended:?}");
}

/// A resource that hangs on entry
/// is cancelled after `BUB_LIFESPAN_TIMEOUT_SECONDS` and named; one that
/// hangs on exit does not hold the answer back and is named too.
#[test]
fn hanging_lifespans_are_cancelled_and_named() {
    let run = |method: &str| {
        let home = Home::new();
        home.scripted(
            "stuck",
            "",
            json!({"provide_lifespan": {"object": {"kind": "lifespan", "name": "L", "methods": {method: {"sleep_ms": 30_000}}}}}),
        );
        bub_tests::bub_bin();
        let started = std::time::Instant::now();
        let out = std::process::Command::new(bub_tests::bub_bin())
            .arg("--home")
            .arg(home.path())
            .args(["run", ",echo hi"])
            .env("BUB_LIFESPAN_TIMEOUT_SECONDS", "1")
            .output()
            .unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(15), "{:?}", started.elapsed());
        (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    let (ok, _, err) = run("enter");
    assert!(!ok);
    assert!(err.contains("lifespan `L` of plugin 'stuck' failed in `enter`: did not finish within 1 s"), "{err}");
    let (ok, out, err) = run("exit");
    assert!(out.contains("hi"), "{out}");
    assert!(!ok && err.contains("failed in `exit`: did not finish within 1 s"), "{err}");
}

/// Reliability item 17: a plugin printing to stdout cannot corrupt
/// `bub run --json`: plugin output goes to stderr, the answer alone to stdout.
#[test]
fn plugin_prints_do_not_corrupt_run_json() {
    let home = Home::new();
    home.scripted("noisy", "", json!({"load_state": {"print": "NOISE FROM A PLUGIN", "return": null}}));
    let (out, err, ok) = run_bub(&home, &["run", "--json", "hi"]);
    assert!(ok, "{err}");
    let parsed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(parsed["session_id"], "cli:local");
    assert!(err.contains("NOISE FROM A PLUGIN"), "{err}");
}

/// Reliability item 16: plugin command names must be plain words: `-x` and
/// `a b` are refused with a warning (and `bub -x` is not the plugin's
/// command); a good name works.
#[test]
fn plugin_command_names_are_validated() {
    let home = Home::new();
    let command = |name: &str| {
        json!({"kind": "cli_command", "name": name, "methods": {
            "spec": {"return": {"name": name, "about": "a scripted command"}},
            "call": {"return": format!("ran {name}")},
        }})
    };
    home.scripted(
        "commands",
        "",
        json!({"register_cli_commands": {"objects": [command("-x"), command("a b"), command("hello")]}}),
    );
    let (out, err, ok) = run_bub(&home, &["hello"]);
    assert!(ok && out.contains("ran hello"), "{out}{err}");
    assert!(err.contains(r#"registers command `-x` with the name "-x""#), "{err}");
    assert!(err.contains(r#"with the name "a b""#), "{err}");
    let (out, _, ok) = run_bub(&home, &["-x"]);
    assert!(!ok && !out.contains("ran -x"), "{out}");
}

/// The nearest `.env` (Bub's `load_dotenv(find_dotenv(usecwd=True))`): read
/// from the current folder or a parent, without overriding a variable
/// already set, and passed on to the commands the tools run; one that
/// others can write is refused with a warning.
#[test]
fn the_nearest_dotenv_reaches_the_tools_unless_others_can_write_it() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let root = tempfile::tempdir().unwrap();
    let below = root.path().join("project/src");
    std::fs::create_dir_all(&below).unwrap();
    let env = root.path().join("project/.env");
    std::fs::write(&env, "DOTENV_PROBE=from-dotenv\nDOTENV_KEPT=from-file\n").unwrap();
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o600)).unwrap();
    let run = || {
        std::process::Command::new(bub_tests::bub_bin())
            .arg("--home")
            .arg(home.path())
            .args(["run", ",bash command='echo $DOTENV_PROBE/$DOTENV_KEPT'"])
            .current_dir(&below)
            .env("DOTENV_KEPT", "from-process")
            .env_remove("DOTENV_PROBE")
            .env_remove("BUB_PLUGIN_PATH")
            .output()
            .unwrap()
    };
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("from-dotenv/from-process"), "{stdout}");
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = run();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("from-dotenv"), "{stdout}");
    assert!(stderr.contains(".env not loaded:") && stderr.contains("is writable by group or others"), "{stderr}");
}

/// The builtin's interactive onboarding (Bub's
/// `onboarding.py`) answered on standard input, without a terminal: the
/// provider, its URL (a bad one asked again), the key, a connection check
/// that lists the models of a loopback server (`GET /v1/models`, with the
/// key), a model by number, channels and stream output — saved as the keys
/// the agent and the gateway read.
#[test]
fn bub_onboard_asks_for_the_model_connection_on_stdin() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let n = stream.read(&mut request).unwrap();
        let request = String::from_utf8_lossy(&request[..n]).into_owned();
        let body = r#"{"object": "list", "data": [{"id": "zeta-model"}, {"id": "alpha-model"}]}"#;
        let reply = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
        stream.write_all(reply.as_bytes()).unwrap();
        request
    });
    let home = Home::new();
    std::fs::write(home.path().join("config.json"), r#"{"kept": 1}"#).unwrap();
    let mut child = Command::new(bub_bin())
        .arg("--home")
        .arg(home.path())
        .arg("onboard")
        .env_remove("BUB_PLUGIN_PATH")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let answers = format!("openai-compatible\nnot a url\n{base}\nsk-onboard\n2\ntelegram\ny\n");
    child.stdin.take().unwrap().write_all(answers.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("Models endpoint reachable: found 2 models."), "{err}");
    assert!(err.contains("Enter an http:// or https:// API base URL"), "the bad URL was refused: {err}");
    let request = server.join().unwrap();
    assert!(request.starts_with("GET /v1/models "), "{request}");
    assert!(request.to_lowercase().contains("authorization: bearer sk-onboard"), "{request}");
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("config.json")).unwrap()).unwrap();
    // Models are listed sorted: 2 is zeta-model.
    assert_eq!(
        saved,
        json!({"kept": 1, "model": "openai:zeta-model", "api_base": base, "api_key": "sk-onboard",
               "client_args": {"api_format": "chat"}, "enabled_channels": "telegram", "stream_output": true})
    );
}

/// Control characters in a model's answer reach the
/// terminal escaped (the echo model repeats them): an `ESC [2J` cannot clear
/// the screen, a bare `\r` cannot hide what came before it.
#[test]
fn control_characters_from_the_model_are_shown_escaped() {
    let home = Home::new();
    let (out, err, ok) = run_bub(&home, &["run", "look\u{1b}[2J here\rhidden\u{7}"]);
    assert!(ok, "{err}");
    assert!(!out.contains('\u{1b}') && !out.contains('\r') && !out.contains('\u{7}'), "{out:?}");
    assert!(out.contains("look\\u{1b}[2J here\\rhidden\\u{7}"), "{out:?}");
}
