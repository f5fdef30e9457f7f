//! `schedule`: reminders and cron jobs for Bub.
//!
//! - **Tools** (the model's, or `,schedule.add …` in command mode), told
//!   the turn's session by the host (`context: true`):
//!   `schedule.add {message, after?, at?, every?, cron?, channel?, chat_id?}`
//!   — once `after` a delay (`"90s"`, `"10m"`, `"2h 30m"`) or `at` a time
//!   (RFC 3339, or a local time like `2026-12-24 09:00` in the job's zone),
//!   repeatedly `every` a duration, or on a `cron` expression (5 fields
//!   `min hour dom month dow`, or 6 with seconds first) in the job's time
//!   zone (`tz`, an IANA name; else the plugin's `timezone` setting; else
//!   UTC); `schedule.list {all?}` — this session's jobs (every job with
//!   `all`); `schedule.remove {id}`.
//! - **Daylight saving**: cron times are wall-clock times in the zone. A
//!   time that does not exist on a spring-forward day (02:30 when clocks
//!   jump from 02:00 to 03:00) runs once, at the same offset after the
//!   jump (03:30); a time that happens twice on a fall-back day (01:30)
//!   runs once, the first time.
//! - **Heartbeat** (`heartbeat: true` with `every` or `cron`): a periodic
//!   turn with the job's message as its prompt, told that it may answer
//!   exactly `<no_reply/>` ([`SILENT_MARKER`], as bub-qq does) when there is
//!   nothing to say; such an answer is recorded on the tape and sent
//!   nowhere (the message names the marker as `context.silent_marker`,
//!   which the builtin's outbound honours).
//! - **Channel** `schedule` (a lifecycle channel: `bub gateway` runs it
//!   alongside any other channel): when a job is due it hands the gateway a
//!   message with the job's text on the job's session, so the turn runs
//!   with that session's memory; its reply goes to the job's `channel` (by
//!   default the `schedule` channel itself, which logs it).
//!
//! Jobs persist in `<data dir>/jobs.json`, changed under a file lock (tools
//! in `bub run` and the gateway's channel may change it at once) and
//! replaced atomically. A job that came due while no gateway ran fires once
//! when one starts.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bub_abi::{
    resources::{clients::MessageHandlerClient, Channel, Fut, Tool},
    types::{AdmitAction, AdmitDecision, ChannelInfo, ChannelRole, Envelope, ToolCallContext, ToolSpec, TurnSnapshot},
    BoxError, Object, Plugin, PluginContext,
};
use chrono::{Datelike, Timelike};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The plugin.
pub struct Schedule {
    jobs: Arc<Jobs>,
    tick: Duration,
    timezone: String,
}

/// What a heartbeat's answer is when it has nothing to say.
pub const SILENT_MARKER: &str = "<no_reply/>";

/// What a heartbeat's prompt is followed by.
fn heartbeat_note() -> String {
    format!(
        "(This is a scheduled heartbeat, not a message from the user. If nothing needs saying, answer exactly \
         {SILENT_MARKER} and nothing else: that answer is not sent.)"
    )
}

/// `name` as a time zone, or an error that says what to give.
fn zone(name: &str) -> Result<jiff::tz::TimeZone, String> {
    jiff::tz::TimeZone::get(name)
        .map_err(|e| format!("time zone {name:?} is not known ({e}): give an IANA name such as Europe/Berlin or UTC"))
}

