//! The agent's own tools (spec §3.7): the ones that work on the run's tape
//! and state, so they live in the agent (not in the builtin plugin): `tape.info`, `tape.search`,
//! `tape.reset`, `tape.handoff`, `tape.anchors`, and the commands `help`,
//! `model`, `quit`. The workspace tools (`bash`, `fs.*`, `web.fetch`) are
//! offered by the builtin plugin through `provide_tools`, so plugins can
//! override them by priority.

use bub_abi::types::TapeQuery;
use serde_json::{json, Map, Value};

use bub_framework::{
    agent::{
        tape::context_false,
        tools::{AgentTool, Exposure, ToolContext},
        AgentError,
    },
    Framework,
};

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
        ),
        AgentTool::native(
            "tape.search",
            "Search the current tape for entries containing a text.",
            schema(json!({"query": {"type": "string"}, "limit": {"type": "integer", "default": 20}}), &["query"]),
            Exposure::Auto,
            search,
        ),
        AgentTool::native(
            "tape.reset",
            "Reset the current tape (optionally archiving it first).",
            schema(json!({"archive": {"type": "boolean", "default": false}}), &[]),
            Exposure::Auto,
            reset,
        ),
        AgentTool::native(
            "tape.handoff",
            "Add a handoff anchor: the model's context restarts after it.",
            schema(
                json!({"name": {"type": "string", "default": "handoff"}, "summary": {"type": "string", "default": ""}}),
                &[],
            ),
            Exposure::Auto,
            handoff,
        ),
        AgentTool::native("tape.anchors", "List the tape's anchors.", schema(json!({}), &[]), Exposure::Auto, anchors),
        AgentTool::native("help", "Show the commands.", schema(json!({}), &[]), Exposure::Command, help),
        AgentTool::native(
            "model",
            "Set the session's model (applies from the next turn).",
            schema(json!({"model_id": {"type": "string"}}), &["model_id"]),
            Exposure::Command,
            model,
        ),
        AgentTool::native("quit", "End the session.", schema(json!({}), &[]), Exposure::Command, quit),
    ]
}

async fn info(_args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let entries = cx.tape.entries().await?;
    let anchors: Vec<_> = entries.iter().filter(|e| e.kind == "anchor").collect();
    let last = anchors.last().and_then(|a| a.payload.get("name")).and_then(Value::as_str).unwrap_or("-");
    let since = entries.iter().rev().take_while(|e| e.kind != "anchor").count();
    let usage = entries
        .iter()
        .rev()
        .find_map(|e| {
            (e.kind == "event" && e.payload.get("name") == Some(&json!("run")))
                .then(|| e.payload["data"]["usage"].clone())
        })
        .filter(|u| u.is_object());
    let (total, rate) = match &usage {
        Some(u) => {
            let input = u["input_tokens"].as_f64().unwrap_or(0.0);
            let cached = u["cached_tokens"].as_f64().unwrap_or(0.0);
            let rate = (input > 0.0).then(|| format!("{:.2}%", 100.0 * cached / input));
            (u["total_tokens"].as_u64().map_or("None".into(), |t| t.to_string()), rate.unwrap_or_else(|| "None".into()))
        }
        None => ("None".into(), "None".into()),
    };
    Ok(json!(format!(
        "name: {}\nentries: {}\nanchors: {}\nlast_anchor: {last}\nentries_since_last_anchor: {since}\nlast_token_usage: {total}\nlast_token_cache_hit_rate: {rate}",
        cx.tape.name(),
        entries.len(),
        anchors.len()
    )))
}

async fn search(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let query = arg_str(&args, "query").unwrap_or_default();
    let limit = arg_u64(&args, "limit").unwrap_or(20) as usize;
    let q = TapeQuery {
        tape: cx.tape.name().to_owned(),
        query: Some(query.clone()),
        kinds: vec!["message".into(), "tool_result".into()],
        limit: Some(limit + 50),
        ..Default::default()
    };
    let needle = query.to_lowercase();
    let mut filtered = 0;
    let mut lines = Vec::new();
    // Newest first from the store; the run's own entries follow unfiltered
    // (the fork's quirk), so the text is checked here too.
    for e in cx.tape.fetch(&q).await? {
        let text = Value::Object(e.payload.clone()).to_string();
        if text.contains("[tape.search]") {
            filtered += 1;
            continue;
        }
        if !text.to_lowercase().contains(&needle) {
            continue;
        }
        if lines.len() < limit {
            // As Bub prints it: Python's json.dumps (", " and ": ").
            lines.push(bub_framework::agent::tools::python_json(&json!({"date": e.date, "content": e.payload})));
        }
    }
    let mut out = format!("[tape.search]: {} matches ({filtered} filtered)", lines.len());
    for l in lines {
        out.push('\n');
        out.push_str(&l);
    }
    Ok(json!(out))
}

