//! Bub's Python plugins, unchanged, through the python bridge.
//! The venv holds Bub 0.6.0a3, the real PyPI plugins bub-schedule, bub-mcp
//! and bub-web-search, and the tests' own `bub-rs-probe` (every turn hook,
//! a tool, live state) and `bub-rs-courier` (a channel, the interception
//! hooks). Behaviour numbers are those of `docs/semantics.md`.

use std::{path::Path, time::Duration};

use bub_tests::{gateway::GatewayProcess, lib, python, run_bub_env, Home};
use serde_json::{json, Value};

/// A home with the bridge pointed at the venv, and echo-model when asked.
fn home_with(venv: &Path, echo: bool) -> Home {
    let home = Home::new();
    home.install("python-bridge", &lib("python-bridge"), json!({"venv": venv}));
    if echo {
        home.install("echo-model", &lib("echo-model"), json!({}));
    }
    home
}

/// Where the first trace line starting with `needle` is (it must be there).
fn position(trace: &[String], needle: &str) -> usize {
    trace.iter().position(|l| l.starts_with(needle)).unwrap_or_else(|| panic!("no {needle:?} in {trace:#?}"))
}

/// `bub` in `home`, tracing the tests' plugins into the home's trace file,
/// with no outer venv (the bridge's own `venv` setting applies).
fn bub(home: &Home, args: &[&str], env: &[(&str, &str)]) -> (String, String, bool) {
    let (home_dir, trace) = (home.path().to_str().unwrap(), home.trace_file());
    let mut all = vec![("BUB_HOME", home_dir), ("BUB_PROBE_TRACE", trace.to_str().unwrap()), ("VIRTUAL_ENV", "")];
    all.extend_from_slice(env);
    run_bub_env(home, args, &all)
}

/// Each entry point is a plugin of its own, in importlib's
/// order after the bridge, shown by name with its version; a Python
/// `tryfirst` outranks the builtin (behaviour 3, pluggy's order).
#[test]
fn python_plugins_register_as_plugins_of_their_own_with_their_markers() {
    let Some(venv) = python::venv_or_skip("python_plugins_register_as_plugins_of_their_own") else { return };
    let home = home_with(venv, false);
    let (out, err, ok) = bub(&home, &["plugins", "list", "--json"], &[]);
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).expect("json list");
    let rows = list.as_array().expect("array");
    let name = |r: &Value| r["name"].as_str().unwrap_or_default().to_owned();
    let members: Vec<String> = rows.iter().filter(|r| r["member_of"] == "python-bridge").map(name).collect();
    for expected in ["probe", "probe-module", "courier", "schedule", "mcp", "web-search"] {
        assert!(members.contains(&expected.to_owned()), "{expected} missing from {members:?}\n{err}");
    }
    let bridge_at = rows.iter().position(|r| name(r) == "python-bridge").unwrap();
    let first_member = rows.iter().position(|r| r["member_of"] == "python-bridge").unwrap();
    assert!(first_member > bridge_at, "members come right after their bridge");
    let schedule = rows.iter().find(|r| name(r) == "schedule").unwrap();
    assert_eq!(schedule["version"], "0.1.1");

    let (hooks, err, ok) = bub(&home, &["hooks", "--call-order"], &[]);
    assert!(ok, "{err}");
    let line = |hook: &str| hooks.lines().find(|l| l.starts_with(&format!("{hook}:"))).unwrap_or_default().to_owned();
    // probe's resolve_session is tryfirst: called before the builtin.
    let resolve = line("resolve_session");
    let at = |n: &str| resolve.find(n).unwrap_or_else(|| panic!("{n} not in {resolve}"));
    assert!(at("probe") < at("builtin"), "{resolve}");
    assert!(line("provide_tools").contains("schedule") && line("provide_tools").contains("mcp"), "{hooks}");
    assert!(line("register_cli_commands").contains("mcp"), "{hooks}");
    assert!(line("dispatch_outbound").contains("probe-module"), "module entry point: {hooks}");
}

/// A turn through Python hooks, sync and async, on the loop
/// thread (an async hook that never waits — the probe's `run_model` — runs
/// in one step without a task of its own, yet `current_task()` answers, as
/// inside Bub's caller task); a live object from `load_state` reaches later hooks as itself;
/// a key a hook sets in the state is seen by the next hook, and so is a
/// value a hook changed in place, as the turn's Python hooks share one
/// state dict while nothing else writes the state (behaviours 5, 9:
/// load_state merge, state shared by the turn's hooks).
#[test]
fn a_turn_runs_through_python_hooks_with_live_state() {
    let Some(venv) = python::venv_or_skip("a_turn_runs_through_python_hooks_with_live_state") else { return };
    let home = home_with(venv, false);
    let (out, err, ok) = bub(&home, &["run", "py:hello"], &[("BUB_PROBE_MODEL", "1")]);
    assert!(ok, "{err}");
    assert!(out.contains("python says: [probe] hello (count 1, loop True, task True)"), "{out}\n{err}");
    let trace = home.trace();
    let pos = |needle: &str| position(&trace, needle);
    assert!(pos("resolve_session") < pos("load_state probe:local"));
    assert!(pos("load_state") < pos("build_prompt live=Counter"), "the live object crossed as itself");
    assert!(pos("build_prompt") < pos("run_model seen=True n=1"), "a key set by build_prompt is seen");
    assert!(pos("run_model") < pos("save_state probe:local"));
    let save = &trace[pos("save_state probe:local")];
    assert!(save.ends_with("notes=['build_prompt', 'run_model']"), "run_model's in-place append is seen: {save}");
    assert!(pos("save_state") < pos("dispatch_outbound"));
}

