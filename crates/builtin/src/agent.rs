//! The builtin agent (Bub's `BubAgent`): an [`Agent`] built from the
//! framework running the turn.
//!
//! The builtin plugin answers `run_model_stream` / `run_model` through the
//! ABI like any plugin, so a plugin with its own model hook overrides the
//! agent by priority, exactly as in Bub. To build the agent it needs the
//! framework running the turn: the framework attaches itself to the turn's
//! state for the turn's duration and the builtin finds it with
//! [`Framework::of`] (Bub keeps its agent in `state._runtime_agent`).

use std::sync::Arc;

use bub_abi::TurnState;
use bub_agent::{run::RunOptions, tape, Agent, AgentError, RunStream, Store};
use bub_framework::{AgentPlugins, Framework};
use serde_json::{json, Value};

use crate::{own_tools, skills, spill};

/// Where the turn's skills are found: the workspace, the user's home (the
/// host's `HOME`), every loaded plugin's folder; templates read the home's
/// `config.json`.
pub fn skill_roots(framework: &Framework) -> skills::SkillRoots {
    let user_home = framework.settings().environment.get("HOME").map(std::path::PathBuf::from);
    let plugin_dirs: Vec<std::path::PathBuf> = framework
        .runtime()
        .registry()
        .plugins()
        .iter()
        .filter(|p| p.status == bub_runtime::PluginStatus::Loaded)
        .filter_map(|p| p.path.as_ref()?.parent().map(std::path::Path::to_path_buf))
        // Installed folders only (a library run from a build folder has none).
        .filter(|dir| dir.join("plugin.json").is_file())
        .collect();
    skills::SkillRoots::new(
        framework.workspace(),
        user_home.as_deref(),
        &plugin_dirs,
        Some(bub_runtime::places::config_file(framework.home())),
    )
    .with_provided(
        &crate::builtin_skills::root(framework.home())
            .into_iter()
            .chain(provided_skill_roots(framework))
            .collect::<Vec<_>>(),
    )
    .with_skill_dirs(&agent_plugin_skills(framework, user_home.as_deref()))
    .with_env(framework.settings().environment.clone())
}

/// The skills of the Agent Plugins packages under the workspace and the
/// user's home (`bub_kit::agent_plugins`); what a package gets wrong is
/// logged and left out.
fn agent_plugin_skills(framework: &Framework, user_home: Option<&std::path::Path>) -> Vec<std::path::PathBuf> {
    let data = framework.home().join("agent-plugins");
    let catalog = bub_kit::agent_plugins::discover(framework.workspace(), user_home, &data);
    // Said once per process: the skills are listed at every step.
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = bub_abi::sync::lock(&SAID);
    for line in &catalog.diagnostics {
        if !said.contains(line) && said.len() < 1024 {
            tracing::warn!(target: "bub::agent_plugins", "{line}");
            said.push(line.clone());
        }
    }
    catalog.skill_dirs()
}

/// The folders `provide_skill_roots` names (the python bridge: its venv's
/// `skills` package), in call order; a plugin whose answer is not a list
/// of paths is logged and skipped.
fn provided_skill_roots(framework: &Framework) -> Vec<std::path::PathBuf> {
    let answers = match framework.runtime().provide_skill_roots() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(target: "bub::skills", "provide_skill_roots failed: {e}");
            return Vec::new();
        }
    };
    let mut roots = Vec::new();
    for answer in answers.iter() {
        match answer.reply().parse::<Vec<String>>() {
            Ok(dirs) => roots.extend(dirs.into_iter().map(std::path::PathBuf::from)),
            Err(e) => {
                tracing::warn!(target: "bub::skills", "provide_skill_roots answered something else than a list of folders: {e}")
            }
        }
    }
    roots
}

/// The builtin's own tools in Bub's registry order around the skill tool
/// (which depends on the turn's skill roots). They depend on nothing else,
/// so they are built once per process: a turn clones handles, not schemas.
struct OwnTools {
    before_skill: Vec<bub_agent::AgentTool>,
    after_skill: Vec<bub_agent::AgentTool>,
}

fn own_tools() -> &'static OwnTools {
    static OWN: std::sync::OnceLock<OwnTools> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        // Bub's registry order: code mode's tools, spill.read, skill, the
        // tape tools, then the rest.
        let (spill_read, rest): (Vec<_>, Vec<_>) =
            own_tools::run_helper_tools().into_iter().partition(|t| t.name == "spill.read");
        OwnTools {
            before_skill: crate::code_mode::tools().into_iter().chain(spill_read).collect(),
            after_skill: own_tools::tape_and_command_tools().into_iter().chain(rest).collect(),
        }
    })
}

