//! Command mode (semantics §A3.6): a prompt that is one text starting with the
//! command prefix runs a tool (or a shell line) without a model.
//!
//! Deliberate difference from Bub: `,bash <line>` runs `<line>` (Bub would
//! bind the line's words to `bash`'s parameters one by one).

use serde_json::{Map, Value};

use super::{tools::AgentTool, AgentError};

/// The line after the prefix when `prompt` is a command: exactly one text
/// item that, trimmed, starts with `prefix`.
pub fn command_line(prompt: &[Value], prefix: Option<&str>) -> Option<String> {
    let prefix = prefix?;
    let [item] = prompt else { return None };
    let text = match item {
        Value::String(s) => s.as_str(),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => o.get("text")?.as_str()?,
        _ => return None,
    };
    text.trim().strip_prefix(prefix).map(|rest| rest.trim().to_owned())
}

/// A parsed command: the tool's registry name and its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The tool.
    pub name: String,
    /// Arguments (strings).
    pub arguments: Map<String, Value>,
}

/// Splits `line` shell-style; the first word names a tool (positional
/// tokens bind to its parameters in schema order, then `key=value`), else
/// the whole line goes to `bash` as `{command: line}`.
pub fn parse(line: &str, find: impl Fn(&str) -> Option<AgentTool>) -> Result<Parsed, AgentError> {
    if line.is_empty() {
        return Err(AgentError::value("empty command"));
    }
    let words = shlex::split(line)
        .ok_or_else(|| AgentError::value(format!("cannot split command line {line:?}: unbalanced quotes")))?;
    let Some((first, rest)) = words.split_first() else { return Err(AgentError::value("empty command")) };
    let Some(tool) = find(first) else {
        if find("bash").is_none() {
            return Err(AgentError::value("bash tool is not available"));
        }
        let mut arguments = Map::new();
        arguments.insert("command".into(), Value::String(line.to_owned()));
        return Ok(Parsed { name: "bash".into(), arguments });
    };
    // `,bash echo hi`: the rest of the line is the command (deliberate
    // difference: Bub binds `echo` to `command` and `hi` to `cwd`).
    if tool.name == "bash" && !rest.is_empty() && !rest[0].contains('=') {
        let command = line.trim_start()[first.len()..].trim().to_owned();
        let mut arguments = Map::new();
        arguments.insert("command".into(), Value::String(command));
        return Ok(Parsed { name: "bash".into(), arguments });
    }
    let names = tool.parameter_names();
    let mut arguments = Map::new();
    let mut positional = 0;
    let mut keyword_seen = false;
    for token in rest {
        match token.split_once('=') {
            Some((k, v)) if !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                if arguments.contains_key(k) {
                    return Err(AgentError::value(format!("argument '{k}' given both positionally and by keyword")));
                }
                arguments.insert(k.to_owned(), Value::String(v.to_owned()));
                keyword_seen = true;
            }
            _ => {
                if keyword_seen {
                    return Err(AgentError::value(format!(
                        "positional argument '{token}' cannot appear after keyword arguments"
                    )));
                }
                let Some(name) = names.get(positional) else {
                    return Err(AgentError::value(format!(
                        "expected at most {} positional arguments, got {}",
                        names.len(),
                        rest.iter().take_while(|t| !t.contains('=')).count()
                    )));
                };
                arguments.insert(name.clone(), Value::String(token.clone()));
                positional += 1;
            }
        }
    }
    coerce(&tool, &mut arguments);
    Ok(Parsed { name: tool.name.clone(), arguments })
}

/// Validation's coercion: string values of integer, number and boolean
/// parameters become those types.
fn coerce(tool: &AgentTool, arguments: &mut Map<String, Value>) {
    let Some(props) = tool.parameters.get("properties").and_then(Value::as_object) else { return };
    for (k, v) in arguments.iter_mut() {
        let Value::String(s) = v else { continue };
        let ty = props.get(k).and_then(|p| p.get("type")).and_then(Value::as_str);
        let new = match ty {
            Some("integer") => s.parse::<i64>().ok().map(Value::from),
            Some("number") => s.parse::<f64>().ok().map(Value::from),
            Some("boolean") => match s.to_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Some(Value::Bool(true)),
                "false" | "0" | "no" | "off" => Some(Value::Bool(false)),
                _ => None,
            },
            Some("array" | "object") => serde_json::from_str(s).ok(),
            _ => None,
        };
        if let Some(n) = new {
            *v = n;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::Exposure;

    fn greet() -> AgentTool {
        AgentTool::native(
            "greet",
            "",
            json!({"type": "object", "properties": {"name": {"type": "string"}, "punctuation": {"type": "string"}}}),
            Exposure::Auto,
            |_a, _c| async { Ok(Value::Null) },
        )
    }

    fn find(name: &str) -> Option<AgentTool> {
        (name == "greet").then(greet)
    }

    #[test]
    fn the_prefix_makes_a_command_behaviour_163_165() {
        assert_eq!(
            command_line(&[json!("  /greet ada punctuation=?")], Some("/")).as_deref(),
            Some("greet ada punctuation=?")
        );
        assert_eq!(command_line(&[json!(",echo")], None), None);
        assert_eq!(command_line(&[json!(",a"), json!("b")], Some(",")), None);
        let p = parse("greet ada punctuation=?", find).unwrap();
        assert_eq!(Value::Object(p.arguments), json!({"name": "ada", "punctuation": "?"}));
    }

    #[test]
    fn argument_errors_behaviour_166_167_169_170() {
        let err = |line: &str| parse(line, find).unwrap_err().to_string();
        assert_eq!(err("greet ada ? extra"), "expected at most 2 positional arguments, got 3");
        assert_eq!(err("greet name=ada bob"), "positional argument 'bob' cannot appear after keyword arguments");
        assert_eq!(err("greet ada name=bob"), "argument 'name' given both positionally and by keyword");
        assert_eq!(err("unknown"), "bash tool is not available");
        assert_eq!(err(""), "empty command");
    }
}