#[bub_abi::plugin]
impl Plugin for Schedule {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let tick_ms = match ctx.config.get("tick_ms") {
            None => 1000,
            Some(v) => v
                .as_u64()
                .or_else(|| v.as_str()?.parse().ok())
                .filter(|t| *t > 0)
                .ok_or("schedule: tick_ms must be a positive number")?,
        };
        let timezone = match ctx.config.get("timezone").and_then(Value::as_str).map(str::trim) {
            Some(name) if !name.is_empty() => {
                zone(name).map_err(|e| format!("schedule: timezone: {e}"))?;
                name.to_owned()
            }
            _ => "UTC".to_owned(),
        };
        Ok(Schedule {
            jobs: Arc::new(Jobs { dir: ctx.data_dir.clone(), warned: Default::default() }),
            tick: Duration::from_millis(tick_ms),
            timezone,
        })
    }

    /// `schedule.add`, `schedule.list`, `schedule.remove`.
    fn provide_tools(&self) -> Option<Vec<Object>> {
        Some(
            [Op::Add, Op::List, Op::Remove]
                .into_iter()
                .map(|op| Object::tool(JobTool { op, jobs: self.jobs.clone(), timezone: self.timezone.clone() }))
                .collect(),
        )
    }

    /// The `schedule` channel: fires due jobs into the gateway.
    fn provide_channels(&self, message_handler: Object) -> Option<Vec<Object>> {
        Some(vec![Object::channel(ScheduleChannel {
            jobs: self.jobs.clone(),
            handler: message_handler,
            tick: self.tick,
            running: Mutex::new(None),
        })])
    }
}

bub_abi::export_plugin!(Schedule);

/// One job.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Job {
    id: String,
    session_id: String,
    message: String,
    /// Seconds since the epoch of the next run.
    next_run: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    every_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chat_id: Option<String>,
    /// The IANA zone its cron expression is read in (UTC when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tz: Option<String>,
    /// A heartbeat: its answer may be the silent marker.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    heartbeat: bool,
    created: String,
}

