//! The agent's own tools (semantics §A3.7): the ones that work on the run's tape
//! and state, so they live in the agent (not in the builtin plugin): `tape.info`, `tape.search`,
//! `tape.reset`, `tape.handoff`, `tape.anchors`, and the commands `help`,
//! `model`, `quit`. The workspace tools (`bash`, `fs.*`, `web.fetch`) are
//! offered by the builtin plugin through `provide_tools`, so plugins can
//! override them by priority.

use bub_abi::types::{TapeEntry, TapeQuery};
use bub_kit::envelope::py_str;
use serde_json::{json, Map, Value};

use bub_agent::{
    tape::context_false,
    tools::{AgentTool, Exposure, ToolContext},
    AgentError,
};
use bub_framework::Framework;

use crate::spill;

fn schema(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

fn arg_str(args: &Map<String, Value>, key: &str) -> Option<String> {
    args.get(key).and_then(|v| match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    })
}

fn arg_u64(args: &Map<String, Value>, key: &str) -> Option<u64> {
    args.get(key).and_then(|v| v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())))
}

/// The tape tools and the commands, in Bub's registry order.
pub fn tape_and_command_tools() -> Vec<AgentTool> {
    vec![
        AgentTool::native(
            "tape.info",
            "Show information about the current tape.",
            schema(json!({}), &[]),
            Exposure::Auto,
            info,
        )
        .rendered(render_info)
        .returning("TapeInfoResult"),
        AgentTool::native(
            "tape.search",
            "Search for entries in the current tape that match the query. Returns a list of matching entries.",
            schema(
                json!({
                    "query": {"type": "string", "description": "The search query string."},
                    "limit": {"type": "integer", "default": 20, "description": "Maximum number of search results to return."},
                    "start": {"type": "string", "description": "Optional start date to filter entries (ISO format)."},
                    "end": {"type": "string", "description": "Optional end date to filter entries (ISO format)."},
                    "kinds": {
                        "type": "array", "items": {"type": "string"}, "default": ["message", "tool_result"],
                        "description": "Optional list of entry kinds to filter search results. Can include 'event', \
                            'anchor', 'system', 'message', 'tool_call', 'tool_result', 'error'."
                    },
                    "sessions": {
                        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                        "description": "Search other sessions too: 'all' (every session of this home; exact matches first, then the closest, then the newest) \
                            or a list of session ids (a comma-separated string in command mode). Each match then \
                            names its session (or, for a session not named here, its tape)."
                    }
                }),
                &["query"],
            ),
            Exposure::Auto,
            search,
        )
        .rendered(render_search)
        .declared_by_model()
        .returning("TapeSearchResult"),
        AgentTool::native(
            "tape.reset",
            "Reset the current tape (optionally archiving it first).",
            schema(json!({"archive": {"type": "boolean", "default": false}}), &[]),
            Exposure::Auto,
            reset,
        )
        .rendered(|r| py_str(&r["message"]))
        .returning("dict[str, str]"),
        AgentTool::native(
            "tape.handoff",
            "Add a handoff anchor: the model's context restarts after it.",
            schema(
                json!({"name": {"type": "string", "default": "handoff"}, "summary": {"type": "string", "default": ""}}),
                &[],
            ),
            Exposure::Auto,
            handoff,
        )
        .rendered(|r| format!("anchor added: {}", py_str(&r["anchor"])))
        .returning("dict[str, str]"),
        AgentTool::native("tape.anchors", "List the tape's anchors.", schema(json!({}), &[]), Exposure::Auto, anchors)
            .rendered(render_anchors)
            .returning("dict[str, list[str]]"),
        AgentTool::native("help", "Show the commands.", schema(json!({}), &[]), Exposure::Command, help),
        AgentTool::native(
            "model",
            "Set the session's model (applies from the next turn).",
            schema(json!({"model_id": {"type": "string"}}), &["model_id"]),
            Exposure::Command,
            model,
        ),
        AgentTool::native(
            "reasoning_effort",
            "Set the reasoning effort for this session starting from the next turn.",
            schema(json!({"reasoning_effort": {"type": "string"}}), &["reasoning_effort"]),
            Exposure::Command,
            reasoning_effort,
        ),
        AgentTool::native("quit", "End the session.", schema(json!({}), &[]), Exposure::Command, quit),
    ]
}

