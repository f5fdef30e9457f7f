//! The builtin plugin's behaviours (semantics §H7 "the builtin's defaults", §H4.10–§H4.11,
//! behaviour 92), through the framework and the real registry.
//!
//! The builtin has no per-host configuration: its tape store lives under
//! `$BUB_HOME`, set once for this test binary.

use bub_abi::{
    types::{ErrorInfo, ProcessRequest, TapeEntry, TapeQuery},
    TurnState,
};
use bub_host::WithBuiltin as _;
use bub_host::{framework::Framework, HostBuilder};
use bub_tests::{block_on, Home};
use serde_json::{json, Map, Value};

/// A framework with the builtin first, then `home`'s plugins, in
/// `workspace`; the builtin is told both (no environment variable).
fn framework(home: &Home, workspace: &std::path::Path) -> Framework {
    let host = HostBuilder::new().workspace(workspace).builtin().discovered(&home.search()).build();
    Framework::new(&host, workspace)
}

fn entry(kind: &str, payload: Value) -> TapeEntry {
    TapeEntry { kind: kind.into(), payload: serde_json::from_value(payload).unwrap(), ..Default::default() }
}

/// The tape store: ids from 1, durable across store instances, queries,
/// a torn last line skipped and never glued to the next entry.
#[test]
fn tape_store_appends_durably_and_survives_a_torn_line() {
    let home = Home::new();
    let ws = tempfile::tempdir().unwrap();
    let fw = framework(&home, ws.path());
    block_on(fw.scoped(|fw| async move {
        let store = fw.get_tape_store().expect("the builtin provides a store");
        let a = store.append("t1", &entry("message", json!({"content": "one"}))).await?;
        let b = store.append("t1", &entry("anchor", json!({"name": "a1"}))).await?;
        let c = store.append("t1", &entry("message", json!({"content": "two"}))).await?;
        assert_eq!((a.id, b.id, c.id), (1, 2, 3));
        assert!(!a.date.is_empty());
        let after = store.fetch_all(&TapeQuery { tape: "t1".into(), last_anchor: true, ..Default::default() }).await?;
        assert_eq!(after.iter().map(|e| e.id).collect::<Vec<_>>(), [3]);
        let kinds =
            TapeQuery { tape: "t1".into(), kinds: vec!["message".into()], limit: Some(1), ..Default::default() };
        assert_eq!(store.fetch_all(&kinds).await?[0].payload["content"], "one", "limit keeps the first (Bub)");
        assert!(store.list_tapes().await?.contains(&"t1".to_owned()));
        let bad = store.append("../escape", &entry("message", json!({}))).await;
        assert!(bad.unwrap_err().to_string().contains("invalid tape name"));
        Ok(())
    }))
    .unwrap();

    // A crash mid-write: a torn last line.
    // The store lives in the home the host told the builtin.
    let file = home.path().join("tapes/t1.jsonl");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("{\"id\":4,\"kind\":\"mess");
    std::fs::write(&file, text).unwrap();

    // A new scope (a new store instance) reads what was durable and goes on.
    block_on(fw.scoped(|fw| async move {
        let store = fw.get_tape_store().unwrap();
        let all = store.fetch_all(&TapeQuery { tape: "t1".into(), ..Default::default() }).await?;
        assert_eq!(all.len(), 3);
        let d = store.append("t1", &entry("message", json!({"content": "after the crash"}))).await?;
        assert_eq!(d.id, 4);
        let all = store.fetch_all(&TapeQuery { tape: "t1".into(), ..Default::default() }).await?;
        assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2, 3, 4]);
        store.reset("t1").await?;
        assert!(store.fetch_all(&TapeQuery { tape: "t1".into(), ..Default::default() }).await?.is_empty());
        Ok(())
    }))
    .unwrap();
    // Outside a scope there is no store.
    assert!(fw.get_tape_store().is_none());
}