impl Job {
    /// A job whose times are real numbers in range (a `null` or `NaN`
    /// `next_run` would never fire and used to stop every other job).
    fn checked(self) -> Result<Job, String> {
        if !(self.next_run.is_finite() && (0.0..=LATEST).contains(&self.next_run)) {
            return Err(format!("next_run {} is not a time", self.next_run));
        }
        if self.every_seconds.is_some_and(|e| !(e.is_finite() && (1.0..=LATEST).contains(&e))) {
            return Err("every_seconds must be at least one second".into());
        }
        Ok(self)
    }
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

fn rfc3339(seconds: f64) -> String {
    let when = UNIX_EPOCH.checked_add(bub_kit::time::seconds_or_zero(seconds)).unwrap_or(UNIX_EPOCH);
    humantime::format_rfc3339_seconds(when).to_string()
}

/// The latest time a job may be set for (9999-12-31, RFC 3339's last year).
const LATEST: f64 = 253_402_300_799.0;

/// A cron expression (5 fields, or 6 with seconds first) read as wall-clock
/// times in zone `tz`; its next time after `after` (seconds since the
/// epoch). The expression is matched on the zone's civil time; a civil
/// time the zone skips (a spring-forward gap) maps to the same offset
/// after the jump, and one it repeats (a fall-back fold) to its first
/// occurrence (jiff's `compatible`), so each runs once that day.
fn cron_next(expr: &str, after: f64, tz: &str) -> Result<f64, String> {
    let fields = expr.split_whitespace().count();
    let full = match fields {
        5 => format!("0 {expr}"),
        6 | 7 => expr.to_owned(),
        _ => return Err(format!("cron {expr:?} needs 5 fields (min hour day month weekday)")),
    };
    let schedule: cron::Schedule = full.parse().map_err(|e| format!("cron {expr:?} is not valid: {e}"))?;
    let zone = zone(tz)?;
    let instant = jiff::Timestamp::from_second(after.floor() as i64).map_err(|_| "time out of range".to_owned())?;
    // The civil time as a chrono UTC time: the cron crate then counts
    // wall-clock fields without a zone of its own.
    let civil = |dt: jiff::civil::DateTime| {
        chrono::NaiveDate::from_ymd_opt(dt.year().into(), dt.month() as u32, dt.day() as u32)
            .and_then(|d| d.and_hms_opt(dt.hour() as u32, dt.minute() as u32, dt.second() as u32))
            .map(|n| n.and_utc())
            .ok_or_else(|| "time out of range".to_owned())
    };
    let mut from = civil(instant.to_zoned(zone.clone()).datetime())?;
    // A civil time at or before `after` (the fold's first occurrence seen
    // from its second) is passed over.
    for _ in 0..16 {
        let next = schedule.after(&from).next().ok_or_else(|| format!("cron {expr:?} never fires again"))?;
        let naive = next.naive_utc();
        let dt = jiff::civil::date(naive.year() as i16, naive.month() as i8, naive.day() as i8).at(
            naive.hour() as i8,
            naive.minute() as i8,
            naive.second() as i8,
            0,
        );
        let at = zone.to_ambiguous_zoned(dt).compatible().map_err(|e| format!("cron {expr:?} in {tz}: {e}"))?;
        let seconds = at.timestamp().as_second() as f64;
        if seconds > after {
            return Ok(seconds);
        }
        from = next;
    }
    Err(format!("cron {expr:?} found no time after {} in {tz}", rfc3339(after)))
}

/// `at` as a time: RFC 3339 with its offset, or a local date and time
/// (`2026-12-24 09:00`, `2026-12-24T09:00:00`) in zone `tz`.
fn at_time(at: &str, tz: &str) -> Result<f64, String> {
    // With an offset (or `Z`), the instant it names.
    if let Ok(time) = at.trim().parse::<jiff::Timestamp>() {
        if time.as_second() < 0 {
            return Err(format!("at={at:?} is before 1970"));
        }
        return Ok(time.as_second() as f64);
    }
    let civil: jiff::civil::DateTime = at
        .trim()
        .replacen(' ', "T", 1)
        .parse()
        .map_err(|e| format!("at={at:?} is neither an RFC 3339 time nor a local date and time: {e}"))?;
    let zoned = zone(tz)?.to_ambiguous_zoned(civil).compatible().map_err(|e| format!("at={at:?} in {tz}: {e}"))?;
    Ok(zoned.timestamp().as_second() as f64)
}

/// The largest `jobs.json` read.
const MAX_JOBS_FILE: u64 = 16 << 20;

/// `<data dir>/jobs.json`, changed under `<data dir>/jobs.lock`.
struct Jobs {
    dir: PathBuf,
    // Broken entries already logged (once each, not every tick).
    warned: Mutex<std::collections::HashSet<String>>,
}

impl Jobs {
    fn file(&self) -> PathBuf {
        self.dir.join("jobs.json")
    }

    /// Runs `change` on the jobs under the lock and saves what it leaves
    /// (with the entries that are not valid jobs, kept as they were).
    fn change<T>(&self, change: impl FnOnce(&mut Vec<Job>) -> Result<T, String>) -> Result<T, String> {
        bub_kit::files::create_private_dir(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let lock_path = self.dir.join("jobs.lock");
        let lock = bub_kit::files::open_private_append(&lock_path)
            .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| format!("cannot lock the jobs: {e}"))?;
        let (mut jobs, broken) = self.read()?;
        let before = jobs.clone();
        let out = change(&mut jobs)?;
        if jobs != before {
            let mut all: Vec<Value> = jobs.iter().map(|j| serde_json::to_value(j).unwrap_or_default()).collect();
            all.extend(broken);
            write_atomically(&self.file(), &serde_json::to_vec_pretty(&all).map_err(|e| e.to_string())?)?;
        }
        Ok(out)
    }

