//! Embeddings (Republic's `EmbeddingModel`, OpenAI's `POST /embeddings`):
//! what model-written code's `republic.get_embedding_model(spec)` calls,
//! with the host's credentials.

use serde_json::{json, Value};

use super::{http, ModelClient, ProviderError, Usage};

/// The providers whose API has no embeddings endpoint (Republic's
/// `SUPPORTED_API_FORMATS` without `embeddings`); any other, an
/// OpenAI-compatible server among them, is asked.
const WITHOUT: &[&str] = &[
    "anthropic",
    "deepseek",
    "github",
    "grok",
    "minimax",
    "moonshot",
    "zai",
    "codex",
    "typesafe",
    "magpie",
    "google",
    "echo",
];

/// The vectors of one request, in input order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Embeddings {
    /// One vector per input text.
    pub vectors: Vec<Vec<f64>>,
    /// The model that answered.
    pub model: Option<String>,
    /// Prompt tokens.
    pub usage: Usage,
}

/// Embeds `texts` in one request (`dimensions` when given).
pub async fn embed(
    client: &ModelClient,
    texts: &[String],
    dimensions: Option<u64>,
) -> Result<Embeddings, ProviderError> {
    if WITHOUT.contains(&client.config.kind.as_str()) {
        return Err(ProviderError::Config(format!(
            "Provider {} supports no embedding API format",
            bub_kit::python::repr_str(&client.provider)
        )));
    }
    let mut body = json!({"model": client.model, "input": texts, "encoding_format": "float"});
    if let Some(d) = dimensions {
        body["dimensions"] = json!(d);
    }
    let answer = http::post_json(client, "/embeddings", &body).await?;
    let mut items: Vec<&Value> = answer["data"].as_array().into_iter().flatten().collect();
    items.sort_by_key(|item| item["index"].as_u64().unwrap_or(0));
    let vectors = items
        .iter()
        .map(|item| {
            item["embedding"].as_array().map(|v| v.iter().filter_map(Value::as_f64).collect()).ok_or_else(|| {
                ProviderError::Response(format!("an embedding without a vector at index {}", item["index"]))
            })
        })
        .collect::<Result<Vec<Vec<f64>>, _>>()?;
    let usage = Usage { input_tokens: answer["usage"]["prompt_tokens"].as_u64().unwrap_or(0), ..Usage::default() };
    Ok(Embeddings { vectors, model: answer["model"].as_str().map(str::to_owned), usage })
}
