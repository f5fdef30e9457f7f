//! How big a request is before it is sent (semantics §A2.9).
//!
//! The context budget is in tokens, but the agent has no tokenizer for
//! every provider, and a tokenizer per model would be a dependency per
//! model. So a request is measured in bytes of its JSON text (system
//! prompt, messages, tool schemas) and turned into tokens at a ratio:
//! one token per three bytes until the model has answered once
//! ([`DEFAULT_TOKENS_PER_BYTE`]; English runs about four bytes a token,
//! code and JSON about three, so this overestimates), then the ratio the
//! provider's own `usage.input_tokens` showed for the last request, plus a
//! tenth. A provider that refused a request as too long caps the budget
//! at three quarters of what that request was estimated at, so a wrong
//! estimate is corrected once and not again on every turn.

use std::{collections::HashMap, sync::Mutex};

use serde_json::Value;

use super::message::Message;

/// Tokens per byte of request text before the provider has reported any.
pub const DEFAULT_TOKENS_PER_BYTE: f64 = 1.0 / 3.0;

/// What one model's calls taught about its tokens: kept per model in the
/// [`ContextCache`](super::context::ContextCache), shared by the turns of a
/// framework.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Calibration {
    /// Tokens per byte the last reported usage showed (with its margin).
    pub tokens_per_byte: Option<f64>,
    /// The estimate of the last request the provider refused as too long.
    pub refused_at: Option<u64>,
}

impl Calibration {
    /// `bytes` of request text in tokens.
    pub fn tokens(&self, bytes: usize) -> u64 {
        (bytes as f64 * self.tokens_per_byte.unwrap_or(DEFAULT_TOKENS_PER_BYTE)).ceil() as u64
    }

    /// The budget a step keeps to: `configured` (0: none), lowered under
    /// a refusal. None: no budget at all.
    pub fn budget(&self, configured: u64) -> Option<u64> {
        let cap = self.refused_at.map(|r| (r / 4 * 3).max(1));
        match (configured, cap) {
            (0, cap) => cap,
            (b, Some(cap)) => Some(b.min(cap)),
            (b, None) => Some(b),
        }
    }

    /// Learns from a call whose request was `bytes` long and which the
    /// provider reported as `input_tokens`. The ratio is kept between one
    /// token per eight bytes and one per byte: a proxy that reports
    /// nonsense cannot switch the budget off.
    pub fn learn(&mut self, bytes: usize, input_tokens: u64) {
        if bytes == 0 || input_tokens == 0 {
            return;
        }
        let ratio = input_tokens as f64 / bytes as f64 * 1.1;
        self.tokens_per_byte = Some(ratio.clamp(1.0 / 8.0, 1.0));
    }
}

/// Calibrations by model, bounded (a gateway that sees a thousand model
/// names forgets the oldest half rather than grows).
#[derive(Debug, Default)]
pub struct Calibrations {
    by_model: Mutex<HashMap<String, Calibration>>,
}

impl Calibrations {
    const MODELS: usize = 64;

    /// What is known of `model`.
    pub fn get(&self, model: &str) -> Calibration {
        bub_abi::sync::lock(&self.by_model).get(model).copied().unwrap_or_default()
    }

    /// Changes what is known of `model`.
    pub fn update(&self, model: &str, change: impl FnOnce(&mut Calibration)) {
        let mut map = bub_abi::sync::lock(&self.by_model);
        if map.len() >= Self::MODELS && !map.contains_key(model) {
            map.clear();
        }
        change(map.entry(model.to_owned()).or_default());
    }
}

/// About the length of `v` as JSON text (strings without their escapes).
pub fn json_bytes(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len() + 2,
        Value::Array(a) => a.iter().map(|x| json_bytes(x) + 1).sum::<usize>() + 2,
        Value::Object(o) => o.iter().map(|(k, x)| k.len() + 4 + json_bytes(x)).sum::<usize>() + 2,
        _ => 8,
    }
}

/// About the length of a message as JSON text; a plain stored message is
/// measured on its stored text, without parsing it.
pub fn message_bytes(m: &Message) -> usize {
    match m.plain() {
        Some(p) => p.role_json.len() + p.content_json.len() + 24,
        None => json_bytes(m.json()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_caps_the_budget_and_usage_recalibrates_the_estimate() {
        let mut c = Calibration::default();
        assert_eq!(c.tokens(3000), 1000);
        assert_eq!(c.budget(64_000), Some(64_000));
        assert_eq!(c.budget(0), None);
        c.refused_at = Some(8_000);
        assert_eq!(c.budget(64_000), Some(6_000));
        assert_eq!(c.budget(0), Some(6_000));
        // The provider counted 1,000 tokens in 4,000 bytes: a quarter, plus a tenth.
        c.learn(4_000, 1_000);
        assert_eq!(c.tokens(4_000), 1_100);
        // Nonsense is clamped: a reported 1 token for 1 MB does not switch it off.
        c.learn(1 << 20, 1);
        assert_eq!(c.tokens(8_000), 1_000);
    }
}
