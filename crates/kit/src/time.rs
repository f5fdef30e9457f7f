//! Seconds from untrusted numbers (a model's `timeout`, a server's
//! `Retry-After`, a setting), without the panics of
//! `Duration::from_secs_f64` on `NaN`, infinity or values past `u64`.

use std::time::Duration;

/// The longest duration [`seconds`] gives: 100 years. Longer is "forever"
/// for every use here, and an `Instant` plus it never overflows.
pub const MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `value` seconds as a duration: `None` for `NaN` and negative values
/// (callers say which setting or argument was wrong); anything over
/// [`MAX`], infinity included, is [`MAX`].
pub fn seconds(value: f64) -> Option<Duration> {
    if value.is_nan() || value < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(value).unwrap_or(MAX).min(MAX))
}

/// `value` seconds clamped into `[0, MAX]`, `NaN` and negatives as zero
/// (a server's delay hint, where zero means "now").
pub fn seconds_or_zero(value: f64) -> Duration {
    seconds(value).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_numbers_never_panic() {
        for v in [f64::INFINITY, 1e30, 1e300, 2f64.powi(64), f64::MAX] {
            assert_eq!(seconds(v), Some(MAX), "{v}");
        }
        assert_eq!(seconds(f64::NAN), None);
        assert_eq!(seconds(-1.0), None);
        assert_eq!(seconds(f64::NEG_INFINITY), None);
        assert_eq!(seconds_or_zero(f64::NAN), Duration::ZERO);
        assert_eq!(seconds(1.5), Some(Duration::from_millis(1500)));
        let _ = std::time::Instant::now() + MAX;
    }
}