/// A Python exception is the plugin's error, its traceback in
/// the log; the host stays up, runs `save_state` (behaviour 7, finally)
/// and tells `on_error` observers (behaviour 13) with a `BubError`.
#[test]
fn a_python_exception_is_the_plugins_error_with_its_traceback_in_the_log() {
    let Some(venv) = python::venv_or_skip("a_python_exception_is_the_plugins_error") else { return };
    let home = home_with(venv, false);
    let (_, err, ok) = bub(&home, &["run", "py:boom"], &[("BUB_PROBE_MODEL", "1")]);
    assert!(!ok);
    assert!(err.contains("plugin 'probe' failed in hook 'run_model'"), "{err}");
    assert!(err.contains("ValueError: probe exploded on purpose"), "{err}");
    assert!(err.contains("Traceback (most recent call last)") && err.contains("bub_rs_probe/plugin.py"), "{err}");
    let trace = home.trace();
    assert!(trace.iter().any(|l| l.starts_with("save_state probe:local output=''")), "{trace:#?}");
    assert!(
        trace.iter().any(|l| l.starts_with("on_error turn BubError") && l.contains("probe exploded")),
        "{trace:#?}"
    );
}

/// Tools registered with `bub.tool` run with their
/// `ToolContext` (the live state object, the tape's name), the real
/// bub-schedule and bub-mcp tools included; the courier's
/// `before_tool_call`/`after_tool_call` see the call (behaviours of the
/// interception wiring, semantics §A3).
#[test]
fn python_tools_run_with_their_context_and_live_state() {
    let Some(venv) = python::venv_or_skip("python_tools_run_with_their_context_and_live_state") else { return };
    let home = home_with(venv, false);
    let (out, err, ok) = bub(&home, &["run", ",probe.echo text=hi"], &[]);
    assert!(ok, "{err}");
    assert!(out.contains("echo hi (counter 1, tape "), "{out}\n{err}");
    let trace = home.trace();
    assert!(trace.iter().any(|l| l == "before_tool_call probe.echo {'text': 'hi'}"), "{trace:#?}");
    assert!(trace.iter().any(|l| l == "after_tool_call probe.echo"), "{trace:#?}");
    let (out, err, ok) = bub(&home, &["run", ",schedule.list"], &[]);
    assert!(ok && out.contains("(no scheduled jobs)"), "{out}\n{err}");
    let (out, err, ok) = bub(&home, &["run", ",mcp"], &[]);
    assert!(ok && out.contains("No MCP servers configured."), "{out}\n{err}");
}

/// `register_cli_commands` hands Python a Typer app; what it
/// adds (bub-mcp's `mcp` group) becomes a `bub` subcommand that parses its
/// own arguments.
#[test]
fn a_python_typer_app_becomes_a_bub_subcommand() {
    let Some(venv) = python::venv_or_skip("a_python_typer_app_becomes_a_bub_subcommand") else { return };
    let home = home_with(venv, false);
    let (help, err, ok) = bub(&home, &["--help"], &[]);
    assert!(ok, "{err}");
    assert!(help.lines().any(|l| l.trim_start().starts_with("mcp") && l.contains("Manage MCP servers")), "{help}");
    let (out, err, ok) = bub(&home, &["mcp", "--help"], &[]);
    assert!(ok, "{err}");
    assert!(out.contains("list") && out.contains("add") && out.contains("remove"), "{out}");
    let (out, err, ok) = bub(&home, &["mcp", "list"], &[]);
    assert!(ok, "{err}");
    assert!(out.contains("No MCP tools registered."), "{out}");
    let (_, err, ok) = bub(&home, &["mcp", "no-such-command"], &[]);
    assert!(!ok, "a Typer usage error exits non-zero: {err}");
}

