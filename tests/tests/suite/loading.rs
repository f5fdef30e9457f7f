//! Discovery and loading: every broken input gets a precise status and the
//! host carries on (semantics §H3.1). Plugins are real cdylibs through the real loader.

use bub_host::WithBuiltin as _;
use bub_host::{discovery::SearchPath, HostBuilder, PluginStatus};
use bub_tests::{block_on, install_into, lib, message, Home};
use serde_json::json;

fn status_of(host: &bub_host::Host, name: &str) -> PluginStatus {
    host.registry().plugin(name).unwrap_or_else(|| panic!("plugin {name} not listed")).status.clone()
}

fn failure_of(host: &bub_host::Host, name: &str) -> String {
    match status_of(host, name) {
        PluginStatus::Failed { detail } => detail,
        other => panic!("{name} should have failed, is {other:?}"),
    }
}

fn write_junk(home: &Home, name: &str, bytes: &[u8]) {
    let dir = home.path().join("plugins").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("libjunk.so"), bytes).unwrap();
    let sha256 = bub_host::integrity::sha256_file(&dir.join("libjunk.so")).unwrap();
    let manifest = json!({"name": name, "library": "libjunk.so", "sha256": sha256});
    std::fs::write(dir.join("plugin.json"), manifest.to_string()).unwrap();
}

/// A good plugin still loads and answers beside every kind of broken one.
#[test]
fn host_survives_every_broken_input() {
    let home = Home::new();
    write_junk(&home, "a-text", b"this is not a shared library\n");
    write_junk(&home, "b-empty", b"");
    home.install("c-nosymbol", &lib("tp-nosymbol"), json!({}));
    home.install("d-major3", &lib("abi-major-3-plugin"), json!({}));
    home.install("d2-abi1", &lib("abi-1-plugin"), json!({}));
    home.install("e-layout", &lib("broken-layout-plugin"), json!({}));
    home.install("f-init-error", &lib("tp-scripted"), json!({"init": "error"}));
    home.install("g-init-panic", &lib("tp-scripted"), json!({"init": "panic"}));
    home.scripted("z-good", "", json!({"resolve_session": {"return": "good"}}));

    let host = home.host_with_builtin();
    let names: Vec<&str> = host.registry().plugins().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "builtin",
            "a-text",
            "b-empty",
            "c-nosymbol",
            "d-major3",
            "d2-abi1",
            "e-layout",
            "f-init-error",
            "g-init-panic",
            "z-good"
        ]
    );

    let text = failure_of(&host, "a-text");
    assert!(text.contains("cannot open") && text.contains("shared library") && text.contains("cdylib"), "{text}");
    let empty = failure_of(&host, "b-empty");
    assert!(empty.contains("the file is empty"), "{empty}");
    let nosym = failure_of(&host, "c-nosymbol");
    assert!(nosym.contains("is not a bub plugin") && nosym.contains("export_plugin!"), "{nosym}");
    let major = failure_of(&host, "d-major3");
    assert!(
        major.contains("ABI 3.0.0") && major.contains("major versions differ") && major.contains("bub-abi 2.x"),
        "{major}"
    );
    // Behaviour 2 for ABI 1 plugins: refused with how to port them.
    let abi1 = failure_of(&host, "d2-abi1");
    assert!(
        abi1.contains("built for plugin ABI 1.2.0")
            && abi1.contains("Rebuild the plugin against bub-abi 2.x")
            && abi1.contains("Porting a plugin from ABI 1"),
        "{abi1}"
    );
    let layout = failure_of(&host, "e-layout");
    // The checker names the first path to the changed type it meets (the
    // error type sits in results and futures alike).
    assert!(layout.contains("incompatible ABI layout") && layout.contains("Rebuild it against bub-abi"), "{layout}");
    let init = failure_of(&host, "f-init-error");
    assert!(init.contains("failed to initialise") && init.contains("refuses to start"), "{init}");
    let panic = failure_of(&host, "g-init-panic");
    assert!(panic.contains("failed to initialise") && panic.contains("panics in its constructor"), "{panic}");

    assert_eq!(status_of(&host, "z-good"), PluginStatus::Loaded);
    let rt = host.runtime();
    let args = bub_host::CallArgs::resolve_session(&message("1")).unwrap();
    let reply = block_on(rt.call_first(bub_abi::HookId::ResolveSession, &args)).unwrap().unwrap();
    assert_eq!(reply.parse::<String>().unwrap(), "good");
}

