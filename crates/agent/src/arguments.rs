//! A tool call's arguments checked as Bub checks them: with pydantic, in
//! its lax mode, against the tool's JSON schema.
//!
//! The model reads the errors (`details.errors` of the tool's result), so
//! they are pydantic's, field for field: a tool declared by its function's
//! signature (`validate_call`) reports a missing argument as
//! `missing_argument` and refuses unknown ones; a tool declared by a model
//! (`tape.search`, `subagent`) reports `missing` and ignores extras. Values
//! pydantic coerces (`"true"` for a boolean, `"5"` for an integer) reach
//! the tool coerced.

use serde_json::{json, Map, Value};

/// How a tool's parameters are declared, which decides pydantic's errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Declared {
    /// By a function's signature (Bub's `@tool` on a function).
    #[default]
    Signature,
    /// By a pydantic model (`@tool(model=…)`).
    Model,
}

/// The pydantic release Bub 0.6.0a3 is installed with: its error URLs
/// name it.
const PYDANTIC: &str = "2.14";

fn error(kind: &str, loc: &str, msg: &str, input: Value) -> Value {
    json!({"type": kind, "loc": [loc], "msg": msg, "input": input,
           "url": format!("https://errors.pydantic.dev/{PYDANTIC}/v/{kind}")})
}

/// Checks `args` against `parameters` (a JSON schema object): the
/// arguments with pydantic's coercions applied (the others untouched, not
/// copied), or pydantic's errors, in its order (parameters in schema
/// order, then unknown ones, when `refuse_extras`).
pub fn check(
    parameters: &Value,
    declared: Declared,
    refuse_extras: bool,
    mut args: Map<String, Value>,
) -> Result<Map<String, Value>, Vec<Value>> {
    let properties = parameters.get("properties").and_then(Value::as_object);
    let required: Vec<&str> =
        parameters.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let mut errors = Vec::new();
    // Applied once all is checked: an error's input is the value as given.
    let mut coerced: Vec<(&str, Value)> = Vec::new();
    let names: Vec<&String> = properties.map(|p| p.keys().collect()).unwrap_or_default();
    // Required names the schema lists without a property come after.
    let missing_order =
        names.iter().map(|n| n.as_str()).chain(required.iter().copied().filter(|r| !names.iter().any(|n| n == r)));
    let mut seen = Vec::new();
    for name in missing_order {
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        match args.get(name) {
            None if required.contains(&name) => errors.push(match declared {
                Declared::Signature => {
                    error("missing_argument", name, "Missing required argument", json!(args_kwargs(&args)))
                }
                Declared::Model => error("missing", name, "Field required", Value::Object(args.clone())),
            }),
            None => {}
            // An optional parameter given as null: Bub's optional
            // parameters default to None.
            Some(Value::Null) if !required.contains(&name) => {}
            Some(value) => {
                let schema = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                match coerce(schema, value) {
                    Ok(Some(v)) => coerced.push((name, v)),
                    Ok(None) => {}
                    Err((kind, msg)) => errors.push(error(kind, name, msg, value.clone())),
                }
            }
        }
    }
    if refuse_extras && properties.is_some() {
        for (name, value) in &args {
            if !names.contains(&name) && !required.contains(&name.as_str()) {
                errors.push(error("unexpected_keyword_argument", name, "Unexpected keyword argument", value.clone()));
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for (name, value) in coerced {
        args.insert(name.to_owned(), value);
    }
    Ok(args)
}

/// The types a schema allows (`type`, or each branch of `anyOf`); none
/// (anything goes) when a branch says no type (a `$ref`, as the media
/// tools' `republic.Image | str`).
fn types(schema: &Value) -> Vec<&str> {
    if let Some(t) = schema.get("type") {
        return match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
    }
    let branches = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Value::as_array);
    let each: Vec<Vec<&str>> = branches.into_iter().flatten().map(types).collect();
    if each.iter().any(Vec::is_empty) {
        return Vec::new();
    }
    each.into_iter().flatten().collect()
}

type Refusal = (&'static str, &'static str);

/// What pydantic's lax mode makes of a value: `Some` new value, `None` for
/// the value as it is, or its error.
type Coerced = Result<Option<Value>, Refusal>;

/// `value` as pydantic's lax mode reads it for `schema`.
fn coerce(schema: &Value, value: &Value) -> Coerced {
    let allowed = types(schema);
    if allowed.is_empty() || (value.is_null() && allowed.contains(&"null")) {
        return Ok(None);
    }
    let mut first_error = None;
    for kind in allowed.iter().filter(|k| **k != "null") {
        let tried = match *kind {
            "boolean" => boolean(value),
            "integer" => integer(value),
            "number" => number(value),
            "string" => value.is_string().then_some(None).ok_or(("string_type", "Input should be a valid string")),
            "array" => value.is_array().then_some(None).ok_or(("list_type", "Input should be a valid list")),
            "object" => value.is_object().then_some(None).ok_or(("dict_type", "Input should be a valid dictionary")),
            _ => Ok(None),
        };
        match tried {
            Ok(v) => return Ok(v),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or(("value_error", "Input is not valid")))
}

fn boolean(value: &Value) -> Coerced {
    const PARSING: Refusal = ("bool_parsing", "Input should be a valid boolean, unable to interpret input");
    match value {
        Value::Bool(_) => Ok(None),
        Value::Number(n) => match n.as_f64() {
            Some(0.0) => Ok(Some(Value::Bool(false))),
            Some(1.0) => Ok(Some(Value::Bool(true))),
            _ => Err(PARSING),
        },
        Value::String(s) => match s.to_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Ok(Some(Value::Bool(false))),
            "1" | "on" | "t" | "true" | "y" | "yes" => Ok(Some(Value::Bool(true))),
            _ => Err(PARSING),
        },
        _ => Err(("bool_type", "Input should be a valid boolean")),
    }
}

fn integer(value: &Value) -> Coerced {
    match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(None),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.is_finite() => Ok(Some(json!(f as i64))),
            _ => Err(("int_from_float", "Input should be a valid integer, got a number with a fractional part")),
        },
        Value::String(s) => s
            .trim()
            .replace('_', "")
            .parse::<i64>()
            .map(|i| Some(json!(i)))
            .map_err(|_| ("int_parsing", "Input should be a valid integer, unable to parse string as an integer")),
        _ => Err(("int_type", "Input should be a valid integer")),
    }
}