/// Under `bub gateway`, a Python channel starts, hands a
/// message to the host's message handler from a task on the loop (a
/// foreign thread for the host), gets the turn's outbound in `send`, and
/// stops when the gateway stops (behaviours of the channel contract).
#[test]
fn a_python_channel_carries_a_turn_through_the_gateway() {
    let Some(venv) = python::venv_or_skip("a_python_channel_carries_a_turn_through_the_gateway") else { return };
    let home = home_with(venv, true);
    let trace = home.trace_file();
    let trace = trace.to_str().unwrap();
    let mut gateway = GatewayProcess::start(
        home.path(),
        &[],
        &[("BUB_COURIER_MESSAGE", "hello courier"), ("BUB_PROBE_TRACE", trace), ("VIRTUAL_ENV", "")],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !home.trace().iter().any(|l| l.starts_with("courier.send")) {
        assert!(std::time::Instant::now() < deadline, "no reply reached the courier:\n{}", gateway.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(30)).is_some_and(|s| s.success()), "{}", gateway.log());
    let lines = home.trace();
    assert!(lines.iter().any(|l| l == "courier.start"), "{lines:#?}");
    // echo-model answers with the prompt: the channel context, then the text.
    let text = lines.join("\n");
    let sent = text.find("courier.send echo: channel=$courier|chat_id=1").expect("the reply was sent to the courier");
    assert!(text[sent..].contains("hello courier"), "{text}");
    assert!(lines.iter().any(|l| l == "courier.stop"), "{lines:#?}\n{}", gateway.log());
}

/// `bub plugins install --python <requirement>` makes the
/// bridge's venv when it is missing (owner-only, inside `$BUB_HOME`),
/// installs the requirement with pip (or uv) and shows its plugins, which
/// `bub plugins list` marks as Python plugins. The plugin here has no
/// dependencies and marks its hookimpl by hand (pluggy's `bub_impl`
/// attribute), so only its build backend comes from PyPI.
#[test]
fn plugins_install_python_installs_into_the_bridges_venv_and_shows_the_plugin() {
    let Some(_) = python::venv_or_skip("plugins_install_python_installs_into_the_bridges_venv") else { return };
    let home = Home::new();
    let venv = home.path().join("python").join("venv");
    // An interpreter of another `major.minor` than the bridge links: the
    // venv it makes is refused and removed, nothing installed into it.
    let other = ["/usr/bin/python3.11", "/usr/bin/python3.13", "/usr/bin/python3.10"]
        .into_iter()
        .find(|p| Path::new(p).exists() && !python::python().contains(&p[9..]));
    if let Some(other) = other {
        home.install("python-bridge", &lib("python-bridge"), json!({"python": other}));
        let (out, err, ok) = bub(&home, &["plugins", "install", "--python", "tiny-plugin"], &[]);
        assert!(!ok && err.contains("but the python bridge links Python"), "{out}\n{err}");
        assert!(!venv.exists(), "the venv of the wrong Python was removed");
    }
    // No `python` setting: the venv is made with the Python the bridge links.
    home.install("python-bridge", &lib("python-bridge"), json!({}));
    let package = home.path().join("tiny-src");
    std::fs::create_dir_all(package.join("tiny_plugin")).unwrap();
    std::fs::write(
        package.join("pyproject.toml"),
        "[build-system]\nrequires = [\"flit_core>=3.9,<4\"]\nbuild-backend = \"flit_core.buildapi\"\n\n[project]\n\
         name = \"tiny-plugin\"\nversion = \"0.2.0\"\ndescription = \"tiny\"\n\n[project.entry-points.bub]\n\
         tiny = \"tiny_plugin\"\n",
    )
    .unwrap();
    std::fs::write(
        package.join("tiny_plugin/__init__.py"),
        "\"\"\"tiny\"\"\"\n\ndef resolve_session(message):\n    return 'tiny:' + message.get('chat_id', '')\n\n\
         resolve_session.bub_impl = {'tryfirst': True}\n",
    )
    .unwrap();
    let (out, err, ok) = bub(&home, &["plugins", "install", "--python", package.to_str().unwrap()], &[]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("python plugin tiny 0.2.0 (loaded)"), "{out}\n{err}");
    assert!(venv.join("pyvenv.cfg").exists());
    // Beside it, in the same run, the Bub release the bridge follows (pip
    // alone would pick the last stable bub for a plugin's unpinned `bub`).
    let bub_version = std::process::Command::new(venv.join("bin/python"))
        .args(["-c", "import importlib.metadata as m; print(m.version('bub'))"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&bub_version.stdout).trim(), "0.6.0a3", "{err}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(venv.join("pyvenv.cfg")).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the venv is owner-only: {mode:o}");
    let mode = std::fs::metadata(&venv).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the venv's folder is owner-only: {mode:o}");
    // One installer run: no `ensurepip` made a pip inside the venv first.
    assert!(!venv.join("bin/pip").exists(), "the venv was made with a pip of its own (a second installer run)");
    assert!(!err.contains("group or others"), "a warning about the venv's modes: {err}");
    let (list, _, _) = bub(&home, &["plugins", "list"], &[]);
    let row = list.lines().find(|l| l.starts_with("tiny ")).unwrap_or_else(|| panic!("{list}"));
    assert!(row.contains("(python, via python-bridge)"), "{row}");
    // A hand-marked tryfirst implementation is called before the builtin.
    let (order, err, ok) = bub(&home, &["hooks", "--call-order"], &[]);
    assert!(ok, "{err}");
    assert!(order.contains("resolve_session: tiny [tryfirst, async] -> builtin"), "{order}");
}

/// The interception hooks see Bub's own dataclasses and their
/// decisions act as under Bub: `ToolCallDecision.proceed(arguments)`
/// rewrites the call, `replace` answers for the tool, `deny` fails it with
/// the message; `LLMCallDecision.finish` answers without calling the
/// provider (semantics §H6.3).
#[test]
fn python_interception_decisions_act_as_under_bub() {
    let Some(venv) = python::venv_or_skip("python_interception_decisions_act_as_under_bub") else { return };
    let home = home_with(venv, false);
    let (out, err, ok) = bub(&home, &["run", ",probe.echo text=rewrite"], &[]);
    assert!(ok && out.contains("echo rewritten (counter"), "{out}\n{err}");
    let (out, err, ok) = bub(&home, &["run", ",probe.echo text=replace"], &[]);
    assert!(ok && out.contains("replaced by the courier"), "{out}\n{err}");
    let (out, err, _) = bub(&home, &["run", ",probe.echo text=forbidden"], &[]);
    assert!(format!("{out}{err}").contains("courier says no"), "{out}\n{err}");
    // The model call itself: finished by the courier, the provider (an
    // address nothing listens on) never asked.
    home.use_model("openai:gpt-test", "http://127.0.0.1:9", json!({}));
    let (out, err, ok) = bub(&home, &["run", "hello"], &[("BUB_COURIER_FINISH", "finished by python")]);
    assert!(ok, "{err}");
    assert!(out.contains("finished by python"), "{out}\n{err}");
    assert!(home.trace().iter().any(|l| l == "before_llm_call openai:gpt-test"), "{:#?}", home.trace());
}

/// App hooks with their objects. A Python tape store (Bub's sync
/// `TapeStore` protocol) takes the turn's entries and answers queries
/// (behaviour of `provide_tape_store`: the last registered wins); a Python
/// lifespan (an async generator) is entered and exited around the scope;
/// a Python `run_model_stream` (an async generator of `StreamEvent`s)
/// answers the turn.
#[test]
fn python_resources_serve_the_host() {
    let Some(venv) = python::venv_or_skip("python_resources_serve_the_host") else { return };
    let home = home_with(venv, false);
    let env = [("BUB_COURIER_LIFESPAN", "1"), ("BUB_COURIER_STREAM", "1")];
    let (out, err, ok) = bub(&home, &["run", "--session-id", "s1", "needle in a haystack"], &env);
    assert!(ok, "{err}");
    assert!(out.contains("streamed:") && out.contains("a haystack"), "{out}\n{err}");
    let trace = home.trace();
    let pos = |needle: &str| trace.iter().position(|l| l.starts_with(needle));
    assert!(pos("lifespan.enter").is_some() && pos("lifespan.exit") > pos("lifespan.enter"), "{trace:#?}");
    // The agent's entries (command mode) go to the Python store, and a
    // later process reads them back through it.
    let env = [("BUB_COURIER_STORE", "1")];
    let (out, err, ok) = bub(&home, &["run", "--session-id", "s1", ",probe.echo text=needle"], &env);
    assert!(ok && out.contains("echo needle"), "{out}\n{err}");
    assert!(home.trace().iter().any(|l| l.starts_with("store.append")), "{:#?}", home.trace());
    assert!(std::fs::read_to_string(home.path().join("courier-tapes.json")).unwrap().contains("needle"));
    let (out, err, ok) = bub(&home, &["run", "--session-id", "s1", ",tape.search query=needle"], &env);
    assert!(ok, "{err}");
    assert!(out.contains("needle"), "{out}\n{err}");
}

/// Cancellation crosses the bridge. A Python hook that hangs is
/// cancelled by the host's hook deadline (`BUB_HOOK_TIMEOUT_SECONDS`): the
/// turn fails with the deadline's message, the Python task sees
/// `CancelledError`, and the hooks after it still run on the same loop
/// (no deadlock).
#[test]
fn a_hanging_python_hook_is_cancelled_by_the_hosts_deadline() {
    let Some(venv) = python::venv_or_skip("a_hanging_python_hook_is_cancelled_by_the_hosts_deadline") else { return };
    let home = home_with(venv, false);
    let started = std::time::Instant::now();
    let (_, err, ok) = bub(&home, &["run", "py:hang"], &[("BUB_HOOK_TIMEOUT_SECONDS", "1")]);
    assert!(!ok);
    assert!(started.elapsed() < Duration::from_secs(30), "the deadline stopped the hang");
    assert!(
        err.contains("plugin 'probe' failed in hook 'load_state': did not finish within 1s and was cancelled"),
        "{err}"
    );
    let trace = home.trace();
    let cancelled = trace.iter().position(|l| l == "load_state cancelled").unwrap_or_else(|| panic!("{trace:#?}"));
    // on_error runs after it, on the same loop: nothing is stuck.
    let told = trace.iter().position(|l| l.starts_with("on_error")).unwrap_or_else(|| panic!("{trace:#?}"));
    assert!(cancelled < told, "{trace:#?}");
}

/// `bub chat` with Python plugins: the probe's `build_prompt`
/// (async, on the loop thread) shapes every chat turn's prompt, which
/// echo-model answers; `,quit` ends the chat.
#[test]
fn bub_chat_runs_python_hooks_on_every_turn() {
    let Some(venv) = python::venv_or_skip("bub_chat_runs_python_hooks_on_every_turn") else { return };
    let home = home_with(venv, true);
    let mut term = super::chat::Terminal::open(&home);
    term.send("py:first\r");
    let at = term.expect(0, "[probe] first");
    term.send("py:second\r");
    term.expect(at, "[probe] second");
    term.send(",quit\r");
    assert!(term.wait().success());
}

/// The real bub-schedule from PyPI under `bub gateway`. Its
/// `schedule.add` works only while its scheduler runs (under Python Bub
/// too: `bub run ",schedule.add …"` fails in both with `'Job' object has no
/// attribute 'next_run_time'`), so the courier channel sends the command
/// inside the gateway; the job fires in the scheduler on the loop thread,
/// its `framework.process_inbound` (the facade) runs a turn of the
/// courier's session, whose model call the courier finishes, and the
/// answer goes back out through the courier.
#[test]
fn a_bub_schedule_job_fires_a_turn_through_the_gateway() {
    let Some(venv) = python::venv_or_skip("a_bub_schedule_job_fires_a_turn_through_the_gateway") else { return };
    let home = home_with(venv, false);
    home.use_model("openai:gpt-test", "http://127.0.0.1:9", json!({}));
    let trace = home.trace_file();
    let env = [
        ("BUB_PROBE_TRACE", trace.to_str().unwrap()),
        ("VIRTUAL_ENV", ""),
        ("BUB_COMMAND_CHANNELS", "courier"),
        ("BUB_COURIER_MESSAGE", ",schedule.add after_seconds=2 message=ping-from-schedule"),
        ("BUB_COURIER_FINISH", "answered the reminder"),
    ];
    let mut gateway = GatewayProcess::start(home.path(), &[], &env);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !home.trace().iter().any(|l| l == "courier.send answered the reminder") {
        assert!(std::time::Instant::now() < deadline, "the job did not fire:\n{:#?}\n{}", home.trace(), gateway.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(30)).is_some_and(|s| s.success()), "{}", gateway.log());
    let lines = home.trace();
    // The tool's own renderer wrote the command's answer.
    let added = lines.iter().position(|l| l.starts_with("courier.send scheduled: ") && l.contains(" next="));
    let asked = lines.iter().position(|l| l == "before_llm_call openai:gpt-test");
    assert!(added.is_some() && asked > added, "the job was added, then its turn asked the model: {lines:#?}");
    assert!(home.path().join("jobs.json").exists(), "bub-schedule keeps its jobs in the home");
}

/// The python bridge isolated. The bridge is a plugin
/// set; in a process of its own every Python plugin behind it is still a
/// plugin of its own (listed by name, with its markers), and a turn runs
/// through their hooks with the live state as in process. The probe reads
/// its settings from the environment, so they are named in `isolated.env`.
#[test]
fn the_python_bridge_runs_isolated_with_its_plugins_behind_it() {
    let Some(venv) = python::venv_or_skip("the_python_bridge_runs_isolated") else { return };
    let home = home_with(venv, false);
    home.isolate("python-bridge", json!({"enabled": true, "env": ["BUB_PROBE_TRACE", "BUB_PROBE_MODEL"]}));
    let (out, err, ok) = bub(&home, &["plugins", "list", "--json"], &[]);
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).expect("json list");
    let rows = list.as_array().expect("array");
    let bridge = rows.iter().find(|r| r["name"] == "python-bridge").unwrap();
    assert_eq!(bridge["isolated"], true, "{bridge}");
    let members: Vec<&str> =
        rows.iter().filter(|r| r["member_of"] == "python-bridge").filter_map(|r| r["name"].as_str()).collect();
    for expected in ["probe", "courier", "schedule"] {
        assert!(members.contains(&expected), "{expected} missing from {members:?}\n{err}");
    }
    let (out, err, ok) = bub(&home, &["run", "py:hello"], &[("BUB_PROBE_MODEL", "1")]);
    assert!(ok, "{err}");
    assert!(out.contains("python says: [probe] hello (count 1, loop True, task True)"), "{out}\n{err}");
    let trace = home.trace();
    let pos = |needle: &str| position(&trace, needle);
    assert!(pos("load_state") < pos("build_prompt live=Counter"), "the live object crossed as itself: {trace:#?}");
    assert!(pos("build_prompt") < pos("run_model seen=True n=1"));
}

