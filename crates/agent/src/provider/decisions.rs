//! Decisions (Republic's `DecisionModel`, the System One `POST /systemone`
//! API of TypeSafe, OpenRouter and Magpie): typed questions about a state
//! answered with probabilities, for model-written code's
//! `republic.get_decision_model(spec)`.

use serde_json::{json, Map, Value};

use super::{http, ModelClient, ProviderError, Usage};

/// The providers that serve System One models.
const WITH: &[&str] = &["typesafe", "openrouter", "magpie"];

/// A question, as the code sent it: `{"type": "noul" | "choice" | "score",
/// "instructions", "criteria"}`.
pub type Question = Map<String, Value>;

/// The answers of one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// Each question's answer under its id (`{"type": "noul", "noul": 0.8}`, …).
    pub answers: Map<String, Value>,
    /// The model that answered.
    pub model: Option<String>,
    /// Tokens.
    pub usage: Usage,
}

/// Republic's `_question`: a choice's list of options becomes a map of
/// them to `null`; a yes/no question without criteria sends none.
fn question_body(question: &Question) -> Value {
    let kind = question.get("type").and_then(Value::as_str).unwrap_or_default();
    let mut body = json!({"type": kind, "instructions": question.get("instructions").cloned().unwrap_or_default()});
    match (kind, question.get("criteria")) {
        (_, None | Some(Value::Null)) => {}
        ("choice", Some(Value::Array(options))) => {
            let named: Map<String, Value> = options
                .iter()
                .map(|o| (o.as_str().map_or_else(|| o.to_string(), str::to_owned), Value::Null))
                .collect();
            body["criteria"] = Value::Object(named);
        }
        (_, Some(criteria)) => body["criteria"] = criteria.clone(),
    }
    body
}

/// Asks every question about `state`.
pub async fn decide(
    client: &ModelClient,
    state: &Value,
    questions: &Map<String, Value>,
) -> Result<Decision, ProviderError> {
    if !WITH.contains(&client.config.kind.as_str()) {
        return Err(ProviderError::Config(format!(
            "Provider {} supports no decision API format",
            bub_kit::python::repr_str(&client.provider)
        )));
    }
    let asked: Map<String, Value> = questions
        .iter()
        .map(|(id, q)| (id.clone(), q.as_object().map(question_body).unwrap_or_else(|| q.clone())))
        .collect();
    let body = json!({"model": client.model, "state": state, "questions": asked});
    let answer = http::post_json(client, "/systemone", &body).await?;
    let answers = answer["answers"]
        .as_object()
        .cloned()
        .ok_or_else(|| ProviderError::Response("a decision answer without answers".into()))?;
    let n = |k: &str| answer["usage"][k].as_u64().unwrap_or(0);
    let usage = Usage { input_tokens: n("input_tokens"), output_tokens: n("output_tokens"), ..Usage::default() };
    Ok(Decision { answers, model: answer["model"].as_str().map(str::to_owned), usage })
}
