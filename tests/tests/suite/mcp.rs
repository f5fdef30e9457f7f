//! The `mcp` plugin (MCP servers' tools for the agent) through the real loader,
//! against the MCP server the test run builds (`tests/mcp-server`), over
//! stdio and streamable HTTP.

use std::io::BufRead;

use bub_tests::{
    build_plugins, lib,
    provider::{chat, Provider},
    run_bub, Home,
};
use serde_json::{json, Value};

fn server_bin() -> std::path::PathBuf {
    build_plugins(false).join("bub-mcp-test-server")
}

fn bub(home: &Home, args: &[&str]) -> String {
    let (out, err, ok) = run_bub(home, args);
    assert!(ok, "bub {args:?}: {err}");
    out
}

/// A streamable-HTTP server on loopback; killed when dropped.
struct HttpServer(std::process::Child, String);

impl HttpServer {
    fn start() -> HttpServer {
        let mut child = std::process::Command::new(server_bin())
            .args(["--http", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the MCP test server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        HttpServer(child, format!("http://{}/mcp", line.trim()))
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `bub mcp add/list/remove` edit `$BUB_HOME/mcp.json`; the servers' tools
/// run as `mcp.<server>_<tool>` (here in command mode, through the tool
/// hooks) over stdio and HTTP; an error result fails the call with its
/// text; an unreachable server is left out and the others still work.
#[test]
fn mcp_servers_tools_run_over_stdio_and_http() {
    let home = Home::new();
    home.install("mcp", &lib("mcp"), json!({"connect_timeout_seconds": 10}));
    let http = HttpServer::start();
    let stdio = server_bin();
    assert!(
        bub(&home, &["mcp", "add", "calc", "--command", stdio.to_str().unwrap()]).contains("added MCP server 'calc'")
    );
    bub(&home, &["mcp", "add", "web", "--url", &http.1]);
    bub(&home, &["mcp", "add", "gone", "--url", "http://127.0.0.1:9/mcp"]);
    let listed = bub(&home, &["mcp", "list", "--tools"]);
    assert!(listed.contains("mcp.calc_add") && listed.contains("mcp.web_echo"), "{listed}");
    assert!(
        listed.contains("gone  http://127.0.0.1:9/mcp") || listed.contains("gone  http: http://127.0.0.1:9/mcp"),
        "{listed}"
    );
    assert!(listed.contains("unreachable"), "{listed}");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(home.path().join("mcp.json")).unwrap()).unwrap();
    assert_eq!(file["mcpServers"]["calc"]["command"], stdio.to_str().unwrap());

    assert!(bub(&home, &["run", ",mcp.calc_echo text=over-stdio"]).contains("echo: over-stdio"));
    assert!(bub(&home, &["run", ",mcp.web_echo text=over-http"]).contains("echo: over-http"));
    let (_, err, ok) = run_bub(&home, &["run", ",mcp.calc_fail"]);
    assert!(!ok && err.contains("tool fail failed: this tool always fails"), "{err}");

    assert!(bub(&home, &["mcp", "remove", "calc"]).contains("removed"));
    let (_, err, ok) = run_bub(&home, &["mcp", "remove", "calc"]);
    assert!(!ok && err.contains("no MCP server 'calc'"), "{err}");
}

fn hostile_server() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/hostile_server.py");
    path.to_str().unwrap().to_owned()
}

/// Whether a process whose command line holds `marker` is alive.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        std::fs::read(p.path().join("cmdline")).is_ok_and(|c| {
            String::from_utf8_lossy(&c).contains(marker) && !String::from_utf8_lossy(&c).contains("hostile_server")
        })
    })
}