/// A Python `run_model` that hands three messages back to the host in
/// every turn (each of which is a turn that hands back three more) cannot
/// grow the gateway without end: past `BUB_MAX_SESSION_QUEUE` the handler
/// refuses, the plugin's `process_inbound` raises with the reason and the
/// setting, the log says so, and the gateway stays small and stops when
/// asked.
#[test]
fn messages_born_inside_turns_are_bounded_by_the_session_queue() {
    let Some(venv) = python::venv_or_skip("messages_born_inside_turns_are_bounded_by_the_session_queue") else {
        return;
    };
    let home = home_with(venv, false);
    let mut gateway = flooding_gateway(&home, ("BUB_MAX_SESSION_QUEUE", "20"));
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !home.trace().iter().any(|l| l.starts_with("flood refused")) {
        assert!(std::time::Instant::now() < deadline, "nothing was refused:\n{}", gateway.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let it run on: the backlog stays at its bound.
    std::thread::sleep(Duration::from_secs(3));
    let rss_kb = gateway.rss_kb();
    let refused = home.trace().into_iter().find(|l| l.starts_with("flood refused")).unwrap();
    assert!(refused.contains("BUB_MAX_SESSION_QUEUE=20") && refused.contains("send it again later"), "{refused}");
    gateway.signal("TERM");
    let status = gateway.wait(Duration::from_secs(60));
    let log = gateway.log();
    assert!(status.is_some_and(|s| s.success()), "{log}");
    assert!(log.contains("refusing a message") && log.contains("BUB_MAX_SESSION_QUEUE"), "{log}");
    assert!(rss_kb < 400_000, "the gateway grew to {rss_kb} kB");
}

/// A Python hook that blocks the loop (`time.sleep` inside an `async def`
/// hook) is cut off at the hook deadline and named; other sessions'
/// messages wait for the loop instead of being dropped, and are answered.
#[test]
fn a_python_hook_that_blocks_the_loop_is_cut_off_named_and_others_wait() {
    let Some(venv) = python::venv_or_skip("a_python_hook_that_blocks_the_loop_is_cut_off_named_and_others_wait") else {
        return;
    };
    blocking_hook_is_cut_off(venv, false);
}

/// The same with the bridge isolated in a process of its own.
#[test]
fn a_python_hook_that_blocks_the_loop_of_an_isolated_bridge_is_cut_off_and_others_wait() {
    let name = "a_python_hook_that_blocks_the_loop_of_an_isolated_bridge_is_cut_off_and_others_wait";
    let Some(venv) = python::venv_or_skip(name) else { return };
    blocking_hook_is_cut_off(venv, true);
}

fn blocking_hook_is_cut_off(venv: &Path, isolated: bool) {
    let home = home_with(venv, true);
    if isolated {
        let env = ["BUB_PROBE_TRACE", "BUB_PROBE_BLOCK_SECONDS", "BUB_HOOK_TIMEOUT_SECONDS"];
        home.isolate("python-bridge", json!({"enabled": true, "env": env}));
    }
    home.install("http-channel", &lib("http-channel"), json!({"bind": "127.0.0.1:0", "token": "t"}));
    let trace = home.trace_file();
    let mut gateway = GatewayProcess::start(
        home.path(),
        &[],
        &[
            ("BUB_PROBE_TRACE", trace.to_str().unwrap()),
            ("BUB_HOOK_TIMEOUT_SECONDS", "3"),
            ("BUB_PROBE_BLOCK_SECONDS", "12"),
            ("VIRTUAL_ENV", ""),
        ],
    );
    let base = gateway.address(home.path(), "http-channel");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let post = |content: &'static str, session: &'static str| {
        let base = base.clone();
        async move {
            let started = std::time::Instant::now();
            let response = reqwest::Client::new()
                .post(format!("{base}/v1/messages"))
                .bearer_auth("t")
                .json(&json!({"content": content, "session_id": session}))
                .send()
                .await
                .expect("request");
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or(Value::Null), started.elapsed())
        }
    };
    let (blocked, others) = rt.block_on(async {
        let blocked = tokio::spawn(post("py:block the loop", "a"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let others = futures_util::future::join_all((0..3).map(|i| {
            let session = ["b", "c", "d"][i];
            tokio::spawn(post("py:hello", session))
        }))
        .await;
        (blocked.await.unwrap(), others.into_iter().map(Result::unwrap).collect::<Vec<_>>())
    });
    let log = gateway.log();
    let (status, body, took) = blocked;
    eprintln!("isolated={isolated} blocked: {status} {body} {took:?}");
    for (status, body, took) in &others {
        eprintln!("isolated={isolated} other: {status} {body} {took:?}");
    }
    // The blocking hook itself is cut off at its deadline and named.
    assert_eq!(status, 500, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("plugin 'probe' failed in hook 'build_prompt': did not finish within 3s"),
        "the blocking hook is named, with its deadline: {body}\n{log}"
    );
    // Within the deadline and a second: its on_error observers, which wait
    // for the same held loop, are told apart, and the reply does not wait
    // for the gateway's admissions (with slack for a loaded machine).
    assert!(took < Duration::from_secs(3 + 1 + 2), "the failure came after {took:?}\n{log}");
    for (status, body, _) in &others {
        assert_eq!(*status, 200, "another session was not answered: {body}\n{log}");
    }
    // Only the blocking plugin is named: a call that only waited for the
    // held loop says it was held up, and by whom; no other plugin's call
    // fails at its deadline as if it had been the one.
    let blamed: Vec<&str> =
        log.lines().filter(|l| l.contains("did not finish within") && !l.contains("build_prompt")).collect();
    assert!(blamed.is_empty(), "an innocent call blamed: {blamed:#?}\n{log}");
    if isolated {
        // Its process is ended at the deadline, and starts again for the others.
        assert!(log.contains("its process is ended and starts again at the next call"), "{log}");
    } else {
        assert!(
            log.contains("held up: it waited") && log.contains("which plugin 'probe' hook 'build_prompt' has held"),
            "the holder is named: {log}"
        );
    }
    println!(
        "FAULT python time.sleep(12) in an async hook, deadline 3 s, isolated={isolated}: the failure at {:.1} s, the \
         hook named, {} of 3 other messages answered (after {:.1} s), 0 dropped",
        took.as_secs_f64(),
        others.iter().filter(|o| o.0 == 200).count(),
        others.iter().map(|o| o.2.as_secs_f64()).fold(0.0, f64::max)
    );
    let runner_pids = runners_of(&home);
    gateway.signal("TERM");
    gateway.wait(Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(500));
    let left = runners_of(&home);
    assert!(left.is_empty(), "isolated processes outlived the gateway: {left:?} (ran: {runner_pids:?})");
}

/// The processes (isolated plugins' and what they started) that have a
/// library of `home` mapped, this test process aside.
fn runners_of(home: &Home) -> Vec<u32> {
    let needle = home.path().join("plugins").display().to_string();
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(&needle)))
        .collect()
}

/// `os._exit()` in a Python hook ends the process without a signal or an
/// exit handler; the next run names the plugin and the hook all the same,
/// as it names a segfault.
#[test]
fn os_exit_in_a_python_hook_is_named_by_the_next_run() {
    let Some(venv) = python::venv_or_skip("os_exit_in_a_python_hook_is_named_by_the_next_run") else { return };
    let home = home_with(venv, true);
    let (_, err, ok) = bub(&home, &["run", "py:exit the process"], &[]);
    assert!(!ok, "the process ended: {err}");
    let (_, err, _) = bub(&home, &["run", "hello"], &[]);
    assert!(
        err.contains("the last bub run ended the process (os._exit(7)) in plugin 'probe' (in hook 'build_prompt')"),
        "{err}"
    );
}

/// A gateway whose courier channel starts a turn in which the probe's
/// `run_model` hands three messages back, as every turn they start does,
/// under the bound `bound`.
fn flooding_gateway(home: &Home, bound: (&str, &str)) -> GatewayProcess {
    let trace = home.trace_file();
    let env = [
        ("BUB_COURIER_MESSAGE", "py:start"),
        ("BUB_PROBE_TRACE", trace.to_str().unwrap()),
        ("BUB_PROBE_MODEL", "1"),
        ("BUB_PROBE_FLOOD", "3"),
        bound,
        ("VIRTUAL_ENV", ""),
    ];
    GatewayProcess::start(home.path(), &[], &env)
}

/// The same flood with a depth bound: each message handed back from inside
/// a turn is one deeper than that turn's, and past `BUB_MAX_INBOUND_DEPTH`
/// it is refused, so the cascade ends by itself (1 + 3 + 9 turns at depth
/// 2) instead of running for ever.
#[test]
fn messages_born_inside_turns_nest_at_most_the_depth_bound() {
    let Some(venv) = python::venv_or_skip("messages_born_inside_turns_nest_at_most_the_depth_bound") else {
        return;
    };
    let home = home_with(venv, false);
    let mut gateway = flooding_gateway(&home, ("BUB_MAX_INBOUND_DEPTH", "2"));
    let turns = |home: &Home| home.trace().iter().filter(|l| l.starts_with("flood turn")).count();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    // Settled: 13 turns, and nothing more for a while.
    loop {
        let before = turns(&home);
        std::thread::sleep(Duration::from_secs(2));
        if before == 13 && turns(&home) == 13 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{} turns so far:\n{}", turns(&home), gateway.log());
    }
    let lines = home.trace();
    let deepest = lines.iter().filter_map(|l| l.strip_prefix("flood turn depth=")).max();
    assert_eq!(deepest, Some("2"), "{lines:#?}");
    let refused: Vec<&String> = lines.iter().filter(|l| l.starts_with("flood refused")).collect();
    assert_eq!(refused.len(), 27, "the 27 messages of depth 3 are refused: {refused:#?}");
    assert!(refused[0].contains("3 turns deep (BUB_MAX_INBOUND_DEPTH=2)"), "{}", refused[0]);
    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(60)).is_some_and(|s| s.success()), "{}", gateway.log());
}

