//! Isolated plugins: the same library, run in a child
//! `bub` process; a crash, an abort, a stack overflow or a hang in it
//! fails only the calls in flight, names the plugin, and the plugin is
//! started again.

use std::time::{Duration, Instant};

use bub_abi::{HookId, TurnState};
use bub_host::{CallArgs, Host, HostBuilder, RuntimeSettings};
use bub_tests::{block_on, bub_bin, lib, message, run_bub, Home};
use serde_json::{json, Value};

/// Real plugins, isolated: `bub gateway` with the HTTP channel and the
/// SQLite tape store each in a process of its own (the channel object and
/// the message handler it calls cross the connection both ways; the store
/// is a host object whose methods are requests) answers messages as in
/// process, and leaves no process behind.
#[test]
fn the_gateway_serves_through_an_isolated_http_channel() {
    let home = Home::new();
    home.install("http-channel", &lib("http-channel"), json!({"bind": "127.0.0.1:0", "token": "t"}));
    home.isolate("http-channel", json!({"enabled": true}));
    home.install("tape-sqlite", &lib("tape-sqlite"), json!({}));
    home.isolate("tape-sqlite", json!({"enabled": true}));
    let started = Instant::now();
    let mut gateway = bub_tests::gateway::GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    eprintln!("up at {:?}", started.elapsed());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let post = |content: &str| post(&rt, &base, content);
    let (status, body) = post("hello isolated");
    assert_eq!(status, 200, "{body}\n{}", gateway.log());
    assert!(body.contains("hello isolated"), "{body}");
    let (status, body) = post("and again");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("and again"), "{body}");
    // The turns went to the isolated store's database.
    let db = home.path().join("data/tape-sqlite/tapes.sqlite3");
    assert!(std::fs::metadata(&db).map(|m| m.len() > 0).unwrap_or(false), "no tape database at {}", db.display());
    // Its plugins' processes end with it.
    let pid = gateway.pid().unwrap();
    let children = children(pid);
    assert_eq!(children.len(), 2, "one process per isolated plugin: {children:?}");
    drop(gateway);
    let gone = |c: &String| {
        std::fs::read_to_string(format!("/proc/{c}/cmdline")).map_or(true, |l| !l.contains("__plugin-runner"))
    };
    let until = Instant::now() + Duration::from_secs(5);
    while !children.iter().all(gone) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(children.iter().all(gone), "a plugin process outlived the gateway");
    eprintln!("served and stopped in {:?}", started.elapsed());
    let (out, _, _) = run_bub(&home, &["plugins", "list"]);
    assert!(out.contains("isolated: runs in a process of its own"), "{out}");
}

/// A host over the home's plugins whose isolated ones run in `bub`.
fn host(home: &Home, env: &[(&str, &str)]) -> Host {
    let mut vars: Vec<(std::ffi::OsString, std::ffi::OsString)> =
        env.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    vars.push(("BUB_HOOK_TIMEOUT_SECONDS".into(), "3".into()));
    let mut settings = RuntimeSettings::from_vars(vars);
    settings.plugin_runner = Some(bub_bin());
    HostBuilder::new().settings(settings).home(home.path()).discovered(&home.search()).build()
}

/// One message to session `s1` through the HTTP channel at `base` (token
/// `t`): the status (0 when the request failed) and the body.
fn post(rt: &tokio::runtime::Runtime, base: &str, content: &str) -> (u16, String) {
    let request = reqwest::Client::new()
        .post(format!("{base}/v1/messages"))
        .bearer_auth("t")
        .json(&json!({"content": content, "session_id": "s1"}));
    rt.block_on(async {
        match request.send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        }
    })
}

