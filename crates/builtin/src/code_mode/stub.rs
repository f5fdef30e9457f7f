//! The Python stub that tells model-written code the tools' signatures
//! (Bub's `render_tool_stub`, for the JSON schemas our tools have: scalar
//! types, arrays, enums, local `$ref`s, `republic` media, objects as
//! `dict[str, Any]`), and, at its end, the `republic` module's members. A result is typed as
//! Bub's function annotates it when the tool says so (`AgentTool::returns`,
//! the builtin's own tools), with the TypedDicts it names; else `Any` (a
//! plugin's tool declares no result schema).

use std::path::{Path, PathBuf};

use bub_agent::tools::AgentTool;
use bub_kit::python::python_repr;
use serde_json::Value;

const HEADER: &str = r#""""Tools available inside `run_code` as `tools.<name>(...)`.

Every tool is an async function: `await` it (top-level `await` is allowed) and pass keyword
arguments only. Each call returns the structured value described by its return type and
raises an exception when the tool fails. Use `asyncio.gather` to run independent calls
concurrently.

The `republic` module is also available (preset as a global and importable); it is documented
at the end of this file.
"""

from typing import Any, Literal, NotRequired, TypedDict

import republic"#;

/// The `republic` module's declaration, in Bub's words (the runner serves
/// these names; the host makes the model calls).
const REPUBLIC: &str = r#"# ---------------------------------------------------------------------------
# `republic`: media and models inside `run_code`. Models are served by the host with
# its credentials and settings; every model method is async. Only the members below exist.
#
# class republic.Image / republic.Audio / republic.Video:
#     __init__(media_type: str, data: bytes | None = None, url: str | None = None)
#     media_type: str; data: bytes | None; url: str | None
#     base64_data: str; data_url: str
#     `tools.attach_image/audio/video` also take a file path in the environment, an http(s)/gs URL
#     or a data URL instead, and load it for you.
#
# republic.system(text: str) -> Message
# republic.user(*content: str | Image | Audio | Video) -> Message
# republic.assistant(*content: str | Image | Audio | Video) -> Message
#     Message has .role, .content (list of text and media) and .text.
#
# republic.get_model(spec: str | None = None) -> ChatModel
#     A "provider:model" spec; None is the model running this session.
#     await model.chat(prompt: str | Message | list[str | Message], **options) -> response
#         options: max_tokens, temperature, top_p, top_k, stop, seed, reasoning_effort, extra_body...
#         (no tools). A plain string is a user message.
#         response.text, .reasoning, .refusal, .finish_reason, .model,
#         .token_usage.input_tokens / .output_tokens, .message (append it to continue the conversation)
#     model.stream(prompt, **options) -> Stream   # same arguments as chat(); not awaited
#         async with model.stream(...) as stream:
#             async for event in stream: ...
#         Events from republic.events: TextDelta(.chunk), ReasoningDelta(.chunk), RefusalDelta(.chunk),
#         UsageDelta(.usage), ImageReady(.image), CitationAdded(.citation), Completed(.response, last).
#         After iterating: stream.response (as returned by chat()), stream.text, .reasoning, .token_usage.
# republic.get_embedding_model(spec: str) -> EmbeddingModel
#     await model.embed(text: str, *, dimensions: int | None = None) -> response   # response.vector
#     await model.embed_many(texts: list[str], *, dimensions: int | None = None) -> response   # response.vectors
# republic.get_decision_model(spec: str) -> DecisionModel
#     await model.decide(state, *, questions: dict[str, Question]) -> response
#         Questions from republic.decisions: Noul(instructions, criteria=None) (yes/no),
#         Choice(instructions, criteria) (pick one), Score(instructions, criteria) (ordered levels).
#         response.answers[id] or response.<id>: .noul | .choice/.probabilities/.confidence | .score/...
#
# Example:
#     model = republic.get_model()
#     chart = republic.Image("image/png", data=open("chart.png", "rb").read())
#     reply = await model.chat([republic.user("Describe this chart.", chart)])
#     print(reply.text)
#     async with model.stream("Write a haiku.") as stream:
#         async for event in stream:
#             if isinstance(event, republic.events.TextDelta):
#                 print(event.chunk, end="")"#;

/// Bub's result TypedDicts, as its stub writes them, in its order.
const TYPED_DICTS: &[(&str, &str)] = &[
    ("SkillList", "class SkillList(TypedDict):\n    skills: list[str]"),
    ("SkillContent", "class SkillContent(TypedDict):\n    name: str\n    location: str\n    content: str"),
    (
        "ToolFailure",
        "class ToolFailure(TypedDict):\n    \"\"\"A recoverable failure reported to the caller instead of raising.\"\"\"\n    error: str",
    ),
    (
        "TapeInfoResult",
        "class TapeInfoResult(TypedDict):\n    name: str\n    entries: int\n    anchors: int\n    last_anchor: str | None\n    \
         entries_since_last_anchor: int\n    last_token_usage: int | None\n    last_token_cache_hit_rate: float | None",
    ),
    ("TapeSearchResult", "class TapeSearchResult(TypedDict):\n    matches: list[TapeSearchMatch]\n    filtered: int"),
    ("TapeSearchMatch", "class TapeSearchMatch(TypedDict):\n    date: str\n    content: dict[str, Any]"),
    (
        "WebFetchResult",
        "class WebFetchResult(TypedDict):\n    url: str\n    status: int\n    content_type: str\n    content: str",
    ),
    ("SubAgentResult", "class SubAgentResult(TypedDict):\n    session_id: str\n    output: str\n    errors: list[str]"),
];

/// Adds the TypedDicts `hint` names to `out`, each followed by those its
/// fields name (Bub's order: `TapeSearchResult`, then `TapeSearchMatch`).
fn typed_dicts_of(hint: &str, out: &mut Vec<&'static str>) {
    let words: Vec<&str> = hint.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
    for (name, body) in TYPED_DICTS {
        if words.contains(name) && !out.contains(name) {
            out.push(name);
            typed_dicts_of(body.split_once('\n').map_or("", |(_, fields)| fields), out);
        }
    }
}

const KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// Bub's `_identifier`: non-word characters to `_`, a leading `_` before a
/// digit or a keyword (`fs.read` → `fs_read`).
pub fn identifier(name: &str) -> String {
    let ident: String = name.chars().map(|c| if c.is_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if ident.is_empty() || ident.starts_with(|c: char| c.is_ascii_digit()) || KEYWORDS.contains(&ident.as_str()) {
        format!("_{ident}")
    } else {
        ident
    }
}

fn is_identifier(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&name)
}

/// Bub's `_media_class`: the schema of a `republic.Image`, `Audio` or
/// `Video` parameter.
fn media_class(o: &serde_json::Map<String, Value>) -> Option<&str> {
    let title = o.get("title").and_then(Value::as_str).filter(|t| matches!(*t, "Image" | "Audio" | "Video"))?;
    let props = o.get("properties").and_then(Value::as_object)?;
    let mut keys: Vec<&str> = props.keys().map(String::as_str).collect();
    keys.sort_unstable();
    (keys == ["data", "media_type", "url"]).then_some(title)
}

/// A schema's own definitions (`$defs`, or the older `definitions`).
fn defs_of(schema: &Value) -> Option<&serde_json::Map<String, Value>> {
    schema.get("$defs").or_else(|| schema.get("definitions")).and_then(Value::as_object)
}

fn type_hint(schema: &Value) -> String {
    hint_in(schema, &serde_json::Map::new())
}

/// The hint for `schema`, its `$ref`s resolved in `defs` and its own.
fn hint_in(schema: &Value, defs: &serde_json::Map<String, Value>) -> String {
    let Some(o) = schema.as_object().filter(|o| !o.is_empty()) else { return "Any".into() };
    if let Some(class) = media_class(o) {
        return format!("republic.{class}");
    }
    let mut defs = std::borrow::Cow::Borrowed(defs);
    if let Some(own) = defs_of(schema) {
        defs.to_mut().extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    if let Some(reference) = o.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next().unwrap_or_default();
        return defs.get(name).map_or_else(|| "Any".into(), |target| hint_in(target, &defs));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(options)) = o.get(key) {
            return union(options.iter().map(|option| hint_in(option, &defs)));
        }
    }
    if let Some(c) = o.get("const") {
        return format!("Literal[{}]", python_repr(c));
    }
    if let Some(Value::Array(values)) = o.get("enum").filter(|e| e.as_array().is_some_and(|a| !a.is_empty())) {
        return format!("Literal[{}]", values.iter().map(python_repr).collect::<Vec<_>>().join(", "));
    }
    match o.get("type") {
        Some(Value::Array(types)) => union(types.iter().map(|t| {
            let mut one = o.clone();
            one.insert("type".into(), t.clone());
            hint_in(&Value::Object(one), &defs)
        })),
        Some(Value::String(t)) => match t.as_str() {
            "array" => format!("list[{}]", o.get("items").map_or_else(|| "Any".into(), |i| hint_in(i, &defs))),
            "object" => match o.get("additionalProperties") {
                Some(extra @ Value::Object(m)) if !m.is_empty() => format!("dict[str, {}]", hint_in(extra, &defs)),
                _ => "dict[str, Any]".into(),
            },
            "string" => "str".into(),
            "integer" => "int".into(),
            "number" => "float".into(),
            "boolean" => "bool".into(),
            "null" => "None".into(),
            _ => "Any".into(),
        },
        _ => "Any".into(),
    }
}

fn union(hints: impl Iterator<Item = String>) -> String {
    let mut unique: Vec<String> = Vec::new();
    for h in hints {
        if !unique.contains(&h) {
            unique.push(h);
        }
    }
    if unique.iter().any(|h| h == "Any") || unique.is_empty() {
        "Any".into()
    } else {
        unique.join(" | ")
    }
}

fn docstring(text: &str) -> Vec<String> {
    let text = text.trim().replace('\\', "\\\\").replace("\"\"\"", "\\\"\\\"\\\"");
    if text.is_empty() {
        return Vec::new();
    }
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() == 1 {
        return vec![format!("    \"\"\"{}\"\"\"", lines[0])];
    }
    let mut out = vec![format!("    \"\"\"{}", lines[0])];
    out.extend(lines[1..].iter().map(|l| format!("    {l}").trim_end().to_owned()));
    out.push("    \"\"\"".into());
    out
}

fn function(tool: &AgentTool) -> String {
    let name = identifier(&tool.name);
    let props = tool.parameters.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    let required: Vec<&str> = tool
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut params = Vec::new();
    let mut arg_docs = Vec::new();
    for (key, prop) in &props {
        let hint = type_hint(prop);
        if required.contains(&key.as_str()) {
            params.push(format!("{key}: {hint}"));
        } else if let Some(default) = prop.get("default") {
            params.push(format!("{key}: {hint} = {}", python_repr(default)));
        } else {
            params.push(format!("{key}: {hint} = ..."));
        }
        if let Some(d) = prop.get("description").and_then(Value::as_str) {
            arg_docs.push(format!("    {key}: {}", d.split_whitespace().collect::<Vec<_>>().join(" ")));
        }
    }
    let signature = if !props.keys().all(|k| is_identifier(k)) {
        "**kwargs: Any".to_owned()
    } else if params.is_empty() {
        String::new()
    } else {
        format!("*, {}", params.join(", "))
    };
    let mut doc = tool.description.trim().to_owned();
    if !arg_docs.is_empty() {
        let args = format!("Args:\n{}", arg_docs.join("\n"));
        doc = if doc.is_empty() { args } else { format!("{doc}\n\n{args}") };
    }
    let mut body = docstring(&doc);
    if body.is_empty() {
        body.push("    ...".into());
    }
    format!("async def {name}({signature}) -> {}:\n{}", tool.returns.unwrap_or("Any"), body.join("\n"))
}

/// The stub for `tools`.
pub fn render(tools: &[&AgentTool]) -> String {
    let mut out = String::from(HEADER);
    let mut dicts = Vec::new();
    for hint in tools.iter().filter_map(|t| t.returns) {
        typed_dicts_of(hint, &mut dicts);
    }
    for name in dicts {
        let body = TYPED_DICTS.iter().find(|(n, _)| *n == name).map_or("", |(_, b)| b);
        out.push_str("\n\n\n");
        out.push_str(body);
    }
    for t in tools {
        out.push_str("\n\n\n");
        out.push_str(&function(t));
    }
    out.push_str("\n\n\n");
    out.push_str(REPUBLIC);
    out.push('\n');
    out
}

/// Writes `content` as `tools-<sha256[:12]>.pyi` in `dir` (once: the name
/// follows the content), owner-only like everything under the home.
pub fn write(content: &str, dir: &Path) -> Result<PathBuf, bub_abi::BoxError> {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(content.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("tools-{}.pyi", &hex[..12]));
    if !path.exists() {
        bub_kit::files::create_private_dir(dir)?;
        bub_kit::files::write_private(&path, content.as_bytes())?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bub_agent::tools::Exposure;
    use serde_json::json;

    #[test]
    fn a_tool_renders_as_a_keyword_only_async_function() {
        let tool = AgentTool::native(
            "fs.read",
            "Read a file.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Where."},
                "limit": {"type": ["integer", "null"], "default": null},
                "mode": {"enum": ["a", "b"]},
            }, "required": ["path"]}),
            Exposure::Auto,
            |_, _| async { Ok(Value::Null) },
        );
        assert_eq!(
            function(&tool),
            "async def fs_read(*, path: str, limit: int | None = None, mode: Literal['a', 'b'] = ...) -> Any:\n    \
             \"\"\"Read a file.\n\n    Args:\n        path: Where.\n    \"\"\""
        );
        assert_eq!(identifier("class"), "_class");
        assert_eq!(identifier("2fa"), "_2fa");
    }

    /// Bub's media tools' parameter (pydantic's `republic.Image | str`,
    /// a `$ref` into its own `$defs`) is declared as Bub declares it, and
    /// the stub ends with the `republic` module's members.
    #[test]
    fn media_parameters_are_republic_classes_and_the_stub_documents_republic() {
        let tools = crate::code_mode::tools();
        let attach = tools.iter().find(|t| t.name == "attach_image").unwrap();
        assert!(function(attach).starts_with("async def attach_image(*, image: republic.Image | str) -> str:"));
        let stub = render(&[attach]);
        assert!(stub.contains("\nimport republic\n"), "{stub}");
        assert!(stub.trim_end().ends_with("print(event.chunk, end=\"\")"), "{stub}");
    }

    /// Results typed as Bub's stub types them: the annotation, and the
    /// TypedDicts it names (and those they name), once each, in Bub's
    /// order, before the functions.
    #[test]
    fn results_are_typed_with_bubs_typed_dicts() {
        let tool = |name: &str, returns: &'static str| {
            AgentTool::native(name, "", json!({"type": "object", "properties": {}}), Exposure::Auto, |_, _| async {
                Ok(Value::Null)
            })
            .returning(returns)
        };
        let (skill, search) =
            (tool("skill", "SkillList | SkillContent | ToolFailure"), tool("tape.search", "TapeSearchResult"));
        let stub = render(&[&skill, &search]);
        let classes: Vec<&str> =
            stub.lines().filter_map(|l| l.strip_prefix("class ")).map(|l| l.split('(').next().unwrap()).collect();
        assert_eq!(classes, ["SkillList", "SkillContent", "ToolFailure", "TapeSearchResult", "TapeSearchMatch"]);
        assert!(stub.contains("async def skill() -> SkillList | SkillContent | ToolFailure:"), "{stub}");
        assert!(stub.contains("class TapeSearchMatch(TypedDict):\n    date: str\n    content: dict[str, Any]"));
        assert!(stub.find("class SkillList") < stub.find("async def skill"));
    }
}