    /// The valid jobs, and the entries that are not (logged, kept in the
    /// file, never fired): one bad entry does not stop every other job.
    /// The file leads to turns being run, so it is trusted like
    /// `config.json`: the user's, not writable by others, a regular file
    /// (a FIFO would block the gateway), at most 16 MiB (it is read on every
    /// tick).
    fn read(&self) -> Result<(Vec<Job>, Vec<Value>), String> {
        let path = self.file();
        let bytes = match bub_kit::files::read_trusted(&path, MAX_JOBS_FILE) {
            Ok(bytes) => bytes,
            Err(bub_kit::files::TrustError::Missing) => return Ok((Vec::new(), Vec::new())),
            Err(e @ bub_kit::files::TrustError::Refused(_)) => return Err(format!("refusing the jobs: {e}")),
            Err(e) => return Err(format!("{} {e}", path.display())),
        };
        let entries: Vec<Value> = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not a JSON list of jobs ({e}); fix or remove it", path.display()))?;
        let (mut jobs, mut broken) = (Vec::new(), Vec::new());
        for entry in entries {
            match serde_json::from_value::<Job>(entry.clone()).map_err(|e| e.to_string()).and_then(Job::checked) {
                Ok(job) => jobs.push(job),
                Err(e) => {
                    let id = entry.get("id").and_then(Value::as_str).unwrap_or("?").to_owned();
                    if bub_abi::sync::lock(&self.warned).insert(id.clone()) {
                        tracing::warn!("schedule: skipping job {id} in {}: {e}; fix or remove it", path.display());
                    }
                    broken.push(entry);
                }
            }
        }
        Ok((jobs, broken))
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    bub_kit::files::write_private(path, bytes).map_err(|e| format!("cannot save {}: {e}", path.display()))
}

#[derive(Clone, Copy)]
enum Op {
    Add,
    List,
    Remove,
}

struct JobTool {
    op: Op,
    jobs: Arc<Jobs>,
    timezone: String,
}

fn text(args: &Map<String, Value>, key: &str) -> Option<String> {
    match args.get(key)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A duration in seconds: a plain number or `"2h 30m"`; finite, not
/// negative, and at most until the year 9999 (`NaN`, `inf` and `1e300`
/// are refused: a model may send them).
fn duration(value: &str, what: &str) -> Result<f64, String> {
    let seconds = match value.parse::<f64>() {
        Ok(seconds) => seconds,
        Err(_) => humantime::parse_duration(value)
            .map(|d| d.as_secs_f64())
            .map_err(|e| format!("{what}={value:?} is not a duration like \"90s\", \"10m\" or \"2h 30m\": {e}"))?,
    };
    if !(seconds.is_finite() && (0.0..=LATEST - now()).contains(&seconds)) {
        return Err(format!("{what}={value:?} is not a duration between 0 seconds and the year 9999"));
    }
    Ok(seconds)
}

fn add(jobs: &Jobs, args: &Map<String, Value>, context: &ToolCallContext, default_tz: &str) -> Result<Value, String> {
    let message = text(args, "message").ok_or("schedule.add needs `message`: the text sent back when the job fires")?;
    let session_id = context
        .session_id
        .clone()
        .ok_or("schedule.add runs in a session's turn (the job fires back into that session)")?;
    let (now, every, cron_expr) = (now(), text(args, "every"), text(args, "cron"));
    let tz = text(args, "tz").unwrap_or_else(|| default_tz.to_owned());
    zone(&tz)?;
    let heartbeat =
        matches!(args.get("heartbeat"), Some(Value::Bool(true))) || text(args, "heartbeat").as_deref() == Some("true");
    if heartbeat && every.is_none() && cron_expr.is_none() {
        return Err("a heartbeat repeats: give `every` (\"30m\") or `cron`".into());
    }
    let next_run = if let Some(expr) = &cron_expr {
        cron_next(expr, now, &tz)?
    } else if let Some(at) = text(args, "at") {
        at_time(&at, &tz)?
    } else if let Some(after) = text(args, "after") {
        now + duration(&after, "after")?
    } else if let Some(every) = &every {
        now + duration(every, "every")?
    } else {
        return Err("schedule.add needs when: `after` (\"10m\"), `at` (RFC 3339), `every` (\"1h\") or `cron`".into());
    };
    let every_seconds = every.map(|e| duration(&e, "every")).transpose()?;
    if every_seconds.is_some_and(|s| s < 1.0) {
        return Err("every must be at least one second".into());
    }
    let job = Job {
        id: format!("job-{:x}", (now * 1e6) as u64 ^ (std::process::id() as u64) << 40),
        session_id,
        message,
        next_run,
        every_seconds,
        cron: cron_expr,
        channel: text(args, "channel"),
        chat_id: text(args, "chat_id"),
        tz: (tz != "UTC").then_some(tz),
        heartbeat,
        created: rfc3339(now),
    }
    .checked()?;
    let shown = describe(&job);
    jobs.change(move |all| {
        all.push(job);
        Ok(())
    })?;
    Ok(shown)
}

fn describe(job: &Job) -> Value {
    let tz = job.tz.as_deref().unwrap_or("UTC");
    // The next run as the zone's wall clock, with its offset.
    let local = jiff::Timestamp::from_second(job.next_run as i64)
        .ok()
        .zip(zone(tz).ok())
        .map(|(t, z)| t.to_zoned(z).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string());
    let mut out = json!({
        "id": job.id,
        "session_id": job.session_id,
        "message": job.message,
        "next_run": rfc3339(job.next_run),
        "every_seconds": job.every_seconds,
        "cron": job.cron,
        "channel": job.channel,
    });
    if job.tz.is_some() {
        out["tz"] = json!(tz);
        out["next_run_local"] = json!(local);
    }
    if job.heartbeat {
        out["heartbeat"] = json!(true);
    }
    out
}

impl Tool for JobTool {
    fn spec(&self) -> ToolSpec {
        let (name, description, parameters) = match self.op {
            Op::Add => (
                "schedule.add",
                "Schedule a message to be sent back to this conversation later: once (`after` a delay such as \
                 \"10m\", or `at` a time), repeatedly (`every` \"1h\"), or on a `cron` expression in a time zone \
                 (`tz`). A `heartbeat` is a repeating check-in whose answer is not sent when there is nothing to say.",
                json!({"type": "object", "properties": {
                    "message": {"type": "string", "description": "The text that comes back when the job fires"},
                    "after": {"type": "string", "description": "A delay: \"90s\", \"10m\", \"2h 30m\""},
                    "at": {"type": "string", "description": "An RFC 3339 time, or a local \"2026-12-24 09:00\" in tz"},
                    "every": {"type": "string", "description": "Repeat interval: \"1h\""},
                    "cron": {"type": "string", "description": "min hour day month weekday, wall-clock time in tz"},
                    "tz": {"type": "string", "description": "IANA time zone (\"Europe/Berlin\"); default: the setting, else UTC"},
                    "heartbeat": {"type": "boolean", "description": "A periodic check-in (with every or cron) that may answer <no_reply/>"},
                    "channel": {"type": "string", "description": "Where the reply goes (default: nowhere but the tape)"},
                    "chat_id": {"type": "string"},
                }, "required": ["message"]}),
            ),
            Op::List => (
                "schedule.list",
                "List this conversation's scheduled jobs (every job with all=true).",
                json!({"type": "object", "properties": {"all": {"type": "boolean", "default": false}}}),
            ),
            Op::Remove => (
                "schedule.remove",
                "Remove a scheduled job by id.",
                json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
            ),
        };
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: parameters.as_object().cloned().unwrap_or_default(),
            exposure: "auto".into(),
            context: true,
        }
    }

    fn call(&self, arguments: Map<String, Value>) -> impl Fut<Value> {
        self.call_in(arguments, ToolCallContext::default())
    }

    fn call_in(&self, arguments: Map<String, Value>, context: ToolCallContext) -> impl Fut<Value> {
        let (op, jobs, timezone) = (self.op, self.jobs.clone(), self.timezone.clone());
        async move {
            let result = match op {
                Op::Add => add(&jobs, &arguments, &context, &timezone),
                Op::List => {
                    let all = matches!(arguments.get("all"), Some(Value::Bool(true)))
                        || text(&arguments, "all").as_deref() == Some("true");
                    jobs.change(|list| {
                        Ok(Value::Array(
                            list.iter()
                                .filter(|j| all || Some(&j.session_id) == context.session_id.as_ref())
                                .map(describe)
                                .collect(),
                        ))
                    })
                }
                Op::Remove => {
                    let id = text(&arguments, "id").ok_or("schedule.remove needs `id` (see schedule.list)")?;
                    jobs.change(|list| {
                        let before = list.len();
                        list.retain(|j| j.id != id);
                        if list.len() == before {
                            return Err(format!("no job {id:?} (see schedule.list)"));
                        }
                        Ok(json!({"removed": id}))
                    })
                }
            };
            result.map_err(BoxError::from)
        }
    }
}

struct ScheduleChannel {
    jobs: Arc<Jobs>,
    handler: Object,
    tick: Duration,
    running: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

type InFlight = Arc<Mutex<std::collections::HashSet<String>>>;

impl ScheduleChannel {
    /// Takes the due jobs under the lock: repeating ones are rescheduled;
    /// one-shot ones stay in the file, marked in flight in this process,
    /// until the gateway has taken them (so a job due during a stop or just
    /// before a kill fires at the next start instead of being lost).
    fn due(jobs: &Jobs, in_flight: &InFlight) -> Result<Vec<Job>, String> {
        let now = now();
        let mut flying = bub_abi::sync::lock(in_flight);
        jobs.change(|all| {
            let mut fired = Vec::new();
            for job in all.iter_mut() {
                if job.next_run > now || flying.contains(&job.id) {
                    continue;
                }
                fired.push(job.clone());
                let next = match (&job.cron, job.every_seconds) {
                    (Some(expr), _) => cron_next(expr, now, job.tz.as_deref().unwrap_or("UTC")).ok(),
                    // Missed runs collapse into one: the next is from now.
                    (None, Some(every)) => Some(job.next_run.max(now - every) + every),
                    (None, None) => None,
                };
                match next {
                    Some(next) => job.next_run = next,
                    None => {
                        flying.insert(job.id.clone());
                    }
                }
            }
            Ok(fired)
        })
    }

