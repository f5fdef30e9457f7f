//! Test support: build the test plugins once per test run, install them into
//! temporary Bub homes, load them through the real loader, capture logs.
//!
//! Plugins are built by running cargo (the same profile and target directory
//! as the tests), because `cargo test` does not produce `cdylib` files of
//! other packages. The ABI fixtures under `tests/fixtures` are built in their
//! own invocations: they enable test-only features of `bub-abi`.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex, OnceLock},
};

use bub_host::{discovery::SearchPath, Host};
use serde_json::{json, Value};

pub mod discord;
pub mod fake;
pub mod gateway;
pub mod npm;
pub mod postgres;
pub mod provider;
pub mod proxy;
pub mod python;
pub mod recordings;
pub mod slack;
pub mod telegram;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is inside the workspace").to_path_buf()
}

/// The shared target directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"))
}

/// Workspace test plugins.
pub const TEST_PLUGINS: &[&str] = &[
    "tp-scripted",
    "tp-scripted-first",
    "tp-scripted-last",
    "tp-scripted-alloc",
    "tp-nosymbol",
    "tp-sdk",
    "tp-bench",
    "tp-noop",
    "tp-agent-noop",
    "tp-allstages",
    "tp-store-wrapper",
    "tp-plugin-set",
    "tp-stream-model",
    "echo-model",
    "session-router",
    "tool-policy",
    "audit-log",
    "openai-chat",
    "http-channel",
    "telegram-channel",
    "slack-channel",
    "discord-channel",
    "tape-sqlite",
    "tape-postgres",
    "schedule",
    "mcp",
    "bub-mcp-test-server",
    "python-bridge",
];

/// ABI fixtures (each built alone).
pub const FIXTURES: &[&str] = &["prev-minor-plugin", "abi-1-plugin", "abi-major-3-plugin", "broken-layout-plugin"];

/// A cargo command; a release one (the benchmarks') builds with the Python
/// the python bridge is built with (`PYO3_PYTHON`, else what
/// `scripts/python-for-bridge.sh` picks, as the scripts do): run bare, a
/// benchmark otherwise built the bridge again on every run, in an
/// environment PyO3's build script had not seen. Debug builds keep the
/// environment of the `cargo test` that runs them, which built the same
/// packages.
fn cargo(release: bool) -> Command {
    static PYTHON: OnceLock<Option<String>> = OnceLock::new();
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    if !release || std::env::var_os("PYO3_PYTHON").is_some() {
        return cmd;
    }
    let python = PYTHON.get_or_init(|| {
        let out = Command::new(workspace().join("scripts/python-for-bridge.sh")).output().ok()?;
        let python = String::from_utf8(out.stdout).ok()?.trim().to_owned();
        (out.status.success() && !python.is_empty()).then_some(python)
    });
    if let Some(python) = python {
        cmd.env("PYO3_PYTHON", python);
    }
    cmd
}

fn run(mut cmd: Command, what: &str) {
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run cargo to build {what}: {e}"));
    assert!(status.success(), "building {what} failed ({status}); run the command above to see why");
}

/// Builds every test plugin and fixture (debug profile), once per process.
pub fn build_plugins(release: bool) -> &'static Path {
    static DEBUG: OnceLock<PathBuf> = OnceLock::new();
    static RELEASE: OnceLock<PathBuf> = OnceLock::new();
    let cell = if release { &RELEASE } else { &DEBUG };
    cell.get_or_init(|| {
        let target = target_dir();
        let mut cmd = cargo(release);
        cmd.current_dir(workspace()).arg("build").arg("--quiet");
        if release {
            cmd.arg("--release");
        }
        for p in TEST_PLUGINS {
            cmd.args(["-p", p]);
        }
        cmd.args(["-p", "bub-host"]);
        run(cmd, "the test plugins");
        for f in FIXTURES {
            let mut cmd = cargo(release);
            cmd.current_dir(workspace()).args([
                "build",
                "--quiet",
                "--manifest-path",
                "tests/fixtures/Cargo.toml",
                "-p",
                f,
            ]);
            cmd.arg("--target-dir").arg(&target);
            if release {
                cmd.arg("--release");
            }
            run(cmd, f);
        }
        target.join(if release { "release" } else { "debug" })
    })
}

/// The built library of package `package` (debug profile).
pub fn lib(package: &str) -> PathBuf {
    lib_in(build_plugins(false), package)
}

/// The built library of package `package` (release profile, for benchmarks).
pub fn lib_release(package: &str) -> PathBuf {
    lib_in(build_plugins(true), package)
}