/// A hostile MCP server: one that answers `initialize`
/// but never `tools/list` is left out after `connect_timeout_seconds` and
/// killed with everything it started (its process group); tool names that
/// are not 1–64 of `A–Z a–z 0–9 _ - .` are left out, descriptions reach the
/// terminal without control characters; a result over `max_message_bytes`
/// fails its call at once, saying why (rmcp alone dropped it and the call
/// waited 600 s for its deadline).
#[test]
fn hostile_mcp_servers_are_bounded() {
    let home = Home::new();
    home.install("mcp", &lib("mcp"), json!({"connect_timeout_seconds": 2, "max_message_bytes": 100_000}));
    let marker = format!("9{}.5", std::process::id());
    let started = std::time::Instant::now();
    let add = |name: &str, args: &[&str]| {
        let mut all = vec!["mcp", "add", name, "--command"];
        let line = std::iter::once("python3".to_owned())
            .chain(std::iter::once(hostile_server()))
            .chain(args.iter().map(|a| a.to_string()))
            .collect::<Vec<_>>()
            .join(" ");
        all.push(&line);
        bub(&home, &all);
    };
    add("stuck", &["hang", &marker]);
    let (out, err, ok) = run_bub(&home, &["run", ",echo still here"]);
    assert!(ok && out.contains("still here"), "{err}");
    assert!(err.contains("server 'stuck' is left out: no answer within 2s"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!running(&marker), "the server's grandchild outlived it");
    bub(&home, &["mcp", "remove", "stuck"]);

    add("h", &["names"]);
    let (listed, err, ok) = run_bub(&home, &["mcp", "list", "--tools"]);
    assert!(ok, "{err}");
    assert!(listed.contains("mcp.h_big") && listed.contains("mcp.h_ok.name-1"), "{listed}");
    assert!(
        !listed.contains('\u{1b}') && !listed.contains("two words") && !listed.contains("xxxxxxxxxx"),
        "{listed:?}"
    );
    assert!(err.contains("is left out: a tool name is 1 to 64 of"), "{err}");
    let started = std::time::Instant::now();
    let (_, err, ok) = run_bub(&home, &["run", ",mcp.h_big"]);
    assert!(!ok);
    assert!(err.contains("larger than 100000 bytes") && err.contains("max_message_bytes"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

/// The model sees MCP tools with their schemas and calls them like any
/// tool: `mcp_calc_add {"a": 2, "b": 3}` → "5".
#[test]
fn the_model_calls_an_mcp_tool() {
    let provider = Provider::start(vec![
        chat::tool_calls("", &[("call_1", "mcp_calc_add", r#"{"a": 2, "b": 3}"#)]),
        chat::text("The sum is 5."),
    ]);
    let home = Home::new();
    home.install("mcp", &lib("mcp"), json!({}));
    bub(&home, &["mcp", "add", "calc", "--command", server_bin().to_str().unwrap()]);
    home.use_model("openai:m", &provider.base_url, json!({}));
    let out = bub(&home, &["run", "add 2 and 3"]);
    assert!(out.contains("The sum is 5."), "{out}");
    let requests = provider.requests();
    let tools = requests[0].body["tools"].as_array().unwrap();
    let add = tools.iter().find(|t| t["function"]["name"] == "mcp_calc_add").expect("the MCP tool is offered");
    assert_eq!(add["function"]["description"], "Add two numbers");
    assert_eq!(add["function"]["parameters"]["required"], json!(["a", "b"]));
    let messages = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["content"], "5");
}

/// The secrets bub's environment holds in the environment tests.
const SECRETS: [(&str, &str); 3] = [
    ("OPENAI_API_KEY", "sk-secret-openai"),
    ("BUB_API_KEY", "sk-secret-bub"),
    ("BUB_TAPE_POSTGRES__URL", "postgres://u:pw@db/x"),
];

/// `bub run <line>` with [`SECRETS`] in its environment: what it printed
/// (it must succeed).
fn run_with_secrets(home: &Home, line: &str) -> String {
    let out = std::process::Command::new(bub_tests::bub_bin())
        .arg("--home")
        .arg(home.path())
        .args(["run", line])
        .env_remove("BUB_PLUGIN_PATH")
        .envs(SECRETS)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `text` shows none of [`SECRETS`].
fn no_secret_in(text: &str) -> bool {
    SECRETS.iter().all(|(_, secret)| !text.contains(secret))
}

/// Security: a stdio server gets a safe set of bub's
/// environment and what `mcp.json` names for it, never bub's keys.
#[test]
fn stdio_servers_do_not_see_bubs_secrets() {
    let home = Home::new();
    home.install("mcp", &lib("mcp"), json!({"connect_timeout_seconds": 10}));
    let servers = json!({"mcpServers": {"env": {"command": server_bin(), "env": {"NAMED_FOR_IT": "yes"}}}});
    bub_kit::files::write_private(&home.path().join("mcp.json"), servers.to_string().as_bytes()).unwrap();
    let text = run_with_secrets(&home, ",mcp.env_get_env");
    assert!(text.contains("NAMED_FOR_IT=yes") && text.contains("PATH="), "{text}");
    assert!(no_secret_in(&text), "the server saw bub's secrets: {text}");
}

/// An MCP result's image reaches the model as a media part and
/// an embedded resource as its text; command mode says what came back.
#[test]
fn mcp_media_results_reach_the_model_and_are_described_in_command_mode() {
    let home = Home::new();
    home.install("mcp", &lib("mcp"), json!({"connect_timeout_seconds": 10}));
    bub(&home, &["mcp", "add", "pics", "--command", server_bin().to_str().unwrap()]);
    let out = bub(&home, &["run", ",mcp.pics_picture"]);
    assert!(out.contains("a red dot") && out.contains("[image: image/png,"), "{out}");
    assert!(out.contains("[resource note://1]\nremember the dot"), "{out}");

    let provider = Provider::start(vec![chat::tool_calls("", &[("c1", "mcp_pics_picture", "{}")]), chat::text("seen")]);
    home.use_model("openai:m", &provider.base_url, json!({}));
    bub(&home, &["run", "show me the picture"]);
    let sent = provider.requests()[1].body["messages"].to_string();
    assert!(sent.contains("data:image/png;base64,iVBORw0KGgo"), "the image did not reach the model: {sent}");
}

/// The reference `everything` MCP server from the npm registry, installed
/// once per test run under the target folder (pinned); None (the caller
/// skips, saying why) only when npm itself is missing.
fn everything_server() -> Option<std::path::PathBuf> {
    const PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";
    static INSTALLED: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            bub_tests::npm::install("npm-mcp-everything", PACKAGE, "node_modules/.bin/mcp-server-everything")
        })
        .clone()
}

/// Real MCP servers: the reference `everything` server from npm,
/// over stdio — its tools run, its image comes back described, its tool
/// names (with `-`) are valid model names, its task-only tool is left out
/// (17.18), and it never sees bub's keys (17.16, through its own `get-env`).
#[test]
fn the_reference_everything_server_from_npm_works_and_sees_no_secrets() {
    let Some(server) = everything_server() else {
        return eprintln!("SKIPPED the_reference_everything_server_from_npm…: npm is not installed");
    };
    let home = Home::new();
    home.install("mcp", &lib("mcp"), json!({"connect_timeout_seconds": 30}));
    let servers = json!({"mcpServers": {"everything": {"command": server, "args": ["stdio"]}}});
    bub_kit::files::write_private(&home.path().join("mcp.json"), servers.to_string().as_bytes()).unwrap();
    let (listed, log, ok) = run_bub(&home, &["mcp", "list", "--tools"]);
    assert!(ok, "{log}");
    assert!(listed.contains("mcp.everything_echo") && listed.contains("mcp.everything_get-env"), "{listed}");
    // Its task-only tool (execution.taskSupport "required") would
    // always fail with -32601: left out, saying why.
    assert!(!listed.contains("simulate-research-query"), "a task-only tool is offered: {listed}");
    assert!(
        log.contains("tool 'simulate-research-query' is left out: it runs only as an MCP task"),
        "no line says why: {log}"
    );
    assert!(bub(&home, &["run", ",mcp.everything_echo message=from-bub"]).contains("from-bub"));
    let image = bub(&home, &["run", ",mcp.everything_get-tiny-image"]);
    assert!(image.contains("[image: image/png,"), "{image}");

    let text = run_with_secrets(&home, ",mcp.everything_get-env");
    assert!(text.contains("PATH"), "{text}");
    assert!(no_secret_in(&text), "the npm server saw bub's secrets: {text}");
}

/// A streamable-HTTP server's answer over
/// `max_message_bytes` fails its call, as a stdio server's does (rmcp's
/// own HTTP limits are set to the plugin's); a smaller one passes.
#[test]
fn an_http_mcp_answer_over_max_message_bytes_fails_its_call() {
    let home = Home::new();
    home.install("mcp", &lib("mcp"), json!({"connect_timeout_seconds": 10, "max_message_bytes": 20_000}));
    let http = HttpServer::start();
    bub(&home, &["mcp", "add", "web", "--url", &http.1]);
    let small = "s".repeat(1000);
    assert!(bub(&home, &["run", &format!(",mcp.web_echo text={small}")]).contains(&small));
    let big = "b".repeat(60_000);
    let started = std::time::Instant::now();
    let (out, err, ok) = run_bub(&home, &["run", &format!(",mcp.web_echo text={big}")]);
    assert!(!ok && !out.contains(&big), "{err}");
    assert!(err.contains("larger than 20000 bytes") && err.contains("max_message_bytes"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "the call waited for its deadline");
}

/// A real MCP server from PyPI (fastmcp, pinned in the tests' venv) that
/// demands a bearer token (fastmcp's own `StaticTokenVerifier`), over
/// `transport` (`http`: streamable HTTP; `sse`: the older HTTP with
/// server-sent events, which it then speaks alone); killed when dropped.
struct GuardedServer(std::process::Child, String);

const GUARDED_SERVER: &str = r#"
import sys
from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
transport, port = sys.argv[1], int(sys.argv[2])
auth = StaticTokenVerifier(tokens={"s3cret-token": {"client_id": "bub-test", "scopes": []}})
mcp = FastMCP("guarded", auth=auth)
@mcp.tool
def whoami(text: str) -> str:
    """Answers who it is."""
    return f"guarded over {transport}: {text}"
mcp.run(transport=transport, host="127.0.0.1", port=port, show_banner=False)
"#;

impl GuardedServer {
    fn start(venv: &std::path::Path, transport: &str) -> GuardedServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let script = std::env::temp_dir().join(format!("bub-guarded-mcp-{}.py", std::process::id()));
        std::fs::write(&script, GUARDED_SERVER).unwrap();
        let child = std::process::Command::new(venv.join("bin/python"))
            .arg(&script)
            .args([transport, &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the fastmcp server");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "the fastmcp server did not listen within 60 s");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let path = if transport == "sse" { "sse" } else { "mcp" };
        GuardedServer(child, format!("http://127.0.0.1:{port}/{path}"))
    }
}

impl Drop for GuardedServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Servers that need credentials, or speak only the older SSE transport,
/// as bub-mcp's `mcp.json` names them: fastmcp servers from PyPI that
/// refuse a request without their bearer token work with `auth` (streamable
/// HTTP) or an `Authorization` header (SSE, chosen by `transport` or a path
/// ending in /sse); without the token the server is left out with what to
/// check; an entry with a key bub-rs does not act on (a misspelt `header`)
/// is left out naming the key, never loaded without it.
#[test]
fn servers_behind_a_token_and_older_sse_servers_work_and_unknown_keys_are_refused() {
    let Some(venv) = bub_tests::python::venv_or_skip("servers_behind_a_token_and_older_sse_servers_work…") else {
        return;
    };
    let http = GuardedServer::start(venv, "http");
    let sse = GuardedServer::start(venv, "sse");
    let home = Home::new();
    home.install("mcp", &lib("mcp"), json!({"connect_timeout_seconds": 30}));
    bub(&home, &["mcp", "add", "tokened", "--url", &http.1, "--auth", "s3cret-token"]);
    let headers = json!({"Authorization": "Bearer s3cret-token"}).to_string();
    bub(&home, &["mcp", "add", "older", "--url", &sse.1, "--headers", &headers]);
    let listed = bub(&home, &["mcp", "list", "--tools"]);
    assert!(listed.contains(&format!("older  sse: {}", sse.1)), "{listed}");
    assert!(listed.contains("mcp.tokened_whoami") && listed.contains("mcp.older_whoami"), "{listed}");
    assert!(!listed.contains("s3cret"), "a credential was shown: {listed}");
    assert!(bub(&home, &["run", ",mcp.tokened_whoami text=hi"]).contains("guarded over http: hi"));
    assert!(bub(&home, &["run", ",mcp.older_whoami text=hello"]).contains("guarded over sse: hello"));

    // Without the token: refused by the server, left out, saying what to check.
    let file = json!({"mcpServers": {
        "bare": {"url": http.1},
        "misspelt": {"url": http.1, "header": {"Authorization": "Bearer s3cret-token"}},
        "older": {"url": sse.1, "transport": "sse", "headers": {"Authorization": "Bearer s3cret-token"}},
    }});
    bub_kit::files::write_private(&home.path().join("mcp.json"), file.to_string().as_bytes()).unwrap();
    let (out, err, ok) = run_bub(&home, &["run", ",mcp.older_whoami text=still"]);
    assert!(ok && out.contains("guarded over sse: still"), "the good server stopped working: {out}{err}");
    assert!(
        err.contains("server 'bare' is left out") && err.contains("check the entry's `auth` token or `headers`"),
        "{err}"
    );
    assert!(err.contains("server 'misspelt' is left out: the key `header` is not one bub-rs acts on"), "{err}");
    // `bub mcp add` refuses what the gateway would leave out.
    let (_, err, ok) = run_bub(&home, &["mcp", "add", "x", "--url", &http.1, "--auth", "oauth"]);
    assert!(!ok && err.contains("browser sign-in"), "{err}");
}