    /// Hands `job` to the gateway and waits for its turn; a one-shot job
    /// leaves the file once its turn ran (or was refused for good), and
    /// stays for the next tick or start when the gateway was stopping.
    async fn fire(jobs: Arc<Jobs>, handler: Object, in_flight: InFlight, job: Job) {
        let mut message = json!({
            "channel": "schedule",
            "session_id": job.session_id,
            "chat_id": job.chat_id.clone().unwrap_or_else(|| "default".into()),
            "content": job.message,
            "is_active": true,
            "context": {"schedule_job": job.id},
        });
        if job.heartbeat {
            message["content"] = json!(format!("{}\n\n{}", job.message, heartbeat_note()));
            message["context"]["silent_marker"] = json!(SILENT_MARKER);
        }
        if let Some(channel) = &job.channel {
            message["output_channel"] = json!(channel);
        }
        let one_shot = job.cron.is_none() && job.every_seconds.is_none();
        let taken = match MessageHandlerClient(&handler).submit(&message).await {
            Ok(delivery) if delivery.status == "cancelled" => {
                tracing::info!("schedule: job {} was cancelled by a stopping gateway; it fires again", job.id);
                false
            }
            Ok(delivery) => {
                tracing::info!("schedule: job {} fired on session {} ({})", job.id, job.session_id, delivery.status);
                true
            }
            Err(e) => {
                tracing::warn!("schedule: job {} could not be handed to the gateway: {e}; it fires again", job.id);
                false
            }
        };
        if one_shot && taken {
            if let Err(e) = jobs.change(|all| {
                all.retain(|j| j.id != job.id);
                Ok(())
            }) {
                tracing::warn!("schedule: job {} ran but could not be removed: {e}", job.id);
            }
        }
        bub_abi::sync::lock(&in_flight).remove(&job.id);
    }
}

impl Channel for ScheduleChannel {
    fn name(&self) -> String {
        "schedule".into()
    }