/// A plugin built against the previous 2.x minor (the fixture is built
/// without the table's last hook, `provide_skill_roots`, as a plugin of the
/// minor before it was appended would be) loads in this host; its missing hook is
/// simply absent. The full layout check runs for it (its fingerprint
/// differs) and accepts only the missing trailing slot.
#[test]
fn plugin_of_previous_minor_abi_loads() {
    let home = Home::new();
    home.install("legacy", &lib("prev-minor-plugin"), json!({}));
    let host = home.host();
    let record = host.registry().plugin("legacy").unwrap();
    assert_eq!(record.status, PluginStatus::Loaded);
    assert_eq!(record.abi_version, bub_abi::ABI_VERSION);
    assert!(record.implements(bub_abi::HookId::ResolveSession));
    assert!(!record.implements(bub_abi::HookId::ProvideSkillRoots));

    let rt = host.runtime();
    let args = bub_host::CallArgs::resolve_session(&message("42")).unwrap();
    let reply = block_on(rt.call_first(bub_abi::HookId::ResolveSession, &args)).unwrap().unwrap();
    assert_eq!(reply.parse::<String>().unwrap(), "fixture:42");
    let tools =
        rt.call_many_sync(bub_abi::HookId::ProvideTools, &bub_host::CallArgs::provide_tools().unwrap()).unwrap();
    assert!(tools.is_empty());
    let prompt = rt
        .call_many_sync(
            bub_abi::HookId::SystemPrompt,
            &bub_host::CallArgs::system_prompt(&json!("hi"), &bub_abi::TurnState::new()).unwrap(),
        )
        .unwrap();
    assert_eq!(
        prompt[0].as_ref().unwrap().parse::<String>().unwrap(),
        format!("built for ABI {}", bub_abi::ABI_VERSION)
    );
}

/// Manifest problems are reported with the file and what to do.
#[test]
fn manifest_problems_are_precise() {
    let home = Home::new();
    let root = home.path().join("plugins");
    std::fs::create_dir_all(root.join("no-manifest")).unwrap();
    std::fs::create_dir_all(root.join("bad-json")).unwrap();
    std::fs::write(root.join("bad-json/plugin.json"), "{ not json").unwrap();
    std::fs::create_dir_all(root.join("escape")).unwrap();
    std::fs::write(root.join("escape/plugin.json"), json!({"name": "escape", "library": "../x.so"}).to_string())
        .unwrap();
    std::fs::create_dir_all(root.join("missing-lib")).unwrap();
    std::fs::write(
        root.join("missing-lib/plugin.json"),
        json!({"name": "missing-lib", "library": "libgone.so"}).to_string(),
    )
    .unwrap();

    let host = home.host();
    let none = failure_of(&host, "no-manifest");
    assert!(none.contains("cannot read manifest") && none.contains("plugin.json"), "{none}");
    let bad = failure_of(&host, "bad-json");
    assert!(bad.contains("is not valid"), "{bad}");
    let esc = failure_of(&host, "escape");
    assert!(esc.contains("must be a file name inside the plugin folder"), "{esc}");
    let gone = failure_of(&host, "missing-lib");
    assert!(gone.contains("does not exist") && gone.contains("libgone.so"), "{gone}");
}

