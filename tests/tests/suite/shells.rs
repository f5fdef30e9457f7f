//! Behaviour 64: background shells belong to the `running()` scope that
//! started them. (Its own test binary: the builtin's `bash` tool uses the
//! newest open scope of the process, and other tests open scopes too.)

use bub_host::WithBuiltin as _;
use bub_host::{framework::Framework, HostBuilder};
use bub_tests::block_on;
use serde_json::{json, Map, Value};

fn tool(fw: &Framework, name: &str, args: Value) -> Result<String, String> {
    let tools = fw.get_tools().unwrap();
    let tool = tools.iter().find(|t| t.name() == name).expect("the builtin provides it");
    let args: Map<String, Value> = serde_json::from_value(args).unwrap();
    block_on(tool.call(&args)).map(|v| v.as_str().unwrap_or_default().to_owned()).map_err(|e| e.to_string())
}

fn bash(fw: &Framework, args: Value) -> Result<String, String> {
    tool(fw, "bash", args)
}

/// Running (a zombie waiting for a reaper that may not exist here is not).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

#[test]
fn b64_scope_exit_terminates_shells() {
    let ws = tempfile::tempdir().unwrap();
    let fw = Framework::new(&HostBuilder::new().builtin().build(), ws.path());
    let scope = block_on(fw.running()).unwrap();

    // Foreground: runs to completion.
    assert_eq!(bash(&fw, json!({"command": "echo hi"})).unwrap(), "hi");
    // A failing command is a tool failure carrying its exit code and output (behaviour 186).
    let err = bash(&fw, json!({"command": "echo boom; exit 7"})).unwrap_err();
    assert!(err.contains("command exited with code 7\noutput:\nboom"), "{err}");

    // Background: a shell ignoring SIGTERM, and its child, in one group.
    let started =
        bash(&fw, json!({"command": "trap '' TERM; echo $$; sleep 60 & echo $!; wait", "background": true})).unwrap();
    let id = started.lines().next().unwrap().strip_prefix("Shell started, shell_id: ").unwrap().to_owned();
    assert!(id.starts_with("bash-") && id.len() == 13, "{id}");
    let pids: Vec<i32> = loop {
        let out = tool(&fw, "bash.output", json!({"shell_id": id})).unwrap();
        assert!(out.starts_with(&format!("id: {id}\nstatus: running\nexit_code: null\n")), "{out}");
        let pids: Vec<i32> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() == 2 {
            break pids;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(pids.iter().all(|p| alive(*p)));

    let t = std::time::Instant::now();
    block_on(scope.exit(None)).unwrap();
    // SIGTERM was ignored by the shell: SIGKILL after the 3 s grace period.
    assert!(t.elapsed() >= std::time::Duration::from_secs(3), "{:?}", t.elapsed());
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(pids.iter().all(|p| !alive(*p)), "every process of the group is gone");

    // New starts fail once the scope is closed.
    let err = bash(&fw, json!({"command": "echo late"})).unwrap_err();
    assert!(err.contains("shell runtime is closed"), "{err}");
}

/// `bash.kill` answers as Bub (`status: exited`, the signal as
/// a negative exit code) and forgets the shell.
#[test]
fn bash_kill_reports_the_signal_and_forgets_the_shell() {
    let ws = tempfile::tempdir().unwrap();
    let fw = Framework::new(&HostBuilder::new().builtin().build(), ws.path());
    let scope = block_on(fw.running()).unwrap();
    let started = bash(&fw, json!({"command": "sleep 30", "background": true})).unwrap();
    let id = started.lines().next().unwrap().strip_prefix("Shell started, shell_id: ").unwrap().to_owned();
    let killed = tool(&fw, "bash.kill", json!({"shell_id": id})).unwrap();
    assert_eq!(killed, format!("id: {id}\nstatus: exited\nexit_code: -15"));
    let err = tool(&fw, "bash.output", json!({"shell_id": id})).unwrap_err();
    assert!(err.contains("unknown shell id: "), "{err}");
    block_on(scope.exit(None)).unwrap();
}

fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        std::fs::read(p.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(marker))
            && std::fs::read_to_string(p.path().join("stat")).is_ok_and(|s| !s.contains(") Z "))
    })
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A cancelled `bash` call takes its foreground shell with it,
/// and a finished command's redirected background child does not outlive it.
#[test]
fn cancelled_and_finished_foreground_shells_leave_nothing_running() {
    let ws = tempfile::tempdir().unwrap();
    let fw = Framework::new(&HostBuilder::new().builtin().build(), ws.path());
    let scope = block_on(fw.running()).unwrap();
    let tools = fw.get_tools().unwrap();
    let bash_tool = tools.iter().find(|t| t.name() == "bash").unwrap().clone();
    let pid = std::process::id();

    let first = format!("sleep 37.{pid}1");
    let args: Map<String, Value> = serde_json::from_value(json!({"command": first})).unwrap();
    block_on(async {
        let call = bash_tool.call(&args);
        let _ = tokio::time::timeout(std::time::Duration::from_millis(500), call).await;
    });
    wait_until("the cancelled call's shell is still running", || !running(&first));

    let second = format!("sleep 38.{pid}2");
    let out = bash(&fw, json!({"command": format!("{second} > /dev/null 2>&1 & echo started")})).unwrap();
    assert_eq!(out, "started");
    wait_until("the redirected child outlived its command", || !running(&second));
    block_on(scope.exit(None)).unwrap();
}

/// A second Ctrl-C ends `bub run` at once, but not before the command its
/// turn started is gone, even one that ignores SIGTERM (TERM, then KILL
/// after the grace): nothing is left running as an orphan.
#[test]
fn a_second_ctrl_c_ends_the_commands_the_turn_started_before_exiting() {
    let home = bub_tests::Home::new();
    let ws = tempfile::tempdir().unwrap();
    let marker = format!("sleep 71.{}3", std::process::id());
    let line = format!(",bash command='trap \"\" TERM INT; {marker}'");
    let mut child = std::process::Command::new(bub_tests::bub_bin())
        .arg("-w")
        .arg(ws.path())
        .args(["run", &line])
        .env("BUB_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The command itself (bub's own command line names it too).
    let sleeping = |marker: &str| {
        std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
            std::fs::read(p.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == marker)
                && std::fs::read_to_string(p.path().join("stat")).is_ok_and(|s| !s.contains(") Z "))
        })
    };
    wait_until("the command did not start", || sleeping(&marker));
    let int = || {
        let status = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
        assert!(status.success());
    };
    int();
    std::thread::sleep(std::time::Duration::from_millis(300));
    int();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "bub did not exit after the second Ctrl-C");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(!sleeping(&marker), "the command outlived bub");
}