async fn info(_args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let entries = cx.tape.entries().await?;
    let anchors: Vec<usize> = entries.iter().enumerate().filter(|(_, e)| e.kind == "anchor").map(|(i, _)| i).collect();
    let last_anchor = anchors.last().and_then(|&i| entries[i].payload.get("name").cloned()).unwrap_or(Value::Null);
    let since = anchors.last().map_or(entries.len(), |&i| entries.len() - i - 1);
    // Bub's TapeInfo: the newest run event with an integer total.
    let (mut total, mut rate) = (Value::Null, Value::Null);
    for e in entries.iter().rev() {
        if e.kind != "event" || e.payload.get("name") != Some(&json!("run")) {
            continue;
        }
        let usage = &e.payload["data"]["usage"];
        let Some(t) = usage.get("total_tokens").filter(|t| t.is_i64() || t.is_u64()) else { continue };
        total = t.clone();
        let (input, cached) = (usage["input_tokens"].as_i64(), usage["cached_tokens"].as_i64());
        if let (Some(input), Some(cached)) = (input.filter(|i| *i > 0), cached) {
            rate = json!(cached as f64 / input as f64);
        }
        break;
    }
    Ok(json!({
        "name": cx.tape.name(),
        "entries": entries.len(),
        "anchors": anchors.len(),
        "last_anchor": last_anchor,
        "entries_since_last_anchor": since,
        "last_token_usage": total,
        "last_token_cache_hit_rate": rate,
    }))
}

/// Bub's `_render_tape_info`.
fn render_info(r: &Value) -> String {
    let rate = r["last_token_cache_hit_rate"].as_f64().map_or_else(|| "None".into(), |h| format!("{:.2}%", h * 100.0));
    format!(
        "name: {}\nentries: {}\nanchors: {}\nlast_anchor: {}\nentries_since_last_anchor: {}\nlast_token_usage: {}\n\
         last_token_cache_hit_rate: {rate}",
        py_str(&r["name"]),
        py_str(&r["entries"]),
        py_str(&r["anchors"]),
        py_str(&r["last_anchor"]),
        py_str(&r["entries_since_last_anchor"]),
        py_str(&r["last_token_usage"]),
    )
}

async fn search(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let limit = arg_u64(&args, "limit").unwrap_or(20) as usize;
    let kinds = match args.get("kinds") {
        Some(Value::Array(kinds)) => kinds.iter().filter_map(|k| k.as_str().map(str::to_owned)).collect(),
        _ => vec!["message".into(), "tool_result".into()],
    };
    let (start, end) = (arg_str(&args, "start"), arg_str(&args, "end"));
    // Bub passes both bounds when either is given (an empty one is invalid).
    let between_dates =
        (start.is_some() || end.is_some()).then(|| (start.unwrap_or_default(), end.unwrap_or_default()));
    let q = TapeQuery {
        tape: cx.tape.name().to_owned(),
        query: Some(arg_str(&args, "query").unwrap_or_default()),
        kinds,
        limit: Some(limit),
        between_dates,
        ..Default::default()
    };
    if let Some(sessions) = args.get("sessions").filter(|v| !v.is_null()) {
        return search_sessions(sessions, &q, &cx).await;
    }
    // The store's matches, best first, then the run's own entries of those
    // kinds (Bub's fork store adds them unsearched).
    let mut filtered = 0;
    let mut matches = Vec::new();
    for e in cx.tape.fetch(&q).await? {
        match search_match(&e) {
            Some(found) => matches.push(found),
            None => filtered += 1,
        }
    }
    Ok(json!({"matches": matches, "filtered": filtered}))
}

/// A search's match `{date, content}` for `entry`; None for an entry that
/// holds an earlier search's result, left out (and counted as filtered)
/// so that a search does not find itself.
fn search_match(entry: &TapeEntry) -> Option<Value> {
    let found = json!({"date": entry.date, "content": entry.payload});
    (!bub_kit::python::python_json(&found).contains("[tape.search]")).then_some(found)
}

