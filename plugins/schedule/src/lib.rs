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
//! - **Cron** as crontab(5) reads it (`cron.rs`): 0 and 7 are Sunday, 1
//!   is Monday; both day fields restricted means either. On a
//!   spring-forward day every skipped time runs once, as far after the
//!   jump as it was into the gap (02:30 → 03:30); in a repeated hour a
//!   fixed-time job runs once, a job with `*` in its minute or hour runs
//!   through both passes.
//! - **A job ends** when it has no next time: a one-time job after its
//!   run, a cron expression that never matches again after its last.
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
//! Jobs persist in `<data dir>/jobs.json` (see `store.rs`: one-time jobs
//! that ran are appended to `jobs.done`, and the list is read again only
//! when a file changed, so idle jobs cost nothing). The channel wakes at
//! the earliest due time, or at `tick_ms` to see a file changed. A job
//! that came due while no gateway ran fires once when one starts; each
//! firing carries its key (`idempotency_keys`), so a job fired again
//! after a crash runs once.

mod cron;
mod store;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bub_abi::{
    resources::{clients::MessageHandlerClient, Channel, Fut, Tool},
    types::{AdmitAction, AdmitDecision, ChannelInfo, ChannelRole, Envelope, ToolCallContext, ToolSpec, TurnSnapshot},
    BoxError, Object, Plugin, PluginContext,
};
use serde_json::{json, Map, Value};
use store::{Job, Jobs, LATEST};

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

/// `name` as a time zone, or an error that says what to give: an IANA
/// name (`Europe/Berlin`, `UTC`), not an empty one nor the database's
/// pseudo-zones (`localtime`, the host's own, which changes with the
/// host; `Factory`; the `posix/` and `right/` trees), and one the
/// machine's zone database knows; without a database, which package
/// brings one.
fn zone(name: &str) -> Result<jiff::tz::TimeZone, String> {
    let name = name.trim();
    let iana = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '+' | '-');
    let pseudo = matches!(name, "localtime" | "Factory" | "posixrules")
        || name.starts_with("posix/")
        || name.starts_with("right/")
        || name.starts_with('/')
        || name.contains("..");
    if name.is_empty() || pseudo || !name.chars().all(iana) {
        return Err(format!("time zone {name:?} is not an IANA zone name: give one such as Europe/Berlin or UTC"));
    }
    jiff::tz::TimeZone::get(name).map_err(|e| {
        if name != "UTC" && jiff::tz::db().is_definitively_empty() {
            format!(
                "time zone {name:?} cannot be resolved: this machine has no time zone database (looked in \
                 /usr/share/zoneinfo and $TZDIR). Install it (Debian, Ubuntu: apt-get install tzdata; Alpine: \
                 apk add tzdata; Fedora: dnf install tzdata), or use UTC"
            )
        } else {
            format!("time zone {name:?} is not known ({e}): give an IANA name such as Europe/Berlin or UTC")
        }
    })
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
        Ok(Schedule { jobs: Arc::new(Jobs::new(ctx.data_dir.clone())), tick: Duration::from_millis(tick_ms), timezone })
    }

    /// `schedule.add`, `schedule.list`, `schedule.remove`.
    fn provide_tools(&self) -> Option<Vec<Object>> {
        Some(
            [Op::Add, Op::List, Op::Remove, Op::Next]
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
            firing: Arc::default(),
        })])
    }
}

bub_abi::export_plugin!(Schedule);

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

fn rfc3339(seconds: f64) -> String {
    let when = UNIX_EPOCH.checked_add(bub_kit::time::seconds_or_zero(seconds)).unwrap_or(UNIX_EPOCH);
    humantime::format_rfc3339_seconds(when).to_string()
}