/// The local environment: files inside the workspace only; processes in
/// their own process group; a timeout kills the group.
#[test]
fn local_environment() {
    let home = Home::new();
    let ws = tempfile::tempdir().unwrap();
    let fw = framework(&home, ws.path());
    let ws_path = ws.path().to_path_buf();
    block_on(fw.scoped(|fw| async move {
        let env = fw.get_environment("s").await?.expect("the builtin provides an environment");
        env.write_text("notes/a.txt", "hi").await?;
        assert_eq!(std::fs::read_to_string(ws_path.join("notes/a.txt")).unwrap(), "hi");
        assert_eq!(env.read_text("notes/a.txt").await?, "hi");
        let err = env.read_text("../../etc/passwd").await.unwrap_err();
        assert!(err.to_string().contains("outside the workspace"), "{err}");
        std::os::unix::fs::symlink("/etc", ws_path.join("escape")).unwrap();
        let err = env.read_text("escape/passwd").await.unwrap_err();
        assert!(err.to_string().contains("outside the workspace"), "{err}");
        let run = |command: &str, timeout_ms| ProcessRequest {
            command: Some(command.into()),
            timeout_ms,
            ..Default::default()
        };
        let out = env.run(&run("echo $$; ps -o pgid= -p $$; pwd", None)).await?;
        let lines: Vec<&str> = out.stdout.lines().map(str::trim).collect();
        assert_eq!(lines[0], lines[1], "the process leads its own group: {out:?}");
        assert_eq!(std::path::Path::new(lines[2]).canonicalize().unwrap(), ws_path.canonicalize().unwrap());
        let slow = env.run(&run("sleep 30", Some(200))).await?;
        assert!(slow.timed_out && slow.returncode.is_none());
        Ok(())
    }))
    .unwrap();
}

/// The local environment's streaming processes (Bub's
/// `spawn`: stdin, stdout and stderr as they come, signals, wait) and
/// `read_bytes`, through the environment object the builtin provides; the
/// scope's exit kills what is still running.
#[test]
fn local_environment_spawns_streaming_processes_and_reads_bytes() {
    let home = Home::new();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("blob.bin"), [0u8, 159, 146, 150, 255]).unwrap();
    let fw = framework(&home, ws.path());
    let pidfile = ws.path().join("sleeper.pid");
    let pidfile2 = pidfile.clone();
    block_on(fw.scoped(|fw| async move {
        let env = fw.get_environment("s").await?.expect("the builtin provides an environment");
        assert_eq!(env.read_bytes("blob.bin").await?, [0u8, 159, 146, 150, 255]);
        assert!(env.read_bytes("../x").await.unwrap_err().to_string().contains("outside the workspace"));
        let spawn = |command: &str| ProcessRequest { command: Some(command.into()), ..Default::default() };
        // A conversation: a line in, its answer out, before the input ends.
        let cat = env.spawn(&spawn("while read line; do echo \"got $line\"; echo err >&2; done")).await?;
        env.write_stdin(&cat, b"one\n", false).await?;
        let first = env.read_output(&cat, "stdout", 64).await?.unwrap();
        assert_eq!(first, b"got one\n");
        assert_eq!(env.read_output(&cat, "stderr", 64).await?.unwrap(), b"err\n");
        env.write_stdin(&cat, b"two\n", true).await?;
        assert_eq!(env.read_output(&cat, "stdout", 64).await?.unwrap(), b"got two\n");
        assert_eq!(env.read_output(&cat, "stdout", 64).await?, None, "end of output");
        assert_eq!(env.wait(&cat).await?, 0);
        assert!(env.wait(&cat).await.unwrap_err().to_string().contains("already waited"));
        // A signal stops it and what it started.
        let sleeper = env.spawn(&spawn("sleep 30 & echo $! > sleeper.pid; wait")).await?;
        while !pidfile2.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(env.signal(&sleeper, false).await?);
        assert_eq!(env.wait(&sleeper).await?, -15);
        // One left running is killed when the scope exits.
        env.spawn(&spawn("sleep 30")).await?;
        Ok(())
    }))
    .unwrap();
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ");
    assert!(!alive, "the group's child was stopped too");
}

/// Behaviour 92: on_error sends one error outbound through dispatch_outbound.
#[test]
fn b92_on_error_dispatches_an_error_outbound() {
    let home = Home::new();
    home.scripted("spy", "", json!({"dispatch_outbound": {"trace_arg": 0}}));
    let ws = tempfile::tempdir().unwrap();
    let fw = framework(&home, ws.path());
    let error = ErrorInfo { kind: "RuntimeError".into(), message: "bad".into(), details: None };
    block_on(fw.runtime().notify_error("turn", &error, Some(&json!({"channel": "cli", "chat_id": "room"}))));
    let calls: Vec<Value> = home
        .trace()
        .iter()
        .filter_map(|l| l.strip_prefix("spy:dispatch_outbound:"))
        .map(|j| serde_json::from_str(j).unwrap())
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["kind"], "error");
    assert_eq!(calls[0]["content"], "An error occurred at stage 'turn': bad");
    assert_eq!((calls[0]["channel"].as_str(), calls[0]["chat_id"].as_str()), (Some("cli"), Some("room")));
    // No message: nothing to address, nothing sent.
    home.clear_trace();
    block_on(fw.runtime().notify_error("turn", &error, None));
    assert!(!home.trace().iter().any(|l| l.starts_with("spy:dispatch_outbound")));
}

