//! [`AgentPlugins`] (Bub's documented `AgentPlugins`, semantics §A2.12–§A2.13): a
//! framework's plugins on an agent's bus.
//!
//! `attach` subscribes the four interception hooks (`before_llm_call`,
//! `after_llm_call`, `before_tool_call`, `after_tool_call`, with the
//! runtime's chain / short-circuit / fault rules), adds the framework's
//! system prompt as a section, wires `continue_prompt` to
//! `StepFinished(continue)` and the steering inbox to `MessagesPending`,
//! and (with `tools`) adds the `provide_tools` tools the agent does not
//! already have.

use bub_abi::{
    types::{Prompt, StreamState, TapeInfo},
    HookId,
};
use serde_json::Value;

use crate::Framework;
use bub_agent::{
    events::{handler, Event, Filter},
    message::CallRequest,
    tools::AgentTool,
    Agent, AgentError,
};

/// The four interception hooks on an agent's bus (Bub's
/// `PluginAgentHooks`): `LLMCallStarted` → `before_llm_call` (a rewritten
/// request or a finish decision), `LLMCallFinished` → `after_llm_call`,
/// `ToolCallStarted` → `before_tool_call` (rewritten arguments, replace or
/// deny), `ToolCallFinished` → `after_tool_call` (a new result). Each runs
/// its implementations in priority order with the runtime's chain,
/// short-circuit and fault rules (a failing implementation is logged and
/// skipped; a policy blocks by returning a decision).
#[derive(Clone)]
pub struct PluginAgentHooks {
    runtime: crate::Runtime,
}

impl PluginAgentHooks {
    /// Over a runtime's plugins.
    pub fn new(runtime: crate::Runtime) -> PluginAgentHooks {
        PluginAgentHooks { runtime }
    }

    /// Subscribes the hooks to `bus`, after what is on it now: one handler
    /// (the four events are disjoint, so one place on the bus serves all).
    pub fn subscribe(&self, bus: &mut bub_agent::EventBus) {
        let rt = self.runtime.clone();
        bus.on(
            Filter::Any,
            handler(move |event, cx| {
                let r = rt.clone();
                Box::pin(async move {
                    match event {
                        // The request goes over as a host value built from
                        // the messages' kept nodes (see `message`).
                        Event::LlmCallStarted { request, decision } if r.has(HookId::BeforeLlmCall) => {
                            let (new, d) = r.before_llm_call_value(request.hosted(), &cx.state).await;
                            if let Some(new) = new {
                                *request = CallRequest::from_abi(new);
                            }
                            *decision = d;
                        }
                        Event::LlmCallFinished { request, result, .. } if r.has(HookId::AfterLlmCall) => {
                            r.after_llm_call_value(request.hosted(), result, &cx.state).await
                        }
                        Event::ToolCallStarted { call, decision } => {
                            let (new, d) = r.before_tool_call(call.clone(), &cx.state).await;
                            *call = new;
                            *decision = d;
                        }
                        Event::ToolCallFinished { call, result } => {
                            *result = r.after_tool_call(call, std::mem::take(result), &cx.state).await;
                        }
                        _ => {}
                    }
                    Ok(())
                })
            }),
        );
    }
}

/// A framework's plugins, ready to attach to agents.
#[derive(Clone)]
pub struct AgentPlugins {
    framework: Framework,
}

/// What `components()` returns.
#[derive(Clone)]
pub struct AgentComponents {
    /// The active tape store (only inside `running()`).
    pub store: Option<bub_runtime::resources::TapeStore>,
    /// The tape context.
    pub context: Option<bub_runtime::resources::TapeContext>,
    /// The sidecars.
    pub sidecars: Vec<bub_runtime::resources::TapeSidecar>,
}

fn framework_error(e: crate::FrameworkError) -> AgentError {
    AgentError::value(e.to_string())
}

impl AgentPlugins {
    /// Over `framework`.
    pub fn new(framework: Framework) -> AgentPlugins {
        AgentPlugins { framework }
    }

    /// The framework.
    pub fn framework(&self) -> &Framework {
        &self.framework
    }

    /// Enters the framework's `running()` scope.
    pub async fn running(&self) -> Result<crate::Running, crate::FrameworkError> {
        self.framework.running().await
    }