async fn reset(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let archive = args.get("archive").is_some_and(|v| v.as_bool().unwrap_or_else(|| v.as_str() == Some("true")));
    if !archive {
        cx.tape.reset(Map::new()).await?;
        return Ok(json!("ok"));
    }
    // Bub's archive: the tape and each sidecar as JSONL next to the tapes,
    // one stamp; a sidecar whose archive failed is kept, not reset.
    let home = Framework::of(&cx.state)
        .map(|f| f.home().to_path_buf())
        .ok_or_else(|| AgentError::value("tape.reset(archive=true) needs the host's home (a framework turn)"))?;
    let dir = home.join("tapes");
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string();
    let write = |tape: String, entries: Vec<bub_abi::types::TapeEntry>| {
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
                bub_abi::files::create_private_dir(&dir)?;
                bub_abi::files::write_private(&target, text.as_bytes())
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
        cx.tape.event("sidecar.archive", data, context_false()).await?;
    }
    Ok(json!(format!("Archived: {}", main.display())))
}

async fn handoff(args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let name = arg_str(&args, "name").filter(|n| !n.is_empty()).unwrap_or_else(|| "handoff".into());
    let summary = arg_str(&args, "summary").unwrap_or_default();
    cx.tape.handoff(&name, Some(json!({"summary": summary}))).await?;
    Ok(json!(format!("anchor added: {name}")))
}

async fn anchors(_args: Map<String, Value>, cx: ToolContext) -> Result<Value, AgentError> {
    let entries = cx.tape.entries().await?;
    let names: Vec<String> = entries
        .iter()
        .filter(|e| e.kind == "anchor")
        .filter_map(|e| e.payload.get("name").and_then(Value::as_str).map(|n| format!("- {n}")))
        .collect();
    let start = names.len().saturating_sub(20);
    Ok(json!(if names.is_empty() { "(no anchors)".to_owned() } else { names[start..].join("\n") }))
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
    let id = arg_str(&args, "model_id")
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| AgentError::value("model_id is required"))?;
    cx.state.set("model", &id).map_err(|e| AgentError::value(e.to_string()))?;
    cx.tape.event("model_switch", json!({"model": id}), Map::new()).await?;
    Ok(json!(format!("Session model set to {id} (applies from the next turn).")))
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
        ),
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
                tools.push(json!({"name": t.model_name(), "description": t.description, "parameters": t.parameters}));
                if t.deferred {
                    loaded.push(t.name.clone());
                }
            }
            None => unknown.push(name),
        }
    }
    if !loaded.is_empty() {
        cx.tape.event("tool.loaded", json!({"names": loaded}), Map::new()).await?;
    }
    Ok(json!({"tools": tools, "unknown": unknown}))
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
        "temp" => format!("temp/{:08x}", bub_framework::random::u64() as u32),
        "inherit" => parent,
        // Confined, a model cannot reach another session's memory.
        other if framework_confined(&framework) && other != parent => {
            return Err(AgentError::value(format!(
            "subagent session {other:?} is another session's; with confine_workspace on, use \"temp\" or \"inherit\""
        )))
        }
        other => other.to_owned(),
    };
    let (state, _) = framework
        .build_state(&json!({"session_id": session}), &session)
        .await
        .map_err(|e| AgentError::value(e.to_string()))?;
    let _attached = framework.attach(&state);
    // As Bub: names trimmed, unknown names refused before any sub-run, an
    // empty list the same as none (every tool but `subagent`).
    let all: Vec<String> = cx.tools.iter().map(|t| t.name.clone()).collect();
    let named: Vec<String> = args
        .get("allowed_tools")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    let unknown: Vec<String> = named.iter().filter(|n| !all.contains(n)).map(|n| format!("'{n}'")).collect();
    if !unknown.is_empty() {
        return Err(AgentError::value(format!("unknown tool name(s): {}", unknown.join(", "))));
    }
    let allowed: Vec<String> = if named.is_empty() { all } else { named };
    let allowed: Vec<String> = allowed.into_iter().filter(|n| n != "subagent").collect();
    state.set("_runtime_allowed_tools", &allowed).map_err(|e| AgentError::value(e.to_string()))?;
    // Bub's `_scope_turn`: case-folded, once each; a list (even empty)
    // restricts the subagent's skills, none leaves them all.
    match args.get("allowed_skills").and_then(Value::as_array) {
        Some(names) => {
            let mut folded: Vec<String> = Vec::new();
            for name in names.iter().filter_map(Value::as_str).map(str::to_lowercase) {
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
    let mut stream = crate::agent::run_stream(&framework, &session, vec![json!(prompt)], state).await?;
    let mut out = String::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(e) if e.kind == "text" => out.push_str(e.data["delta"].as_str().unwrap_or("")),
            Ok(e) if e.kind == "error" => {
                out.push_str(&format!("[Error: {}]", e.data["message"].as_str().unwrap_or("")))
            }
            Ok(_) => {}
            Err(e) => out.push_str(&format!("[Error: {e}]")),
        }
    }
    Ok(json!(out))
}
