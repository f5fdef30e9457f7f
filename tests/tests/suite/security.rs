//! The attacks and faults of the adversarial run, reproduced
//! through the real `bub` binary, plugins and loader. Where an attack takes
//! a second local user, the test runs that part as `nobody` (the suite runs
//! as root in CI) and says it skipped that part otherwise.

use std::{
    os::unix::{fs::PermissionsExt, process::CommandExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use bub_tests::{
    bub_bin,
    gateway::GatewayProcess,
    lib,
    provider::{chat, Provider, Reply},
    run_bub, Home,
};
use serde_json::{json, Value};

/// uid and gid of `nobody` when the suite runs as root (None otherwise).
fn nobody() -> Option<(u32, u32)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let line = passwd.lines().find(|l| l.starts_with("nobody:"))?;
    let mut f = line.split(':').skip(2);
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

/// Whether `nobody` can read `path` (None: no second user to try with).
fn nobody_can_read(path: &Path) -> Option<bool> {
    let (uid, gid) = nobody()?;
    let status = Command::new("cat")
        .arg(path)
        .uid(uid)
        .gid(gid)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run cat as nobody");
    Some(status.success())
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).mode() & 0o777
}

/// `bub --home <home> <args>` with `env` (and `-w <workspace>` when given).
fn bub_env(home: &Path, workspace: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> (String, String, bool) {
    let mut cmd = Command::new(bub_bin());
    cmd.arg("--home").arg(home);
    if let Some(ws) = workspace {
        cmd.arg("-w").arg(ws);
    }
    cmd.args(args).env_remove("BUB_PLUGIN_PATH").env_remove("RUST_LOG").env("BUB_HOME", home);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.stdin(Stdio::null()).output().expect("run bub");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn http_channel(home: &Home, config: Value) {
    let mut config = config;
    config["bind"] = json!("127.0.0.1:0");
    home.install("http-channel", &lib("http-channel"), config);
}

async fn post(base: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    let mut request = reqwest::Client::new().post(format!("{base}/v1/messages")).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The default HTTP channel needs a token, generated at the first
/// start into a file only the user can read; a second local user can post
/// nothing and read nothing; command mode over the channel runs nothing.
#[test]
fn the_default_http_channel_needs_a_generated_token_and_runs_no_commands() {
    let home = Home::new();
    http_channel(&home, json!({}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    let token_file = home.path().join("data/http-channel/token");
    assert_eq!(mode(&token_file), 0o600);
    assert_eq!(mode(&home.path().join("data/http-channel")), 0o700);
    let token = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();
    assert_eq!(token.len(), 64, "32 random bytes, hex: {token}");
    match nobody_can_read(&token_file) {
        Some(readable) => assert!(!readable, "another user read the token"),
        None => eprintln!("SKIPPED the second-user read: the suite does not run as root"),
    }
    runtime().block_on(async {
        let (status, body) = post(&base, None, json!({"content": "hi", "session_id": "cli:local"})).await;
        assert_eq!(status, 401, "{body}");
        let (status, _) = post(&base, Some("wrong"), json!({"content": "hi"})).await;
        assert_eq!(status, 401);
        let (status, body) = post(&base, Some(&token), json!({"content": "hello"})).await;
        assert_eq!(status, 200, "{body}");
        // Lower-case `bearer` is the same scheme (RFC 7235).
        let response = reqwest::Client::new()
            .post(format!("{base}/v1/messages"))
            .header("authorization", format!("bearer {token}"))
            .json(&json!({"content": "lower"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        // Command mode is the CLI's only, unless configured.
        let marker = home.path().join("pwned");
        let line = format!(",bash id > {}", marker.display());
        let (status, body) = post(&base, Some(&token), json!({"content": line})).await;
        assert_eq!(status, 200, "{body}");
        let reply = body["reply"].as_str().unwrap_or_default();
        assert!(reply.contains("command mode is off for channel 'http'"), "{body}");
        assert!(reply.contains("BUB_COMMAND_CHANNELS"), "{body}");
        std::thread::sleep(Duration::from_millis(200));
        assert!(!marker.exists(), "a command from the HTTP channel ran");
    });
    // The token survives a restart (it is printed only when generated).
    gateway.signal("TERM");
    gateway.wait(Duration::from_secs(20));
    assert!(gateway.log().contains("generated a token"), "{}", gateway.log());
    let mut again = GatewayProcess::start(home.path(), &[], &[]);
    let base = again.address(home.path(), "http-channel");
    runtime().block_on(async {
        let (status, body) = post(&base, Some(&token), json!({"content": "again"})).await;
        assert_eq!(status, 200, "{body}");
    });
    assert!(!again.log().contains("generated a token"), "{}", again.log());
}

/// A channel named in `BUB_COMMAND_CHANNELS` may run commands.
#[test]
fn command_channels_switch_command_mode_on_per_channel() {
    let home = Home::new();
    let (out, _, ok) = run_bub(&home, &["run", "--channel", "telegram", ",bash echo ran-it"]);
    assert!(ok);
    assert!(out.contains("command mode is off for channel 'telegram'") && !out.contains("ran-it"), "{out}");
    let (out, err, ok) = bub_env(
        home.path(),
        None,
        &["run", "--channel", "telegram", ",bash echo ran-it"],
        &[("BUB_COMMAND_CHANNELS", "cli,telegram")],
    );
    assert!(ok, "{err}");
    assert!(out.contains("ran-it"), "{out}");
    // `,help` is harmless and answers everywhere.
    let (out, _, _) = run_bub(&home, &["run", "--channel", "telegram", ",help"]);
    assert!(out.contains("Commands"), "{out}");
}

/// An empty or blank token is no token: a public bind is refused.
#[test]
fn an_empty_token_is_no_token() {
    for token in ["", "  ", "\"\""] {
        let home = Home::new();
        home.install("http-channel", &lib("http-channel"), json!({"bind": "0.0.0.0:0"}));
        let (_, err, ok) = bub_env(home.path(), None, &["gateway"], &[("BUB_HTTP_CHANNEL__TOKEN", token)]);
        assert!(!ok, "token {token:?} opened a public port");
        assert!(err.contains("refusing to listen on 0.0.0.0:0 without a token"), "{token:?}: {err}");
    }
}

/// Whatever the umask (000, 002), what bub writes
/// under `$BUB_HOME` is owner-only, and a plugin installed under umask 002
/// loads; `bub plugins list` names files others can read.
#[test]
fn files_under_bub_home_are_owner_only_whatever_the_umask() {
    for umask in ["000", "002"] {
        let scratch = tempfile::tempdir().unwrap();
        let home = scratch.path().join("home");
        let shell = |line: &str| {
            let script = format!("umask {umask}; exec \"$0\" --home \"$1\" {line}");
            let out = Command::new("sh")
                .arg("-c")
                .arg(script)
                .arg(bub_bin())
                .arg(&home)
                .env_remove("BUB_PLUGIN_PATH")
                .env("BUB_HOME", &home)
                .output()
                .unwrap();
            (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
        };
        let (_, err) = shell(&format!("plugins install {}", lib("http-channel").display()));
        assert!(err.is_empty() || !err.contains("error"), "{err}");
        let (out, err) = shell("plugins list");
        assert!(
            out.lines().any(|l| l.starts_with("http-channel") && l.contains(" loaded ")),
            "umask {umask}: {out}{err}"
        );
        let _ = shell("run hello");
        let _ = shell("run ',model openai:gpt-x'");
        let plugin = home.join("plugins/http-channel");
        for (path, want) in [
            (home.join("plugins"), 0o700),
            (plugin.clone(), 0o700),
            (plugin.join("plugin.json"), 0o600),
            (home.join("tapes"), 0o700),
        ] {
            assert_eq!(mode(&path), want, "umask {umask}: {}", path.display());
        }
        for tape in std::fs::read_dir(home.join("tapes")).unwrap().flatten() {
            assert_eq!(mode(&tape.path()), 0o600, "umask {umask}: {}", tape.path().display());
        }
        if umask == "000" {
            std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
            match nobody_can_read(&plugin.join("plugin.json")) {
                Some(readable) => assert!(!readable, "another user read a manifest"),
                None => eprintln!("SKIPPED the second-user read: the suite does not run as root"),
            }
        }
        // An existing secret others can read is reported.
        std::fs::write(home.join("config.json"), "{}").unwrap();
        std::fs::set_permissions(home.join("config.json"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let (_, err) = shell("plugins list");
        assert!(err.contains("can be read by other users") && err.contains("config.json (644)"), "{err}");
        assert!(err.contains("chmod -R go-rwx"), "{err}");
    }
}

/// `mcp.json` is trusted like `config.json`: writable by others (or
/// owned by another user) its servers are not started.
#[test]
fn an_mcp_json_others_can_write_runs_nothing() {
    let home = Home::new();
    home.install("mcp", &lib("mcp"), json!({}));
    let marker = home.path().join("server-ran");
    let file = home.path().join("mcp.json");
    let servers =
        json!({"mcpServers": {"evil": {"command": "sh", "args": ["-c", format!("touch {}", marker.display())]}}});
    std::fs::write(&file, servers.to_string()).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (_, err, _) = run_bub(&home, &["run", "hello"]);
    assert!(err.contains("refusing mcp.json") && err.contains("writable by group or others"), "{err}");
    assert!(!marker.exists(), "a server from a world-writable mcp.json ran");
    if let Some((uid, gid)) = nobody() {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        rustix::fs::chown(&file, Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(gid))).unwrap();
        let (_, err, _) = run_bub(&home, &["run", "hello"]);
        assert!(err.contains("refusing mcp.json") && err.contains(&format!("owned by uid {uid}")), "{err}");
        assert!(!marker.exists(), "a server from another user's mcp.json ran");
    } else {
        eprintln!("SKIPPED the other-owner case: the suite does not run as root");
    }
}

fn schedule_home(tick_ms: u64) -> Home {
    let home = Home::new();
    http_channel(&home, json!({"token": "t"}));
    home.install("schedule", &lib("schedule"), json!({"tick_ms": tick_ms}));
    home
}

fn jobs_file(home: &Home) -> PathBuf {
    home.path().join("data/schedule/jobs.json")
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `jobs.json` is trusted like `config.json` and never blocks the
/// gateway: writable by others it fires nothing; a FIFO is refused and the
/// gateway still stops on SIGTERM.
#[test]
fn a_jobs_json_others_can_write_or_a_fifo_fires_nothing_and_blocks_nothing() {
    let home = schedule_home(100);
    std::fs::create_dir_all(home.path().join("data/schedule")).unwrap();
    let job = json!([{"id": "j1", "session_id": "s", "message": "from a stranger", "next_run": 0.0, "created": "x"}]);
    std::fs::write(jobs_file(&home), job.to_string()).unwrap();
    std::fs::set_permissions(jobs_file(&home), std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    wait_for("the refusal", Duration::from_secs(20), || gateway.log().contains("refusing the jobs"));
    std::thread::sleep(Duration::from_millis(500));
    let log = gateway.log();
    assert!(log.contains("writable by group or others"), "{log}");
    assert!(!log.contains("fired on session"), "{log}");
    assert_eq!(log.matches("refusing the jobs").count(), 1, "logged once, not every tick: {log}");
    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(20)).is_some());

    std::fs::remove_file(jobs_file(&home)).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        jobs_file(&home),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    wait_for("the refusal", Duration::from_secs(20), || gateway.log().contains("not a regular file"));
    gateway.signal("TERM");
    let status = gateway.wait(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "the gateway did not stop: {}", gateway.log());
}

/// A client cannot route a turn's events into another client's
/// stream: `_` context keys are refused.
#[test]
fn clients_cannot_set_internal_routing_keys() {
    let home = Home::new();
    http_channel(&home, json!({"token": "t", "sessions": ["http:*", "mine"]}));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    runtime().block_on(async {
        let body = json!({"content": "hi", "stream": true, "context": {"_http_request": format!("{}-2", gateway.pid().unwrap())}});
        let (status, body) = post(&base, Some("t"), body).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"].as_str().unwrap().contains("reserved"), "{body}");
        // The sessions rule (6): a channel may keep its clients to its sessions.
        let (status, body) = post(&base, Some("t"), json!({"content": "hi", "session_id": "cli:local"})).await;
        assert_eq!(status, 403, "{body}");
        let (status, body) = post(&base, Some("t"), json!({"content": "hi", "session_id": "mine"})).await;
        assert_eq!(status, 200, "{body}");
        let (status, body) = post(&base, Some("t"), json!({"content": "hi"})).await;
        assert_eq!(status, 200, "the default http:<chat> session: {body}");
    });
}

/// With `BUB_CONFINE_WORKSPACE`, the fs tools and bash stay in the
/// workspace (paths, `..`, symbolic links; Landlock for bash where the
/// kernel has it), and a subagent cannot name another session.
#[test]
fn confinement_keeps_the_tools_in_the_workspace() {
    // Everything in a folder outside what confined bash may reach (/tmp,
    // /dev, the system folders): under the user's home when it is outside
    // them, as `~/.bub` is.
    let allowed = ["/tmp", "/var/tmp", "/dev", "/usr", "/etc", "/opt", "/proc", "/sys", "/bin", "/lib"];
    let home_dir = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h.is_dir() && !allowed.iter().any(|a| h.starts_with(a)) && h != Path::new("/"));
    let scratch = match &home_dir {
        Some(h) => tempfile::Builder::new().prefix(".bub-confine-test-").tempdir_in(h).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let (home, ws) = (scratch.path().join("home"), scratch.path().join("ws"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(scratch.path().join("outside")).unwrap();
    std::fs::write(scratch.path().join("outside/secret.txt"), "the secret").unwrap();
    std::fs::write(ws.join("mine.txt"), "my file").unwrap();
    std::os::unix::fs::symlink(scratch.path().join("outside/secret.txt"), ws.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(scratch.path().join("outside/new.txt"), ws.join("dangling.txt")).unwrap();
    let confined = [("BUB_CONFINE_WORKSPACE", "true")];
    let run = |line: &str, env: &[(&str, &str)]| bub_env(&home, Some(&ws), &["run", line], env);

    let (out, err, ok) = run(",fs.read mine.txt", &confined);
    assert!(ok && out.contains("my file"), "{out}{err}");
    let secret = scratch.path().join("outside/secret.txt");
    for line in [
        format!(",fs.read {}", secret.display()),
        ",fs.read ../outside/secret.txt".to_owned(),
        ",fs.read link.txt".to_owned(),
        ",fs.write dangling.txt content=x".to_owned(),
        format!(",bash command=\"cat secret.txt\" cwd={}", scratch.path().join("outside").display()),
    ] {
        let (out, err, _) = run(&line, &confined);
        assert!(!out.contains("the secret"), "{line}: {out}");
        assert!(err.contains("is outside the workspace"), "{line}: {err}");
    }
    assert!(!scratch.path().join("outside/new.txt").exists(), "a dangling link was written through");
    // Unconfined (the default, as in Bub), the same read works.
    let (out, _, _) = run(",fs.read link.txt", &[]);
    assert!(out.contains("the secret"), "{out}");

    // bash: Landlock keeps it from reading or writing outside.
    let probe = format!(
        ",bash cat {} ; echo written > {}/evil.txt",
        secret.display(),
        scratch.path().join("outside").display()
    );
    let (out, err, _) = run(&probe, &confined);
    if err.contains("no Landlock") {
        eprintln!("SKIPPED the bash part: this kernel has no Landlock");
    } else if home_dir.is_none() {
        eprintln!("SKIPPED the bash part: no home folder outside /tmp to keep a secret in");
    } else {
        assert!(!out.contains("the secret") && !err.contains("the secret"), "bash read outside: {out}{err}");
        assert!(!scratch.path().join("outside/evil.txt").exists(), "bash wrote outside the workspace");
        let (out, err, ok) = run(",bash echo inside > in.txt && cat in.txt", &confined);
        assert!(ok && out.contains("inside"), "{out}{err}");
    }

    // A subagent may not name another session.
    let (_, err, _) = run(",subagent prompt=hi session=cli:other", &confined);
    assert!(err.contains("another session's") && err.contains("confine_workspace"), "{err}");
}

/// `Retry-After: 1e30` (or `inf`, or ≥ 2^64 s) is clamped to the
/// retry delay cap, not a panic that empties the turn.
#[test]
fn absurd_retry_after_headers_are_clamped() {
    for value in ["1e30", "inf", "18446744073709551616"] {
        let provider = Provider::start(vec![
            Reply::Status(429, "slow down".into(), vec![("retry-after".into(), value.into())]),
            chat::text("after the wait"),
        ]);
        let home = Home::new();
        let retries = json!({"client_args": {"retry_delay": 0.01, "max_retry_delay": 0.05}});
        home.use_model("openai:m", &provider.base_url, retries);
        let (out, err, ok) = run_bub(&home, &["run", "hi"]);
        assert!(ok, "{value}: {err}");
        assert!(out.contains("after the wait"), "{value}: {out}");
        assert!(!err.contains("panicked"), "{value}: {err}");
        assert_eq!(provider.requests().len(), 2);
    }
}

/// A model's `NaN`, `inf` or `1e300` duration is an error (schedule)
/// or "very long" (bash), never a panic; a broken entry in jobs.json does
/// not stop the other jobs.
#[test]
fn hostile_durations_and_a_broken_job_stop_nothing() {
    let home = schedule_home(100);
    for when in ["every=NaN", "every=inf", "after=1e300", "after=-5"] {
        let (out, err, _) = run_bub(&home, &["run", "--session-id", "s", &format!(",schedule.add message=x {when}")]);
        assert!(!err.contains("panicked") && !out.contains("panicked"), "{when}: {err}");
        assert!(err.contains("not a duration"), "{when}: {err}");
    }
    assert!(!jobs_file(&home).exists(), "a refused job was stored");
    let (out, err, ok) = run_bub(&home, &["run", ",bash echo survived timeout_seconds=1e300"]);
    assert!(ok && out.contains("survived"), "{out}{err}");

    // A broken entry (what NaN used to store) beside a good, due job.
    std::fs::create_dir_all(home.path().join("data/schedule")).unwrap();
    let jobs = json!([
        {"id": "broken", "session_id": "s", "message": "never", "next_run": null, "created": "x"},
        {"id": "good", "session_id": "s", "message": "still fires", "next_run": 0.0, "created": "x"},
    ]);
    bub_kit::files::write_private(&jobs_file(&home), jobs.to_string().as_bytes()).unwrap();
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    wait_for("the good job", Duration::from_secs(30), || gateway.log().contains("job good fired on session s"));
    // The plugin logs the firing, then marks the one-shot job done (an
    // append to jobs.done; the list drops it at its next change).
    let done = || std::fs::read_to_string(home.path().join("data/schedule/jobs.done")).unwrap_or_default();
    wait_for("the fired job to be done", Duration::from_secs(10), || done().lines().any(|l| l == "good"));
    let (left, err, ok) = run_bub(&home, &["run", "--session-id", "s", ",schedule.list all=true"]);
    assert!(ok, "{err}");
    assert!(!left.contains("still fires"), "the fired one-shot job left the jobs: {left}");
    let ids: Vec<String> = serde_json::from_slice::<Value>(&std::fs::read(jobs_file(&home)).unwrap())
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["id"].as_str().map(str::to_owned))
        .collect();
    assert!(ids.contains(&"broken".to_owned()), "the broken entry stays for the user to fix: {ids:?}");
    assert!(gateway.log().contains("skipping job broken"), "{}", gateway.log());
}

/// A one-shot job whose turn a stopping gateway cancels stays in
/// jobs.json and fires at the next start (it used to be deleted before it
/// was handed over).
#[test]
fn a_one_shot_job_cancelled_by_a_stop_fires_again() {
    let home = schedule_home(100);
    home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 4000, "return": null}}));
    let (_, err, ok) = run_bub(&home, &["run", "--session-id", "s", ",schedule.add message=remember-me after=1s"]);
    assert!(ok, "{err}");
    let env = [("BUB_SHUTDOWN_GRACE_SECONDS", "0")];
    home.clear_trace();
    let mut gateway = GatewayProcess::start(home.path(), &[], &env);
    gateway.address(home.path(), "http-channel");
    // Handed over (its turn is in the slow load_state, 4 s), then the stop.
    wait_for("the job's turn in load_state", Duration::from_secs(30), || {
        home.trace().iter().any(|l| l.contains("load_state"))
    });
    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(30)).is_some());
    let jobs: Value = serde_json::from_slice(&std::fs::read(jobs_file(&home)).unwrap()).unwrap();
    assert_eq!(jobs.as_array().unwrap().len(), 1, "the job was lost: {}\n{}", jobs, gateway.log());
    assert!(gateway.log().contains("fires again"), "{}", gateway.log());
}

/// Ctrl-C in `bub run` mid-turn cancels it: the run is on the tape
/// (as cancelled), its shell is stopped, bub exits 130.
#[test]
fn ctrl_c_in_bub_run_keeps_the_run_on_the_tape_and_stops_its_shell() {
    let marker = format!("sleep {}.{}", 40 + std::process::id() % 10, std::process::id() % 997);
    let provider =
        Provider::start(vec![chat::tool_calls("", &[("call_1", "bash", &json!({"command": marker}).to_string())])]);
    let home = Home::new();
    home.use_model("openai:m", &provider.base_url, json!({}));
    let ws = tempfile::tempdir().unwrap();
    let mut child = Command::new(bub_bin())
        .arg("--home")
        .arg(home.path())
        .arg("-w")
        .arg(ws.path())
        .args(["run", "start a long command"])
        .env_remove("BUB_PLUGIN_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let running = |m: &str| {
        std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
            std::fs::read(p.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(m))
        })
    };
    wait_for("the shell", Duration::from_secs(30), || running(&marker) || child.try_wait().unwrap().is_some());
    assert!(child.try_wait().unwrap().is_none(), "bub exited before the signal");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("turn cancelled"), "{err}");
    wait_for("the shell to stop", Duration::from_secs(10), || !running(&marker));
    let tapes: Vec<_> = std::fs::read_dir(home.path().join("tapes")).unwrap().flatten().collect();
    let text: String = tapes.iter().map(|t| std::fs::read_to_string(t.path()).unwrap()).collect();
    assert!(text.contains("start a long command"), "the run is not on the tape: {text}");
    assert!(text.contains("\"cancelled\""), "the run is not recorded as cancelled: {text}");
}

/// A huge provider error body is cut before it is kept (message,
/// logs, tape).
#[test]
fn a_huge_provider_error_body_is_capped() {
    let body = "x".repeat(5 << 20);
    let provider = Provider::start(vec![Reply::Status(400, body, vec![])]);
    let home = Home::new();
    home.use_model("openai:m", &provider.base_url, json!({}));
    let (_, err, ok) = run_bub(&home, &["run", "hi"]);
    assert!(!ok);
    assert!(err.contains("[error body cut at 16384 bytes]"), "{}", &err[..err.len().min(400)]);
    assert!(err.len() < 200_000, "stderr kept {} bytes", err.len());
    let tape_bytes: u64 = std::fs::read_dir(home.path().join("tapes"))
        .map(|d| d.flatten().map(|e| e.metadata().unwrap().len()).sum())
        .unwrap_or(0);
    assert!(tape_bytes < 200_000, "the tape grew by {tape_bytes} bytes");
}

/// A second SIGTERM during the grace ends it at once, and every
/// accepted message is answered or saved to unprocessed.jsonl; after a
/// kill -9, the next start saves what the dead gateway had accepted.
#[test]
fn every_accepted_message_is_answered_or_saved_on_every_stop() {
    for kill in [false, true] {
        let home = Home::new();
        http_channel(&home, json!({"token": "t"}));
        home.scripted("slow", "", json!({"load_state": {"async": true, "sleep_ms": 1500, "return": null}}));
        let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
        let base = gateway.address(home.path(), "http-channel");
        let rt = runtime();
        let sent: Vec<_> = (0..12)
            .map(|i| {
                let base = base.clone();
                rt.spawn(async move {
                    post(&base, Some("t"), json!({"content": format!("m{i}"), "session_id": "one"})).await
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(2000));
        if kill {
            gateway.signal("KILL");
        } else {
            gateway.signal("TERM");
            std::thread::sleep(Duration::from_millis(200));
            gateway.signal("TERM");
        }
        let started = Instant::now();
        assert!(gateway.wait(Duration::from_secs(20)).is_some());
        let stopped = started.elapsed();
        if !kill {
            assert!(stopped < Duration::from_secs(10), "the second signal did not cut the grace short");
        }
        let answered: usize = rt.block_on(async {
            let mut n = 0;
            for s in sent {
                if let Ok((200, _)) = s.await {
                    n += 1;
                }
            }
            n
        });
        if kill {
            // The next start finds the dead gateway's journal.
            let mut next = GatewayProcess::start(home.path(), &[], &[]);
            next.address(home.path(), "http-channel");
            assert!(next.log().contains("stopped without finishing"), "{}", next.log());
        }
        let saved = std::fs::read_to_string(home.path().join("gateway/unprocessed.jsonl")).unwrap_or_default();
        let saved: Vec<&str> = saved.lines().collect();
        eprintln!("kill={kill}: stopped in {:?}; {answered} answered, {} saved", stopped, saved.len());
        assert_eq!(
            answered + saved.len(),
            12,
            "kill={kill}: {answered} answered, {} saved:\n{}",
            saved.len(),
            gateway.log()
        );
        assert_eq!(mode(&home.path().join("gateway/unprocessed.jsonl")), 0o600);
        let journals = std::fs::read_dir(home.path().join("gateway"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("journal-") && !kill)
            .count();
        assert_eq!(journals, 0, "a clean stop leaves no journal");
    }
}

/// Tape-postgres reconnects after a server restart, and a frozen
/// server fails a turn within the statement timeout instead of hanging it;
/// once it answers again, turns work again.
#[test]
fn tape_postgres_survives_a_restart_and_a_frozen_server() {
    let mut pg = match bub_tests::postgres::Postgres::start() {
        Ok(pg) => pg,
        Err(why) => return eprintln!("SKIPPED tape_postgres_survives_a_restart_and_a_frozen_server: {why}"),
    };
    let home = Home::new();
    http_channel(&home, json!({"token": "t"}));
    let store = json!({"url": pg.url(), "statement_timeout_seconds": 2, "lock_wait_seconds": 2});
    home.install("tape-postgres", &lib("tape-postgres"), store);
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    let base = gateway.address(home.path(), "http-channel");
    let rt = runtime();
    let turn = |content: &str| rt.block_on(post(&base, Some("t"), json!({"content": content, "session_id": "pg"})));

    let (status, body) = turn("before");
    assert_eq!(status, 200, "{body}");
    pg.restart().expect("restart postgres");
    let (status, body) = turn("after the restart");
    assert_eq!(status, 200, "no reconnect after the restart: {body}\n{}", gateway.log());

    pg.freeze();
    let started = Instant::now();
    let (status, body) = turn("while frozen");
    let waited = started.elapsed();
    pg.thaw();
    assert_ne!(status, 200, "{body}");
    assert!(waited < Duration::from_secs(20), "a frozen server held the turn {waited:?}");
    assert!(body.to_string().contains("did not answer"), "{body}");

    let (status, body) = turn("after the thaw");
    assert_eq!(status, 200, "{body}\n{}", gateway.log());
    let rows = pg.psql("SELECT count(*) FROM bub_tape_entries WHERE payload::text LIKE '%after the thaw%'");
    if let Some(rows) = rows {
        assert_ne!(rows.trim(), "0", "the last turn is not on the tape");
    }
}

/// A home another user could have written is refused, not half used:
/// plugins there were refused already, but tapes were still read (a
/// planted tape became history) and written. A home owned by another user,
/// or writable by others, stops every command with the reason and the fix.
#[test]
fn a_home_another_user_owns_or_can_write_is_refused() {
    let home = Home::new();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (_, err, ok) = run_bub(&home, &["run", "hello"]);
    assert!(!ok && err.contains("refusing the home") && err.contains("writable by group or others"), "{err}");
    assert!(err.contains("--home DIR"), "the fix is named: {err}");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let (_, err, ok) = run_bub(&home, &["run", "hello"]);
    assert!(ok, "its own home again: {err}");

    // Its tape folder made writable by others is refused the same.
    std::fs::set_permissions(home.path().join("tapes"), std::fs::Permissions::from_mode(0o757)).unwrap();
    let (_, err, ok) = run_bub(&home, &["run", "hello"]);
    assert!(!ok && err.contains("tapes"), "{err}");
    std::fs::set_permissions(home.path().join("tapes"), std::fs::Permissions::from_mode(0o700)).unwrap();

    let Some((uid, gid)) = nobody() else {
        eprintln!("SKIPPED the second-user part: not root, no `nobody` to own the home");
        return;
    };
    let theirs = tempfile::tempdir().unwrap();
    let shared = theirs.path().join("bub");
    std::fs::create_dir(&shared).unwrap();
    std::os::unix::fs::chown(&shared, Some(uid), Some(gid)).unwrap();
    let out = Command::new(bub_bin()).arg("--home").arg(&shared).args(["run", "hello"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("owned by uid {uid}")), "{err}");
}

/// A symbolic link at a tape's path is not followed: bub neither appends
/// to the file it names nor changes that file's mode (a link to any file
/// would otherwise be written and chmod'ed 0600, as root too).
#[test]
fn a_link_at_a_tape_path_is_refused_and_its_target_untouched() {
    let home = Home::new();
    let (_, err, ok) = run_bub(&home, &["run", "first"]);
    assert!(ok, "{err}");
    let tapes: Vec<PathBuf> = std::fs::read_dir(home.path().join("tapes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert!(!tapes.is_empty(), "the first turn wrote a tape");
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("precious.txt");
    std::fs::write(&target, "precious\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    for tape in &tapes {
        std::fs::remove_file(tape).unwrap();
        std::os::unix::fs::symlink(&target, tape).unwrap();
    }
    let (_, err, _) = run_bub(&home, &["run", "second"]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n", "the link's target was written: {err}");
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "the link's target's mode was changed");
    assert!(err.contains("symbolic link"), "the reason is said: {err}");
}