/// A venv whose `bub` is of another release line (pip's pick for a plugin's
/// unpinned `bub` is the last stable one, 0.5.1) is refused when the bridge
/// loads, with the command that fixes it, instead of loading plugins whose
/// every tool call then fails.
#[test]
fn a_venv_with_another_bub_release_is_refused_with_the_fix() {
    let Some(_) = python::venv_or_skip("a_venv_with_another_bub_release_is_refused_with_the_fix") else { return };
    let home = Home::new();
    let venv = home.path().join("old-venv");
    let made =
        std::process::Command::new(python::python()).args(["-m", "venv", "--without-pip"]).arg(&venv).status().unwrap();
    assert!(made.success());
    let site = std::fs::read_dir(venv.join("lib")).unwrap().next().unwrap().unwrap().path().join("site-packages");
    let dist = site.join("bub-0.5.1.dist-info");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(dist.join("METADATA"), "Metadata-Version: 2.1\nName: bub\nVersion: 0.5.1\n").unwrap();
    home.install("python-bridge", &lib("python-bridge"), json!({"venv": venv}));
    let (out, err, _) = bub(&home, &["plugins", "list"], &[]);
    let text = format!("{out}\n{err}");
    assert!(text.contains("holds bub 0.5.1, but this bridge runs plugins of Bub 0.6.0a3"), "{text}");
    assert!(text.contains("bub[app]==0.6.0a3"), "the fix is named: {text}");
}

