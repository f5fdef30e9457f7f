//! Account logins: `bub login codex` and the `codex` provider that runs
//! turns on a ChatGPT plan, side by side with Python Bub 0.6.0a3 on one stub
//! backend and one stub token endpoint, and against the files the real
//! Codex CLI (`@openai/codex` from npm, pinned) writes and reads.
//!
//! What is stubbed, and why: OpenAI's token endpoint and Codex's backend
//! are on the network, which the tests do not have. Both hosts are pointed
//! at a loopback stub: bub-rs and the Codex CLI by
//! `CODEX_REFRESH_TOKEN_URL_OVERRIDE` (the Codex CLI's own variable),
//! Python Bub — whose token URL is a literal in Republic — by a
//! `sitecustomize` that swaps the URL authlib is given.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use bub_tests::{
    bub_bin, lib,
    provider::{Provider, Reply, Request},
    Home,
};
use serde_json::{json, Value};

fn jwt(claims: Value) -> String {
    use base64::Engine as _;
    let part = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.c2ln", part(&json!({"alg": "RS256", "typ": "JWT"})), part(&claims))
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

fn account_claims(account: &str, exp: i64) -> Value {
    json!({"exp": exp, "email": "ann@example.com",
           "https://api.openai.com/auth": {"chatgpt_account_id": account, "chatgpt_plan_type": "plus", "chatgpt_user_id": "user-1"}})
}

/// A Codex CLI login file as the CLI writes it, whose access token expired
/// a minute and a half ago: the next request must refresh it first.
fn expired_login(codex_home: &Path) {
    std::fs::create_dir_all(codex_home).unwrap();
    let past = now() - 90;
    let login = json!({
        "OPENAI_API_KEY": null,
        "tokens": {
            "id_token": jwt(account_claims("acct-1", past)),
            "access_token": jwt(account_claims("acct-1", past)),
            "refresh_token": "rt-1",
            "account_id": "acct-1"
        },
        "last_refresh": "2026-10-01T00:00:00Z"
    });
    let text = serde_json::to_string_pretty(&login).unwrap() + "\n";
    bub_kit::files::write_private(&codex_home.join("auth.json"), text.as_bytes()).unwrap();
}

/// The stub: OpenAI's token endpoint (`/oauth/token`, answering one fresh
/// token) and Codex's backend (`…/responses`, a streamed text answer).
struct Stub {
    server: Provider,
    fresh_access_token: String,
    root: String,
}

impl Stub {
    fn start() -> Stub {
        let fresh = jwt(account_claims("acct-1", now() + 3600));
        let answer = {
            let fresh = fresh.clone();
            move |r: &Request| {
                if r.line.contains("/oauth/token") {
                    let body = json!({"access_token": fresh, "refresh_token": "rt-2",
                                      "id_token": jwt(account_claims("acct-1", now() + 3600)),
                                      "expires_in": 3600, "token_type": "Bearer"});
                    return Reply::Status(200, body.to_string(), vec![]);
                }
                if r.line.contains("/responses") {
                    return codex_answer("hello from codex");
                }
                Reply::Status(404, json!({"error": "not here"}).to_string(), vec![])
            }
        };
        let server = Provider::respond(answer);
        let root = server.base_url.trim_end_matches("/v1").to_owned();
        Stub { server, fresh_access_token: fresh, root }
    }

    fn token_requests(&self) -> Vec<Request> {
        self.server.requests().into_iter().filter(|r| r.line.contains("/oauth/token")).collect()
    }

    fn model_requests(&self) -> Vec<Request> {
        self.server.requests().into_iter().filter(|r| r.line.contains("/responses")).collect()
    }
}

/// A Responses stream as Codex's backend sends one.
fn codex_answer(text: &str) -> Reply {
    let message = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": text, "annotations": []}]});
    let usage = json!({"input_tokens": 3, "output_tokens": 2, "total_tokens": 5});
    Reply::Sse(vec![
        json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}})
            .to_string(),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}})
        .to_string(),
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text})
            .to_string(),
        json!({"type": "response.output_item.done", "output_index": 0, "item": message}).to_string(),
        json!({"type": "response.completed",
               "response": {"id": "resp_1", "status": "completed", "output": [message], "usage": usage}})
        .to_string(),
    ])
}

/// Points authlib's token endpoint at `CODEX_REFRESH_TOKEN_URL_OVERRIDE`
/// in a Python Bub process (Republic names the URL as a literal).
const SITECUSTOMIZE: &str = r#"
import os
from authlib.integrations.httpx_client import OAuth2Client
_init = OAuth2Client.__init__
def _init_at_the_stub(self, *args, **kwargs):
    url = os.environ.get("CODEX_REFRESH_TOKEN_URL_OVERRIDE")
    if url and kwargs.get("token_endpoint"):
        kwargs["token_endpoint"] = url
    _init(self, *args, **kwargs)