    /// Runs alongside whatever channel the gateway runs.
    fn info(&self) -> impl Fut<ChannelInfo> {
        async { Ok(ChannelInfo { role: ChannelRole::Lifecycle, ..Default::default() }) }
    }

    /// A session's jobs run one at a time, in the order they fired: a job
    /// due while the session's last one still runs follows it.
    fn admit_message(
        &self,
        _session_id: String,
        _message: Envelope,
        turn: TurnSnapshot,
    ) -> impl Fut<Option<AdmitDecision>> {
        let decision = turn.is_running.then(|| AdmitDecision {
            action: AdmitAction::FollowUp,
            reason: Some("the session's previous scheduled job is still running".into()),
        });
        async move { Ok(decision) }
    }

    fn start(&self) -> impl Fut<()> {
        let (jobs, handler, tick) = (self.jobs.clone(), self.handler.clone(), self.tick);
        let in_flight = InFlight::default();
        let task = tokio::spawn(async move {
            // The same problem (a refused file) is logged once, not every tick.
            let mut last_error = String::new();
            loop {
                let checked = {
                    let (jobs, in_flight) = (jobs.clone(), in_flight.clone());
                    tokio::task::spawn_blocking(move || Self::due(&jobs, &in_flight)).await
                };
                match checked {
                    Ok(Ok(fired)) => {
                        last_error.clear();
                        for job in fired {
                            tokio::spawn(Self::fire(jobs.clone(), handler.clone(), in_flight.clone(), job));
                        }
                    }
                    Ok(Err(e)) if e != last_error => {
                        tracing::warn!("schedule: {e}");
                        last_error = e;
                    }
                    Ok(Err(_)) => {}
                    Err(e) => tracing::warn!("schedule: checking the jobs failed: {e}"),
                }
                tokio::time::sleep(tick).await;
            }
        });
        *bub_abi::sync::lock(&self.running) = Some(task);
        async { Ok(()) }
    }

