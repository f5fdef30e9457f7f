//! `tool-policy`: a `before_tool_call` guard (tryfirst, so it decides before
//! other plugins rewrite anything).
//!
//! Config (in the plugin's manifest), rules checked in order, first match wins:
//!
//! ```json
//! {"rules": [
//!   {"tool": "bash", "argument": "cmd", "contains": "rm -rf", "deny": "destructive command"},
//!   {"tool": "web.*", "replace": "network access is disabled here"},
//!   {"tool": "bash", "set": {"timeout": 30}}
//! ]}
//! ```
//!
//! `tool` matches a tool name exactly, or a prefix when it ends with `*`.
//! `argument` + `contains` narrow the rule to calls whose argument (as text)
//! contains the string. A rule either denies (`deny`: the reason), replaces
//! the call's result (`replace`), or proceeds with arguments merged from `set`.
//! A policy blocks by *returning* a decision: an error would only be logged.

use bub_abi::{
    types::{ToolCall, ToolCallDecision},
    BoxError, Plugin, PluginContext,
};
use serde::Deserialize;
use serde_json::{Map, Value};

/// One rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    tool: String,
    #[serde(default)]
    argument: Option<String>,
    #[serde(default)]
    contains: Option<String>,
    #[serde(default)]
    deny: Option<String>,
    #[serde(default)]
    replace: Option<Value>,
    #[serde(default)]
    set: Option<Map<String, Value>>,
}

impl Rule {
    fn matches(&self, call: &ToolCall) -> bool {
        let tool_ok = match self.tool.strip_suffix('*') {
            Some(prefix) => call.tool.starts_with(prefix),
            None => call.tool == self.tool,
        };
        let arg_ok = match (&self.argument, &self.contains) {
            // Reads one argument through the host; the rest is never copied.
            (Some(arg), Some(needle)) => call.arguments.as_ref().get(arg).is_some_and(|v| match v.as_str() {
                Some(s) => s.contains(needle.as_str()),
                None => v.to_json().contains(needle.as_str()),
            }),
            _ => true,
        };
        tool_ok && arg_ok
    }
}

/// The plugin.
pub struct ToolPolicy {
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
struct Config {
    #[serde(default)]
    rules: Vec<Rule>,
}

#[bub_abi::plugin]
impl Plugin for ToolPolicy {
    fn new(ctx: &PluginContext) -> Result<Self, BoxError> {
        let config: Config = serde_json::from_value(Value::Object(ctx.config.clone()))
            .map_err(|e| format!("invalid tool-policy config: {e}"))?;
        for (i, r) in config.rules.iter().enumerate() {
            let actions = [r.deny.is_some(), r.replace.is_some(), r.set.is_some()].iter().filter(|b| **b).count();
            if actions != 1 {
                return Err(format!("rule {i} (tool {:?}) must have exactly one of deny, replace, set", r.tool).into());
            }
        }
        Ok(ToolPolicy { rules: config.rules })
    }

    #[tryfirst]
    fn before_tool_call(&self, call: ToolCall) -> Option<ToolCallDecision> {
        let rule = self.rules.iter().find(|r| r.matches(&call))?;
        if let Some(reason) = &rule.deny {
            tracing::info!(tool = %call.tool, reason = %reason, "denied");
            return Some(ToolCallDecision::deny(format!("blocked by policy: {reason}")));
        }
        if let Some(result) = &rule.replace {
            return Some(ToolCallDecision::replace(result.clone()));
        }
        // The call's arguments plus the rule's keys, sharing everything else.
        let mut arguments = call.arguments;
        for (k, v) in rule.set.iter().flatten() {
            arguments = arguments.as_ref().with(k, v);
        }
        Some(ToolCallDecision::proceed(Some(arguments)))
    }
}

bub_abi::export_plugin!(ToolPolicy);

#[cfg(test)]
mod tests {
    use bub_abi::types::{ToolAction, ToolCall};
    use bub_runtime::testing::PluginTest;
    use serde_json::json;

    bub_abi::static_plugin!(super::ToolPolicy, fn module, name = "tool-policy", version = "0", description = "test");

    fn policy(rules: serde_json::Value) -> PluginTest {
        PluginTest::with_config("tool-policy", module(), json!({"rules": rules}).as_object().unwrap().clone())
    }

    fn call(tool: &str, arguments: serde_json::Value) -> ToolCall {
        let arguments = bub_abi::Value::from_json(&arguments.to_string()).expect("JSON");
        ToolCall { run_id: "r".into(), tool: tool.into(), arguments, ..Default::default() }
    }

    /// First match wins; `*` is a prefix; `argument` + `contains` narrow a
    /// rule; `set` merges arguments; other tools proceed untouched.
    #[tokio::test]
    async fn rules_in_order() {
        let test = policy(json!([
            {"tool": "bash", "argument": "cmd", "contains": "rm -rf", "deny": "destructive"},
            {"tool": "web.*", "replace": "offline"},
            {"tool": "bash", "set": {"timeout": 30}},
        ]));
        assert!(test.loaded(), "{:?}", test.record());
        let rt = test.runtime();
        let state = bub_abi::TurnState::new();
        let (_, d) = rt.before_tool_call(call("bash", json!({"cmd": "rm -rf /"})), &state).await;
        assert_eq!((d.action, d.message.as_deref()), (ToolAction::Deny, Some("blocked by policy: destructive")));
        let (_, d) = rt.before_tool_call(call("web.fetch", json!({})), &state).await;
        assert_eq!(d.action, ToolAction::Replace);
        let (c, d) = rt.before_tool_call(call("bash", json!({"cmd": "ls"})), &state).await;
        assert_eq!(d.action, ToolAction::Proceed);
        let merged: serde_json::Value = serde_json::from_str(&c.arguments.to_json()).unwrap();
        assert_eq!(merged, json!({"cmd": "ls", "timeout": 30}));
        let (_, d) = rt.before_tool_call(call("fs.read", json!({})), &state).await;
        assert_eq!(d.action, ToolAction::Proceed);
    }

    /// A rule with no action, or two, fails the constructor with its index.
    #[test]
    fn a_rule_needs_exactly_one_action() {
        for rules in [json!([{"tool": "bash"}]), json!([{"tool": "x", "deny": "a", "replace": "b"}])] {
            let test = policy(rules);
            assert!(!test.loaded());
            assert!(format!("{:?}", test.record()).contains("must have exactly one of deny, replace, set"));
        }
    }
}