/// Registration order: builtin, then `$BUB_HOME/plugins` by folder name, then
/// each absolute `BUB_PLUGIN_PATH` folder; relative entries are ignored; a
/// name already taken is refused (the first one wins).
#[test]
fn discovery_order_and_shadowing() {
    let home = Home::new();
    let extra = tempfile::tempdir().unwrap();
    let scripted = lib("tp-scripted");
    install_into(&home.path().join("plugins"), "zeta", &scripted, json!({}));
    install_into(&home.path().join("plugins"), "alpha", &scripted, json!({}));
    install_into(extra.path(), "beta", &scripted, json!({}));
    install_into(extra.path(), "alpha", &scripted, json!({}));

    let path_var = format!("relative/dir:{}", extra.path().display());
    let search = SearchPath::new(home.path(), Some(&path_var));
    assert_eq!(search.ignored.len(), 1, "relative entries are ignored");
    let host = HostBuilder::new().builtin().discovered(&search).build();
    let order: Vec<(&str, &str)> =
        host.registry().plugins().iter().map(|p| (p.name.as_str(), p.status.as_str())).collect();
    assert_eq!(
        order,
        [("builtin", "loaded"), ("alpha", "loaded"), ("zeta", "loaded"), ("alpha", "failed"), ("beta", "loaded")]
    );
    let shadowed = &host.registry().plugins()[3];
    match &shadowed.status {
        PluginStatus::Failed { detail } => assert!(detail.contains("already taken"), "{detail}"),
        other => panic!("{other:?}"),
    }
}

