//! What every benchmark of this crate shares (a module, not a target:
//! cargo makes targets of `benches/*.rs` only).

use std::time::Duration;

use criterion::Criterion;

/// Criterion's settings for these benchmarks: short warm-ups and
/// measurements, enough samples for a stable median, no plots (a full
/// `scripts/bench.sh` run stays within minutes).
pub fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500))
        .sample_size(30)
        .without_plots()
}