    fn stop(&self) -> impl Fut<()> {
        if let Some(task) = bub_abi::sync::lock(&self.running).take() {
            task.abort();
        }
        async { Ok(()) }
    }

    /// A job's reply with no channel of its own ends here.
    fn send(&self, message: Envelope) -> impl Fut<()> {
        let content = message.get("content").and_then(Value::as_str).unwrap_or_default().to_owned();
        tracing::info!("schedule: reply on session {:?}: {content}", message.get("session_id"));
        async { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01T00:00:00Z, a Tuesday.
    const T0: f64 = 1_796_083_200.0;

    #[test]
    fn cron_takes_five_or_six_fields_and_names_bad_ones() {
        // Every day at 09:30 (five fields: seconds are 0).
        assert_eq!(cron_next("30 9 * * *", T0, "UTC").unwrap(), T0 + 9.0 * 3600.0 + 30.0 * 60.0);
        // Six fields, seconds first: the next :15 second.
        assert_eq!(cron_next("15 * * * * *", T0, "UTC").unwrap(), T0 + 15.0);
        let err = cron_next("* *", T0, "UTC").unwrap_err();
        assert!(err.contains("needs 5 fields"), "{err}");
        let err = cron_next("61 * * * *", T0, "UTC").unwrap_err();
        assert!(err.contains("is not valid"), "{err}");
    }

    /// Seconds since the epoch of an RFC 3339 time.
    fn at(text: &str) -> f64 {
        text.parse::<jiff::Timestamp>().unwrap().as_second() as f64
    }

    /// Every run of `expr` in zone `tz` from `from` to `to` (RFC 3339).
    fn runs(expr: &str, tz: &str, from: &str, to: &str) -> Vec<String> {
        let (mut t, end) = (at(from), at(to));
        let mut out = Vec::new();
        loop {
            t = cron_next(expr, t, tz).unwrap();
            if t > end {
                return out;
            }
            out.push(rfc3339(t));
        }
    }

    /// Daylight saving in New York, 2026: clocks jump from 02:00 to 03:00
    /// on 8 March and fall back from 02:00 to 01:00 on 1 November.
    #[test]
    fn a_cron_time_in_a_zone_runs_once_on_daylight_saving_days() {
        let ny = "America/New_York";
        // 02:30 does not exist on 8 March: it runs once, at 03:30 EDT.
        assert_eq!(
            runs("30 2 * * *", ny, "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z"),
            ["2026-03-07T07:30:00Z", "2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"]
        );
        // 01:30 happens twice on 1 November: it runs once, the first time (EDT).
        assert_eq!(
            runs("30 1 * * *", ny, "2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z"),
            ["2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
        );
        // Asked from inside the repeated hour, the first 01:30 is past: tomorrow.
        assert_eq!(cron_next("30 1 * * *", at("2026-11-01T06:00:00Z"), ny).unwrap(), at("2026-11-02T06:30:00Z"));
        // An hourly job keeps every wall-clock hour, and the repeated one once.
        let hourly = runs("0 * * * *", ny, "2026-11-01T03:30:00Z", "2026-11-01T08:30:00Z");
        assert_eq!(
            hourly,
            ["2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"]
        );
        // The same expression in UTC and in Tokyo (no daylight saving).
        assert_eq!(
            cron_next("0 9 * * *", at("2026-12-01T00:00:00Z"), "Asia/Tokyo").unwrap(),
            at("2026-12-01T00:00:00Z") + 86400.0
        );
        let err = cron_next("0 9 * * *", T0, "Mars/Olympus").unwrap_err();
        assert!(err.contains("is not known") && err.contains("IANA"), "{err}");
    }

    #[test]
    fn a_local_time_is_read_in_the_zone_and_an_offset_wins() {
        assert_eq!(at_time("2026-12-24 09:00", "Europe/Berlin").unwrap(), at("2026-12-24T08:00:00Z"));
        assert_eq!(at_time("2026-07-24T09:00:00", "Europe/Berlin").unwrap(), at("2026-07-24T07:00:00Z"));
        assert_eq!(at_time("2026-12-24T09:00:00Z", "Europe/Berlin").unwrap(), at("2026-12-24T09:00:00Z"));
        assert_eq!(at_time("2026-12-24T09:00:00-05:00", "Europe/Berlin").unwrap(), at("2026-12-24T14:00:00Z"));
        assert!(at_time("tomorrow", "UTC").is_err());
    }

    #[test]
    fn durations_are_numbers_or_humane_and_bounded() {
        assert_eq!(duration("90", "in").unwrap(), 90.0);
        assert_eq!(duration("2h 30m", "in").unwrap(), 9000.0);
        for bad in ["NaN", "inf", "-5", "1e300", "soon"] {
            assert!(duration(bad, "in").is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn jobs_with_impossible_times_are_refused() {
        let job = |next_run: f64, every: Option<f64>| Job {
            next_run,
            every_seconds: every,
            ..serde_json::from_value(serde_json::json!({
                "id": "j", "message": "m", "session_id": "s", "next_run": 0.0, "created": "x"
            }))
            .expect("a minimal job")
        };
        assert!(job(T0, None).checked().is_ok());
        assert!(job(T0, Some(60.0)).checked().is_ok());
        assert!(job(f64::NAN, None).checked().is_err());
        assert!(job(LATEST + 1.0, None).checked().is_err());
        assert!(job(T0, Some(0.5)).checked().is_err(), "every_seconds under one second");
    }
}