    /// Store (inside `running()`), tape context and sidecars.
    pub fn components(&self) -> AgentComponents {
        AgentComponents {
            store: self.framework.get_tape_store(),
            context: self.framework.build_tape_context().ok(),
            sidecars: self.framework.get_tape_sidecars().unwrap_or_default(),
        }
    }

    /// A turn state for `session_id` (Bub's `build_state`): the framework's
    /// runtime defaults and every `load_state` fragment.
    pub async fn build_state(
        &self,
        session_id: &str,
        message: Option<&Value>,
    ) -> Result<bub_abi::TurnState, AgentError> {
        let message = message.cloned().unwrap_or_else(|| serde_json::json!({"session_id": session_id}));
        let (state, _) = self.framework.build_state(&message, session_id).await.map_err(framework_error)?;
        Ok(state)
    }

    /// Attaches the plugins to `agent` (after what is on its bus now).
    pub async fn attach(&self, agent: &mut Agent, tools: bool) -> Result<(), AgentError> {
        PluginAgentHooks::new(self.framework.runtime().clone()).subscribe(&mut agent.events);
        // The framework's system prompt, as one section.
        let fw = self.framework.clone();
        agent.sections.push(std::sync::Arc::new(move |pcx| {
            let fw = fw.clone();
            Box::pin(async move {
                // Bub's legacy form: a string without media, blocks with it.
                let prompt: Prompt = bub_kit::prompt::to_legacy_prompt(&pcx.prompt);
                fw.system_prompt(&prompt, &pcx.state).map(Some).map_err(framework_error)
            })
        }));
        // continue_prompt on StepFinished(continue).
        let fw = self.framework.clone();
        agent.events.on(
            Filter::Kind("StepFinished"),
            handler(move |event, cx| {
                let fw = fw.clone();
                Box::pin(async move {
                    if let Event::StepFinished {
                        status: bub_agent::events::Status::Continue,
                        next_prompt,
                        prompt,
                        usage,
                        ..
                    } = event
                    {
                        let tape = TapeInfo { name: cx.tape.name().to_owned() };
                        // The finished step's prompt in Bub's legacy form, and its usage.
                        let legacy = prompt.as_deref().map(bub_kit::prompt::to_legacy_prompt);
                        let state = StreamState { usage: usage.clone(), ..Default::default() };
                        let next = fw.continue_prompt(legacy.as_ref(), &tape, &state).await.map_err(framework_error)?;
                        if let Some(text) = next {
                            *next_prompt = Some(vec![Value::String(text)]);
                        }
                    }
                    Ok(())
                })
            }),
        );
        // The steering inbox on MessagesPending.
        let fw = self.framework.clone();
        agent.events.on(
            Filter::Kind("MessagesPending"),
            handler(move |event, cx| {
                let fw = fw.clone();
                Box::pin(async move {
                    let Event::MessagesPending { messages } = event else { return Ok(()) };
                    let Some(inbox) = fw.get_steering_inbox() else { return Ok(()) };
                    let state = cx.state.to_map();
                    let envelopes = inbox.drain_messages(&state).await.map_err(AgentError::store)?;
                    for message in envelopes {
                        let session = message.get("session_id").and_then(Value::as_str).unwrap_or("").to_owned();
                        let content =
                            fw.build_prompt_content(&message, &session, &cx.state).await.map_err(framework_error)?;
                        messages.push(Value::Array(content));
                    }
                    Ok(())
                })
            }),
        );
        let fw = self.framework.clone();
        agent.pending = Some(std::sync::Arc::new(move |state| {
            let fw = fw.clone();
            Box::pin(async move {
                let Some(inbox) = fw.get_steering_inbox() else { return Ok(false) };
                Ok(inbox.message_count(&state.to_map()).await.map_err(AgentError::store)? > 0)
            })
        }));
        if tools {
            for tool in self.framework.get_tools().map_err(framework_error)? {
                let tool = AgentTool::from_plugin(tool).await?;
                if agent.tools.iter().all(|t| t.name != tool.name) {
                    std::sync::Arc::make_mut(&mut agent.tools).push(tool);
                }
            }
        }
        Ok(())
    }
}
