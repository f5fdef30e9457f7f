//! Loads this plugin in-process (`bub_runtime::testing::PluginTest`: the
//! real registry and dispatch, no library to build) and checks what its
//! hooks return. `bub plugins install .` then builds the library bub loads.

{% if hooks == "tool-policy" %}use bub_runtime::testing::PluginTest;{% else %}use bub_abi::HookId;
use bub_runtime::{testing::PluginTest, CallArgs};{% endif %}
use serde_json::json;

#[tokio::test]
async fn hooks_answer_through_the_host() {
    let config = json!({"greeting": "hi"}).as_object().unwrap().clone();
    let test = PluginTest::with_config("{{project-name}}", {{crate_name}}::test_module(), config);
    assert!(test.loaded(), "{:?}", test.record());
    let rt = test.runtime();
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
    let call = |tool: &str| bub_abi::types::ToolCall { run_id: "r".into(), tool: tool.into(), arguments: bub_abi::Value::object(), ..Default::default() };
    let (_, denied) = rt.before_tool_call(call("forbidden"), &state).await;
    assert_eq!(denied.action, bub_abi::types::ToolAction::Deny);
    assert_eq!(denied.message.as_deref(), Some("hi: not allowed"));
    let (_, allowed) = rt.before_tool_call(call("ls"), &state).await;
    assert_eq!(allowed.action, bub_abi::types::ToolAction::Proceed);
{% endif %}}