/// The child processes of process `pid`.
fn children(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

fn resolve(host: &Host) -> Result<Option<String>, String> {
    let args = CallArgs::resolve_session(&message("42")).unwrap();
    block_on(host.runtime().call_first(HookId::ResolveSession, &args))
        .map(|r| r.map(|r| r.parse::<String>().unwrap()))
        .map_err(|e| e.to_string())
}

/// The same scripted plugins answer the same, isolated or not: first
/// result (behaviour 1), sync dispatch skipping async answers (behaviour
/// 2), async answers, the live turn state both ways, a returned object's
/// methods, and the registration order and markers `bub hooks` shows.
#[test]
fn an_isolated_plugin_answers_as_it_does_in_process() {
    let run = |isolated: bool| {
        let home = Home::new();
        home.scripted("1-low", "", json!({"resolve_session": {"return": "low"}}));
        home.scripted(
            "2-mid",
            "first",
            json!({
                "resolve_session": {"return": "mid", "async": true, "sleep_ms": 5},
                "system_prompt": {"return": "async", "async": true},
                "build_prompt": {"set_state": {"seen": [1, {"x": "y"}]}, "get_state": "given", "return": "p"},
                "provide_tape_store": {"object": {"kind": "tape_store", "methods": {"list_tapes": {"return": ["t1", "t2"]}}}},
            }),
        );
        home.scripted("3-sync", "", json!({"system_prompt": {"return": "sync"}}));
        if isolated {
            for name in ["1-low", "2-mid", "3-sync"] {
                home.isolate(name, json!({"enabled": true}));
            }
        }
        let host = host(&home, &[]);
        let rt = host.runtime();
        let first = resolve(&host).unwrap();
        let state = TurnState::new();
        state.set("given", &json!("from the host")).unwrap();
        let sys =
            rt.call_many_sync(HookId::SystemPrompt, &CallArgs::system_prompt(&json!("p"), &state).unwrap()).unwrap();
        let sys: Vec<String> = sys.iter().flatten().map(|r| r.parse::<String>().unwrap()).collect();
        let built =
            block_on(rt.call_first(HookId::BuildPrompt, &CallArgs::build_prompt(&message("1"), "s", &state).unwrap()))
                .unwrap()
                .map(|r| r.parse::<String>().unwrap());
        let seen = state.get::<Value>("seen").unwrap();
        let store =
            rt.call_first_sync(HookId::ProvideTapeStore, &CallArgs::provide_tape_store().unwrap()).unwrap().unwrap();
        let object = store.object().expect("an object");
        let tapes = block_on(object.invoke("list_tapes", &json!({}))).unwrap();
        let (hooks, _, _) = run_bub(&home, &["hooks"]);
        (first, sys, built, seen, object.kind(), tapes, hooks, home.trace())
    };
    let in_process = run(false);
    let isolated = run(true);
    assert_eq!(in_process.0.as_deref(), Some("mid"));
    assert_eq!(in_process.1, ["sync"]);
    assert_eq!(in_process.2.as_deref(), Some("from the host"));
    assert_eq!(in_process.3, Some(json!([1, {"x": "y"}])));
    assert_eq!(in_process.5, json!(["t1", "t2"]));
    assert_eq!(in_process, isolated, "isolated plugins answer differently");
}

/// A segfault, an abort, a stack overflow and `exit` in an isolated
/// plugin's hook fail that call with the plugin, the hook and how its
/// process ended; the host stays up, the plugin is started again on a
/// later call, and `bub plugins list` shows the restart and the crash.
#[test]
fn a_crash_in_an_isolated_plugin_fails_only_that_call_and_it_comes_back() {
    for (how, says) in [
        ("segfault", "killed by SIGSEGV"),
        ("abort", "killed by SIGABRT"),
        ("stack_overflow", "killed by SIG"),
        ("exit", "exited with status 3"),
    ] {
        let home = Home::new();
        home.scripted("crasher", "", json!({"resolve_session": {"crash_every": [2, how], "return": "ok"}}));
        home.isolate("crasher", json!({"enabled": true}));
        let host = host(&home, &[]);
        assert_eq!(resolve(&host).unwrap().as_deref(), Some("ok"), "{how}");
        let err = resolve(&host).unwrap_err();
        assert!(err.contains("crasher") && err.contains("resolve_session") && err.contains(says), "{how}: {err}");
        assert!(err.contains("bub starts it again on its next call"), "{how}: {err}");
        // Within the backoff the call says so; after it, the plugin is back.
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(resolve(&host).unwrap().as_deref(), Some("ok"), "{how}: not started again");
        let (out, err, ok) = run_bub(&home, &["plugins", "list"]);
        assert!(ok, "{err}");
        assert!(
            out.contains("isolated: runs in a process of its own; restarted 1 time; last crash: its process"),
            "{how}: {out}"
        );
        assert!(out.contains(says), "{how}: {out}");
    }
}

/// Past `isolated.max_restarts` crashes in ten minutes the plugin is left
/// stopped, and its calls say so at once.
#[test]
fn an_isolated_plugin_that_keeps_crashing_is_stopped() {
    let home = Home::new();
    home.scripted("crasher", "", json!({"resolve_session": {"crash": "abort"}}));
    home.isolate("crasher", json!({"enabled": true, "max_restarts": 1}));
    let host = host(&home, &[]);
    for _ in 0..2 {
        let err = resolve(&host).unwrap_err();
        assert!(err.contains("SIGABRT"), "{err}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let started = Instant::now();
    let err = resolve(&host).unwrap_err();
    assert!(err.contains("is stopped: it crashed 2 times in 10 minutes (isolated.max_restarts is 1)"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// A plugin that crashes in its constructor is a failed plugin, not a dead
/// `bub`: `bub hooks` and `bub plugins list` work and say how it ended.
#[test]
fn an_isolated_plugin_that_crashes_while_loading_is_a_failed_plugin() {
    let home = Home::new();
    let dir = home.scripted("crasher", "", json!({}));
    let manifest = dir.join("plugin.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["config"]["init"] = json!("segfault");
    m["isolation"] = json!({"enabled": true});
    std::fs::write(&manifest, m.to_string()).unwrap();
    let (out, err, ok) = run_bub(&home, &["hooks"]);
    assert!(ok, "{out}{err}");
    let (out, err, ok) = run_bub(&home, &["plugins", "list"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("failed") && out.contains("isolated plugin 'crasher': its process killed by SIGSEGV"),
        "{out}"
    );
}

/// A sync hook that never returns is killed at the hook deadline and the
/// plugin started again; a process that stops answering pings (SIGSTOP)
/// is killed after `isolated.ping_timeout_seconds`.
#[test]
fn a_hung_isolated_plugin_is_killed_and_started_again() {
    let home = Home::new();
    home.scripted("hangs", "", json!({"system_prompt": {"block_ms": 600000}, "resolve_session": {"return": "ok"}}));
    home.isolate("hangs", json!({"enabled": true, "ping_timeout_seconds": 1}));
    let host = host(&home, &[]);
    let started = Instant::now();
    let err = host
        .runtime()
        .call_many_sync(HookId::SystemPrompt, &CallArgs::system_prompt(&json!("p"), &TurnState::new()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("system_prompt (a sync hook) did not answer within 3 s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(resolve(&host).unwrap().as_deref(), Some("ok"));

    // Freeze the whole process: the ping watch kills it.
    let pid = bub_host::isolation::Status::read(home.path(), "hangs").and_then(|s| s.pid).expect("its pid");
    let stop = std::process::Command::new("kill").args(["-STOP", &pid.to_string()]).status().unwrap();
    assert!(stop.success());
    std::thread::sleep(Duration::from_millis(2500));
    let status = bub_host::isolation::Status::read(home.path(), "hangs").unwrap();
    assert!(status.last_crash.as_deref().unwrap_or("").contains("answered no ping"), "{status:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(resolve(&host).unwrap().as_deref(), Some("ok"));
}

/// The child gets the basics and what `isolated.env` names, never the
/// host's other variables (keys); and its memory limit holds: an answer
/// over it ends the child (SIGABRT from the failed allocation), not the host.
#[test]
fn an_isolated_plugin_gets_only_its_variables_and_its_memory() {
    let home = Home::new();
    home.scripted("secret", "", json!({"resolve_session": {"env_var": "OPENAI_API_KEY"}}));
    home.isolate("secret", json!({"enabled": true}));
    let env = [("OPENAI_API_KEY", "sk-host"), ("PATH", "/usr/bin:/bin")];
    assert_eq!(resolve(&host(&home, &env)).unwrap(), None, "the key leaked into the child");
    home.isolate("secret", json!({"enabled": true, "env": ["OPENAI_API_KEY"]}));
    assert_eq!(resolve(&host(&home, &env)).unwrap().as_deref(), Some("sk-host"));

    let home = Home::new();
    home.scripted("big", "", json!({"resolve_session": {"repeat": ["x", 700_000_000]}}));
    home.isolate("big", json!({"enabled": true, "memory_mb": 400}));
    let host = host(&home, &[]);
    let err = resolve(&host).unwrap_err();
    assert!(err.contains("big") && err.contains("killed by SIGABRT"), "{err}");
}

/// `bub plugins install --isolated` and `bub plugins config NAME
/// isolated.…` keep the isolation in the manifest (not in the plugin's
/// config), check the values, and a reinstall keeps it.
#[test]
fn isolation_is_set_by_install_and_config() {
    let home = Home::new();
    let library = lib("tp-scripted");
    let library = library.to_str().unwrap();
    let (out, err, ok) = run_bub(&home, &["plugins", "install", library, "--name", "iso", "--isolated"]);
    assert!(ok && out.contains("isolated: it runs in a process of its own"), "{out}{err}");
    let (out, err, ok) = run_bub(&home, &["plugins", "config", "iso", "isolated.memory_mb=512", "isolated.env=A,B"]);
    assert!(ok, "{err}");
    assert!(out.contains("\"memory_mb\": 512") && out.contains("\"A\""), "{out}");
    let (_, err, ok) = run_bub(&home, &["plugins", "config", "iso", "isolated.memory_mb=lots"]);
    assert!(!ok && err.contains("isolated.memory_mb takes a whole number"), "{err}");
    let (_, err, ok) = run_bub(&home, &["plugins", "config", "iso", "isolated.colour=red"]);
    assert!(!ok && err.contains("not an isolation setting"), "{err}");
    let (_, _, ok) = run_bub(&home, &["plugins", "install", library, "--name", "iso"]);
    assert!(ok);
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("plugins/iso/plugin.json")).unwrap()).unwrap();
    assert_eq!(manifest["isolation"]["memory_mb"], 512, "{manifest}");
    assert!(manifest["config"].get("isolated").is_none(), "{manifest}");
    let (out, _, _) = run_bub(&home, &["plugins", "list"]);
    assert!(out.contains("isolated: runs in a process of its own"), "{out}");
    let (out, _, _) = run_bub(&home, &["plugins", "info", "iso"]);
    assert!(
        out.contains("isolated:     in a process of its own (memory 512 MiB, at most 5 restarts in 10 min, env A B)"),
        "{out}"
    );
    let (_, err, ok) = run_bub(&home, &["plugins", "config", "iso", "isolated=false"]);
    assert!(ok, "{err}");
    let (out, _, _) = run_bub(&home, &["plugins", "list"]);
    assert!(!out.contains("isolated"), "{out}");
}

/// A tape store (or tools, the steering inbox) from an isolated plugin
/// outlives a crash of its process: the host's handle asks the restarted
/// process for it again on its next call (channels: see below). A stream
/// is not revived: its call failed with the crash.
#[test]
fn a_store_from_an_isolated_plugin_comes_back_after_a_crash() {
    let home = Home::new();
    home.scripted(
        "store",
        "",
        json!({
            "provide_tape_store": {"object": {"kind": "tape_store", "methods": {"list_tapes": {"return": ["t1"]}}}},
            "resolve_session": {"crash": "segfault"},
        }),
    );
    home.isolate("store", json!({"enabled": true}));
    let host = host(&home, &[]);
    let rt = host.runtime();
    let store =
        rt.call_first_sync(HookId::ProvideTapeStore, &CallArgs::provide_tape_store().unwrap()).unwrap().unwrap();
    let store = store.object().unwrap();
    assert_eq!(block_on(store.invoke("list_tapes", &json!({}))).unwrap(), json!(["t1"]));
    assert!(resolve(&host).unwrap_err().contains("SIGSEGV"));
    // The same handle, after the crash (waits out the backoff).
    assert_eq!(block_on(store.invoke("list_tapes", &json!({}))).unwrap(), json!(["t1"]));
    assert_eq!(block_on(store.invoke("list_tapes", &json!({}))).unwrap(), json!(["t1"]));
    let provided = home.trace().iter().filter(|l| l.ends_with(":provide_tape_store")).count();
    assert_eq!(provided, 2, "asked once at first, once in the restarted process: {:?}", home.trace());
}

/// An isolated channel whose process dies (here SIGKILL, as the OOM killer
/// would) is started again by the gateway at once, on its configured
/// address: the next request is served.
#[test]
fn an_isolated_channel_is_started_again_after_its_process_dies() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let home = Home::new();
    home.install("http-channel", &lib("http-channel"), json!({"bind": format!("127.0.0.1:{port}"), "token": "t"}));
    home.isolate("http-channel", json!({"enabled": true}));
    let mut gateway = bub_tests::gateway::GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let post = |content: &str| post(&rt, &base, content);
    assert_eq!(post("before").0, 200);
    let pid = gateway.pid().unwrap();
    let child = children(pid).pop().expect("the channel's process");
    assert!(std::process::Command::new("kill").args(["-KILL", &child]).status().unwrap().success());
    let until = Instant::now() + Duration::from_secs(10);
    let (status, body) = loop {
        std::thread::sleep(Duration::from_millis(200));
        let (status, body) = post("after");
        if status == 200 || Instant::now() > until {
            break (status, body);
        }
    };
    assert_eq!(status, 200, "{body}\n{}", gateway.log());
    assert!(body.contains("after"), "{body}");
    assert!(gateway.log().contains("a channel of it was started again"), "{}", gateway.log());
    assert!(gateway.wait(Duration::from_millis(10)).is_none(), "the gateway went down");
}

/// A crash right after the plugin started a subprocess is named at once
/// (its socket is close-on-exec, so the subprocess does not keep it open
/// and the host sees the end at the crash, not when pings go unanswered),
/// and the subprocess is ended with the plugin's process group instead of
/// being left orphaned.
#[test]
fn a_crash_after_a_spawn_is_named_at_once_and_the_subprocess_ends_with_it() {
    let home = Home::new();
    home.scripted(
        "spawner",
        "",
        json!({"resolve_session": {"spawn_process": ["sleep", "120"], "crash": "segfault", "return": "never"}}),
    );
    home.isolate("spawner", json!({"enabled": true}));
    let host = host(&home, &[("BUB_HOOK_TIMEOUT_SECONDS", "60")]);
    let started = std::time::Instant::now();
    let err = resolve(&host).unwrap_err();
    let took = started.elapsed();
    assert!(err.contains("killed by SIGSEGV"), "the signal is named: {err}");
    assert!(took < Duration::from_secs(10), "named after {took:?}, not at the crash: {err}");
    let pid: u32 = home
        .trace()
        .iter()
        .find_map(|line| line.split(":pid:").nth(1).and_then(|p| p.parse().ok()))
        .unwrap_or_else(|| panic!("the subprocess's pid was traced: {:?}", home.trace()));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.split(") ").nth(1).unwrap_or("").starts_with('Z'));
        if !alive {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the plugin's subprocess {pid} outlived it");
        std::thread::sleep(Duration::from_millis(50));
    }
}