/// `tape.search` over other sessions' tapes (`sessions`: "all", or ids as a
/// list or a comma-separated string): the store's search across tapes
/// (an index where the store has one), each match naming its session (or,
/// for a tape without a record, its tape). Earlier searches' results are
/// left out, as on one tape. The run's own entries are not on the store
/// yet, so they are not among them.
///
/// Only the sessions of the turn's owner are searched (see
/// [`bub_agent::sessions`]): "all" means all of theirs, and naming
/// another person's session is refused. The open channels' turns (the
/// terminal, by default) search every session.
async fn search_sessions(sessions: &Value, q: &TapeQuery, cx: &ToolContext) -> Result<Value, AgentError> {
    let here = cx.tape.name();
    // None: every session; else the ids named.
    let ids: Option<Vec<String>> = match sessions {
        Value::String(s) if s.trim() == "all" => None,
        Value::String(s) => Some(s.split(',').map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect()),
        Value::Array(items) => Some(items.iter().filter_map(Value::as_str).map(str::to_owned).collect()),
        other => {
            return Err(AgentError::bub(
                "invalid_input",
                format!("sessions must be 'all' or a list of ids, got {other}"),
                None,
            ))
        }
    };
    if ids.as_ref().is_some_and(Vec::is_empty) {
        return Err(AgentError::bub("invalid_input", "sessions names no session: give 'all' or session ids", None));
    }
    let bounds = SearchBounds::of(cx)?;
    let store = cx.tape.store();
    // The tapes to search, each with the session it holds (None: a tape
    // without a record).
    let candidates: Vec<(String, Option<String>)> = match ids {
        None => bounds.index.sessions(store).await?,
        Some(ids) => {
            let refused: Vec<&String> = ids.iter().filter(|id| !bounds.may_read(Some(id))).collect();
            if !refused.is_empty() {
                return Err(AgentError::bub("invalid_input", bounds.refusal(&refused), None));
            }
            ids.iter().map(|id| (bub_agent::tape::sibling_session_tape(here, id), Some(id.clone()))).collect()
        }
    };
    let mut session_of: std::collections::HashMap<String, Option<String>> =
        candidates.into_iter().filter(|(tape, session)| tape == here || bounds.may_read(session.as_deref())).collect();
    session_of.insert(here.to_owned(), Some(bounds.session.clone()));
    let tapes: Vec<String> = session_of.keys().cloned().collect();
    let found = store.search_tapes(Some(&tapes), q).await?;
    let mut filtered = 0;
    let mut matches = Vec::new();
    for m in found {
        let Some(mut one) = search_match(&m.entry) else {
            filtered += 1;
            continue;
        };
        match session_of.get(&m.tape) {
            Some(Some(id)) => one["session"] = json!(id),
            _ => one["tape"] = json!(m.tape),
        }
        matches.push(one);
    }
    Ok(json!({"matches": matches, "filtered": filtered}))
}

/// Whose sessions a turn may read: its owner's, or every one for a turn
/// of an open channel (see [`bub_agent::sessions`]).
pub(crate) struct SearchBounds {
    scope: bub_agent::sessions::SearchScope,
    index: std::sync::Arc<bub_agent::sessions::SessionIndex>,
    open: bool,
    // The session whose owner the turn acts for, and that owner.
    session: String,
    owner: bub_agent::sessions::Owner,
}

impl SearchBounds {
    /// The bounds of the turn `cx` runs in.
    pub(crate) fn of(cx: &ToolContext) -> Result<SearchBounds, AgentError> {
        let framework = Framework::of(&cx.state);
        let scope = match &framework {
            Some(f) => f.model_settings().map_err(AgentError::value)?.search,
            None => Default::default(),
        };
        let index = framework.as_ref().map_or_else(bub_agent::sessions::SessionIndex::new, Framework::session_index);
        let text = |key: &str| cx.state.get_value(key).and_then(|v| v.as_str().map(str::to_owned));
        let session = text(bub_agent::sessions::OWNER_SESSION_KEY).or_else(|| text("session_id")).unwrap_or_default();
        let open = scope.is_open(text("_runtime_channel").as_deref());
        let owner = scope.owner(&session);
        Ok(SearchBounds { scope, index, open, session, owner })
    }

    /// Whether the turn may read `session` (None: a tape without a record).
    pub(crate) fn may_read(&self, session: Option<&str>) -> bool {
        self.open || session.is_some_and(|s| s == self.session || self.scope.owner(s) == self.owner)
    }

