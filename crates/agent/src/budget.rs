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
//! tenth. A provider that refused a request as too long caps that model's
//! budget under what the request was estimated at: by the provider's own
//! numbers when its error names them (a window of 8,192 for a request it
//! counted at 9,000), else at three quarters, so a wrong estimate is
//! corrected once and not again on every turn. The cap is a correction,
//! not a sentence: one the provider's numbers gave is a fact about the
//! model and lasts [`RECOVER_AFTER`]; one guessed (three quarters of a
//! refused request, which compounds when refusals come in a row) is
//! lifted after [`RECOVER_AFTER_CALLS`] calls the model took. A later
//! refusal sets it again.

use std::{collections::HashMap, sync::Mutex};

use serde_json::Value;

use super::message::Message;

/// Tokens per byte of request text before the provider has reported any.
pub const DEFAULT_TOKENS_PER_BYTE: f64 = 1.0 / 3.0;

/// Calls a model takes after a refusal before its cap is lifted.
pub const RECOVER_AFTER_CALLS: u32 = 20;

/// How long a refusal's cap lasts at most.
pub const RECOVER_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// What one model's calls taught about its tokens: kept per model in the
/// [`ContextCache`](super::context::ContextCache), shared by the turns of a
/// framework.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Calibration {
    /// Tokens per byte the last reported usage showed (with its margin).
    pub tokens_per_byte: Option<f64>,
    /// The budget a refusal capped this model's at (estimated tokens).
    pub refused_at: Option<u64>,
    /// Calls the model took since the refusal, and when it came.
    pub since_refusal: u32,
    /// When the refusal came.
    pub refused_when: Option<std::time::Instant>,
    /// Whether the cap was guessed (the refusal named no numbers).
    pub guessed: bool,
}

impl Calibration {
    /// `bytes` of request text in tokens.
    pub fn tokens(&self, bytes: usize) -> u64 {
        (bytes as f64 * self.tokens_per_byte.unwrap_or(DEFAULT_TOKENS_PER_BYTE)).ceil() as u64
    }

    /// The budget a step keeps to: `configured` (0: none), lowered under
    /// a refusal. None: no budget at all.
    pub fn budget(&self, configured: u64) -> Option<u64> {
        let cap = self.refused_at.map(|r| r.max(1));
        match (configured, cap) {
            (0, cap) => cap,
            (b, Some(cap)) => Some(b.min(cap)),
            (b, None) => Some(b),
        }
    }

    /// The provider refused a request estimated at `estimate` tokens as too
    /// long, saying `error`: the budget is capped under it (lowered only,
    /// while a cap stands).
    pub fn refused(&mut self, estimate: u64, error: &str) {
        let (cap, guessed) = match window_and_request(error) {
            // The provider's window, in the estimate's units, with a margin.
            Some((window, asked)) if asked > window => {
                ((estimate as f64 * window as f64 / asked as f64 * 0.9) as u64, false)
            }
            _ => (estimate / 4 * 3, true),
        };
        let cap = cap.max(1);
        self.guessed = guessed && self.refused_at.is_none_or(|c| cap < c || self.guessed);
        self.refused_at = Some(self.refused_at.map_or(cap, |c| c.min(cap)));
        self.since_refusal = 0;
        self.refused_when = Some(std::time::Instant::now());
    }

    /// The model took a call: after enough of them, or long enough, a
    /// refusal's cap is lifted (a later refusal sets it again).
    pub fn accepted(&mut self) {
        if self.refused_at.is_none() {
            return;
        }
        self.since_refusal += 1;
        let old = self.refused_when.is_none_or(|t| t.elapsed() >= RECOVER_AFTER);
        if (self.guessed && self.since_refusal >= RECOVER_AFTER_CALLS) || old {
            self.refused_at = None;
            self.since_refusal = 0;
            self.refused_when = None;
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

/// The window and the request's size a refusal names, in the provider's
/// tokens: OpenAI's and vLLM's "maximum context length is 8192 tokens.
/// However, your messages resulted in 9000 tokens", Anthropic's "prompt
/// is too long: 210000 tokens > 200000 maximum". None when it names
/// neither.
pub fn window_and_request(error: &str) -> Option<(u64, u64)> {
    let s = error.to_lowercase();
    let number_after = |at: usize| -> Option<u64> {
        let rest = s.get(at..)?.trim_start();
        let digits: String =
            rest.chars().take_while(|c| c.is_ascii_digit() || *c == ',').filter(|c| *c != ',').collect();
        digits.parse().ok()
    };
    // "… tokens > N maximum": the request first, then the window.
    if let Some(gt) = s.find("tokens >") {
        let before = &s[..gt];
        let start = before.trim_end().rfind(|c: char| !c.is_ascii_digit() && c != ',').map_or(0, |i| i + 1);
        let asked = before.trim_end()[start..].replace(',', "").parse().ok()?;
        return Some((number_after(gt + "tokens >".len())?, asked));
    }
    let window = number_after(s.find("maximum context length is")? + "maximum context length is".len())?;
    let asked = ["resulted in", "you requested", "requested"]
        .iter()
        .find_map(|marker| s.find(marker).and_then(|at| number_after(at + marker.len())))?;
    Some((window, asked))
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
        c.refused(8_000, "the request is too long");
        assert_eq!(c.budget(64_000), Some(6_000));
        assert_eq!(c.budget(0), Some(6_000));
        // The provider counted 1,000 tokens in 4,000 bytes: a quarter, plus a tenth.
        c.learn(4_000, 1_000);
        assert_eq!(c.tokens(4_000), 1_100);
        // Nonsense is clamped: a reported 1 token for 1 MB does not switch it off.
        c.learn(1 << 20, 1);
        assert_eq!(c.tokens(8_000), 1_000);
    }

    #[test]
    fn a_refusal_with_numbers_caps_by_them_and_every_cap_is_lifted_in_time() {
        let mut c = Calibration::default();
        let openai = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9,000 \
            tokens. Please reduce the length of the messages.";
        c.refused(10_000, openai);
        assert_eq!(c.budget(64_000), Some(8_192));
        // A second refusal while capped lowers it by its own numbers, not by another quarter.
        c.refused(8_192, "prompt is too long: 8300 tokens > 8192 maximum");
        assert_eq!(c.budget(64_000), Some(7_276));
        for _ in 0..RECOVER_AFTER_CALLS * 2 {
            c.accepted();
        }
        assert_eq!(c.budget(64_000), Some(7_276), "the provider's numbers are a fact: kept (for an hour)");
        // A guessed cap compounds with refusals in a row, and is lifted.
        let mut g = Calibration::default();
        for estimate in [8_000, 6_000, 4_500] {
            g.refused(estimate, "request too large");
        }
        assert_eq!(g.budget(64_000), Some(3_375));
        for _ in 0..RECOVER_AFTER_CALLS - 1 {
            g.accepted();
        }
        assert_eq!(g.budget(64_000), Some(3_375), "still capped");
        g.accepted();
        assert_eq!(g.budget(64_000), Some(64_000), "lifted after the model took enough calls");
        assert_eq!(window_and_request(openai), Some((8_192, 9_000)));
        let vllm =
            "This model's maximum context length is 4096 tokens. However, you requested 4196 tokens (100 in the \
            messages, 4096 in the completion).";
        assert_eq!(window_and_request(vllm), Some((4_096, 4_196)));
        assert_eq!(window_and_request("prompt is too long: 210000 tokens > 200000 maximum"), Some((200_000, 210_000)));
        assert_eq!(window_and_request("context_length_exceeded"), None);
    }
}