/// A SearXNG-shaped search server on loopback: answers `GET /search` with
/// one result and records the query strings it got.
fn searxng_stub() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
            }
            log.lock().unwrap().push(line.trim().to_owned());
            let body = json!({"results": [{"title": "Bub, the hook framework", "url": "https://example.invalid/bub",
                "content": "grows everything from hooks", "engine": "stub", "category": "general"}]})
            .to_string();
            let mut out = stream;
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (base, seen)
}

/// A published plugin's settings through `bub.ensure_config`
/// (bub-web-search 0.1.1 registers `web.search` only when its section names
/// a provider): the section of `$BUB_HOME/config.json` is read, as Bub
/// reads its config file, and the tool searches the configured server.
#[test]
fn python_plugins_read_their_config_json_section_through_bub_configure() {
    let Some(venv) = python::venv_or_skip("python_plugins_read_their_config_json_section_through_bub_configure") else {
        return;
    };
    let home = home_with(venv, false);
    let (base, seen) = searxng_stub();
    let config = json!({"web-search": {"provider": "searxng", "searxng_base_url": base}});
    let config_file = home.path().join("config.json");
    std::fs::write(&config_file, config.to_string()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&config_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (out, err, ok) = bub(&home, &["run", ",web.search query=bub"], &[]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("Bub, the hook framework"), "the tool searched the configured server: {out}\n{err}");
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().any(|l| l.starts_with("GET /search?q=bub")), "{seen:?}");
}