    /// Why `sessions` are refused, and how the operator opens them.
    pub(crate) fn refusal(&self, sessions: &[&String]) -> String {
        let named: Vec<String> = sessions.iter().map(|s| format!("{s:?}")).collect();
        format!(
            "session(s) {} belong to someone else: this conversation reaches only its own sessions (the operator \
             joins a person's sessions with the `people` setting, or opens search to a channel with \
             `search_open_channels`)",
            named.join(", ")
        )
    }
}

/// Bub's `_render_tape_search`: each match as Python's `json.dumps` writes
/// it (ASCII-escaped, `", "` and `": "`).
fn render_search(r: &Value) -> String {
    let matches = r["matches"].as_array().cloned().unwrap_or_default();
    let mut out = format!("[tape.search]: {} matches ({} filtered)", matches.len(), py_str(&r["filtered"]));
    for m in &matches {
        out.push('\n');
        // Non-ASCII only occurs inside strings, where \uXXXX means the same.
        for c in bub_kit::python::python_json(m).chars() {
            if c.is_ascii() {
                out.push(c);
            } else {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
    }
    out
}

async fn reset(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let archive = args.get("archive").is_some_and(|v| v.as_bool().unwrap_or_else(|| v.as_str() == Some("true")));
    if !archive {
        cx.tape.reset(Map::new()).await?;
        return Ok(json!({"message": "ok"}));
    }
    // Bub's archive: the tape and each sidecar as JSONL next to the tapes,
    // one stamp; a sidecar whose archive failed is kept, not reset.
    let home = Framework::of(&cx.state)
        .map(|f| f.home().to_path_buf())
        .ok_or_else(|| AgentError::value("tape.reset(archive=true) needs the host's home (a framework turn)"))?;
    let dir = home.join("tapes");
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string();
    let write = |tape: String, entries: Vec<TapeEntry>| {
        let dir = dir.clone();
        let path = dir.join(format!("{tape}.jsonl.{stamp}.bak"));
        async move {
            let mut text = String::new();
            for e in &entries {
                text.push_str(&serde_json::to_string(e).unwrap_or_default());
                text.push('\n');
            }
            let target = path.clone();
            tokio::task::spawn_blocking(move || {
                bub_kit::files::create_private_dir(&dir)?;
                bub_kit::files::write_private(&target, text.as_bytes())
            })
            .await
            .map_err(std::io::Error::other)?
            .map(|()| path)
        }
    };
    let main = write(cx.tape.name().to_owned(), cx.tape.entries().await?)
        .await
        .map_err(|e| AgentError::value(format!("cannot archive tape {}: {e}", cx.tape.name())))?;
    let mut outcomes = Vec::new();
    for (name, tape) in cx.tape.sidecars() {
        let q = TapeQuery { tape: tape.clone(), ..Default::default() };
        let result = match cx.tape.fetch(&q).await {
            Ok(entries) => write(tape, entries).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        outcomes.push((name, result));
    }
    let failed: Vec<String> = outcomes.iter().filter(|(_, r)| r.is_err()).map(|(n, _)| n.clone()).collect();
    let mut state = Map::new();
    state.insert("archived".into(), json!(main.display().to_string()));
    cx.tape.reset_keeping(state, &failed).await?;
    for (name, result) in outcomes {
        let data = match result {
            Ok(path) => {
                json!({"sidecar": name, "reason": "tape.reset", "status": "ok", "archive": path.display().to_string()})
            }
            Err(e) => json!({"sidecar": name, "reason": "tape.reset", "status": "error", "error": e}),
        };
        cx.tape.record_event("sidecar.archive", data, context_false()).await?;
    }
    Ok(json!({"message": format!("Archived: {}", main.display())}))
}

async fn handoff(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let name = arg_str(&args, "name").filter(|n| !n.is_empty()).unwrap_or_else(|| "handoff".into());
    let summary = arg_str(&args, "summary").unwrap_or_default();
    cx.tape.handoff(&name, Some(json!({"summary": summary}))).await?;
    Ok(json!({"anchor": name}))
}

async fn anchors(_args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let entries = cx.tape.entries().await?;
    let names: Vec<Value> =
        entries.iter().filter(|e| e.kind == "anchor").filter_map(|e| e.payload.get("name").cloned()).collect();
    let start = names.len().saturating_sub(20);
    Ok(json!({"anchors": names[start..]}))
}

/// Bub's `_render_anchors`.
fn render_anchors(r: &Value) -> String {
    let names: Vec<String> =
        r["anchors"].as_array().into_iter().flatten().map(|n| format!("- {}", py_str(n))).collect();
    if names.is_empty() {
        "(no anchors)".into()
    } else {
        names.join("\n")
    }
}

/// Bub's help lines (Bub 0.6.0a3, `bub/builtin/tools.py` `show_help`): a
/// fixed list of commands with an example each.
const HELP_LINES: [(&str, &str); 14] = [
    ("help", ""),
    ("skill", " name=foo"),
    ("tape.info", ""),
    ("tape.search", " query=error"),
    ("tape.handoff", " name=phase-1 summary='done'"),
    ("tape.anchors", ""),
    ("fs.read", " path=README.md"),
    ("fs.write", " path=tmp.txt content='hello'"),
    ("fs.edit", " path=tmp.txt old=hello new=world"),
    ("bash", " command='sleep 5' background=true"),
    ("bash.output", " shell_id=bsh-12345678"),
    ("bash.kill", " shell_id=bsh-12345678"),
    ("code_mode", " enable=true"),
    ("quit", ""),
];

/// Bub's help: the prefix, its fixed list of commands (each line only when
/// this agent has that tool: no `skill` line without skills), and the shell
/// fallback.
async fn help(_args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let prefix = Framework::of(&cx.state)
        .and_then(|f| f.model_settings().ok())
        .map_or_else(|| ",".to_owned(), |s| s.command_prefix);
    let mut text = format!("Commands use '{prefix}' at line start.\nKnown internal commands:\n");
    for (name, example) in HELP_LINES {
        if cx.tools.iter().any(|t| t.name == name) {
            text.push_str(&format!("  {prefix}{name}{example}\n"));
        }
    }
    text.push_str(&format!("Any unknown command after '{prefix}' is executed as shell via bash."));
    Ok(json!(text))
}

async fn model(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    // An empty id clears the session's model (back to the default), as
    // Bub's session settings read an empty value.
    let id = arg_str(&args, "model_id").ok_or_else(|| AgentError::value("model_id is required"))?;
    set_session_setting(&cx, "model", id.as_str()).await?;
    Ok(json!(format!("Session model set to {id} (applies from the next turn).")))
}

async fn reasoning_effort(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let effort = arg_str(&args, "reasoning_effort").unwrap_or_default().trim().to_owned();
    if effort.is_empty() {
        return Err(AgentError::value("reasoning_effort must not be empty"));
    }
    set_session_setting(&cx, "reasoning_effort", effort.as_str()).await?;
    Ok(json!(format!("Session reasoning effort set to {effort} (applies from the next turn).")))
}

/// Bub's `set_session_setting`: into this turn's state and, as a switch
/// event, onto the session tape (merged back with the turn), where the next
/// turn's state finds it (`agent::session_settings`).
pub(crate) async fn set_session_setting(
    cx: &ToolContext,
    key: &str,
    value: impl Into<Value>,
) -> Result<(), AgentError> {
    use bub_agent::session_settings;
    let value = value.into();
    cx.state.set(key, &value).map_err(|e| AgentError::value(e.to_string()))?;
    cx.tape.record_event(&session_settings::event_name(key), json!({ key: value }), Map::new()).await?;
    Ok(())
}

async fn quit(_args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    // The session's end is the channel's to act on (the gateway's router
    // quits the session; `bub chat` ends at Ctrl-D): mark it in the state.
    // The builtin's save_state stops the session's shells (Bub's answer).
    let _ = cx.state.set("_runtime_quit", &true);
    Ok(json!("Session tasks stopped."))
}

/// The run helpers: `spill.read`, `tool.describe` and `subagent`.
pub fn run_helper_tools() -> Vec<AgentTool> {
    vec![
        AgentTool::native(
            "spill.read",
            "Read bounded chunks from an oversized tool result stored in the current session's spill tape.",
            schema(
                json!({"handle": {"type": "string"}, "cursor": {"type": "integer", "default": 0},
                       "count": {"type": "integer", "default": 1}, "from_end": {"type": "boolean", "default": false}}),
                &["handle"],
            ),
            Exposure::Direct,
            |args, cx| async move {
                let handle = arg_str(&args, "handle").unwrap_or_default();
                let int = |k: &str, d: i64| {
                    args.get(k).and_then(|v| v.as_i64().or_else(|| v.as_str()?.parse().ok())).unwrap_or(d)
                };
                let from_end =
                    args.get("from_end").is_some_and(|v| v.as_bool().unwrap_or_else(|| v.as_str() == Some("true")));
                Ok(json!(spill::read(&cx.tape, &handle, int("cursor", 0), int("count", 1), from_end).await?))
            },
        ),
        AgentTool::native(
            "tool.describe",
            "Describe tools by name (their parameters); loads deferred tools for the next steps.",
            schema(json!({"names": {"type": "array", "items": {"type": "string"}}}), &["names"]),
            Exposure::Direct,
            describe,
        ),
        AgentTool::native(
            "subagent",
            "Run a sub-agent on a prompt and return its answer.",
            schema(
                json!({"prompt": {"type": "string"}, "model": {"type": "string"},
                       "session": {"type": "string", "default": "temp"},
                       "allowed_tools": {"type": "array", "items": {"type": "string"}},
                       "allowed_skills": {"type": "array", "items": {"type": "string"}}}),
                &["prompt"],
            ),
            Exposure::Auto,
            subagent,
        )
        .declared_by_model()
        .rendered(render_subagent)
        .returning("SubAgentResult"),
    ]
}

async fn describe(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let names: Vec<String> = match args.get("names") {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        Some(Value::String(s)) => s.split([',', ' ']).filter(|s| !s.is_empty()).map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let (mut tools, mut unknown, mut loaded) = (Vec::new(), Vec::new(), Vec::new());
    for name in names {
        match cx.tools.iter().find(|t| t.name == name || t.model_name() == name) {
            Some(t) => {
                tools.push(json!({"name": t.model_name(), "description": t.description, "parameters": *t.parameters}));
                if t.deferred {
                    loaded.push(t.name.clone());
                }
            }
            None => unknown.push(name),
        }
    }
    if !loaded.is_empty() {
        cx.tape.record_event("tool.loaded", json!({"names": loaded}), Map::new()).await?;
    }
    Ok(json!({"tools": tools, "unknown": unknown}))
}

/// Bub's `resolve_tool_names(names or None, exclude={"subagent"})`: each
/// name (trimmed) is a registry name or its model-facing alias, matched
/// case-insensitively; the registry names, sorted (Bub's `_scope_turn`
/// sorts them too). An unknown name is refused with Bub's message.
fn resolve_tool_names(tools: &[bub_agent::AgentTool], names: &[String]) -> Result<Vec<String>, AgentError> {
    let index = |name: &str| {
        let key = name.trim().to_lowercase();
        tools
            .iter()
            .find(|t| t.name.to_lowercase() == key)
            .or_else(|| tools.iter().find(|t| t.model_name().to_lowercase() == key))
            .map(|t| t.name.clone())
    };
    let mut resolved: Vec<String> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    if names.is_empty() {
        resolved.extend(tools.iter().map(|t| t.name.clone()));
    }
    for name in names {
        match index(name) {
            Some(found) => resolved.push(found),
            // Python's repr of a plain name.
            None => unknown.push(format!("'{}'", name.trim())),
        }
    }
    if !unknown.is_empty() {
        unknown.sort();
        unknown.dedup();
        return Err(AgentError::value(format!("unknown tool name(s): {}", unknown.join(", "))));
    }
    resolved.retain(|n| n != "subagent");
    resolved.sort();
    resolved.dedup();
    Ok(resolved)
}

fn framework_confined(framework: &Framework) -> bool {
    framework.model_settings().is_ok_and(|s| s.confine_workspace)
}

async fn subagent(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let prompt = arg_str(&args, "prompt").unwrap_or_default();
    let framework = Framework::of(&cx.state)
        .ok_or_else(|| AgentError::value("subagent needs a framework turn (it runs through the builtin agent)"))?;
    let parent: String = cx.state.get("session_id").ok().flatten().unwrap_or_default();
    let session = match arg_str(&args, "session").as_deref().unwrap_or("temp") {
        "temp" => format!("temp/{:08x}", bub_kit::random::u64() as u32),
        "inherit" => parent.clone(),
        // Confined, a model cannot reach another session's memory.
        other if framework_confined(&framework) && other != parent => {
            return Err(AgentError::value(format!(
            "subagent session {other:?} is another session's; with confine_workspace on, use \"temp\" or \"inherit\""
        )))
        }
        other => {
            // Another session's memory is its owner's (see `search_sessions`).
            let bounds = SearchBounds::of(&cx)?;
            if !bounds.may_read(Some(other)) {
                return Err(AgentError::value(bounds.refusal(&[&other.to_owned()])));
            }
            other.to_owned()
        }
    };
    // The sub-run acts for the caller's owner: its `temp/…` session is no one's.
    let owner_session: Option<String> = cx
        .state
        .get_value(bub_agent::sessions::OWNER_SESSION_KEY)
        .and_then(|v| v.as_str().map(str::to_owned))
        .or_else(|| Some(parent.clone()).filter(|p| !p.is_empty()));
    // Bub's `{**context.state, "session_id": …}`: the sub-run starts from a
    // copy of the calling turn's state (its model, code mode, runtime
    // objects), under its own session; no `load_state` runs for it.
    let (state, _) = bub_abi::TurnState::shared(Map::new());
    for key in cx.state.keys() {
        if let Some(value) = cx.state.get_raw(&key) {
            let _ = state.handle().set(bub_abi::abi_stable::std_types::RStr::from_str(&key), value);
        }
    }
    state.set("session_id", &session).map_err(|e| AgentError::value(e.to_string()))?;
    if let Some(owner) = &owner_session {
        state.set(bub_agent::sessions::OWNER_SESSION_KEY, owner).map_err(|e| AgentError::value(e.to_string()))?;
    }
    let _attached = framework.attach(&state);
    // As Bub's `resolve_tool_names`: registry names and model-facing
    // aliases alike, case-insensitively; unknown names refused before any
    // sub-run; an empty list the same as none (every tool but `subagent`).
    let named: Vec<String> = args
        .get("allowed_tools")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(|s| s.trim().to_owned()).collect())
        .unwrap_or_default();
    let allowed = resolve_tool_names(&cx.tools, &named)?;
    state.set("_runtime_allowed_tools", &allowed).map_err(|e| AgentError::value(e.to_string()))?;
    // Bub's `_scope_turn`: case-folded, once each; a list (even empty)
    // restricts the subagent's skills, none leaves them all. The run
    // records the names as asked.
    let asked_skills: Option<Vec<String>> = args
        .get("allowed_skills")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).map(str::to_owned).collect());
    match &asked_skills {
        Some(names) => {
            let mut folded: Vec<String> = Vec::new();
            for name in names.iter().map(|n| n.to_lowercase()) {
                if !folded.contains(&name) {
                    folded.push(name);
                }
            }
            state.set("allowed_skills", &folded).map_err(|e| AgentError::value(e.to_string()))?;
        }
        None => {
            state.remove("allowed_skills");
        }
    }
    if let Some(model) = arg_str(&args, "model") {
        state.set("model", &model).map_err(|e| AgentError::value(e.to_string()))?;
    }
    let asked = crate::agent::Asked { tools: Some(allowed), skills: asked_skills };
    let mut stream = crate::agent::run_stream_asked(&framework, &session, vec![json!(prompt)], state, asked).await?;
    // Bub's `SubAgentResult`: the text, and the errors apart.
    let (mut output, mut errors) = (String::new(), Vec::new());
    while let Some(item) = stream.next().await {
        match item {
            Ok(e) if e.kind == "text" => output.push_str(e.data["delta"].as_str().unwrap_or("")),
            Ok(e) if e.kind == "error" => errors.push(e.data["message"].as_str().unwrap_or("unknown error").to_owned()),
            Ok(_) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    Ok(json!({"session_id": session, "output": output, "errors": errors}))
}

/// Bub's `_render_subagent`: the output, then each error as `[Error: …]`.
fn render_subagent(result: &Value) -> String {
    let errors = result["errors"].as_array().into_iter().flatten().filter_map(Value::as_str);
    let mut text = result["output"].as_str().unwrap_or_default().to_owned();
    for e in errors {
        text.push_str(&format!("[Error: {e}]"));
    }
    text
}
