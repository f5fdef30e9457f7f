//! Builds this plugin, loads it through the real bub runtime (bub-runtime: the loader and dispatcher, without the CLI or the agent) and
//! checks what its hooks return.

use std::{path::PathBuf, process::Command};

{% if hooks == "tool-policy" %}use bub_runtime::{HostBuilder, PluginStatus};{% else %}use bub_abi::HookId;
use bub_runtime::{CallArgs, HostBuilder, PluginStatus};{% endif %}
use serde_json::json;

fn build() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .status()
        .expect("run cargo");
    assert!(status.success(), "cargo build failed");
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let file = format!("{}{}{}", std::env::consts::DLL_PREFIX, "{{crate_name}}", std::env::consts::DLL_SUFFIX);
    target.join("debug").join(file)
}

#[tokio::test]
async fn hooks_answer_through_the_host() {
    let host = HostBuilder::new()
        .library("{{project-name}}", build(), json!({"greeting": "hi"}).as_object().unwrap().clone())
        .build();
    let record = host.registry().plugin("{{project-name}}").unwrap();
    assert_eq!(record.status, PluginStatus::Loaded, "{record:?}");
    let rt = host.runtime();
{% if hooks == "session" %}
    let message = json!({"channel": "cli", "chat_id": "42", "content": "hello"});
    let session = rt.call_first(HookId::ResolveSession, &CallArgs::resolve_session(&message).unwrap()).await.unwrap();
    assert_eq!(session.unwrap().parse::<String>().unwrap(), "cli:42");
    let state = rt.call_many(HookId::LoadState, &CallArgs::load_state(&message, &"cli:42".to_owned()).unwrap()).await.unwrap();
    assert_eq!(state[0].as_ref().unwrap().parse::<serde_json::Value>().unwrap(), json!({"greeting": "hi cli:42"}));
{% elsif hooks == "model" %}
    let args = CallArgs::run_model(&json!("ping"), &"s".to_owned(), &bub_abi::TurnState::new()).unwrap();
    let answer = rt.call_first(HookId::RunModel, &args).await.unwrap();
    assert_eq!(answer.unwrap().parse::<String>().unwrap(), "hi: ping");
    let prompt = rt.call_many_sync(HookId::SystemPrompt, &CallArgs::system_prompt(&json!("p"), &bub_abi::TurnState::new()).unwrap()).unwrap();
    assert_eq!(prompt[0].as_ref().unwrap().parse::<String>().unwrap(), "{{description}}");
{% else %}
    let state = bub_abi::TurnState::new();
    let call = |tool: &str| bub_abi::types::ToolCall { run_id: "r".into(), tool: tool.into(), arguments: bub_abi::Value::object() };
    let (_, denied) = rt.before_tool_call(call("forbidden"), &state).await;
    assert_eq!(denied.action, bub_abi::types::ToolAction::Deny);
    assert_eq!(denied.message.as_deref(), Some("hi: not allowed"));
    let (_, allowed) = rt.before_tool_call(call("ls"), &state).await;
    assert_eq!(allowed.action, bub_abi::types::ToolAction::Proceed);
{% endif %}}
