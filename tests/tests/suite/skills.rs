//! Skills (Bub's `bub.skills`): discovery from the workspace, the
//! user's home and installed plugins, precedence, validity, the system
//! prompt's `<available_skills>` section with `$name` expansion and body
//! templating, the `skill` tool, `allowed_skills` for a subagent — through
//! `bub run` against a scripted provider, and a plugin crate shipping a
//! skill through `bub plugins install`.

use std::{path::Path, process::Command};

use bub_tests::{
    bub_bin,
    provider::{chat, Provider},
    workspace as repo, Home,
};
use serde_json::{json, Value};

fn skill(root: &Path, folder: &str, front: &str, body: &str) {
    let dir = root.join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), format!("---\n{front}\n---\n{body}\n")).unwrap();
}

/// A home configured for `provider`, a workspace and a user home with
/// skills of each kind.
struct Setup {
    home: Home,
    ws: tempfile::TempDir,
    user: tempfile::TempDir,
}

fn setup(provider: &Provider) -> Setup {
    let home = Home::new();
    let config = json!({"model": "openai:m", "api_key": "sk-test", "api_base": provider.base_url,
        "telegram": {"token": "T0KEN"}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let (ws, user) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let project = ws.path().join(".agents/skills");
    skill(
        &project,
        "hello",
        "name: hello\ndescription: Say hello properly.",
        "Run $SKILL_DIR/hi.sh; token ${config.telegram.token}; cost $$5",
    );
    skill(&project, "shared", "name: shared\ndescription: the project's copy", "project body");
    skill(&project, "wrong-folder", "name: other\ndescription: name differs from folder", "x");
    skill(&project, "no-description", "name: no-description", "x");
    skill(&project, "bad-meta", "name: bad-meta\ndescription: d\nmetadata: {a: 1}", "x");
    let global = user.path().join(".agents/skills");
    skill(&global, "shared", "name: shared\ndescription: the global copy", "global body");
    skill(
        &global,
        "tele",
        "Name: tele\nDescription: Send with the bot.\nmetadata: {channel: telegram}",
        "export BUB_TELEGRAM_TOKEN=${config.telegram.token}",
    );
    Setup { home, ws, user }
}

fn bub(s: &Setup, args: &[&str]) -> (String, String, bool) {
    let out = Command::new(bub_bin())
        .arg("--home")
        .arg(s.home.path())
        .arg("-w")
        .arg(s.ws.path())
        .args(args)
        .env("HOME", s.user.path())
        .env_remove("BUB_PLUGIN_PATH")
        .env_remove("RUST_LOG")
        .output()
        .expect("run bub");
    (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap(), out.status.success())
}

fn system_prompt(body: &Value) -> String {
    body["messages"][0]["content"].as_str().unwrap_or_default().to_owned()
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect()
}

/// The section lists the valid skills, sorted, the project's copy of a
/// name over the global one; invalid front matter (name not the folder's,
/// no description, non-string metadata) is skipped; keys are
/// case-insensitive; `$hello` in the prompt expands that skill with its
/// location and body: `$SKILL_DIR` substituted, `$$` a dollar, and — a
/// project skill being the repository's, not the user's — no config
/// values, while the global skill gets them.
#[test]
fn the_prompt_lists_valid_skills_and_expands_the_named_one() {
    let provider = Provider::start(vec![chat::text("ok"), chat::text("ok")]);
    let s = setup(&provider);
    let (_, err, ok) = bub(&s, &["run", "please $hello and $tele"]);
    assert!(ok, "{err}");
    let requests = provider.requests();
    let system = system_prompt(&requests[0].body);
    let section = &system[system.find("<available_skills>").expect(&system)..];
    // bub-rs's builtin skills are listed among them (by name; their own
    // test is below), then left out of this comparison.
    let builtin = ["- gh: ", "- skill-creator: ", "- telegram: "];
    for line in builtin {
        assert!(section.lines().any(|l| l.starts_with(line)), "{line} is not listed: {section}");
    }
    let section: String =
        section.lines().filter(|l| !builtin.iter().any(|b| l.starts_with(b))).map(|l| format!("{l}\n")).collect();
    let section = section.trim_end();
    let hello = s.ws.path().join(".agents/skills/hello").canonicalize().unwrap();
    let tele = s.user.path().join(".agents/skills/tele").canonicalize().unwrap();
    assert_eq!(
        section,
        format!(
            "<available_skills>\n- hello: Say hello properly.\n  Location: {}/SKILL.md\nRun {}/hi.sh; token ${{config.telegram.token}}; cost $5\n\
             - shared: the project's copy\n- tele: Send with the bot.\n  Location: {}/SKILL.md\nexport BUB_TELEGRAM_TOKEN=T0KEN\n</available_skills>",
            hello.display(),
            hello.display(),
            tele.display()
        )
    );
    assert!(tool_names(&requests[0].body).contains(&"skill".to_owned()));
    // Without a hint nothing is expanded.
    let (_, err, ok) = bub(&s, &["run", "hi"]);
    assert!(ok, "{err}");
    let system = system_prompt(&provider.requests()[1].body);
    assert!(system.contains("- hello: Say hello properly.\n- shared"), "{system}");
}

/// The tool messages' texts of a request, in order.
fn tool_results(body: &serde_json::Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

/// `skill()` lists every skill; `skill(name)` returns its location and
/// body; an unknown name is the tool's answer `(no such skill)`.
#[test]
fn the_skill_tool_lists_and_loads() {
    let provider = Provider::start(vec![
        chat::tool_calls(
            "",
            &[("c1", "skill", "{}"), ("c2", "skill", r#"{"name": "shared"}"#), ("c3", "skill", r#"{"name": "nope"}"#)],
        ),
        chat::text("done"),
    ]);
    let s = setup(&provider);
    let (_, err, ok) = bub(&s, &["run", "go"]);
    assert!(ok, "{err}");
    let results = tool_results(&provider.requests()[1].body);
    // The project's, the user's, then bub-rs's builtin ones, by name.
    assert_eq!(results[0], "Available skills:\n- gh\n- hello\n- shared\n- skill-creator\n- tele\n- telegram");
    let shared = s.ws.path().join(".agents/skills/shared").canonicalize().unwrap();
    assert_eq!(results[1], format!("Location: {}/SKILL.md\n---\nproject body", shared.display()));
    assert_eq!(results[2], "(no such skill)");
}

/// A subagent with `allowed_skills` sees only those skills in its prompt,
/// and its `skill` tool refuses the others.
#[test]
fn a_subagent_with_allowed_skills_sees_only_those() {
    let provider = Provider::start(vec![
        chat::tool_calls("", &[("c1", "subagent", r#"{"prompt": "sub", "allowed_skills": ["Tele"]}"#)]),
        chat::tool_calls("", &[("s1", "skill", r#"{"name": "hello"}"#)]),
        chat::text("sub done"),
        chat::text("all done"),
    ]);
    let s = setup(&provider);
    let (_, err, ok) = bub(&s, &["run", "delegate"]);
    assert!(ok, "{err}");
    let requests = provider.requests();
    let sub = system_prompt(&requests[1].body);
    assert!(sub.contains("<available_skills>\n- tele: Send with the bot.\n</available_skills>"), "{sub}");
    let refused = requests[2].body["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").cloned();
    assert_eq!(refused.unwrap()["content"], "(skill 'hello' is not allowed in this context)");
}

/// A plugin crate's `skills/` folder is installed with it (files only,
/// owner-only) and its skills join the prompt after the project's and the
/// user's (Bub's precedence: project > global > plugin).
#[test]
fn a_plugin_ships_skills_in_its_crate() {
    let provider = Provider::start(vec![chat::text("ok")]);
    let s = setup(&provider);
    let crate_dir = repo().join("plugins/session-router");
    let (_, err, ok) = bub(&s, &["plugins", "install", crate_dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    let installed = s.home.path().join("plugins/session-router/skills/session-aliases/SKILL.md");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&installed).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    // A project skill of the same name would win; here only the plugin has it.
    let (_, err, ok) = bub(&s, &["run", "hi"]);
    assert!(ok, "{err}");
    let system = system_prompt(&provider.requests()[0].body);
    assert!(system.contains("- session-aliases: How session-router names sessions"), "{system}");
}

/// Bub's legacy `.agent/skills` is still read, with Bub's warning.
#[test]
fn the_legacy_folder_warns_and_is_read() {
    let provider = Provider::start(vec![chat::text("ok")]);
    let s = setup(&provider);
    skill(&s.ws.path().join(".agent/skills"), "old", "name: old\ndescription: from the legacy folder", "x");
    let (_, err, ok) = bub(&s, &["run", "hi"]);
    assert!(ok, "{err}");
    assert!(err.contains("Found legacy skills directory at") && err.contains(".agent/skills"), "{err}");
    assert!(system_prompt(&provider.requests()[0].body).contains("- old: from the legacy folder"));
}

/// `${config.telegram.token}` in a user's skill reads the setting as Bub's
/// settings do: `BUB_TELEGRAM_TOKEN` in the environment wins over the
/// `telegram.token` of `config.json`.
#[test]
fn a_skills_config_value_comes_from_the_environment_first() {
    let provider =
        Provider::start(vec![chat::tool_calls("", &[("c1", "skill", r#"{"name": "tele"}"#)]), chat::text("ok")]);
    let s = setup(&provider);
    let out = Command::new(bub_bin())
        .arg("--home")
        .arg(s.home.path())
        .arg("-w")
        .arg(s.ws.path())
        .args(["run", "go"])
        .env("HOME", s.user.path())
        .env("BUB_TELEGRAM_TOKEN", "FROM-ENV")
        .env_remove("BUB_PLUGIN_PATH")
        .output()
        .expect("run bub");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let second = &provider.requests()[1].body;
    let result = second["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    let text = result["content"].as_str().unwrap();
    assert!(text.ends_with("export BUB_TELEGRAM_TOKEN=FROM-ENV"), "{text}");
}

/// bub-rs's own builtin skills (`gh`, `skill-creator`, `telegram`) are
/// listed after the others, as Bub lists its builtin source: written under
/// `$BUB_HOME/builtin-skills/`, owner-only, their bodies in bub-rs's words
/// (the telegram skill names bub-rs's channel and never prints the token);
/// a project skill of the same name replaces one.
#[test]
fn the_builtin_skills_are_bub_rs_own_and_a_project_replaces_one() {
    let provider = Provider::start(vec![
        chat::tool_calls("", &[("c1", "skill", r#"{"name": "telegram"}"#), ("c2", "skill", r#"{"name": "gh"}"#)]),
        chat::text("done"),
    ]);
    let s = setup(&provider);
    skill(&s.ws.path().join(".agents/skills"), "gh", "name: gh\ndescription: the project's gh", "project gh body");
    let (_, err, ok) = bub(&s, &["run", "go"]);
    assert!(ok, "{err}");
    let results = tool_results(&provider.requests()[1].body);
    let telegram = &results[0];
    let location = telegram.lines().next().unwrap().trim_start_matches("Location: ").to_owned();
    let root = s.home.path().join("builtin-skills").canonicalize().unwrap();
    assert!(
        location.starts_with(&root.display().to_string()) && location.ends_with("/telegram/SKILL.md"),
        "{location}"
    );
    assert!(telegram.contains("telegram-channel") && telegram.contains("never\nprint it"), "{telegram}");
    assert!(!telegram.contains("T0KEN"), "the token reached the model: {telegram}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&location).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(results[1].ends_with("project gh body"), "the project's gh did not win: {}", results[1]);
}