/// The next run after `after` (seconds since the epoch) of cron `expr` in
/// zone `tz` (see `cron.rs`); `Ok(None)`: it never runs again.
fn cron_next(expr: &str, after: f64, tz: &str) -> Result<Option<f64>, String> {
    let cron = cron::Cron::parse(expr)?;
    let zone = zone(tz)?;
    let instant = jiff::Timestamp::from_second(after.floor() as i64).map_err(|_| "time out of range".to_owned())?;
    Ok(cron.next_after(instant, &zone).map(|t| t.as_second() as f64).filter(|t| *t <= LATEST))
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

#[derive(Clone, Copy)]
enum Op {
    Add,
    List,
    Remove,
    Next,
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
    // A `tz` given empty is refused, not read as "no zone" (UTC).
    let tz = match args.get("tz") {
        None | Some(Value::Null) => default_tz.to_owned(),
        Some(Value::String(name)) => name.trim().to_owned(),
        Some(other) => other.to_string(),
    };
    zone(&tz)?;
    let heartbeat =
        matches!(args.get("heartbeat"), Some(Value::Bool(true))) || text(args, "heartbeat").as_deref() == Some("true");
    if heartbeat && every.is_none() && cron_expr.is_none() {
        return Err("a heartbeat repeats: give `every` (\"30m\") or `cron`".into());
    }
    let next_run = if let Some(expr) = &cron_expr {
        cron_next(expr, now, &tz)?.ok_or_else(|| format!("cron {expr:?} never runs again"))?
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

/// `schedule.next`: the next `count` runs of `cron` after `after`, each
/// in UTC and on the zone's clock.
fn next_runs(args: &Map<String, Value>, default_tz: &str) -> Result<Value, String> {
    let expr = text(args, "cron").ok_or("schedule.next needs `cron`")?;
    let tz = match args.get("tz") {
        None | Some(Value::Null) => default_tz.to_owned(),
        Some(Value::String(name)) => name.trim().to_owned(),
        Some(other) => other.to_string(),
    };
    let zone = zone(&tz)?;
    let mut after = match text(args, "after") {
        Some(at) => at_time(&at, &tz)?,
        None => now(),
    };
    let count = match args.get("count") {
        None | Some(Value::Null) => 5,
        Some(v) => v.as_u64().or_else(|| v.as_str()?.trim().parse().ok()).ok_or("count must be a number")?,
    }
    .clamp(1, 100);
    let mut runs = Vec::new();
    for _ in 0..count {
        let Some(next) = cron_next(&expr, after, &tz)? else { break };
        let local = jiff::Timestamp::from_second(next as i64)
            .map(|t| t.to_zoned(zone.clone()).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string())
            .unwrap_or_default();
        runs.push(json!({"utc": rfc3339(next), "local": local}));
        after = next;
    }
    Ok(json!({"cron": expr, "tz": tz, "runs": runs}))
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
            Op::Next => (
                "schedule.next",
                "Show when a cron expression runs: its next runs after a time (default now), in a time zone, \
                 without scheduling anything.",
                json!({"type": "object", "properties": {
                    "cron": {"type": "string", "description": "min hour day month weekday (or 6 fields, seconds first)"},
                    "tz": {"type": "string", "description": "IANA time zone; default: the setting, else UTC"},
                    "after": {"type": "string", "description": "From this time (RFC 3339, or local in tz); default now"},
                    "count": {"type": "integer", "default": 5, "description": "How many runs (at most 100)"},
                }, "required": ["cron"]}),
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
                Op::Next => next_runs(&arguments, &timezone),
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
    firing: Arc<Firing>,
}

/// What the channel's loop and its firings share: the jobs being fired
/// now (not fired again meanwhile), and the one-time jobs that ran, for
/// the next tick to mark done in one write.
#[derive(Default)]
struct Firing {
    in_flight: Mutex<std::collections::HashSet<String>>,
    done: Mutex<Vec<String>>,
}

/// A due job, and whether this is its last run.
struct Due {
    job: Job,
    last: bool,
}

impl ScheduleChannel {
    /// Takes the due jobs under the lock: a repeating one gets its next
    /// time; one with none (a one-time job, a cron expression that never
    /// matches again) is fired a last time and stays in the file, marked
    /// in flight in this process, until the gateway has taken it (so a job
    /// due during a stop or just before a kill fires at the next start
    /// instead of being lost). A zone that cannot be resolved any more
    /// (its database removed) puts the job off for an hour, said once.
    fn due(jobs: &Jobs, firing: &Firing) -> Result<Vec<Due>, String> {
        let now = now();
        let mut flying = bub_abi::sync::lock(&firing.in_flight);
        jobs.change(|all| {
            let mut fired = Vec::new();
            for job in all.iter_mut() {
                if job.next_run > now || flying.contains(&job.id) {
                    continue;
                }
                let next = match (&job.cron, job.every_seconds) {
                    (Some(expr), _) => match cron_next(expr, now, job.tz.as_deref().unwrap_or("UTC")) {
                        Ok(next) => next,
                        Err(e) => {
                            tracing::warn!("schedule: job {} is put off for an hour: {e}", job.id);
                            job.next_run = now + 3600.0;
                            continue;
                        }
                    },
                    // Missed runs collapse into one: the next is from now.
                    (None, Some(every)) => Some(job.next_run.max(now - every) + every),
                    (None, None) => None,
                };
                let last = next.is_none();
                fired.push(Due { job: job.clone(), last });
                match next {
                    Some(next) => job.next_run = next,
                    None => {
                        if !job.once() {
                            tracing::info!("schedule: job {} has no next time after this run; it ends", job.id);
                        }
                        flying.insert(job.id.clone());
                    }
                }
            }
            Ok(fired)
        })
    }

    /// Hands `due.job` to the gateway and waits for its turn; a job on its
    /// last run is done once its turn ran (or was refused for good), and
    /// stays for the next tick or start when the gateway was stopping.
    async fn fire(handler: Object, firing: Arc<Firing>, due: Due) {
        let job = due.job;
        let mut message = json!({
            "channel": "schedule",
            "session_id": job.session_id,
            "chat_id": job.chat_id.clone().unwrap_or_else(|| "default".into()),
            "content": job.message,
            "is_active": true,
            "context": {"schedule_job": job.id},
            // A run fired again (after a kill before it was marked done)
            // runs once (bub_framework::repeats).
            "idempotency_keys": [format!("schedule:{}@{}", job.id, job.next_run as i64)],
        });
        if job.heartbeat {
            message["content"] = json!(format!("{}\n\n{}", job.message, heartbeat_note()));
            message["context"]["silent_marker"] = json!(SILENT_MARKER);
        }
        if let Some(channel) = &job.channel {
            message["output_channel"] = json!(channel);
        }
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
        if due.last && taken {
            bub_abi::sync::lock(&firing.done).push(job.id.clone());
        } else {
            bub_abi::sync::lock(&firing.in_flight).remove(&job.id);
        }
    }

    /// Marks the jobs that ran out done, in one write; then they are no
    /// longer in flight.
    fn mark_done(jobs: &Jobs, firing: &Firing) {
        let done = std::mem::take(&mut *bub_abi::sync::lock(&firing.done));
        if done.is_empty() {
            return;
        }
        match jobs.mark_done(&done) {
            Ok(()) => {
                let mut flying = bub_abi::sync::lock(&firing.in_flight);
                for id in &done {
                    flying.remove(id);
                }
            }
            Err(e) => {
                tracing::warn!("schedule: {e}; tried again at the next tick");
                bub_abi::sync::lock(&firing.done).extend(done);
            }
        }
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
        let firing = self.firing.clone();
        let task = tokio::spawn(async move {
            // The same problem (a refused file) is logged once, not every tick.
            let mut last_error = String::new();
            loop {
                let checked = {
                    let (jobs, firing) = (jobs.clone(), firing.clone());
                    tokio::task::spawn_blocking(move || {
                        Self::mark_done(&jobs, &firing);
                        // What is due, from the jobs as last read: a tick
                        // with nothing due reads and writes nothing.
                        let snapshot = jobs.snapshot()?;
                        let flying = bub_abi::sync::lock(&firing.in_flight).clone();
                        let waiting = snapshot.iter().filter(|j| !flying.contains(&j.id));
                        let earliest = waiting.map(|j| j.next_run).fold(f64::INFINITY, f64::min);
                        if earliest > now() {
                            return Ok((Vec::new(), earliest));
                        }
                        let fired = Self::due(&jobs, &firing)?;
                        Ok::<_, String>((fired, now()))
                    })
                    .await
                };
                let mut wait = tick;
                match checked {
                    Ok(Ok((fired, earliest))) => {
                        last_error.clear();
                        for due in fired {
                            tokio::spawn(Self::fire(handler.clone(), firing.clone(), due));
                        }
                        // Asleep until the earliest due time, looking at the
                        // files once a tick for jobs added meanwhile.
                        if earliest.is_finite() {
                            wait = wait.min(bub_kit::time::seconds_or_zero(earliest - now()));
                        }
                    }
                    Ok(Err(e)) if e != last_error => {
                        tracing::warn!("schedule: {e}");
                        last_error = e;
                    }
                    Ok(Err(_)) => {}
                    Err(e) => tracing::warn!("schedule: checking the jobs failed: {e}"),
                }
                tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
            }
        });
        *bub_abi::sync::lock(&self.running) = Some(task);
        async { Ok(()) }
    }

    /// Stops the loop; the jobs whose last run ended meanwhile are marked
    /// done now (else they would fire again at the next start).
    fn stop(&self) -> impl Fut<()> {
        if let Some(task) = bub_abi::sync::lock(&self.running).take() {
            task.abort();
        }
        Self::mark_done(&self.jobs, &self.firing);
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

    /// Seconds since the epoch of an RFC 3339 time.
    fn at(text: &str) -> f64 {
        text.parse::<jiff::Timestamp>().unwrap().as_second() as f64
    }

    #[test]
    fn cron_in_a_zone_and_an_end() {
        assert_eq!(cron_next("30 9 * * *", T0, "UTC").unwrap(), Some(T0 + 9.0 * 3600.0 + 30.0 * 60.0));
        assert_eq!(
            cron_next("0 9 * * *", at("2026-12-01T00:00:00Z"), "Asia/Tokyo").unwrap(),
            Some(at("2026-12-01T00:00:00Z") + 86400.0)
        );
        assert_eq!(cron_next("0 0 30 2 *", T0, "UTC").unwrap(), None, "never again");
        let err = cron_next("0 9 * * *", T0, "Mars/Olympus").unwrap_err();
        assert!(err.contains("is not known") && err.contains("IANA"), "{err}");
    }

    #[test]
    fn empty_and_pseudo_zones_are_refused() {
        for bad in [
            "",
            "  ",
            "localtime",
            "Factory",
            "posixrules",
            "posix/Europe/Berlin",
            "right/UTC",
            "/etc/localtime",
            "../../etc/passwd",
            "Europe/Berlin;rm",
        ] {
            let err = zone(bad).unwrap_err();
            assert!(err.contains("IANA"), "{bad:?}: {err}");
        }
        assert!(zone("Europe/Berlin").is_ok() && zone("UTC").is_ok() && zone("Etc/GMT+5").is_ok());
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
}