fn lib_in(dir: &Path, package: &str) -> PathBuf {
    let path = dir.join(format!(
        "{}{}{}",
        std::env::consts::DLL_PREFIX,
        package.replace('-', "_"),
        std::env::consts::DLL_SUFFIX
    ));
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// The `bub` binary (debug profile).
pub fn bub_bin() -> PathBuf {
    build_plugins(false).join(format!("bub{}", std::env::consts::EXE_SUFFIX))
}

/// The `bub` binary (release profile, for benchmarks).
pub fn bub_bin_release() -> PathBuf {
    build_plugins(true).join(format!("bub{}", std::env::consts::EXE_SUFFIX))
}

/// A temporary Bub home with helpers to install plugins into it.
pub struct Home {
    dir: tempfile::TempDir,
}

impl Default for Home {
    fn default() -> Self {
        Self::new()
    }
}

impl Home {
    /// An empty home.
    pub fn new() -> Home {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("plugins")).expect("plugins dir");
        Home { dir }
    }

    /// The home's path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A file for plugins to trace their calls into.
    pub fn trace_file(&self) -> PathBuf {
        self.path().join("trace.log")
    }

    /// The trace lines written so far.
    pub fn trace(&self) -> Vec<String> {
        std::fs::read_to_string(self.trace_file()).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    /// Clears the trace.
    pub fn clear_trace(&self) {
        let _ = std::fs::remove_file(self.trace_file());
    }

    /// Installs `library` as plugin `name` with `config` (a copy: every copy
    /// is loaded as a separate library with its own statics).
    pub fn install(&self, name: &str, library: &Path, config: Value) -> PathBuf {
        install_into(&self.path().join("plugins"), name, library, config)
    }

    /// Installs the scripted plugin with `marker` ("", "first" or "last").
    pub fn scripted(&self, name: &str, marker: &str, hooks: Value) -> PathBuf {
        let package = match marker {
            "" => "tp-scripted",
            "first" => "tp-scripted-first",
            "last" => "tp-scripted-last",
            other => panic!("unknown marker {other}"),
        };
        let config = json!({"trace": self.trace_file(), "hooks": hooks});
        self.install(name, &lib(package), config)
    }

    /// Runs installed plugin `name` in a process of its own: its
    /// manifest's `isolation` becomes `settings` (`{"enabled": true, …}`).
    pub fn isolate(&self, name: &str, settings: Value) {
        let manifest = self.path().join("plugins").join(name).join("plugin.json");
        let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
        m["isolation"] = settings;
        std::fs::write(&manifest, m.to_string()).unwrap();
    }

    /// Points the agent at a model server: `config.json` with `model`, a
    /// key, `api_base` and the keys of `extra` (an object).
    pub fn use_model(&self, model: &str, api_base: &str, extra: Value) {
        let mut config = json!({"model": model, "api_key": "k", "api_base": api_base});
        for (k, v) in extra.as_object().expect("extra config is an object") {
            config[k] = v.clone();
        }
        std::fs::write(self.path().join("config.json"), config.to_string()).expect("write config.json");
    }

    /// The search path of this home (no BUB_PLUGIN_PATH).
    pub fn search(&self) -> SearchPath {
        SearchPath::new(self.path(), None)
    }

    /// A host over this home's installed plugins only: dispatch tests must
    /// not see the builtin's answers. Isolated plugins run in the `bub`
    /// binary the tests built (this test binary is no plugin runner).
    pub fn host(&self) -> Host {
        let settings = bub_host::RuntimeSettings { plugin_runner: Some(bub_bin()), ..Default::default() };
        bub_host::HostBuilder::new().settings(settings).home(self.path()).discovered(&self.search()).build()
    }

    /// A host as `bub` builds it: the builtin, then the installed plugins.
    pub fn host_with_builtin(&self) -> Host {
        bub_host::discover(&self.search())
    }
}

/// Installs `library` as `<root>/<name>/` with a manifest.
pub fn install_into(root: &Path, name: &str, library: &Path, config: Value) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("plugin dir");
    let file = library.file_name().expect("library file name");
    let dest = dir.join(file);
    std::fs::copy(library, &dest).expect("copy library");
    // As `bub plugins install` does: record the sha256, remember the check.
    let sha256 = bub_host::integrity::sha256_file(&dest).expect("hash library");
    let manifest = json!({"name": name, "library": file.to_string_lossy(), "sha256": sha256, "config": config});
    std::fs::write(dir.join("plugin.json"), serde_json::to_string_pretty(&manifest).unwrap()).expect("manifest");
    bub_host::integrity::remember(&dir, &std::fs::metadata(&dest).unwrap(), &sha256);
    dir
}