/// A disabled plugin is listed, not loaded.
#[test]
fn disabled_plugin_is_listed_not_loaded() {
    let home = Home::new();
    let dir = home.scripted("off", "", json!({"resolve_session": {"return": "x"}}));
    let manifest = dir.join("plugin.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["enabled"] = json!(false);
    std::fs::write(&manifest, m.to_string()).unwrap();
    let host = home.host();
    assert_eq!(status_of(&host, "off"), PluginStatus::Disabled);
    assert!(host.registry().impls(bub_abi::HookId::ResolveSession).is_empty());
}

/// `$BUB_HOME/config.json` (what `bub onboard` writes): a plugin's section
/// is merged over its manifest config; a broken file changes nothing. (One
/// home per case: a library is initialised once per process.)
#[test]
fn app_config_overrides_manifest_config() {
    use bub_host::CallArgs;
    let session = |config: Option<&str>| {
        let home = Home::new();
        home.scripted("cfg", "", json!({"resolve_session": {"return": "from-manifest"}}));
        if let Some(text) = config {
            std::fs::write(home.path().join("config.json"), text).unwrap();
        }
        let args = CallArgs::resolve_session(&json!({})).unwrap();
        let reply = block_on(home.host().runtime().call_first(bub_abi::HookId::ResolveSession, &args));
        reply.unwrap().unwrap().parse::<String>().unwrap()
    };
    assert_eq!(session(None), "from-manifest");
    let config = json!({"cfg": {"hooks": {"resolve_session": {"return": "from-config"}}}, "other": {"x": 1}});
    assert_eq!(session(Some(&config.to_string())), "from-config");
    let (value, logs) = bub_tests::capture_logs(|| session(Some("not json")));
    assert_eq!(value, "from-manifest");
    // The reason and where it went wrong.
    assert!(
        logs.iter().any(|l| l.contains("config.json is not valid JSON (expected ident at line 1 column 2)")),
        "{logs:?}"
    );
    let (_, logs) = bub_tests::capture_logs(|| session(Some("[1, 2]")));
    assert!(logs.iter().any(|l| l.contains("config.json is not a JSON object")), "{logs:?}");
}

/// `config.json` steers plugins (a base URL, a
/// key) and is trusted like a library: one writable by others is ignored
/// with the reason and the fix.
#[test]
fn a_config_json_others_can_write_is_ignored() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    home.scripted("cfg", "", json!({"resolve_session": {"return": "from-manifest"}}));
    let config = json!({"cfg": {"hooks": {"resolve_session": {"return": "from-config"}}}});
    let path = home.path().join("config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let session = || {
        let args = bub_host::CallArgs::resolve_session(&json!({})).unwrap();
        let reply = block_on(home.host().runtime().call_first(bub_abi::HookId::ResolveSession, &args));
        reply.unwrap().unwrap().parse::<String>().unwrap()
    };
    let (value, logs) = bub_tests::capture_logs(session);
    assert_eq!(value, "from-manifest");
    assert!(
        logs.iter().any(|l| l.contains("is writable by group or others (mode 666)") && l.contains("chmod go-w")),
        "{logs:?}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(session(), "from-config");
}

/// Reliability item 15: a plugin's `config.json` section that is not an
/// object is reported, not ignored silently.
#[test]
fn a_config_json_section_that_is_not_an_object_is_reported() {
    let home = Home::new();
    home.install("echo-model", &lib("echo-model"), json!({}));
    std::fs::write(home.path().join("config.json"), r#"{"echo-model": "oops"}"#).unwrap();
    let (_, err, ok) = bub_tests::run_bub(&home, &["run", "hi"]);
    assert!(ok, "{err}");
    assert!(
        err.contains(r#"config.json: the section "echo-model" is a string, not an object of settings; ignored"#),
        "{err}"
    );
}

/// One library contributes several
/// plugins, each registered under its own name right after the library,
/// with its own hooks and markers. A member's `tryfirst` outranks a normal
/// native plugin registered after it (pluggy's order across plugins); a
/// member with an unusable name or a name already taken is refused, the
/// others stay.
#[test]
fn a_plugin_set_registers_each_member_as_a_plugin_of_its_own() {
    let home = bub_tests::Home::new();
    home.install(
        "tp-plugin-set",
        &bub_tests::lib("tp-plugin-set"),
        serde_json::json!({"members": [
            {"name": "guest-first", "answer": "guest:first", "hooks": {"resolve_session": "tryfirst"}},
            {"name": "guest-normal", "answer": "guest:normal", "hooks": {"resolve_session": "normal", "build_prompt": "normal"}},
            {"name": "bad name!", "answer": "x", "hooks": {"resolve_session": "normal"}},
            {"name": "builtin", "answer": "x", "hooks": {"resolve_session": "normal"}},
        ]}),
    );
    // A native plugin discovered after the set: normally called first.
    home.scripted("zz-native", "", serde_json::json!({"resolve_session": {"return": "native:normal"}}));
    let (out, err, ok) = bub_tests::run_bub(&home, &["plugins", "list", "--json"]);
    assert!(ok, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows: Vec<(String, String, serde_json::Value)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (p["name"].as_str().unwrap().to_owned(), p["status"].as_str().unwrap().to_owned(), p["member_of"].clone())
        })
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(names[..4], ["builtin", "tp-plugin-set", "guest-first", "guest-normal"], "{out}");
    assert_eq!(rows[2].1, "loaded");
    assert_eq!(rows[2].2, "tp-plugin-set");
    assert_eq!(names.last(), Some(&"zz-native"));
    let refused: Vec<&(String, String, serde_json::Value)> = rows.iter().filter(|r| r.1 == "failed").collect();
    assert_eq!(refused.len(), 2, "the bad name and the taken one: {out}");
    assert!(list.to_string().contains("a plugin name uses"), "{out}");
    assert!(list.to_string().contains("already"), "the builtin's name is taken: {out}");

    let (order, _, ok) = bub_tests::run_bub(&home, &["hooks", "--call-order"]);
    assert!(ok);
    let line = order.lines().find(|l| l.starts_with("resolve_session:")).unwrap();
    assert_eq!(
        line,
        "resolve_session: guest-first [tryfirst, sync] -> zz-native [normal, sync] -> guest-normal [normal, sync] -> builtin [normal, sync]",
        "{order}"
    );
    let (out, err, ok) = bub_tests::run_bub(&home, &["run", "--json", "hi"]);
    assert!(ok, "{err}");
    let turn: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(turn["session_id"], "guest:first", "{out}");
}