/// Builds the turn's agent: store (the scope's, else memory), tape context,
/// sidecars, settings, the agent's own tools, then the framework's plugins.
pub async fn build(framework: &Framework) -> Result<Agent, AgentError> {
    let settings = framework.model_settings().map_err(AgentError::value)?;
    let spill_threshold = settings.spill_threshold;
    let store = framework.get_tape_store().map(Store::Host).unwrap_or_else(Store::memory);
    let mut agent = Agent::new(settings, store);
    agent.contexts = framework.contexts();
    agent.sessions = framework.session_index();
    agent.rescue = Some(bub_agent::rescue::Rescue::new(framework.home().join("rescued")));
    if let Ok(context) = framework.build_tape_context() {
        if let Ok(Some(anchor)) = context.describe().await.map(|d| d.get("anchor").cloned()) {
            agent.context.anchor = anchor.as_str().map(str::to_owned);
        }
    }
    agent.sidecars = framework.get_tape_sidecars().unwrap_or_default().iter().map(|s| s.name().to_owned()).collect();
    let roots = skill_roots(framework);
    let own = own_tools();
    let skill = skills::tool(roots.clone());
    for tool in own.before_skill.iter().cloned().chain([skill]).chain(own.after_skill.iter().cloned()) {
        agent.add_tool(tool);
    }
    AgentPlugins::new(framework.clone()).attach(&mut agent, true).await?;
    // After the hooks' system prompt, as Bub's `_code_mode_prompt`.
    agent.sections.push(crate::code_mode::section(agent.tools.clone()));
    // After the hooks' system prompt, as Bub's `_skills_prompt`.
    agent.sections.push(skills::section(roots));
    // After the plugins' after_tool_call hooks, as Bub's trylast builtin.
    if agent.sidecars.iter().any(|s| s == spill::SIDECAR) {
        spill::subscribe(&mut agent.events, spill_threshold);
    }
    // Last: the spans see what the hooks made of each call.
    crate::otel::subscribe(&mut agent.events, &framework.settings().environment);
    Ok(agent)
}

/// Commands that run nothing but the agent's own bookkeeping, allowed from
/// every channel.
const HARMLESS_COMMANDS: [&str; 2] = ["help", "quit"];

/// The answer to a command from a channel whose messages may not run
/// commands (`command_channels`), or None when the prompt may run.
fn command_refused(agent: &Agent, prompt: &[Value], state: &TurnState) -> Option<RunStream> {
    let line = bub_agent::command::command_line(prompt, agent.command_prefix.as_deref())?;
    let channel = state.get_value("_runtime_channel")?.as_str()?.to_owned();
    let allowed = &agent.settings.command_channels;
    let first = line.split_whitespace().next().unwrap_or_default();
    if allowed.iter().any(|c| c == "*" || *c == channel) || HARMLESS_COMMANDS.contains(&first) {
        return None;
    }
    tracing::warn!(target: "bub::agent", "refused a command from channel {channel:?}: {first}");
    let text = format!(
        "error: command mode is off for channel '{channel}': commands run tools with no model in between, and \
         anyone who can write to this channel could run them. To allow it, add the channel to \
         BUB_COMMAND_CHANNELS (now {:?}) or to command_channels in config.json.",
        allowed.join(",")
    );
    Some(RunStream::fixed(vec![
        bub_agent::run::event("text", json!({"delta": text})),
        bub_agent::run::event("final", json!({"text": text, "ok": false})),
    ]))
}

/// What a run was asked to allow, as Bub's `run_stream` records it in the
/// run's `loop.start` metadata (None: not restricted).
#[derive(Debug, Default)]
pub struct Asked {
    /// The tools the run may call (registry names).
    pub tools: Option<Vec<String>>,
    /// The skill names as asked (the state holds them case-folded).
    pub skills: Option<Vec<String>>,
}

/// Runs one turn's prompt through the agent (Bub's `BubAgent.run_stream`).
pub async fn run_stream(
    framework: &Framework,
    session_id: &str,
    prompt: Vec<Value>,
    state: TurnState,
) -> Result<RunStream, AgentError> {
    let skills = state
        .get_value("allowed_skills")
        .and_then(|v| serde_json::from_value::<Vec<String>>(v).ok())
        .filter(|a| !a.is_empty());
    run_stream_asked(framework, session_id, prompt, state, Asked { tools: None, skills }).await
}

/// [`run_stream`] of a run restricted as `asked` says (a subagent's).
pub async fn run_stream_asked(
    framework: &Framework,
    session_id: &str,
    prompt: Vec<Value>,
    state: TurnState,
    asked: Asked,
) -> Result<RunStream, AgentError> {
    let agent = Arc::new(build(framework).await?);
    if let Some(refused) = command_refused(&agent, &prompt, &state) {
        return Ok(refused);
    }
    if state.get_value("session_id").is_none() {
        let _ = state.set("session_id", session_id);
    }
    let model = state.get_value("model").and_then(|m| m.as_str().map(str::to_owned)).filter(|m| !m.is_empty());
    let model = model.or_else(|| Some(agent.settings.default_model()));
    // Bub's run metadata: the turn's allowed skills and tools (none: all).
    let mut metadata = serde_json::Map::new();
    let listed = |names: Option<Vec<String>>| names.filter(|n| !n.is_empty()).map_or(Value::Null, |n| json!(n));
    metadata.insert("allowed_skills".into(), listed(asked.skills));
    metadata.insert("allowed_tools".into(), listed(asked.tools));
    // The session's reasoning effort wins over the completion args' (behaviour 218).
    let mut call_options = serde_json::Map::new();
    if let Some(effort) = state.get_value("reasoning_effort").filter(|e| e.as_str().is_some_and(|s| !s.is_empty())) {
        call_options.insert("reasoning_effort".into(), effort);
    }
    let options = RunOptions {
        tape: tape::session_tape_name(framework.workspace(), session_id),
        state,
        merge_back: !session_id.starts_with("temp/"),
        model,
        metadata,
        options: call_options,
    };
    agent.start(prompt, options).await
}
