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
    /// The model's context window, prompt and answer together, as a
    /// refusal named it (provider tokens): a fact about the model, kept.
    pub window: Option<u64>,
    /// The most output tokens a refusal said the model takes.
    pub max_output: Option<u64>,
}

impl Calibration {
    /// `bytes` of request text in tokens.
    pub fn tokens(&self, bytes: usize) -> u64 {
        (bytes as f64 * self.tokens_per_byte.unwrap_or(DEFAULT_TOKENS_PER_BYTE)).ceil() as u64
    }

    /// The budget a step keeps to: `configured` (0: none), lowered under
    /// a refusal. None: no budget at all.
    pub fn budget(&self, configured: u64) -> Option<u64> {
        // A window a refusal named holds the answer too: three quarters
        // of it, as for a configured `context_window`.
        let from_window = self.window.map(|w| (w / 4 * 3).max(1));
        let cap = match (self.refused_at.map(|r| r.max(1)), from_window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
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
        if let Some((window, _)) = window_and_request(error) {
            self.window = Some(self.window.map_or(window, |w| w.min(window)));
        }
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

    /// The window a request must fit, prompt and answer together: the
    /// smaller of the `configured` one and the one a refusal named.
    pub fn known_window(&self, configured: Option<u64>) -> Option<u64> {
        match (configured, self.window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The provider refused a request (`bytes` long) for the answer's
    /// tokens it asked for: what the refusal named is learned (the window,
    /// the model's output limit, and the prompt's size in the provider's
    /// tokens, which calibrates the estimate). The budget is not cut: the
    /// next request asks for fewer output tokens instead.
    pub fn output_refused(&mut self, refusal: &OutputRefusal, bytes: usize) {
        if let Some(window) = refusal.window {
            self.window = Some(self.window.map_or(window, |w| w.min(window)));
        }
        if let Some(cap) = refusal.cap {
            self.max_output = Some(self.max_output.map_or(cap, |c| c.min(cap)));
        }
        if let Some(prompt) = refusal.prompt {
            self.learn(bytes, prompt);
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
    let asked = ["resulted in", "you requested", "your request has", "requested"]
        .iter()
        .find_map(|marker| s.find(marker).and_then(|at| number_after(at + marker.len())))?;
    Some((window, asked))
}

/// Output tokens a request asks for at least, where the configured
/// `max_tokens` is larger: under it, an answer is cut off before it says
/// much, so the prompt is folded instead.
pub const OUTPUT_FLOOR: u64 = 256;

/// What a refusal of the answer's tokens named, in the provider's tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputRefusal {
    /// The window prompt and answer share.
    pub window: Option<u64>,
    /// The prompt, as the provider counted it.
    pub prompt: Option<u64>,
    /// The output tokens the request asked for.
    pub asked: Option<u64>,
    /// The most output tokens the model takes.
    pub cap: Option<u64>,
}

/// A refusal of the output tokens a request asked for, in the words of
/// vLLM ("'max_tokens' or 'max_completion_tokens' is too large: 16384.
/// This model's maximum context length is 8192 tokens and your request has
/// 2000 input tokens (16384 > 8192 - 2000)", and its older "you requested
/// 8292 tokens (100 in the messages, 8192 in the completion)"), OpenAI
/// ("max_tokens is too large: 16384. This model supports at most 4096
/// completion tokens") and Anthropic ("max_tokens: 64001 > 64000, which is
/// the maximum allowed number of output tokens"). None for any other
/// error, a prompt too long among them.
pub fn output_refusal(error: &str) -> Option<OutputRefusal> {
    let s = error.to_lowercase();
    let number_at = |rest: &str| -> Option<u64> {
        let digits: String =
            rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == ',').filter(|c| *c != ',').collect();
        digits.parse().ok()
    };
    let after = |marker: &str| s.find(marker).and_then(|at| number_at(&s[at + marker.len()..]));
    let before = |marker: &str| {
        let at = s.find(marker)?;
        let head = s[..at].trim_end();
        let start = head.rfind(|c: char| !c.is_ascii_digit() && c != ',').map_or(0, |i| i + 1);
        head[start..].replace(',', "").parse().ok()
    };
    let mut r = OutputRefusal::default();
    if s.contains("in the completion") {
        r.window = after("maximum context length is");
        r.prompt = before(" in the messages");
        r.asked = before(" in the completion");
    } else if s.contains("is too large") && s.contains("input tokens") {
        r.window = after("maximum context length is");
        r.prompt = after("your request has");
        r.asked = after("is too large:");
    } else if s.contains("completion tokens") && s.contains("supports at most") {
        r.cap = after("supports at most");
        r.asked = after("is too large:");
    } else if s.contains("maximum allowed number of output tokens") {
        r.cap = after(">");
        r.asked = after("max_tokens:");
    }
    let named = (r.window.is_some() && r.prompt.is_some()) || r.cap.is_some();
    named.then_some(r)
}

/// Why a request cannot be sent: its prompt leaves the answer less than
/// the floor of the model's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRoom {
    /// The window, in tokens.
    pub window: u64,
    /// The prompt, estimated.
    pub prompt: u64,
    /// What it leaves for the answer.
    pub room: u64,
    /// The least the answer gets.
    pub floor: u64,
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the prompt (about {} tokens) leaves {} tokens of the model's {}-token context window for the answer, \
             under the floor of {}: the context is folded to make room; if that is not enough, lower \
             BUB_CONTEXT_BUDGET_TOKENS or set the model's context_window to what its server allows",
            self.prompt, self.room, self.window, self.floor
        )
    }
}

/// The output tokens to ask for: `configured`, at most the model's
/// output limit `cap`, and, with a known `window`, at most what a prompt
/// of `prompt` tokens (estimated) leaves of it, with a margin for the
/// estimate's error: a server that counts prompt and answer against the
/// window (vLLM, OpenAI's older models) refuses a request asking more.
/// Never under [`OUTPUT_FLOOR`] (or `configured`, when smaller): [`NoRoom`]
/// then says so.
pub fn output_tokens(configured: u64, window: Option<u64>, prompt: u64, cap: Option<u64>) -> Result<u64, NoRoom> {
    let mut tokens = cap.map_or(configured, |c| configured.min(c.max(1)));
    if let Some(window) = window {
        // The estimate is calibrated on the last request, whose size may
        // differ; a server also counts what the estimate does not see (its
        // chat template, the request's other fields).
        let margin = prompt / 10 + 128;
        let room = window.saturating_sub(prompt + margin);
        let floor = OUTPUT_FLOOR.min(tokens);
        if room < floor {
            return Err(NoRoom { window, prompt, room, floor });
        }
        tokens = tokens.min(room);
    }
    Ok(tokens)
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
        assert_eq!(c.refused_at, Some(8_192));
        // The window it named holds the answer too: three quarters of it.
        assert_eq!((c.window, c.budget(64_000)), (Some(8_192), Some(6_144)));
        // A second refusal while capped lowers it by its own numbers, not by another quarter.
        c.refused(8_192, "prompt is too long: 8300 tokens > 8192 maximum");
        assert_eq!(c.refused_at, Some(7_276));
        for _ in 0..RECOVER_AFTER_CALLS * 2 {
            c.accepted();
        }
        assert_eq!(c.refused_at, Some(7_276), "the provider's numbers are a fact: kept (for an hour)");
        assert_eq!(c.budget(64_000), Some(6_144));
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
        let vllm_prompt = "This model's maximum context length is 1536 tokens. However, your request has 4176 input \
            tokens. Please reduce the length of the input messages.";
        assert_eq!(window_and_request(vllm_prompt), Some((1_536, 4_176)));
    }