/// The turn with the builtin only: context prefix with Bub's date line
/// (§4.3: `<context>\n---Date: <local ISO>---\n<content>`), internal
/// context keys left out, one outbound copying the addressing, the session
/// in the state, the no-model fallback.
#[test]
fn builtin_turn() {
    let home = Home::new();
    let ws = tempfile::tempdir().unwrap();
    let fw = framework(&home, ws.path());
    let mut inbound = json!({"channel": "cli", "chat_id": "c1", "content": "hi",
                             "context": {"sender_id": "human", "_internal": 1}});
    let r = block_on(fw.process_inbound(&mut inbound, false)).unwrap();
    assert_eq!(r.session_id, "cli:c1");
    assert_eq!(bub_tests::mask_date(&r.model_output), "sender_id=human\n---Date: <now>---\nhi");
    assert_eq!(r.state["session_id"], "cli:c1");
    assert_eq!(
        r.outbounds,
        [json!({"session_id": "cli:c1", "content": r.model_output, "channel": "cli", "chat_id": "c1"})]
    );

    // Media become content parts.
    let mut inbound = json!({"content": "look", "media": [{"type": "image", "url": "https://x/y.png"}]});
    let r = block_on(fw.process_inbound(&mut inbound, false)).unwrap();
    assert_eq!(r.prompt, [json!("look"), json!({"type": "image", "url": "https://x/y.png"})]);
}

/// The system prompt: the default, plus the workspace's AGENTS.md.
#[test]
fn system_prompt_reads_agents_md() {
    let home = Home::new();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("AGENTS.md"), "Always answer in French.").unwrap();
    let fw = framework(&home, ws.path());
    let mut state = Map::new();
    state.insert("_runtime_workspace".into(), json!(ws.path().display().to_string()));
    let prompt = fw.system_prompt(&json!("hi"), &TurnState::from_map(state)).unwrap();
    assert!(prompt.starts_with(bub_host::builtin::DEFAULT_SYSTEM_PROMPT));
    assert!(
        prompt.ends_with("<workspace_instruction>\nAlways answer in French.\n</workspace_instruction>"),
        "{prompt}"
    );
}

/// Steering: the builtin inbox keys messages by session, FIFO, drained once.
#[test]
fn steering_inbox() {
    let home = Home::new();
    let ws = tempfile::tempdir().unwrap();
    let fw = framework(&home, ws.path());
    assert!(!block_on(fw.steer_message(json!({"content": "x"}), "s1", &mut Map::new(), None)).unwrap());
    block_on(fw.scoped(|fw| async move {
        let mut state = Map::new();
        assert!(fw.steer_message(json!({"content": "first"}), "user/s1", &mut state, Some("urgent")).await?);
        assert!(fw.steer_message(json!({"content": "second"}), "user/s1", &mut state, None).await?);
        let mut other = Map::new();
        fw.steer_message(json!({"content": "elsewhere"}), "other", &mut other, None).await?;
        let inbox = fw.get_steering_inbox().unwrap();
        assert_eq!(inbox.message_count(&state).await?, 2);
        let drained = inbox.drain_messages(&state).await?;
        assert_eq!(drained[0]["content"], "first");
        assert_eq!(drained[0]["context"]["steering_reason"], "urgent");
        assert_eq!(drained[1]["content"], "second");
        assert_eq!(inbox.message_count(&state).await?, 0);
        assert_eq!(inbox.message_count(&other).await?, 1);
        Ok(())
    }))
    .unwrap();
}

/// No process globals (ABI 2): two hosts in one process
/// each get their own builtin instance, told their own home and workspace.
/// Their tape stores write under their own homes, and the `bash` tool runs
/// in the host's workspace (`bub -w`), not in the launch directory.
#[test]
fn two_hosts_share_nothing_and_bash_runs_in_the_workspace() {
    let (home_a, home_b) = (Home::new(), Home::new());
    let (ws_a, ws_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (fw_a, fw_b) = (framework(&home_a, ws_a.path()), framework(&home_b, ws_b.path()));
    let run = |fw: &Framework, tape: &'static str| {
        block_on(fw.scoped(|fw| async move {
            let store = fw.get_tape_store().expect("a store");
            store.append(tape, &entry("message", json!({"content": tape}))).await?;
            let bash = fw.get_tools()?.into_iter().find(|t| t.name() == "bash").expect("the bash tool");
            let mut args = Map::new();
            args.insert("command".into(), json!("pwd"));
            let out = bash.call(&args).await?;
            Ok::<_, bub_host::framework::FrameworkError>(out.as_str().unwrap_or_default().trim().to_owned())
        }))
        .unwrap()
    };
    let (pwd_a, pwd_b) = (run(&fw_a, "ta"), run(&fw_b, "tb"));
    let canon = |p: &std::path::Path| std::fs::canonicalize(p).unwrap();
    assert_eq!(canon(std::path::Path::new(&pwd_a)), canon(ws_a.path()));
    assert_eq!(canon(std::path::Path::new(&pwd_b)), canon(ws_b.path()));
    assert!(home_a.path().join("tapes/ta.jsonl").is_file());
    assert!(home_b.path().join("tapes/tb.jsonl").is_file());
    assert!(!home_a.path().join("tapes/tb.jsonl").exists() && !home_b.path().join("tapes/ta.jsonl").exists());
}