/// Runs `f` with a subscriber that records every log line (`target: message fields`).
pub fn capture_logs<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let writer = CaptureWriter(lines.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .without_time()
        .with_writer(move || writer.clone())
        .finish();
    let r = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
    (r, text.lines().map(str::to_owned).collect())
}

#[derive(Clone)]
struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs a future to completion on a current-thread runtime (so a
/// thread-local log capture sees everything the dispatch logs).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(f)
}

/// Runs `bub --home <home> <args>` (without BUB_PLUGIN_PATH): stdout, stderr, success.
pub fn run_bub(home: &Home, args: &[&str]) -> (String, String, bool) {
    run_bub_env(home, args, &[])
}

/// [`run_bub`] with `env` set as well.
pub fn run_bub_env(home: &Home, args: &[&str], env: &[(&str, &str)]) -> (String, String, bool) {
    let out = Command::new(bub_bin())
        .arg("--home")
        .arg(home.path())
        .args(args)
        .env_remove("BUB_PLUGIN_PATH")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .output()
        .expect("run bub");
    (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap(), out.status.success())
}

/// Drives a future that never really waits (a no-op waker, polled in a
/// loop): the benchmarks' equivalent of one coroutine on one event loop.
pub fn poll_ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::hint::spin_loop();
    }
}

/// A message envelope.
pub fn message(chat: &str) -> Value {
    json!({"content": "hello", "channel": "test", "chat_id": chat})
}

/// A message handler object that accepts and drops every message (for
/// `provide_channels` calls that never deliver anything).
pub fn message_handler() -> bub_abi::Object {
    struct Drop;
    impl bub_abi::ObjectImpl for Drop {
        fn kind(&self) -> &str {
            bub_abi::resources::kinds::MESSAGE_HANDLER
        }
        fn invoke(&self, _method: &str, _args: Value) -> bub_abi::ObjectFuture {
            Box::pin(async { Ok(Value::Null) })
        }
    }
    bub_abi::Object::new(Drop)
}

/// Replaces the builtin prompt's date line (`---Date: 2026-11-30T19:46:14+00:00---`)
/// with `---Date: <now>---` after checking its shape (local ISO time to the
/// second with a UTC offset, as Python's `isoformat(timespec="seconds")`).
pub fn mask_date(text: &str) -> String {
    const OPEN: &str = "---Date: ";
    let Some(start) = text.find(OPEN) else { return text.to_owned() };
    let rest = &text[start + OPEN.len()..];
    let end = rest.find("---").unwrap_or_else(|| panic!("an unterminated date line in {text:?}"));
    let stamp = &rest[..end];
    let shape: String =
        stamp.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect::<String>().replace('-', "+");
    assert_eq!(shape, "9999+99+99T99:99:99+99:99", "not a local ISO time to the second: {stamp:?}");
    format!("{}{OPEN}<now>---{}", &text[..start], &rest[end + 3..])
}

/// Line `id` of a prefilled tape, as the builtin store writes it: the
/// bootstrap anchor, then alternating user and assistant messages of about
/// 120 bytes of text. The benchmarks' long tapes (`agent_bench`, the same
/// bytes as `scripts/agent_bench.py` writes; `microbench tape`).
pub fn prefill_line(id: usize) -> String {
    let (kind, payload) = if id == 1 {
        ("anchor", json!({"name": "session/start", "state": {"owner": "human"}}))
    } else if id.is_multiple_of(2) {
        ("message", json!({"role": "user", "content": format!("question {id}: {}", "lorem ipsum ".repeat(8))}))
    } else {
        ("message", json!({"role": "assistant", "content": format!("answer {id}: {}", "dolor sit amet ".repeat(8))}))
    };
    let line = json!({"id": id, "kind": kind, "payload": payload, "meta": {}, "date": "2026-12-01T00:00:00+00:00"});
    format!("{line}\n")
}

/// For a profile of a benchmark's measured part only: with
/// `PERF_CTL=<fifo>`, tells a `perf record -D -1 --control fifo:<fifo>`
/// to start sampling now (nothing without it).
pub fn perf_enable() {
    if let Some(fifo) = std::env::var_os("PERF_CTL") {
        std::fs::write(fifo, "enable\n").expect("PERF_CTL: a fifo perf reads (--control fifo:…)");
    }
}