    #[test]
    fn refusals_of_output_tokens_are_read_in_each_providers_words() {
        let vllm = "'max_tokens' or 'max_completion_tokens' is too large: 16384. This model's maximum context length \
            is 8000 tokens and your request has 2778 input tokens (16384 > 8000 - 2778). None";
        let r = output_refusal(vllm).unwrap();
        assert_eq!((r.window, r.prompt, r.asked, r.cap), (Some(8_000), Some(2_778), Some(16_384), None));
        let older = "This model's maximum context length is 4096 tokens. However, you requested 4196 tokens (100 in \
            the messages, 4096 in the completion). Please reduce the length of the messages or completion.";
        let r = output_refusal(older).unwrap();
        assert_eq!((r.window, r.prompt, r.asked), (Some(4_096), Some(100), Some(4_096)));
        let openai = "max_tokens is too large: 16384. This model supports at most 4096 completion tokens, whereas \
            you provided 16384.";
        assert_eq!(output_refusal(openai).unwrap().cap, Some(4_096));
        let anthropic = "max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens for \
            claude-opus-4-20250514";
        assert_eq!(output_refusal(anthropic).unwrap().cap, Some(64_000));
        for other in [
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
            "This model's maximum context length is 1536 tokens. However, your request has 4176 input tokens.",
            "rate limit reached",
        ] {
            assert_eq!(output_refusal(other), None, "{other}");
        }
    }

    #[test]
    fn the_answer_gets_what_the_prompt_leaves_of_the_window() {
        assert_eq!(output_tokens(16_384, None, 5_000, None), Ok(16_384));
        assert_eq!(output_tokens(16_384, None, 5_000, Some(4_096)), Ok(4_096));
        // 8,000 - 5,000 - (500 + 128).
        assert_eq!(output_tokens(16_384, Some(8_000), 5_000, None), Ok(2_372));
        assert_eq!(output_tokens(1_000, Some(8_000), 5_000, None), Ok(1_000));
        let no_room = output_tokens(16_384, Some(8_000), 7_500, None).unwrap_err();
        assert_eq!((no_room.room, no_room.floor), (0, OUTPUT_FLOOR));
        assert!(crate::run::is_context_overflow(&no_room.to_string()), "{no_room}");
        // A configured max_tokens under the floor is the floor.
        assert_eq!(output_tokens(100, Some(8_000), 7_000, None), Ok(100));
        assert!(output_tokens(100, Some(8_000), 7_200, None).is_err());
    }

    #[test]
    fn a_window_a_refusal_named_is_kept_and_bounds_the_budget() {
        let mut c = Calibration::default();
        let vllm = "'max_tokens' or 'max_completion_tokens' is too large: 16384. This model's maximum context length \
            is 8000 tokens and your request has 2000 input tokens (16384 > 8000 - 2000).";
        c.output_refused(&output_refusal(vllm).unwrap(), 8_000);
        assert_eq!(c.window, Some(8_000));
        assert_eq!(c.budget(64_000), Some(6_000));
        assert_eq!(c.tokens(8_000), 2_200, "the prompt's count calibrates the estimate");
        for _ in 0..RECOVER_AFTER_CALLS * 2 {
            c.accepted();
        }
        assert_eq!(c.budget(64_000), Some(6_000), "a fact about the model: kept");
    }
}
