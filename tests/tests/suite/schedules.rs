//! The `schedule` plugin in a gateway left running for months: a job
//! with no next time ends instead of firing at every tick; a zone that
//! cannot be resolved is refused with the package to install, and never
//! fires at every tick either; idle jobs cost next to nothing; many jobs
//! firing at once do not rewrite the job list once per job.
//! (RELIABILITY.md "Bounds" cites these; cron's rules are `cron.rs`'s
//! unit tests and the reference comparison.)

use std::time::{Duration, Instant};

use bub_tests::{gateway::GatewayProcess, lib, run_bub_env, Home};
use serde_json::{json, Value};

fn home_with_schedule(tick_ms: u64) -> Home {
    let home = Home::new();
    home.install("http-channel", &lib("http-channel"), json!({"bind": "127.0.0.1:0", "token": "t"}));
    home.install("schedule", &lib("schedule"), json!({"tick_ms": tick_ms}));
    home
}

fn write_jobs(home: &Home, jobs: &Value) {
    let dir = home.path().join("data/schedule");
    bub_kit::files::create_private_dir(&dir).unwrap();
    bub_kit::files::write_private(&dir.join("jobs.json"), jobs.to_string().as_bytes()).unwrap();
}

/// The process's CPU time (user and system) and bytes written so far.
fn cpu_and_writes(pid: u32) -> (Duration, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let written = io.lines().find_map(|l| l.strip_prefix("wchar: ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    (Duration::from_millis(ticks * 10), written)
}

fn fired(gateway: &GatewayProcess, id: &str) -> usize {
    gateway.log().matches(&format!("job {id} fired on session")).count()
}

/// A repeating job whose expression never matches again (the 30th of
/// February, written into jobs.json) fires once and ends; before, it
/// fired at every tick (45 times a minute for a seven-field cron whose
/// year had passed).
#[test]
fn a_job_with_no_next_time_fires_once_and_ends() {
    let home = home_with_schedule(100);
    write_jobs(
        &home,
        &json!([{"id": "never-again", "session_id": "s", "message": "last time", "next_run": 0.0,
            "cron": "0 0 30 2 *", "created": "x"}]),
    );
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    gateway.wait_for_log("job never-again fired", Duration::from_secs(30), "the job fired");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(fired(&gateway, "never-again"), 1, "{}", gateway.log());
    assert!(gateway.log().contains("has no next time after this run; it ends"), "{}", gateway.log());
    let (left, err, ok) = run_bub_env(&home, &["run", "--session-id", "s", ",schedule.list all=true"], &[]);
    assert!(ok, "{err}");
    assert!(!left.contains("last time"), "{left}");
    // And one that never runs at all is refused when it is added.
    let (_, err, ok) =
        run_bub_env(&home, &["run", "--session-id", "s", r#",schedule.add message=x cron="0 0 30 2 *""#], &[]);
    assert!(!ok && err.contains("never runs again"), "{err}");
}

/// A `bub` that sees no time zone database: an empty folder mounted over
/// /usr/share/zoneinfo in a mount namespace of its own (as root, with
/// util-linux's `unshare`); None, said, where that cannot be made.
fn bub_without_zone_database(home: &Home, test: &str) -> Option<std::path::PathBuf> {
    let empty = home.path().join("no-zoneinfo");
    std::fs::create_dir_all(&empty).unwrap();
    let script = home.path().join("bub-without-tzdata.sh");
    let text = format!(
        "#!/bin/sh\nexec unshare --mount sh -c 'mount --bind \"$0\" /usr/share/zoneinfo && exec \"$@\"' {} {} \"$@\"\n",
        empty.display(),
        bub_tests::bub_bin().display()
    );
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let probe = std::process::Command::new(&script).arg("--version").output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED {test} (no zone database half): cannot hide /usr/share/zoneinfo (needs root and unshare)");
        return None;
    }
    Some(script)
}

/// Without a time zone database a zoned job is refused, naming the
/// package; an empty or pseudo zone is refused too. A zoned job already
/// in jobs.json does not fire at every tick: it is put off, said once.
#[test]
fn a_zone_that_cannot_be_resolved_is_refused_and_never_runs_away() {
    let home = home_with_schedule(100);
    let add = |tz: &str| {
        run_bub_env(
            &home,
            &["run", "--session-id", "s", &format!(",schedule.add message=x cron=\"* * * * *\" tz={tz}")],
            &[],
        )
    };
    for pseudo in ["localtime", "Factory", "\"\"", "posix/Europe/Berlin"] {
        let (_, err, ok) = add(pseudo);
        assert!(!ok && err.contains("IANA"), "{pseudo}: {err}");
    }
    assert!(add("Europe/Berlin").2, "with the database it is a job");
    let Some(no_db) = bub_without_zone_database(&home, "a_zone_that_cannot_be_resolved_is_refused_and_never_runs_away")
    else {
        return;
    };
    let out = std::process::Command::new(&no_db)
        .arg("--home")
        .arg(home.path())
        .args(["run", "--session-id", "s", r#",schedule.add message=x cron="* * * * *" tz=Asia/Tokyo"#])
        .env_remove("BUB_PLUGIN_PATH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no time zone database") && err.contains("tzdata"), "{err}");

    let jobs: Value =
        serde_json::from_slice(&std::fs::read(home.path().join("data/schedule/jobs.json")).unwrap()).unwrap();
    let id = jobs[0]["id"].as_str().unwrap().to_owned();
    let mut due = jobs.clone();
    due[0]["next_run"] = json!(0.0);
    write_jobs(&home, &due);
    let mut gateway = GatewayProcess::start_bin(&no_db, home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    gateway.wait_for_log("is put off for an hour", Duration::from_secs(30), "the job put off");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(fired(&gateway, &id), 0, "{}", gateway.log());
    assert_eq!(gateway.log().matches("is put off for an hour").count(), 1, "said once: {}", gateway.log());
    assert!(gateway.log().contains("tzdata"), "{}", gateway.log());
}

/// 20,000 jobs that are not due cost next to nothing: with a 100 ms tick
/// the list was read at every tick (about half a core); now a tick looks
/// at the files' identity and reads nothing.
#[test]
fn twenty_thousand_idle_jobs_cost_next_to_nothing() {
    let home = home_with_schedule(100);
    let later = 4_000_000_000.0;
    let jobs: Vec<Value> = (0..20_000)
        .map(|i| {
            json!({"id": format!("idle-{i}"), "session_id": "s", "message": "later", "next_run": later,
            "every_seconds": 3600.0, "created": "x"})
        })
        .collect();
    write_jobs(&home, &Value::Array(jobs));
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    std::thread::sleep(Duration::from_secs(2));
    let pid = gateway.pid().unwrap();
    let (cpu_before, _) = cpu_and_writes(pid);
    std::thread::sleep(Duration::from_secs(5));
    let (cpu_after, _) = cpu_and_writes(pid);
    let used = cpu_after - cpu_before;
    println!("BOUND 20,000 idle jobs, 100 ms tick: {:.2} s of CPU in 5 s", used.as_secs_f64());
    assert!(used < Duration::from_millis(1000), "idle jobs cost {used:?} of CPU in 5 s");
}

/// 1,000 one-time jobs due at once: each turn runs, and the list is not
/// rewritten once per job (before: 6,000 due jobs wrote 2.9 GiB): what
/// the gateway writes stays near the turns' own tapes.
#[test]
fn a_thousand_due_jobs_fire_without_rewriting_the_list_per_job() {
    let home = home_with_schedule(100);
    let jobs: Vec<Value> = (0..1_000)
        .map(|i| {
            json!({"id": format!("due-{i}"), "session_id": format!("s{}", i % 50),
            "message": format!("job {i} {}", "x".repeat(200)), "next_run": 0.0, "created": "x"})
        })
        .collect();
    write_jobs(&home, &Value::Array(jobs));
    let list_bytes = std::fs::metadata(home.path().join("data/schedule/jobs.json")).unwrap().len();
    let started = Instant::now();
    let mut gateway = GatewayProcess::start(home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    let done =
        || std::fs::read_to_string(home.path().join("data/schedule/jobs.done")).unwrap_or_default().lines().count();
    let deadline = Instant::now() + Duration::from_secs(300);
    while done() < 1_000 {
        assert!(Instant::now() < deadline, "{} of 1,000 done\n{}", done(), gateway.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, written) = cpu_and_writes(gateway.pid().unwrap());
    println!(
        "BOUND 1,000 due one-time jobs: all ran in {:.1} s, the gateway wrote {:.1} MB (the list is {:.2} MB)",
        started.elapsed().as_secs_f64(),
        written as f64 / 1e6,
        list_bytes as f64 / 1e6
    );
    assert!(written < list_bytes * 100, "wrote {written} bytes: the list was rewritten per job");
}

/// The reference: croniter (PyPI, pinned) reads each expression on the
/// zone's wall clock (naive times), CPython's zoneinfo turns wall-clock
/// times into instants (PEP 495: a skipped time with `fold=0` takes the
/// offset before the jump, so it runs as far after it), and the documented
/// rules pick among a repeated hour's two instants (both for a `*` in the
/// minute or hour field, else the first). Cases are expressions × zones ×
/// instants around daylight-saving days; for each, its next five runs.
const REFERENCE: &str = r#"
import json, sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo
from croniter import croniter

def runs(expr, tz, after, count):
    z = ZoneInfo(tz)
    after = datetime.fromisoformat(after.replace("Z", "+00:00"))
    fields = expr.split()
    minute, hour = (fields[0], fields[1]) if len(fields) == 5 else (fields[1], fields[2])
    through = minute.startswith("*") or hour.startswith("*")
    civil = after.astimezone(z).replace(tzinfo=None) - timedelta(hours=3)
    it = croniter(expr, civil)
    found, horizon = set(), None
    for _ in range(200000):
        c = it.get_next(datetime)
        if horizon is not None and c > horizon:
            break
        first, second = c.replace(tzinfo=z, fold=0), c.replace(tzinfo=z, fold=1)
        a, b = first.timestamp(), second.timestamp()
        gap = datetime.fromtimestamp(a, z).replace(tzinfo=None) != c
        if gap or a == b:
            instants = [a]
        else:
            instants = [min(a, b), max(a, b)] if through else [min(a, b)]
        found.update(t for t in instants if t > after.timestamp())
        if len(found) >= count:
            nth = sorted(found)[count - 1]
            horizon = datetime.fromtimestamp(nth, z).replace(tzinfo=None) + timedelta(hours=3)
    return [datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") for t in sorted(found)[:count]]

cases = json.load(sys.stdin)
print(json.dumps([runs(c["cron"], c["tz"], c["after"], 5) for c in cases]))
"#;

/// The cases: crontab's weekday numbers and names, both day fields, steps,
/// lists and ranges, leap days; zones with and without daylight saving,
/// half-hour and 45-minute offsets, Lord Howe's half-hour shift; instants
/// before New York's, Europe's and Lord Howe's 2026 changes and on ordinary
/// days.
fn reference_cases() -> Vec<Value> {
    let plain = [
        "30 9 * * 1-5",
        "0 0 * * 7",
        "0 0 * * 0",
        "0 0 * * 6,0",
        "0 9 1 * 1",
        "0 9 13 * 5",
        "0 12 * * mon-fri",
        "5 4 * * sun",
        "0 0 1 jan *",
        "0 0 29 2 *",
        "59 23 31 12 *",
        "15 */6 * * *",
        "0 0,12 1 */2 *",
        "*/7 * * * *",
    ];
    let dst = ["30 2 * * *", "0,30 2 * * *", "*/15 2 * * *", "30 1 * * *", "0 * * * *", "45 1 * * *"];
    let mut cases = Vec::new();
    for (i, expr) in plain.iter().enumerate() {
        let tz = ["UTC", "Asia/Kathmandu", "Asia/Tokyo", "Europe/Berlin", "America/New_York"][i % 5];
        for after in ["2026-12-05T00:00:00Z", "2027-02-27T13:30:00Z"] {
            cases.push(json!({"cron": expr, "tz": tz, "after": after}));
        }
    }
    for expr in dst {
        for (tz, after) in [
            ("America/New_York", "2026-03-07T12:00:00Z"),
            ("America/New_York", "2026-10-31T12:00:00Z"),
            ("America/New_York", "2026-11-01T05:45:00Z"),
            ("Europe/Berlin", "2026-03-28T12:00:00Z"),
            ("Europe/Berlin", "2026-10-24T12:00:00Z"),
            ("Australia/Lord_Howe", "2026-10-03T00:00:00Z"),
        ] {
            cases.push(json!({"cron": expr, "tz": tz, "after": after}));
        }
    }
    cases
}

/// bub-rs's next runs (`schedule.next`, through the real binary and
/// loader) against the reference on 64 expression × zone × instant cases.
#[test]
fn cron_matches_a_reference_nobody_here_wrote() {
    let Some(venv) = bub_tests::python::croniter_venv_or_skip("cron_matches_a_reference_nobody_here_wrote") else {
        return;
    };
    let cases = reference_cases();
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let mut child = std::process::Command::new(venv.join("bin/python"))
        .args(["-c", REFERENCE])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run croniter");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), Value::Array(cases.clone()).to_string().as_bytes())
        .unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let expected: Vec<Vec<String>> = serde_json::from_slice(&out.stdout).unwrap();

    let home = home_with_schedule(1000);
    let mut differ = Vec::new();
    for (case, want) in cases.iter().zip(&expected) {
        let line = format!(
            ",schedule.next cron=\"{}\" tz={} after={} count=5",
            case["cron"].as_str().unwrap(),
            case["tz"].as_str().unwrap(),
            case["after"].as_str().unwrap()
        );
        let (out, err, ok) = run_bub_env(&home, &["run", &line], &[]);
        assert!(ok, "{line}: {err}");
        let answer: Value = serde_json::from_str(out.lines().rev().find(|l| l.starts_with('{')).unwrap()).unwrap();
        let got: Vec<String> =
            answer["runs"].as_array().unwrap().iter().map(|r| r["utc"].as_str().unwrap().to_owned()).collect();
        if &got != want {
            differ.push(format!("{case}\n  bub-rs:    {got:?}\n  reference: {want:?}"));
        }
    }
    println!("REFERENCE cron: {} cases, {} differ", cases.len(), differ.len());
    assert!(differ.is_empty(), "{} of {} cases differ:\n{}", differ.len(), cases.len(), differ.join("\n"));
}

/// Jobs fired by a real gateway across New York's spring-forward day,
/// the clock moved by libfaketime (Debian's `faketime`, 120× from
/// 2026-03-08 06:56 UTC): `*/15 2 * * *` runs four times after the jump
/// (03:00, 03:15, 03:30, 03:45 EDT), `0,30 2 * * *` twice, `30 2 * * *`
/// once, as the module documents.
#[test]
fn cron_jobs_fire_through_a_gateway_across_a_spring_forward_day() {
    if std::process::Command::new("faketime").arg("--version").output().is_err() {
        return eprintln!(
            "SKIPPED cron_jobs_fire_through_a_gateway_across_a_spring_forward_day: faketime is not installed"
        );
    }
    let home = home_with_schedule(100);
    let faked = |start: &str| {
        let script = home.path().join(format!("bub-at-{}.sh", start.replace([' ', ':'], "-")));
        let text = format!(
            "#!/bin/sh\nexport TZ=UTC FAKETIME_DONT_FAKE_MONOTONIC=1\nexec faketime -f '@{start} x120' {} \"$@\"\n",
            bub_tests::bub_bin().display()
        );
        std::fs::write(&script, text).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        script
    };
    let adder = faked("2026-03-08 06:50:00");
    let mut ids = Vec::new();
    for expr in ["*/15 2 * * *", "0,30 2 * * *", "30 2 * * *"] {
        let out = std::process::Command::new(&adder)
            .arg("--home")
            .arg(home.path())
            .args([
                "run",
                "--session-id",
                "dst",
                &format!(",schedule.add message=x cron=\"{expr}\" tz=America/New_York"),
            ])
            .env_remove("BUB_PLUGIN_PATH")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        let job: Value = serde_json::from_str(text.lines().rev().find(|l| l.starts_with('{')).unwrap()).unwrap();
        let first = if expr == "30 2 * * *" { "2026-03-08T07:30:00Z" } else { "2026-03-08T07:00:00Z" };
        assert_eq!(job["next_run"], first, "{expr}: the first run, 03:00 or 03:30 EDT");
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    let mut gateway = GatewayProcess::start_bin(&faked("2026-03-08 06:56:00"), home.path(), &[], &[]);
    gateway.address(home.path(), "http-channel");
    let deadline = Instant::now() + Duration::from_secs(120);
    while fired(&gateway, &ids[0]) < 4 || fired(&gateway, &ids[1]) < 2 || fired(&gateway, &ids[2]) < 1 {
        assert!(Instant::now() < deadline, "not every run came:\n{}", gateway.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Past 03:50 EDT nothing more fires that day.
    std::thread::sleep(Duration::from_secs(3));
    let counts: Vec<usize> = ids.iter().map(|id| fired(&gateway, id)).collect();
    println!("FAULT cron across New York's spring-forward day under faketime: runs {counts:?} (want [4, 2, 1])");
    assert_eq!(counts, [4, 2, 1], "{}", gateway.log());
}
