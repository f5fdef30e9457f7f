//! `bub plugins install | remove | enable | disable | info` as a user runs them.

use std::time::Duration;

use bub_tests::{lib, workspace, Home};
use serde_json::{json, Value};

fn bub(home: &Home, args: &[&str]) -> (String, String, bool) {
    bub_tests::run_bub(home, args)
}

fn list(home: &Home) -> Vec<(String, String)> {
    let (out, err, ok) = bub(home, &["plugins", "list", "--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().into(), p["status"].as_str().unwrap().into()))
        .collect()
}

fn entries(home: &Home) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(home.path().join("plugins"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Installing a built library writes the folder and a full manifest, and
/// the plugin loads; `info` shows its hooks with marker and sync/async.
#[test]
fn install_library_then_info() {
    let home = Home::new();
    let (out, err, ok) = bub(&home, &["plugins", "install", lib("tp-sdk").to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.starts_with(&format!("installed tp-sdk 0.3.1 (ABI {})", bub_abi::ABI_VERSION)), "{out}");
    assert_eq!(list(&home), [("builtin".into(), "loaded".into()), ("tp-sdk".into(), "loaded".into())]);

    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("plugins/tp-sdk/plugin.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["name"], "tp-sdk");
    assert_eq!(manifest["library"], "plugin.so", "a fixed safe name, whatever the source is called");
    assert_eq!(manifest["version"], "0.3.1");
    assert_eq!(manifest["abi_version"], bub_abi::ABI_VERSION);
    assert_eq!(manifest["sha256"].as_str().unwrap().len(), 64);
    assert!(manifest["installed_at"].as_str().unwrap().ends_with('Z'));

    let (out, _, ok) = bub(&home, &["plugins", "info", "tp-sdk", "--json"]);
    assert!(ok);
    let info: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(info["status"], "loaded");
    assert!(info["hooks"]
        .as_array()
        .unwrap()
        .contains(&json!({"hook": "resolve_session", "marker": "tryfirst", "async": false})));
    assert!(info["hooks"]
        .as_array()
        .unwrap()
        .contains(&json!({"hook": "run_model", "marker": "normal", "async": true})));
    let (text, _, _) = bub(&home, &["plugins", "info", "tp-sdk"]);
    assert!(text.contains("status:       loaded") && text.contains("  dispatch_outbound [trylast, sync]"), "{text}");
}

/// A library that fails the checks is not installed: clear message, nothing left behind.
#[test]
fn broken_library_is_not_installed() {
    let home = Home::new();
    let (_, err, ok) = bub(&home, &["plugins", "install", lib("tp-nosymbol").to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("not installed") && err.contains("is not a bub plugin"), "{err}");
    let (_, err, ok) = bub(&home, &["plugins", "install", lib("abi-major-3-plugin").to_str().unwrap()]);
    assert!(!ok && err.contains("major versions differ"), "{err}");
    let (_, err, ok) = bub(&home, &["plugins", "install", "/no/such/lib.so"]);
    assert!(!ok && err.contains("does not exist"), "{err}");
    // A file that is not a library: its reason is said once.
    let text = tempfile::tempdir().unwrap();
    let text = text.path().join("notes.so");
    std::fs::write(&text, "not a library\n").unwrap();
    let (_, err, ok) = bub(&home, &["plugins", "install", text.to_str().unwrap()]);
    assert!(!ok && err.contains("as a shared library"), "{err}");
    assert_eq!(err.matches("as a shared library").count(), 1, "the reason is repeated: {err}");
    // It names the user's file, not the installer's hidden staging copy.
    assert!(err.contains(&format!("cannot open {} as a shared library", text.display())), "{err}");
    assert!(!err.contains(".staging-"), "{err}");
    assert!(entries(&home).is_empty(), "{:?}", entries(&home));
}

/// A new version replaces the old one, keeping its config; a failed
/// replacement leaves the previous version installed and working.
#[test]
fn replace_keeps_config_and_failed_replace_keeps_previous() {
    let home = Home::new();
    let (_, err, ok) = bub(&home, &["plugins", "install", lib("tp-sdk").to_str().unwrap(), "--name", "x"]);
    assert!(ok, "{err}");
    let manifest_path = home.path().join("plugins/x/plugin.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    m["config"] = json!({"prefix": "kept: "});
    std::fs::write(&manifest_path, m.to_string()).unwrap();

    let (out, err, ok) = bub(&home, &["plugins", "install", lib("echo-model").to_str().unwrap(), "--name", "x"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("replaced x 0.3.1 with 0.1.0"), "{out}");
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    assert_eq!(m["library"], "plugin.so");
    assert_eq!(m["config"], json!({"prefix": "kept: "}));

    let (_, err, ok) =
        bub(&home, &["plugins", "install", lib("broken-layout-plugin").to_str().unwrap(), "--name", "x"]);
    assert!(!ok && err.contains("incompatible ABI layout"), "{err}");
    assert_eq!(list(&home), [("builtin".into(), "loaded".into()), ("x".into(), "loaded".into())]);
    assert_eq!(entries(&home), ["x"]);
    let (hooks, _, _) = bub(&home, &["hooks"]);
    assert!(hooks.contains("run_model: builtin, x"), "{hooks}");
}

/// Disable keeps the plugin listed but unloaded; enable brings it back; remove deletes it.
#[test]
fn disable_enable_remove() {
    let home = Home::new();
    assert!(bub(&home, &["plugins", "install", lib("echo-model").to_str().unwrap()]).2);
    let (out, _, ok) = bub(&home, &["plugins", "disable", "echo-model"]);
    assert!(ok && out.trim() == "disabled echo-model", "{out}");
    assert_eq!(list(&home)[1], ("echo-model".into(), "disabled".into()));
    assert!(!bub(&home, &["hooks"]).0.contains("echo-model"));

    assert!(bub(&home, &["plugins", "enable", "echo-model"]).2);
    assert_eq!(list(&home)[1], ("echo-model".into(), "loaded".into()));

    let (_, _, ok) = bub(&home, &["plugins", "remove", "echo-model"]);
    assert!(ok);
    assert_eq!(list(&home), [("builtin".into(), "loaded".into())]);
    let (_, err, ok) = bub(&home, &["plugins", "remove", "echo-model"]);
    assert!(!ok && err.contains("no plugin named 'echo-model' is installed"), "{err}");
    let (_, err, ok) = bub(&home, &["plugins", "enable", "../etc"]);
    assert!(!ok && err.contains("invalid plugin name"), "{err}");
}

/// A crate folder is built with `cargo build --release`, then installed.
#[test]
fn install_crate_folder_builds_it() {
    let home = Home::new();
    let crate_dir = workspace().join("plugins/session-router");
    let (out, err, ok) = bub(&home, &["plugins", "install", crate_dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.starts_with("installed session-router 0.1.0"), "{out}");
    assert_eq!(list(&home)[1], ("session-router".into(), "loaded".into()));
}

/// `bub plugins config`: shows, sets (JSON or string values) and unsets keys
/// of the manifest's config; the plugin receives them at load.
#[test]
fn plugins_config_sets_and_unsets_keys() {
    let home = Home::new();
    assert!(bub(&home, &["plugins", "install", lib("echo-model").to_str().unwrap()]).2);
    let (out, _, ok) = bub(&home, &["plugins", "config", "echo-model"]);
    assert!(ok && out.trim() == "{}", "{out}");
    let (out, err, ok) = bub(&home, &["plugins", "config", "echo-model", "prefix=bot says: ", "limit=3"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v, json!({"prefix": "bot says: ", "limit": 3}));
    let (out, _, _) = bub(&home, &["run", "hi"]);
    assert!(out.contains("bot says: sender_id=human"), "{out}");
    let (out, _, ok) = bub(&home, &["plugins", "config", "echo-model", "--unset", "limit"]);
    assert!(ok && !out.contains("limit"), "{out}");
    let (_, err, ok) = bub(&home, &["plugins", "config", "echo-model", "novalue"]);
    assert!(!ok && err.contains("is not KEY=VALUE"), "{err}");
    let (_, err, ok) = bub(&home, &["plugins", "config", "missing"]);
    assert!(!ok && err.contains("missing"), "{err}");
}

/// The installer's hidden work folders are never
/// discovered as plugins; leftovers of a killed install are cleaned by the
/// next install; a reinstall is seen by a concurrent reader as the old or
/// the new version, never neither.
#[test]
fn hidden_folders_are_not_plugins_and_reinstalls_are_never_missing() {
    let home = Home::new();
    let root = home.path().join("plugins");
    // A stale staging copy of a policy plugin and a retired version: both hidden.
    bub_tests::install_into(&root, ".staging-2147483646-1", &lib("tool_policy"), json!({}));
    bub_tests::install_into(&root, ".old-tool-policy-2147483646-2", &lib("tool_policy"), json!({}));
    assert_eq!(list(&home), [("builtin".to_owned(), "loaded".to_owned())]);

    let (_, err, ok) = bub(&home, &["plugins", "install", lib("echo-model").to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(entries(&home), ["echo-model"], "the dead installs' folders are gone");

    // Reinstall in a loop while another thread keeps discovering the plugin.
    let search = bub_host::discovery::SearchPath::new(home.path(), None);
    let installer = bub_host::install::Installer::new(home.path());
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    let reader = std::thread::spawn(move || {
        let (mut seen, mut missing) = (0, 0);
        while !d.load(std::sync::atomic::Ordering::Relaxed) {
            let found = search
                .candidates()
                .into_iter()
                .any(|dir| bub_host::manifest::Manifest::read(&dir).is_ok_and(|m| m.name == "echo-model"));
            seen += 1;
            if !found {
                missing += 1;
            }
        }
        (seen, missing)
    });
    for _ in 0..20 {
        installer.install(&lib("echo-model"), None).unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (seen, missing) = reader.join().unwrap();
    assert!(seen > 20, "the reader ran ({seen} looks)");
    assert_eq!(missing, 0, "{missing} of {seen} looks found no echo-model");
}

/// A folder whose manifest names another
/// plugin fails and claims nothing (it cannot disable the real one); names
/// with newlines, ANSI escapes or bidi overrides are refused and printed
/// escaped; a 70,000-character version does not crash `plugins list`.
#[test]
fn manifests_cannot_claim_forge_or_crash_the_listing() {
    let home = Home::new();
    let root = home.path().join("plugins");
    let rewrite = |folder: &str, key: &str, value: Value| {
        let path = root.join(folder).join("plugin.json");
        let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        m[key] = value;
        std::fs::write(&path, m.to_string()).unwrap();
    };
    bub_tests::install_into(&root, "0-claim", &lib("echo-model"), json!({}));
    rewrite("0-claim", "name", json!("tool-policy"));
    bub_tests::install_into(&root, "tool-policy", &lib("tool_policy"), json!({}));
    bub_tests::install_into(&root, "zz-forge", &lib("echo-model"), json!({}));
    rewrite("zz-forge", "name", json!("zz-forge\nbuiltin  1.0  2.0  loaded  \u{1b}[31m\u{202e}evil"));
    bub_tests::install_into(&root, "zz-long", &lib("echo-model"), json!({}));
    rewrite("zz-long", "version", json!("9".repeat(70_000)));
    rewrite("zz-long", "enabled", json!(false)); // a disabled plugin lists its manifest's version

    let (out, err, ok) = bub(&home, &["plugins", "list"]);
    assert!(ok, "{err}");
    let rows: Vec<&str> = out.lines().filter(|l| !l.starts_with("    error:")).collect();
    assert_eq!(rows.len(), 1 + 5, "header, builtin, four folders:\n{out}");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{202e}'), "{out:?}");
    let statuses = list(&home);
    assert!(statuses.contains(&("tool-policy".to_owned(), "loaded".to_owned())), "{statuses:?}");
    assert!(statuses.contains(&("0-claim".to_owned(), "failed".to_owned())), "{statuses:?}");
    assert!(statuses.contains(&("zz-forge".to_owned(), "failed".to_owned())), "{statuses:?}");
    assert!(out.contains("must be its folder's"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("zz-long") && l.contains('…')), "{out}");
}

/// Hand-copied folders `e-m` and `e_m` would both read
/// `BUB_E_M__*`: the second is refused and says whose variables they are;
/// a folder named like the builtin says it is taken by a plugin built into
/// bub (the message read "taken by ;").
#[test]
fn hand_copied_folders_cannot_share_settings_variables_or_the_builtins_name() {
    let home = Home::new();
    let root = home.path().join("plugins");
    bub_tests::install_into(&root, "e-m", &lib("echo-model"), json!({}));
    bub_tests::install_into(&root, "e_m", &lib("echo-model"), json!({}));
    bub_tests::install_into(&root, "builtin", &lib("echo-model"), json!({}));
    let (out, err, ok) = bub(&home, &["plugins", "list"]);
    assert!(ok, "{err}");
    let statuses = list(&home);
    assert!(statuses.contains(&("e-m".to_owned(), "loaded".to_owned())), "{statuses:?}");
    assert!(statuses.contains(&("e_m".to_owned(), "failed".to_owned())), "{statuses:?}");
    assert!(out.contains("plugin 'e_m' would read the settings variables BUB_E_M__* of plugin 'e-m'"), "{out}");
    assert!(out.contains("plugin name 'builtin' is already taken by a plugin built into bub"), "{out}");
}

/// Ten `bub plugins config` processes at once
/// keep all ten keys (each change is read and written under the plugins
/// folder's lock).
#[test]
fn parallel_config_changes_are_all_kept() {
    let home = Home::new();
    let (_, err, ok) = bub(&home, &["plugins", "install", lib("echo-model").to_str().unwrap()]);
    assert!(ok, "{err}");
    let children: Vec<_> = (0..10)
        .map(|i| {
            std::process::Command::new(bub_tests::bub_bin())
                .arg("--home")
                .arg(home.path())
                .args(["plugins", "config", "echo-model", &format!("k{i}={i}")])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let (out, _, _) = bub(&home, &["plugins", "config", "echo-model"]);
    let config: Value = serde_json::from_str(&out).unwrap();
    for i in 0..10 {
        assert_eq!(config[format!("k{i}")], json!(i), "{config}");
    }
}

/// Five installs of one name
/// and ten `plugins config` changes, all at once. Every install succeeds
/// (none fails moving the old copy aside), no config change is lost to a
/// reinstall, and the plugin loads afterwards.
#[test]
fn parallel_installs_and_config_changes_lose_nothing() {
    let home = Home::new();
    let library = lib("echo-model");
    let (_, err, ok) = bub(&home, &["plugins", "install", library.to_str().unwrap()]);
    assert!(ok, "{err}");
    let spawn = |args: Vec<String>| {
        std::process::Command::new(bub_tests::bub_bin())
            .arg("--home")
            .arg(home.path())
            .args(args)
            .env_remove("BUB_PLUGIN_PATH")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut children = Vec::new();
    for i in 0..10 {
        let install = ["plugins", "install", library.to_str().unwrap()].map(String::from).to_vec();
        if i % 2 == 0 {
            children.push(spawn(install));
        }
        children.push(spawn(["plugins", "config", "echo-model", &format!("k{i}={i}")].map(String::from).to_vec()));
    }
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let (out, _, _) = bub(&home, &["plugins", "config", "echo-model"]);
    let config: Value = serde_json::from_str(&out).unwrap();
    for i in 0..10 {
        assert_eq!(config[format!("k{i}")], json!(i), "{config}");
    }
    assert!(list(&home).iter().any(|(name, status)| name == "echo-model" && status == "loaded"), "{:?}", list(&home));
    let leftovers: Vec<_> = std::fs::read_dir(home.path().join("plugins"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && !n.ends_with(".lock"))
        .collect();
    assert!(leftovers.is_empty(), "installer leftovers: {leftovers:?}");
}

/// A library file named like the installer's own
/// files is installed under the fixed name, leaving them intact.
#[test]
fn a_library_named_like_installer_files_cannot_overwrite_them() {
    let home = Home::new();
    let odd = tempfile::tempdir().unwrap();
    for name in ["plugin.json", ".verified"] {
        let src = odd.path().join(name);
        std::fs::copy(lib("echo-model"), &src).unwrap();
        let (_, err, ok) = bub(&home, &["plugins", "install", src.to_str().unwrap(), "--name", "odd"]);
        assert!(ok, "{err}");
        let dir = home.path().join("plugins/odd");
        let manifest: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("plugin.json")).unwrap()).unwrap();
        assert_eq!(manifest["library"], "plugin.so");
        assert_eq!(list(&home)[1], ("odd".to_owned(), "loaded".to_owned()));
    }
}

/// `builtin` cannot be installed (it
/// could never load); names that share settings variables collide at
/// install; a FIFO is refused as not a regular file, at once; a
/// `BUB_PLUGIN_PATH` entry that is a plugin folder, a file or missing is
/// reported, not silently ignored.
#[test]
fn install_refuses_names_that_cannot_work_and_odd_sources() {
    let home = Home::new();
    let echo = lib("echo-model");
    let (_, err, ok) = bub(&home, &["plugins", "install", echo.to_str().unwrap(), "--name", "builtin"]);
    assert!(!ok && err.contains("not `builtin`, the host's own"), "{err}");
    assert!(bub(&home, &["plugins", "install", echo.to_str().unwrap(), "--name", "e-m"]).2);
    let (_, err, ok) = bub(&home, &["plugins", "install", echo.to_str().unwrap(), "--name", "E_M"]);
    assert!(!ok && err.contains("collides with the installed plugin \"e-m\": both would read BUB_E_M__*"), "{err}");

    let fifo = home.path().join("pipe.so");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let (_, err, ok) = bub(&home, &["plugins", "install", fifo.to_str().unwrap()]);
    assert!(!ok && err.contains("not a regular file"), "{err}");

    let plugin_folder = home.path().join("plugins/e-m");
    let out = std::process::Command::new(bub_tests::bub_bin())
        .arg("--home")
        .arg(home.path())
        .args(["plugins", "list"])
        .env("BUB_PLUGIN_PATH", format!("{}:/no/such/root:{}", plugin_folder.display(), fifo.display()))
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("is a plugin folder; BUB_PLUGIN_PATH lists folders that hold plugin folders"), "{err}");
    assert!(err.contains("\"/no/such/root\": does not exist") || err.contains("does not exist"), "{err}");
    assert!(err.contains("is not a folder"), "{err}");
    assert!(!err.contains('\u{1b}'), "no colour codes in a pipe: {err:?}");
}

/// Host API: a plugin that declares it replaces another
/// (`export_plugin!(…, replaces = [...])`) gets the declaration recorded at
/// install; the replaced plugin is listed as replaced and never loaded, and
/// comes back when the replacing one is disabled. An older plugin (ABI 2.0,
/// no declaration) installs with none.
#[test]
fn a_plugin_can_replace_another_by_name() {
    let home = Home::new();
    home.scripted("replaced-by-noop", "", json!({"load_state": {"return": null}}));
    let (_, err, ok) = bub(&home, &["plugins", "install", lib("tp-noop").to_str().unwrap()]);
    assert!(ok, "{err}");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("plugins/tp-noop/plugin.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["replaces"], json!(["replaced-by-noop"]));

    let plugins = list(&home);
    assert!(plugins.contains(&("replaced-by-noop".into(), "replaced".into())), "{plugins:?}");
    assert!(plugins.contains(&("tp-noop".into(), "loaded".into())), "{plugins:?}");
    let (out, _, _) = bub(&home, &["plugins", "list"]);
    assert!(out.contains("replaced by tp-noop"), "{out}");
    let (_, err, ok) = bub(&home, &["run", "hi"]);
    assert!(ok, "{err}");
    assert!(!home.trace().iter().any(|l| l.starts_with("replaced-by-noop:load_state")), "{:?}", home.trace());

    let (_, err, ok) = bub(&home, &["plugins", "disable", "tp-noop"]);
    assert!(ok, "{err}");
    assert!(list(&home).contains(&("replaced-by-noop".into(), "loaded".into())));
    let (_, err, ok) = bub(&home, &["run", "hi"]);
    assert!(ok, "{err}");
    assert!(home.trace().iter().any(|l| l.starts_with("replaced-by-noop:load_state")), "{:?}", home.trace());

    let (_, err, ok) = bub(&home, &["plugins", "install", lib("prev-minor-plugin").to_str().unwrap()]);
    assert!(ok, "{err}");
    let installed: Vec<String> = entries(&home);
    let prev = installed.iter().find(|e| e.contains("prev")).unwrap();
    let manifest = std::fs::read_to_string(home.path().join("plugins").join(prev).join("plugin.json")).unwrap();
    assert!(!manifest.contains("replaces"), "{manifest}");
}

/// A minimal plugin crate at `dir`, version `version`, depending on
/// `bub_abi` (a Cargo.toml dependency value).
fn plugin_crate(dir: &std::path::Path, version: &str, bub_abi: &str) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"bub-fetched-plugin\"\nversion = \"{version}\"\nedition = \"2021\"\n\n\
             [workspace]\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n[dependencies]\nbub-abi = {bub_abi}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("src/lib.rs"),
        "#[derive(Default)]\npub struct Fetched;\n\n#[bub_abi::plugin]\nimpl bub_abi::Plugin for Fetched {\n    \
         fn resolve_session(&self) -> Option<String> {\n        None\n    }\n}\n\nbub_abi::export_plugin!(Fetched);\n",
    )
    .unwrap();
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("git (needed to test installs from git)");
    assert!(status.success(), "git {args:?}");
}

/// `bub` with the test's cargo set-up: offline (no test reaches the
/// network), building into the shared target folder, the release profile
/// unoptimized (what is tested is fetching and installing, not the
/// optimizer: a third of the build time).
fn bub_offline(home: &Home, args: &[&str]) -> (String, String, bool) {
    bub_offline_into(home, &bub_tests::target_dir(), args)
}

/// As [`bub_offline`], building into `target`.
fn bub_offline_into(home: &Home, target: &std::path::Path, args: &[&str]) -> (String, String, bool) {
    let out = std::process::Command::new(bub_tests::bub_bin())
        .arg("--home")
        .arg(home.path())
        .args(args)
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_TARGET_DIR", target)
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
        .env_remove("BUB_PLUGIN_PATH")
        .output()
        .expect("run bub");
    (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap(), out.status.success())
}

/// `bub plugins install <git URL>[@ref]` clones, builds in
/// release and installs like a crate folder, recording the source;
/// `bub plugins update` rebuilds from it (a branch moves on, a tag stays);
/// a ref that does not exist is refused with the reason.
#[test]
fn install_from_a_git_repository_and_update_from_it() {
    let home = Home::new();
    let repo = tempfile::tempdir().unwrap();
    let abi = format!("{{ path = {:?} }}", workspace().join("crates/abi").display().to_string());
    plugin_crate(repo.path(), "0.1.0", &abi);
    // A link named `skills` is not followed: installing a stranger's crate
    // must not copy a folder of the machine into the plugin.
    std::os::unix::fs::symlink("/etc", repo.path().join("skills")).unwrap();
    git(repo.path(), &["init", "--quiet", "--initial-branch=main"]);
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "--quiet", "-m", "0.1.0"]);
    git(repo.path(), &["tag", "v0.1.0"]);
    let url = format!("file://{}", repo.path().display());

    let (out, err, ok) = bub_offline(&home, &["plugins", "install", &url]);
    assert!(ok, "{err}");
    assert!(out.starts_with("installed bub-fetched-plugin 0.1.0"), "{out}");
    assert!(out.contains(&format!("from {url} (commit ")), "{out}");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join("plugins/bub-fetched-plugin/plugin.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["source"]["kind"], "git");
    assert_eq!(manifest["source"]["url"], url.as_str());
    assert_eq!(list(&home)[1], ("bub-fetched-plugin".into(), "loaded".into()));
    assert!(!home.path().join("plugins/bub-fetched-plugin/skills").exists(), "the `skills` link was followed");

    // A second plugin pinned to the tag, under another name.
    let (out, err, ok) = bub_offline(&home, &["plugins", "install", &format!("{url}@v0.1.0"), "--name", "pinned"]);
    assert!(ok, "{err}");
    assert!(out.contains("@v0.1.0"), "{out}");

    // The branch moves on: update follows it; the tag stays.
    plugin_crate(repo.path(), "0.2.0", &abi);
    git(repo.path(), &["commit", "--quiet", "-am", "0.2.0"]);
    let (out, err, ok) = bub_offline(&home, &["plugins", "update"]);
    assert!(ok, "{err}");
    assert!(out.contains("replaced bub-fetched-plugin 0.1.0 with 0.2.0"), "{out}");
    assert!(out.contains("reinstalled pinned 0.1.0"), "{out}");

    let (_, err, ok) = bub_offline(&home, &["plugins", "install", &format!("{url}@no-such-tag"), "--name", "x"]);
    assert!(!ok);
    assert!(err.contains("git checkout no-such-tag") && err.contains("branch, tag or commit"), "{err}");
    // A plugin installed from a library has its path as source; one
    // without a source says how to reinstall it.
    let (_, err, ok) = bub_offline(&home, &["plugins", "update", "nothing-here"]);
    assert!(!ok && err.contains("no plugin named 'nothing-here'"), "{err}");
}

/// `bub plugins install <crate>[@version]` fetches the crate
/// with cargo (here from a vendored directory source that replaces
/// crates.io, as an offline mirror does), builds and installs it; a crate
/// the registry does not have is refused with cargo's reason.
#[test]
fn install_a_crate_from_the_registry() {
    let home = Home::new();
    let scratch = tempfile::tempdir().unwrap();
    // The vendored registry: bub-abi's dependencies (cargo vendor, from
    // cargo's cache), bub-abi itself as published (cargo package), and the
    // plugin crate.
    let stub = scratch.path().join("stub");
    std::fs::create_dir_all(stub.join("src")).unwrap();
    std::fs::write(stub.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        stub.join("Cargo.toml"),
        format!(
            "[package]\nname = \"stub\"\nversion = \"0.0.0\"\nedition = \"2021\"\n[dependencies]\nbub-abi = {{ path = {:?} }}\n[workspace]\n",
            workspace().join("crates/abi").display().to_string()
        ),
    )
    .unwrap();
    let vendor = scratch.path().join("vendor");
    let cargo = || std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    // The workspace's versions, and every one of them in cargo's cache:
    // vendoring takes the crates of every platform, and a build on this
    // one never downloads some of them (a fresh machine's cache lacks
    // them). Fetched from the registry once; already cached, no request.
    std::fs::copy(workspace().join("Cargo.lock"), stub.join("Cargo.lock")).unwrap();
    let status = cargo()
        .args(["fetch", "--quiet", "--manifest-path"])
        .arg(stub.join("Cargo.toml"))
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "cargo fetch (the crates.io registry must be reachable, or its crates cached)");
    let status = cargo()
        .args(["vendor", "--offline", "--quiet", "--manifest-path"])
        .arg(stub.join("Cargo.toml"))
        .arg(&vendor)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "cargo vendor");
    let packaged = scratch.path().join("package");
    let status = cargo()
        .current_dir(workspace())
        .args([
            "package",
            "--quiet",
            "--offline",
            "--no-verify",
            "--allow-dirty",
            "-p",
            "bub-abi-macros",
            "-p",
            "bub-abi",
        ])
        .arg("--target-dir")
        .arg(&packaged)
        .status()
        .unwrap();
    assert!(status.success(), "cargo package bub-abi");
    let unpack = |crate_file: &std::path::Path| {
        let status =
            std::process::Command::new("tar").arg("xzf").arg(crate_file).arg("-C").arg(&vendor).status().unwrap();
        assert!(status.success());
    };
    for entry in std::fs::read_dir(packaged.join("package")).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "crate") {
            unpack(&path);
            let dir = vendor.join(path.file_stem().unwrap());
            std::fs::write(dir.join(".cargo-checksum.json"), r#"{"files": {}, "package": null}"#).unwrap();
        }
    }
    let plugin = vendor.join("bub-fetched-plugin-0.3.0");
    plugin_crate(&plugin, "0.3.0", "\"2.3\"");
    std::fs::write(plugin.join(".cargo-checksum.json"), r#"{"files": {}, "package": null}"#).unwrap();
    // Cargo reads this for every build under the home (as ~/.cargo/config.toml would be).
    std::fs::create_dir_all(home.path().join(".cargo")).unwrap();
    std::fs::write(
        home.path().join(".cargo/config.toml"),
        format!(
            "[source.crates-io]\nreplace-with = \"vendored\"\n\n[source.vendored]\ndirectory = {:?}\n",
            vendor.display().to_string()
        ),
    )
    .unwrap();

    // Its own target folder: the vendored copies have the ids of crates.io's
    // (source replacement) but other paths, so sharing the target folder
    // would make each build invalidate the other's artifacts.
    let target = scratch.path().join("target");
    let bub_offline = |home: &Home, args: &[&str]| bub_offline_into(home, &target, args);
    let (out, err, ok) = bub_offline(&home, &["plugins", "install", "bub-fetched-plugin@0.3.0"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("installed bub-fetched-plugin 0.3.0"), "{out}");
    assert!(out.contains("from crate bub-fetched-plugin@0.3.0"), "{out}");
    assert_eq!(list(&home)[1], ("bub-fetched-plugin".into(), "loaded".into()));
    let (out, err, ok) = bub_offline(&home, &["plugins", "update", "bub-fetched-plugin"]);
    assert!(ok, "{err}");
    assert!(out.contains("reinstalled bub-fetched-plugin 0.3.0"), "{out}");

    let (_, err, ok) = bub_offline(&home, &["plugins", "install", "bub-no-such-plugin"]);
    assert!(!ok);
    assert!(err.contains("cannot fetch crate bub-no-such-plugin") && err.contains("cargo metadata"), "{err}");
}

/// A git server that accepts the connection and never answers does not
/// hang the install: it is stopped after `BUB_INSTALL_TIMEOUT_SECONDS`
/// with the reason and the setting. A fetch folder that a killed install
/// left (its lock free) is removed by the next fetch.
#[test]
fn a_git_server_that_never_answers_times_out_and_leftovers_are_removed() {
    let home = Home::new();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    // Accepts, then says nothing, for the whole test.
    std::thread::spawn(move || {
        let connection = silent.accept();
        std::thread::sleep(Duration::from_secs(30));
        drop(connection);
    });
    let left = home.path().join("cache/fetch/.fetch-left-by-a-kill");
    std::fs::create_dir_all(left.join("repo")).unwrap();
    std::fs::write(left.join(".lock"), "").unwrap();
    let aged = std::process::Command::new("touch").args(["-d", "2 hours ago"]).arg(&left).status().unwrap();
    assert!(aged.success());
    let bin = bub_tests::bub_bin();
    let started = std::time::Instant::now();
    let out = std::process::Command::new(bin)
        .arg("--home")
        .arg(home.path())
        .args(["plugins", "install", &format!("http://127.0.0.1:{port}/plugin.git")])
        .env("BUB_INSTALL_TIMEOUT_SECONDS", "2")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("BUB_PLUGIN_PATH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20), "the install hung for {:?}", started.elapsed());
    assert!(err.contains("did not finish within 2 s") && err.contains("BUB_INSTALL_TIMEOUT_SECONDS"), "{err}");
    let fetch = home.path().join("cache/fetch");
    let leftovers: Vec<_> = std::fs::read_dir(&fetch).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(leftovers.is_empty(), "fetch folders left: {leftovers:?}");
}