fn number(value: &Value) -> Coerced {
    match value {
        Value::Number(_) => Ok(None),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(|n| Some(Value::Number(n)))
            .ok_or(("float_parsing", "Input should be a valid number, unable to parse string as a number")),
        _ => Err(("float_type", "Input should be a valid number")),
    }
}

/// pydantic's `ArgsKwargs` as its repr shows it (the call had keyword
/// arguments only): `ArgsKwargs(())`, `ArgsKwargs((), {'limit': 5})`.
fn args_kwargs(args: &Map<String, Value>) -> String {
    if args.is_empty() {
        return "ArgsKwargs(())".to_owned();
    }
    format!("ArgsKwargs((), {})", bub_kit::python::python_repr(&Value::Object(args.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"}, "archive": {"type": "boolean"}, "n": {"type": "integer"},
            "x": {"type": "number"}, "items": {"anyOf": [{"type": "array"}, {"type": "null"}]}},
            "required": ["path"]})
    }

    fn errors(args: Value, declared: Declared) -> Vec<Value> {
        check(&schema(), declared, declared == Declared::Signature, args.as_object().unwrap().clone()).unwrap_err()
    }

    /// The errors pydantic 2.14 gives `validate_call` for the same calls
    /// (printed by Python Bub's venv), type, message and input.
    #[test]
    fn errors_are_pydantics() {
        let e = errors(json!({}), Declared::Signature);
        assert_eq!(e[0]["type"], "missing_argument");
        assert_eq!(e[0]["input"], "ArgsKwargs(())");
        assert_eq!(e[0]["url"], "https://errors.pydantic.dev/2.14/v/missing_argument");
        let e =
            errors(json!({"n": 5, "s": "it's \"q\"", "b": true, "z": null, "l": [1.5, {"a": 2}]}), Declared::Signature);
        assert_eq!(
            e[0]["input"],
            "ArgsKwargs((), {'n': 5, 's': 'it\\'s \"q\"', 'b': True, 'z': None, 'l': [1.5, {'a': 2}]})"
        );
        let kinds: Vec<&str> = e.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "missing_argument",
                "unexpected_keyword_argument",
                "unexpected_keyword_argument",
                "unexpected_keyword_argument",
                "unexpected_keyword_argument"
            ]
        );
        let e = errors(json!({"path": "a", "archive": "maybe"}), Declared::Signature);
        assert_eq!(
            e[0],
            json!({"type": "bool_parsing", "loc": ["archive"], "msg": "Input should be a valid boolean, unable to interpret input", "input": "maybe", "url": "https://errors.pydantic.dev/2.14/v/bool_parsing"})
        );
        assert_eq!(errors(json!({"path": 1}), Declared::Signature)[0]["type"], "string_type");
        assert_eq!(errors(json!({"path": "a", "n": "1.5"}), Declared::Signature)[0]["type"], "int_parsing");
        assert_eq!(errors(json!({"path": "a", "n": 1.5}), Declared::Signature)[0]["type"], "int_from_float");
        assert_eq!(errors(json!({"path": "a", "x": "abc"}), Declared::Signature)[0]["type"], "float_parsing");
        assert_eq!(errors(json!({"path": "a", "archive": [1]}), Declared::Signature)[0]["type"], "bool_type");
        assert_eq!(errors(json!({"path": "a", "items": "x"}), Declared::Signature)[0]["type"], "list_type");
        let e = errors(json!({"n": 3}), Declared::Model);
        assert_eq!(
            e,
            [
                json!({"type": "missing", "loc": ["path"], "msg": "Field required", "input": {"n": 3}, "url": "https://errors.pydantic.dev/2.14/v/missing"})
            ]
        );
    }

    /// Lax mode: what pydantic coerces reaches the tool coerced; a model
    /// ignores extras.
    #[test]
    fn values_are_coerced_as_pydantic_coerces_them() {
        let args = json!({"path": "a", "archive": "yes", "n": "7", "x": 2, "extra": 1});
        let ok = check(&schema(), Declared::Model, false, args.as_object().unwrap().clone()).unwrap();
        assert_eq!(Value::Object(ok), json!({"path": "a", "archive": true, "n": 7, "x": 2, "extra": 1}));
        assert!(check(
            &schema(),
            Declared::Model,
            false,
            json!({"path": "a", "items": null}).as_object().unwrap().clone()
        )
        .is_ok());
    }
}