/// What the framework facade lacks of Bub's `BubFramework` says so by name
/// (NotImplementedError), a method when called and an attribute when read;
/// what Bub's framework does not have either stays an AttributeError.
#[test]
fn the_framework_facade_names_what_it_does_not_provide() {
    let Some(venv) = python::venv_or_skip("the_framework_facade_names_what_it_does_not_provide") else { return };
    let home = home_with(venv, true);
    for name in ["get_tape_store", "_tape_store", "no_such_thing"] {
        let (_, err, ok) = bub(&home, &["run", &format!("py:framework {name}")], &[]);
        assert!(ok, "{err}");
    }
    let trace = home.trace().join("\n");
    assert!(
        trace.contains("framework.get_tape_store: NotImplementedError: BubFramework.get_tape_store is not provided"),
        "{trace}"
    );
    assert!(trace.contains("framework._tape_store: NotImplementedError: BubFramework._tape_store"), "{trace}");
    assert!(trace.contains("framework.no_such_thing: AttributeError"), "{trace}");
}

/// A Python channel's `ChannelMessage` crosses field by field, as
/// bub-discord and bub-feishu build theirs: its typing `lifespan` stays a
/// live object, entered before the turn's `load_state` and exited after
/// its `save_state`; a medium with only a `data_fetcher` reaches the model
/// as a data URL; a medium with no source is left out, never sent as an
/// empty URL.
#[test]
fn a_channel_message_with_a_lifespan_and_fetched_media_runs_its_turn() {
    let Some(venv) = python::venv_or_skip("a_channel_message_with_a_lifespan_and_fetched_media_runs_its_turn") else {
        return;
    };
    let home = home_with(venv, false);
    let provider = bub_tests::provider::Provider::start(vec![bub_tests::provider::chat::text("a pixel")]);
    home.use_model("openai:gpt-test", &provider.base_url, json!({"api_format": "chat"}));
    let trace = home.trace_file();
    let env = [
        ("BUB_PROBE_TRACE", trace.to_str().unwrap()),
        ("VIRTUAL_ENV", ""),
        ("BUB_COURIER_MESSAGE", "what is this?"),
        ("BUB_COURIER_AS", "channel_message"),
    ];
    let mut gateway = GatewayProcess::start(home.path(), &[], &env);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !home.trace().iter().any(|l| l.starts_with("typing.exit")) {
        assert!(std::time::Instant::now() < deadline, "the turn did not end:\n{:#?}\n{}", home.trace(), gateway.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    gateway.signal("TERM");
    assert!(gateway.wait(Duration::from_secs(30)).is_some_and(|s| s.success()), "{}", gateway.log());
    let lines = home.trace();
    let pos = |needle: &str| position(&lines, needle);
    assert!(pos("media.fetched") < pos("load_state"), "{lines:#?}");
    assert!(pos("typing.enter") < pos("load_state"), "{lines:#?}");
    assert!(pos("save_state") < pos("typing.exit None"), "{lines:#?}");
    assert!(pos("courier.send a pixel") < pos("typing.exit None"), "{lines:#?}");
    let requests = provider.requests();
    let user = requests[0].body["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "user").cloned();
    let parts = user.as_ref().and_then(|u| u["content"].as_array()).cloned().unwrap_or_default();
    let images: Vec<&Value> = parts.iter().filter(|p| p["type"] == "image_url").collect();
    assert_eq!(images.len(), 1, "one image, the fetched one: {user:?}");
    let url = images[0]["image_url"]["url"].as_str().unwrap_or_default();
    assert!(url.starts_with("data:image/png;base64,iVBORw0KGgo"), "{url}");
    assert!(gateway.log().contains("has no url and no data"), "the medium left out is logged:\n{}", gateway.log());
}

/// `bub onboard` runs a Python plugin's `onboard_config` off the loop
/// thread: Bub's prompts (`bub.inquirer`, on textual) run an event loop of
/// their own with `asyncio.run`, which a running loop's thread refuses.
/// What it returns is saved in `config.json`, where Python plugins read
/// their sections (`bub.configure`).
#[test]
fn onboarding_a_python_plugin_may_run_an_event_loop_of_its_own() {
    let Some(venv) = python::venv_or_skip("onboarding_a_python_plugin_may_run_an_event_loop_of_its_own") else {
        return;
    };
    let home = home_with(venv, false);
    let (out, err, ok) = bub(&home, &["onboard", "courier"], &[("BUB_COURIER_ONBOARD", "hi there")]);
    assert!(ok, "{out}\n{err}");
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(config["courier"]["greeting"], "hi there", "{config}");
}

/// `framework.get_model_options(session_id=…)` collects every
/// `provide_model_options` answer through the host (the builtin's
/// configured model included) and merges them into Bub's `ModelOptions`.
#[test]
fn the_framework_facade_collects_model_options_from_every_plugin() {
    let Some(venv) = python::venv_or_skip("the_framework_facade_collects_model_options_from_every_plugin") else {
        return;
    };
    let home = home_with(venv, true);
    home.use_model("openai:gpt-test", "http://127.0.0.1:9", json!({}));
    let (out, err, ok) = bub(&home, &["run", "py:options"], &[]);
    assert!(ok, "{out}\n{err}");
    let trace = home.trace();
    let line = trace.iter().find(|l| l.starts_with("options ")).unwrap_or_else(|| panic!("{trace:#?}\n{err}"));
    assert_eq!(line, "options current=openai:gpt-test models=['openai:gpt-test']", "{trace:#?}");
}

/// The call-parent idiom from a sync hook (`system_prompt`): the rest of
/// the chain, Python and Rust implementations, answers at once with the
/// list pluggy would give, without waiting on the loop the hook holds.
#[test]
fn a_sync_hook_calls_the_rest_of_its_chain() {
    let Some(venv) = python::venv_or_skip("a_sync_hook_calls_the_rest_of_its_chain") else { return };
    let home = home_with(venv, false);
    let provider = bub_tests::provider::Provider::start(vec![bub_tests::provider::chat::text("hi")]);
    home.use_model("openai:gpt-test", &provider.base_url, json!({"api_format": "chat"}));
    let (out, err, ok) = bub(&home, &["run", "hello"], &[("BUB_COURIER_REST", "1")]);
    assert!(ok, "{out}\n{err}");
    let trace = home.trace();
    let line =
        trace.iter().find(|l| l.starts_with("rest.system_prompt")).unwrap_or_else(|| panic!("{trace:#?}\n{err}"));
    assert!(line.starts_with("rest.system_prompt list ") && line.ends_with("probed=True"), "{line}");
}

/// No process of an isolated plugin outlives its host: `bub run` whose
/// isolated bridge blocks its loop past the deadline ends, and leaves
/// neither the plugin's process nor anything it started.
#[test]
fn an_isolated_plugin_blocking_its_loop_leaves_no_process_after_bub_run() {
    let Some(venv) = python::venv_or_skip("an_isolated_plugin_blocking_its_loop_leaves_no_process_after_bub_run")
    else {
        return;
    };
    let home = home_with(venv, true);
    let env = ["BUB_PROBE_TRACE", "BUB_PROBE_BLOCK_SECONDS", "BUB_HOOK_TIMEOUT_SECONDS"];
    home.isolate("python-bridge", json!({"enabled": true, "env": env}));
    let started = std::time::Instant::now();
    let (_, err, ok) = bub(
        &home,
        &["run", "py:block the loop"],
        &[("BUB_HOOK_TIMEOUT_SECONDS", "2"), ("BUB_PROBE_BLOCK_SECONDS", "30")],
    );
    assert!(!ok && err.contains("did not finish within 2s"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "bub run waited for the blocking call: {:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_millis(500));
    let left = runners_of(&home);
    assert!(left.is_empty(), "processes outlived bub run: {left:?}");
}