/// One library registered by two hosts in one process: each registration
/// gets its own instance and its own configuration (before ABI 2 the
/// second host silently got the first one's).
#[test]
fn one_library_two_hosts_two_configs() {
    let (a, b) = (Home::new(), Home::new());
    a.scripted("p", "", json!({"resolve_session": {"return": "from-a"}}));
    b.scripted("p", "", json!({"resolve_session": {"return": "from-b"}}));
    let (host_a, host_b) = (a.host(), b.host());
    let ask = |host: &bub_host::Host| {
        let args = bub_host::CallArgs::resolve_session(&json!({"content": "x"})).unwrap();
        let reply = block_on(host.runtime().call_first(bub_abi::HookId::ResolveSession, &args)).unwrap().unwrap();
        reply.parse::<String>().unwrap()
    };
    assert_eq!((ask(&host_a), ask(&host_b)), ("from-a".to_owned(), "from-b".to_owned()));
}

/// Appends from many writers (each its own store
/// instance, as separate processes are) to one tape get unique, gapless ids,
/// and large concurrent appends never leave blank lines; a run appended at
/// once (`append_many`) stays together.
#[test]
fn concurrent_appends_get_unique_ids_and_no_blank_lines() {
    use bub_abi::resources::TapeStore as _;
    let dir = tempfile::tempdir().unwrap();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let path = dir.path().to_path_buf();
            std::thread::spawn(move || {
                let store = bub_host::builtin::tape_store::FileTapeStore::new(path);
                block_on(async {
                    for i in 0..25 {
                        // Every fifth entry is large (~100 KB): many write() calls.
                        let text = if i % 5 == 0 { "x".repeat(100_000) } else { format!("w{w} e{i}") };
                        store.append("shared".into(), entry("message", json!({"content": text}))).await.unwrap();
                        // And a run of three at once (append_many): one write.
                        let run: Vec<_> =
                            (0..3).map(|k| entry("event", json!({"run": format!("w{w} r{i}"), "k": k}))).collect();
                        let stored = store.append_many("shared".into(), run).await.unwrap();
                        assert!(stored.windows(2).all(|p| p[1].id == p[0].id + 1), "a run's ids are consecutive");
                    }
                })
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let text = std::fs::read_to_string(dir.path().join("shared.jsonl")).unwrap();
    assert!(!text.lines().any(|l| l.trim().is_empty()), "no blank lines");
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut ids: Vec<u64> = lines.iter().map(|l| l["id"].as_u64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, (1..=800).collect::<Vec<_>>());
    // Each run's three lines sit together in the file, in order.
    for (i, line) in lines.iter().enumerate().filter(|(_, l)| l["payload"]["k"] == 0) {
        let run = &line["payload"]["run"];
        assert!(lines[i + 1]["payload"]["run"] == *run && lines[i + 2]["payload"]["run"] == *run, "{run} split");
    }
}

/// `provide_model_options` (Bub's builtin): the configured model, then the
/// fallbacks, once each, the first current — from the settings the host
/// was built with (its `environment`), not the process: two hosts in one
/// process offer their own models.
#[test]
fn model_options_are_the_configured_model_and_fallbacks() {
    let home = Home::new();
    let ws = tempfile::tempdir().unwrap();
    let options = |vars: &[(&str, &str)]| {
        let settings = bub_host::RuntimeSettings::from_vars(vars.iter().map(|(k, v)| ((*k).into(), (*v).into())));
        let host = HostBuilder::new().settings(settings).home(home.path()).workspace(ws.path()).builtin().build();
        block_on(Framework::new(&host, ws.path()).get_model_options("s", None)).unwrap()
    };
    let got = options(&[("BUB_MODEL", "openai:a"), ("BUB_FALLBACK_MODELS", r#"["anthropic:b", "openai:a"]"#)]);
    let ids: Vec<&str> = got.models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["openai:a", "anthropic:b"]);
    assert_eq!(got.current_model.as_deref(), Some("openai:a"));
    assert_eq!(got.models[1].name.as_deref(), Some("anthropic:b"));
    // Nothing configured: bub-rs's default model (Bub's is its DEFAULT_MODEL).
    assert_eq!(options(&[]).current_model.as_deref(), Some("echo"));
}