OAuth2Client.__init__ = _init_at_the_stub
"#;

/// The environment a `bub run` of either host gets: the codex model, the
/// stub, a CODEX_HOME of its own.
fn codex_env(stub: &Stub, home: &Path, codex_home: &Path) -> Vec<(String, String)> {
    vec![
        ("BUB_HOME".into(), home.display().to_string()),
        ("BUB_MODEL".into(), "codex:gpt-5.1-codex".into()),
        ("BUB_API_BASE".into(), format!("{}/backend-api/codex", stub.root)),
        ("CODEX_HOME".into(), codex_home.display().to_string()),
        ("CODEX_REFRESH_TOKEN_URL_OVERRIDE".into(), format!("{}/oauth/token", stub.root)),
        ("NO_COLOR".into(), "1".into()),
    ]
}

fn run(program: &Path, args: &[&str], cwd: &Path, env: &[(String, String)], extra: &[(&str, &str)]) -> (String, bool) {
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(cwd);
    for (k, _) in std::env::vars() {
        if k.starts_with("BUB_") || k.starts_with("OPENAI_") || k.starts_with("CODEX_") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    cmd.envs(extra.iter().copied());
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (text, out.status.success())
}

/// What a host sent the token endpoint and Codex's backend, and the login
/// file after the turn.
struct Seen {
    token: Vec<Request>,
    model: Vec<Request>,
    login: Value,
}

/// A temporary folder with a Bub home, a Codex home (not made: a login
/// writes it) and a workspace.
fn folders() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (home, codex_home, ws) = (dir.path().join("home"), dir.path().join("codex"), dir.path().join("ws"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    (dir, home, codex_home, ws)
}

fn one_turn(python: Option<&Path>) -> (Seen, String) {
    let stub = Stub::start();
    let (dir, home, codex_home, ws) = folders();
    expired_login(&codex_home);
    let env = codex_env(&stub, &home, &codex_home);
    let (output, ok) = match python {
        Some(venv) => {
            let site = dir.path().join("site");
            std::fs::create_dir_all(&site).unwrap();
            std::fs::write(site.join("sitecustomize.py"), SITECUSTOMIZE).unwrap();
            let path = site.display().to_string();
            run(&venv.join("bin/bub"), &["run", "hi codex"], &ws, &env, &[("PYTHONPATH", &path)])
        }
        None => run(&bub_bin(), &["run", "hi codex"], &ws, &env, &[]),
    };
    assert!(ok, "the turn failed: {output}");
    assert!(output.contains("hello from codex"), "the answer was not printed: {output}");
    let login: Value = serde_json::from_str(&std::fs::read_to_string(codex_home.join("auth.json")).unwrap()).unwrap();
    let mode = std::fs::metadata(codex_home.join("auth.json")).map(|m| {
        use std::os::unix::fs::PermissionsExt as _;
        m.permissions().mode() & 0o777
    });
    assert_eq!(mode.unwrap(), 0o600, "the refreshed login is the owner's alone");
    (Seen { token: stub.token_requests(), model: stub.model_requests(), login }, stub.fresh_access_token)
}

fn form(text: &str) -> Vec<(String, String)> {
    text.split('&').filter_map(|p| p.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

/// The headers a Codex request carries that count (the credentials and
/// Codex's own), by name.
const CODEX_HEADERS: [&str; 5] = ["authorization", "chatgpt-account-id", "openai-beta", "originator", "content-type"];

/// The same turn on a ChatGPT login whose token expired, through Python
/// Bub and bub-rs: both refresh it once with the same form at the token
/// endpoint, write the same login file back (every field kept, the new
/// tokens, `expires_at` and `last_refresh` as Python writes them), and send
/// Codex's backend the same path, headers and body keys, with the new
/// token and the account.
#[test]
fn bub_and_python_bub_refresh_a_codex_login_and_call_codex_alike() {
    let Some(venv) = bub_tests::python::bub_alone_venv_or_skip("bub_and_python_bub_refresh_a_codex_login…") else {
        return;
    };
    let (py, py_fresh) = one_turn(Some(venv));
    let (rs, rs_fresh) = one_turn(None);

    // The refresh: one each, the same form, the same content headers.
    assert_eq!(py.token.len(), 1, "Python Bub refreshed {} times", py.token.len());
    assert_eq!(rs.token.len(), 1, "bub-rs refreshed {} times", rs.token.len());
    assert_eq!(form(&rs.token[0].text), form(&py.token[0].text), "the refresh forms differ");
    assert_eq!(
        form(&rs.token[0].text),
        vec![
            ("grant_type".into(), "refresh_token".into()),
            ("refresh_token".into(), "rt-1".into()),
            ("client_id".into(), "app_EMoamEEZ73f0CkXaXp7hrann".into())
        ]
    );
    assert_eq!(rs.token[0].line.split(' ').nth(1), py.token[0].line.split(' ').nth(1));
    for h in ["content-type", "accept"] {
        assert_eq!(rs.token[0].header(h), py.token[0].header(h), "the refresh's {h} differs");
    }

    // The login file after: the same fields, the new tokens.
    let keys = |v: &Value| v.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    assert_eq!(keys(&rs.login), keys(&py.login), "the login file's fields differ");
    assert_eq!(keys(&rs.login["tokens"]), keys(&py.login["tokens"]), "the stored tokens' fields differ");
    assert_eq!(rs.login["tokens"]["access_token"], json!(rs_fresh));
    assert_eq!(py.login["tokens"]["access_token"], json!(py_fresh));
    for login in [&rs.login, &py.login] {
        assert_eq!(login["tokens"]["refresh_token"], "rt-2");
        assert_eq!(login["tokens"]["account_id"], "acct-1");
        assert_eq!(login["OPENAI_API_KEY"], Value::Null, "a field the host does not own is kept");
        let expires = login["tokens"]["expires_at"].as_str().unwrap_or_default();
        assert!(expires.ends_with("+00:00") && !expires.contains('.'), "expires_at as Python writes it: {expires}");
        let refreshed = login["last_refresh"].as_str().unwrap_or_default();
        assert!(refreshed.starts_with("20") && refreshed.ends_with("+00:00"), "last_refresh: {refreshed}");
    }

    // The call: the same path, headers and body keys; the new token.
    assert_eq!((py.model.len(), rs.model.len()), (1, 1), "one call each");
    let (p, r) = (&py.model[0], &rs.model[0]);
    assert_eq!(r.line, p.line, "the paths differ");
    for h in CODEX_HEADERS {
        let (rv, pv) = (r.header(h).map(str::to_owned), p.header(h).map(str::to_owned));
        let (rv, pv) = match h {
            // Each host refreshed to its own copy of the fresh token.
            "authorization" => {
                (rv.map(|v| v.replace(&rs_fresh, "<fresh>")), pv.map(|v| v.replace(&py_fresh, "<fresh>")))
            }
            _ => (rv, pv),
        };
        assert_eq!(rv, pv, "the header {h} differs");
    }
    assert_eq!(r.header("authorization"), Some(format!("Bearer {rs_fresh}").as_str()));
    assert_eq!(r.header("chatgpt-account-id"), Some("acct-1"));
    assert_eq!(keys(&r.body), keys(&p.body), "the body's keys differ: {} against {}", r.body, p.body);
    for key in ["model", "stream", "store", "instructions", "include"] {
        assert_eq!(r.body[key], p.body[key], "the body's {key} differs");
    }
    assert!(r.body.get("max_output_tokens").is_none(), "Codex is sent no output limit");
    // The user's message, as the last input item, the same.
    let last = |b: &Value| {
        let item = b["input"].as_array().and_then(|a| a.last().cloned()).unwrap_or_default();
        bub_tests::mask_date(&item.to_string())
    };
    assert_eq!(last(&r.body), last(&p.body), "the prompt's input item differs");
}

/// A second turn on the refreshed login refreshes nothing: the token is
/// read from the file the first turn wrote.
#[test]
fn a_fresh_codex_login_is_used_without_refreshing() {
    let stub = Stub::start();
    let (_dir, home, codex_home, ws) = folders();
    expired_login(&codex_home);
    let env = codex_env(&stub, &home, &codex_home);
    for _ in 0..2 {
        let (out, ok) = run(&bub_bin(), &["run", "hi"], &ws, &env, &[]);
        assert!(ok && out.contains("hello from codex"), "{out}");
    }
    assert_eq!(stub.token_requests().len(), 1, "the second turn refreshed again");
    assert_eq!(stub.model_requests().len(), 2);
}

/// A missing, foreign or half login fails the turn with Republic's words
/// (what to run), and a refusal at the token endpoint says it could not
/// refresh; nothing is sent to Codex's backend without credentials.
#[test]
fn an_unusable_codex_login_says_what_to_do() {
    let stub = Stub::start();
    let (_dir, home, codex_home, ws) = folders();
    std::fs::create_dir_all(&codex_home).unwrap();
    let env = codex_env(&stub, &home, &codex_home);
    let turn = || run(&bub_bin(), &["run", "hi"], &ws, &env, &[]).0;
    assert!(turn().contains("Cannot read Codex credentials; run codex login with file storage"), "{}", turn());
    let write = |v: Value| {
        bub_kit::files::write_private(&codex_home.join("auth.json"), v.to_string().as_bytes()).unwrap();
    };
    write(json!({"OPENAI_API_KEY": "sk-x", "tokens": null}));
    assert!(turn().contains("Codex credentials must contain a ChatGPT login"), "{}", turn());
    write(json!({"tokens": {"access_token": "a"}}));
    assert!(turn().contains("Codex credentials are missing an access token or account ID"), "{}", turn());
    write(json!({"tokens": {"access_token": jwt(json!({"exp": now() - 600})), "account_id": "acct-1"}}));
    assert!(turn().contains("Codex token has expired and has no refresh token"), "{}", turn());
    assert!(stub.model_requests().is_empty(), "a request went out without credentials");
}

/// A shell script standing in for the Codex CLI: records how it was
/// called, then exits with `status`, writing a login into `$CODEX_HOME`
/// when it succeeds.
fn fake_codex(dir: &Path, status: i32) -> PathBuf {
    let script = dir.join("fake-codex");
    let login = json!({"tokens": {"access_token": jwt(account_claims("acct-7", now() + 3600)), "account_id": "acct-7",
                                  "refresh_token": "rt"}});
    let text = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"{log}\"\nprintf 'CODEX_HOME=%s\\n' \"$CODEX_HOME\" >> \"{log}\"\n\
         [ {status} -eq 0 ] || exit {status}\nmkdir -p \"$CODEX_HOME\"\nprintf '%s' '{login}' > \"$CODEX_HOME/auth.json\"\n\
         chmod 600 \"$CODEX_HOME/auth.json\"\n",
        log = dir.join("calls.log").display(),
    );
    std::fs::write(&script, text).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// `bub login codex` as Bub's: it runs `<executable> login --config
/// cli_auth_credentials_store="file"` (and `--device-auth`) with
/// `CODEX_HOME` set to `--codex-home`, then reports the account of the
/// login written; a failing or missing CLI is reported in Bub's words with
/// status 1. Output and the CLI's arguments are compared with Python Bub's.
#[test]
fn bub_login_codex_runs_the_codex_cli_as_bub_does() {
    let Some(venv) = bub_tests::python::bub_alone_venv_or_skip("bub_login_codex_runs_the_codex_cli_as_bub_does") else {
        return;
    };
    let python_bub = venv.join("bin/bub");
    let cases: [(i32, bool, bool); 4] = [(0, true, true), (0, false, false), (3, true, false), (3, false, false)];
    for (status, device, with_home) in cases {
        let mut seen = Vec::new();
        for program in [python_bub.clone(), bub_bin()] {
            let dir = tempfile::tempdir().unwrap();
            let exe = fake_codex(dir.path(), status);
            let codex_home = dir.path().join("codex home");
            let home = dir.path().join("bub");
            std::fs::create_dir_all(&home).unwrap();
            let mut args = vec!["login", "codex", "--executable", exe.to_str().unwrap()];
            let home_arg = codex_home.display().to_string();
            if with_home {
                args.extend(["--codex-home", &home_arg]);
            }
            if device {
                args.push("--device-auth");
            }
            let env = vec![
                ("BUB_HOME".to_owned(), home.display().to_string()),
                ("CODEX_HOME".to_owned(), dir.path().join("default codex").display().to_string()),
                ("NO_COLOR".to_owned(), "1".to_owned()),
            ];
            let (out, ok) = run(&program, &args, dir.path(), &env, &[]);
            let calls = std::fs::read_to_string(dir.path().join("calls.log")).unwrap_or_default();
            let mask =
                |t: &str| t.replace(&dir.path().display().to_string(), "<dir>").replace(exe.to_str().unwrap(), "<exe>");
            seen.push((mask(&out), ok, mask(&calls)));
        }
        assert_eq!(
            seen[1], seen[0],
            "bub-rs (right) and Python Bub (left) differ for exit {status}, device {device}, home {with_home}"
        );
        if status == 0 {
            assert!(seen[1].0.contains("login: ok\naccount_id: acct-7\n"), "{}", seen[1].0);
        }
    }
    // A CLI that is not there.
    let mut seen = Vec::new();
    for program in [python_bub, bub_bin()] {
        let dir = tempfile::tempdir().unwrap();
        let env =
            vec![("BUB_HOME".to_owned(), dir.path().display().to_string()), ("NO_COLOR".to_owned(), "1".to_owned())];
        let (out, ok) = run(&program, &["login", "codex", "--executable", "no-such-codex"], dir.path(), &env, &[]);
        seen.push((out, ok));
    }
    assert_eq!(seen[1], seen[0], "a missing CLI is reported differently");
    assert!(!seen[1].1);
}

/// A plugin attaches its own login to `bub login` (`CommandSpec::group`),
/// listed beside `codex`; a plugin cannot take `codex`.
#[test]
fn a_plugin_adds_its_own_login() {
    let home = Home::new();
    home.install("tp-sdk", &lib("tp-sdk"), json!({}));
    let (out, err, ok) = bub_tests::run_bub(&home, &["login", "tp-sdk", "--token", "t0k"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "tp-sdk login: ok (token t0k)");
    let (help, _, _) = bub_tests::run_bub(&home, &["login", "--help"]);
    assert!(help.contains("codex") && help.contains("tp-sdk"), "{help}");
    // Still a login, not a top-level command.
    let (_, _, ok) = bub_tests::run_bub(&home, &["tp-sdk"]);
    assert!(!ok);
}

/// The real Codex CLI (`@openai/codex` from npm, pinned): the login file
/// it writes when it refreshes an expired login is the one bub-rs reads
/// (its turn uses the CLI's token and account, refreshing nothing), and the
/// file bub-rs writes when it refreshes is one the CLI reads as logged in.
/// The CLI's own browser login needs OpenAI's servers: its refresh, pointed
/// at the stub by `CODEX_REFRESH_TOKEN_URL_OVERRIDE`, is how it writes here.
#[test]
fn the_real_codex_cli_and_bub_share_one_login_file() {
    let Some(codex) = codex_cli() else {
        return eprintln!("SKIPPED the_real_codex_cli_and_bub_share_one_login_file: npm is not installed");
    };
    let stub = Stub::start();
    let (dir, home, codex_home, ws) = folders();
    expired_login(&codex_home);
    let env = codex_env(&stub, &home, &codex_home);

    // The CLI refreshes (it tries to reach its backend after: it is
    // stopped once the file changed).
    let before = std::fs::read_to_string(codex_home.join("auth.json")).unwrap();
    let mut cli = Command::new(&codex);
    cli.args(["exec", "--skip-git-repo-check", "hi"]).current_dir(&ws);
    cli.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    cli.env("OPENAI_BASE_URL", format!("{}/v1", stub.root)).env("HOME", dir.path());
    cli.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut child = cli.spawn().expect("start the codex CLI");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(codex_home.join("auth.json")).unwrap() == before {
        assert!(std::time::Instant::now() < deadline, "the Codex CLI did not refresh its login within 60 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    let written: Value = serde_json::from_str(&std::fs::read_to_string(codex_home.join("auth.json")).unwrap()).unwrap();
    assert_eq!(written["tokens"]["access_token"], json!(stub.fresh_access_token), "the CLI wrote: {written}");
    let refreshes = stub.token_requests().len();

    // bub-rs reads what the CLI wrote.
    let (out, ok) = run(&bub_bin(), &["run", "hi"], &ws, &env, &[]);
    assert!(ok && out.contains("hello from codex"), "{out}");
    assert_eq!(stub.token_requests().len(), refreshes, "bub-rs refreshed a login the CLI had just refreshed");
    let call = stub.model_requests().pop().expect("a call to Codex's backend");
    assert_eq!(call.header("authorization"), Some(format!("Bearer {}", stub.fresh_access_token).as_str()));
    assert_eq!(call.header("chatgpt-account-id"), Some("acct-1"));

    // The CLI reads what bub-rs wrote.
    expired_login(&codex_home);
    let (out, ok) = run(&bub_bin(), &["run", "hi"], &ws, &env, &[]);
    assert!(ok, "{out}");
    let mut status = Command::new(&codex);
    status.args(["login", "status"]).env("HOME", dir.path());
    status.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let out = status.output().expect("run codex login status");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("Logged in using ChatGPT"), "the CLI reads bub-rs's file as: {text}");
}

/// `@openai/codex` from npm, pinned, once per target folder.
fn codex_cli() -> Option<PathBuf> {
    static INSTALLED: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| bub_tests::npm::install("npm-codex", "@openai/codex@0.171.0", "node_modules/.bin/codex"))
        .clone()
}
