//! `schedule`: reminders and cron jobs for Bub.
//!
//! - **Tools** (the model's, or `,schedule.add …` in command mode), told
//!   the turn's session by the host (`context: true`):
//!   `schedule.add {message, after?, at?, every?, cron?, channel?, chat_id?}`
//!   — once `after` a delay (`"90s"`, `"10m"`, `"2h 30m"`) or `at` a time
//!   (RFC 3339), repeatedly `every` a duration, or on a `cron` expression
//!   (5 fields `min hour dom month dow`, or 6 with seconds first; UTC);
//!   `schedule.list {all?}` — this session's jobs (every job with `all`);
//!   `schedule.remove {id}`.
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
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The plugin.
pub struct Schedule {
    jobs: Arc<Jobs>,
    tick: Duration,
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
        Ok(Schedule {
            jobs: Arc::new(Jobs { dir: ctx.data_dir.clone(), warned: Default::default() }),
            tick: Duration::from_millis(tick_ms),
        })
    }

    /// `schedule.add`, `schedule.list`, `schedule.remove`.
    fn provide_tools(&self) -> Option<Vec<Object>> {
        Some(
            [Op::Add, Op::List, Op::Remove]
                .into_iter()
                .map(|op| Object::tool(JobTool { op, jobs: self.jobs.clone() }))
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

/// A cron expression (5 fields, or 6 with seconds first); its next time after `after`.
fn cron_next(expr: &str, after: f64) -> Result<f64, String> {
    let fields = expr.split_whitespace().count();
    let full = match fields {
        5 => format!("0 {expr}"),
        6 | 7 => expr.to_owned(),
        _ => return Err(format!("cron {expr:?} needs 5 fields (min hour day month weekday)")),
    };
    let schedule: cron::Schedule = full.parse().map_err(|e| format!("cron {expr:?} is not valid: {e}"))?;
    let start = chrono::DateTime::<chrono::Utc>::from_timestamp(after as i64, 0).ok_or("time out of range")?;
    let next = schedule.after(&start).next().ok_or_else(|| format!("cron {expr:?} never fires again"))?;
    Ok(next.timestamp() as f64)
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

fn add(jobs: &Jobs, args: &Map<String, Value>, context: &ToolCallContext) -> Result<Value, String> {
    let message = text(args, "message").ok_or("schedule.add needs `message`: the text sent back when the job fires")?;
    let session_id = context
        .session_id
        .clone()
        .ok_or("schedule.add runs in a session's turn (the job fires back into that session)")?;
    let (now, every, cron_expr) = (now(), text(args, "every"), text(args, "cron"));
    let next_run = if let Some(expr) = &cron_expr {
        cron_next(expr, now)?
    } else if let Some(at) = text(args, "at") {
        let time = humantime::parse_rfc3339_weak(&at).map_err(|e| format!("at={at:?} is not an RFC 3339 time: {e}"))?;
        time.duration_since(UNIX_EPOCH).map_err(|_| format!("at={at:?} is before 1970"))?.as_secs_f64()
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
    json!({
        "id": job.id,
        "session_id": job.session_id,
        "message": job.message,
        "next_run": rfc3339(job.next_run),
        "every_seconds": job.every_seconds,
        "cron": job.cron,
        "channel": job.channel,
    })
}

impl Tool for JobTool {
    fn spec(&self) -> ToolSpec {
        let (name, description, parameters) = match self.op {
            Op::Add => (
                "schedule.add",
                "Schedule a message to be sent back to this conversation later: once (`after` a delay such as \
                 \"10m\", or `at` an RFC 3339 time), repeatedly (`every` \"1h\"), or on a `cron` expression (UTC).",
                json!({"type": "object", "properties": {
                    "message": {"type": "string", "description": "The text that comes back when the job fires"},
                    "after": {"type": "string", "description": "A delay: \"90s\", \"10m\", \"2h 30m\""},
                    "at": {"type": "string", "description": "An RFC 3339 time"},
                    "every": {"type": "string", "description": "Repeat interval: \"1h\""},
                    "cron": {"type": "string", "description": "min hour day month weekday (UTC)"},
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
        let (op, jobs) = (self.op, self.jobs.clone());
        async move {
            let result = match op {
                Op::Add => add(&jobs, &arguments, &context),
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
                    (Some(expr), _) => cron_next(expr, now).ok(),
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
        assert_eq!(cron_next("30 9 * * *", T0).unwrap(), T0 + 9.0 * 3600.0 + 30.0 * 60.0);
        // Six fields, seconds first: the next :15 second.
        assert_eq!(cron_next("15 * * * * *", T0).unwrap(), T0 + 15.0);
        let err = cron_next("* *", T0).unwrap_err();
        assert!(err.contains("needs 5 fields"), "{err}");
        let err = cron_next("61 * * * *", T0).unwrap_err();
        assert!(err.contains("is not valid"), "{err}");
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
