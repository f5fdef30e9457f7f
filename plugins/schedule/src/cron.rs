//! Cron expressions as crontab(5) reads them, in a job's time zone.
//!
//! The fields are read by `croner` (the Rust port of the croner library,
//! which follows POSIX/Vixie cron): `minute hour day-of-month month
//! day-of-week`, or six fields with seconds first; names (`mon`, `jan`);
//! day-of-week 0 and 7 are Sunday, 1 is Monday. When both day fields are
//! restricted a day matches if **either** does (`0 9 1 * 1`: the 1st of
//! each month and every Monday), as Vixie cron's man page says; when one
//! is `*`, only the other counts. (The `cron` crate used before read
//! day-of-week as Quartz does, 1 = Sunday, so `1-5` fired Sunday to
//! Thursday.) croner also reads `L`, `#` and `W`.
//!
//! The expression matches wall-clock times in the zone; this module turns
//! them into instants, with the daylight-saving rules below (croner's own
//! rules move a skipped time to the first instant after the gap and skip
//! interval jobs there; bub-rs keeps its documented rule instead):
//! - **A skipped time** (the hour a spring-forward day jumps over) runs
//!   once, as far after the jump as it was after the gap's start: 02:30
//!   on New York's spring-forward day runs at 03:30 EDT. Every time of the
//!   day's list does: `0,30 2 * * *` runs at 03:00 and 03:30 that day,
//!   `*/15 2 * * *` four times.
//! - **A repeated time** (the hour a fall-back day goes through twice):
//!   a job whose minute and hour fields are fixed runs once, the first
//!   time; a job with `*` in its minute or hour field runs through both
//!   passes, as cronie does.
//! - A time both (a repeated time that another field's list also puts
//!   after a gap) runs once per instant.

use croner::parser::{CronParser, Seconds, Year};
use jiff::{
    civil::DateTime,
    tz::{AmbiguousOffset, TimeZone},
    SignedDuration, Timestamp,
};

/// A parsed expression.
#[derive(Debug, Clone)]
pub struct Cron {
    inner: croner::Cron,
    // `*` in the minute or hour field (or the seconds'): runs through a
    // repeated hour.
    through_folds: bool,
}

/// How far a zone's offset moves at a transition, at most (Lord Howe's
/// half hour, daylight saving's hour, the odd two-hour change): civil
/// times further apart than this keep their order as instants.
const SHIFT: SignedDuration = SignedDuration::from_hours(3);

impl Cron {
    /// Reads `expr`: 5 fields, or 6 with seconds first.
    pub fn parse(expr: &str) -> Result<Cron, String> {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let (minute, hour, seconds) = match fields.as_slice() {
            [m, h, _, _, _] => (*m, *h, None),
            [s, m, h, _, _, _] => (*m, *h, Some(*s)),
            _ => {
                return Err(format!(
                    "cron {expr:?} needs 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first"
                ))
            }
        };
        let parser = CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build();
        let inner = parser.parse(expr).map_err(|e| format!("cron {expr:?} is not valid: {e}"))?;
        let wild = |field: &str| field.starts_with('*');
        Ok(Cron { inner, through_folds: wild(minute) || wild(hour) || seconds.is_some_and(wild) })
    }

    /// The first wall-clock time after `civil` the expression matches
    /// (None: there is none, e.g. `0 0 30 2 *`).
    fn next_civil(&self, civil: DateTime) -> Option<DateTime> {
        self.inner.find_next_occurrence(&civil, false).ok()
    }

    /// The instants wall-clock time `civil` runs at in `zone`.
    fn instants(&self, civil: DateTime, zone: &TimeZone) -> Vec<Timestamp> {
        let ambiguous = zone.to_ambiguous_timestamp(civil);
        match ambiguous.offset() {
            AmbiguousOffset::Unambiguous { .. } | AmbiguousOffset::Gap { .. } => {
                // A gap's time, shifted forward by the gap (jiff's
                // `compatible`, RFC 5545's rule).
                ambiguous.compatible().ok().into_iter().collect()
            }
            AmbiguousOffset::Fold { .. } => {
                let mut out: Vec<Timestamp> = ambiguous.earlier().ok().into_iter().collect();
                if self.through_folds {
                    out.extend(ambiguous.later().ok());
                }
                out
            }
        }
    }

    /// The first run strictly after `after` in `zone`; None when the
    /// expression never matches again.
    pub fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let civil_after = after.to_zoned(zone.clone()).datetime();
        // The common case: the next wall-clock match is an ordinary time and
        // no transition lies near: it is the answer.
        let first = self.next_civil(civil_after)?;
        if let [at] = self.instants(first, zone).as_slice() {
            let near = after.checked_sub(SHIFT).unwrap_or(after);
            let transition = zone.following(near).next().map(|t| t.timestamp());
            if *at > after && transition.is_none_or(|t| t > at.checked_add(SHIFT).unwrap_or(*at)) {
                return Some(*at);
            }
        }
        self.next_near_a_transition(after, civil_after, zone)
    }

    /// [`next_after`](Self::next_after) near a transition, where wall-clock
    /// order and instant order part: every wall-clock match from `SHIFT`
    /// before `after` is mapped, and the earliest instant after it wins,
    /// looking on until the wall clock is `SHIFT` past the best one.
    fn next_near_a_transition(&self, after: Timestamp, civil_after: DateTime, zone: &TimeZone) -> Option<Timestamp> {
        let mut cursor = civil_after.checked_sub(SHIFT).ok()?;
        let mut best: Option<(Timestamp, DateTime)> = None;
        // Bounded: an every-second expression walks at most 2 × 3 h of seconds.
        for _ in 0..100_000 {
            let Some(civil) = self.next_civil(cursor) else { break };
            if best.is_some_and(|(_, at)| civil > at.checked_add(SHIFT).unwrap_or(at)) {
                break;
            }
            for instant in self.instants(civil, zone) {
                if instant > after && best.is_none_or(|(b, _)| instant < b) {
                    best = Some((instant, civil));
                }
            }
            cursor = civil;
        }
        best.map(|(at, _)| at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// Every run of `expr` in `tz` from `from` to `to`.
    fn runs(expr: &str, tz: &str, from: &str, to: &str) -> Vec<String> {
        let (cron, zone) = (Cron::parse(expr).unwrap(), TimeZone::get(tz).unwrap());
        let (mut t, end) = (at(from), at(to));
        let mut out = Vec::new();
        while let Some(next) = cron.next_after(t, &zone) {
            if next > end {
                break;
            }
            out.push(next.to_string());
            t = next;
        }
        out
    }

    #[test]
    fn weekdays_are_crontabs_0_and_7_sunday_1_monday() {
        // 2026-12-06 is a Sunday.
        let utc = "UTC";
        assert_eq!(
            runs("30 9 * * 1-5", utc, "2026-12-05T00:00:00Z", "2026-12-09T00:00:00Z"),
            ["2026-12-07T09:30:00Z", "2026-12-08T09:30:00Z"],
            "Monday and Tuesday, not Sunday"
        );
        assert_eq!(runs("0 0 * * 7", utc, "2026-12-01T00:00:00Z", "2026-12-08T00:00:00Z"), ["2026-12-06T00:00:00Z"]);
        assert_eq!(runs("0 0 * * 0", utc, "2026-12-01T00:00:00Z", "2026-12-08T00:00:00Z"), ["2026-12-06T00:00:00Z"]);
        assert_eq!(
            runs("0 0 * * 6,0", utc, "2026-12-01T00:00:00Z", "2026-12-08T00:00:00Z"),
            ["2026-12-05T00:00:00Z", "2026-12-06T00:00:00Z"]
        );
        assert_eq!(runs("0 0 * * sun", utc, "2026-12-01T00:00:00Z", "2026-12-08T00:00:00Z"), ["2026-12-06T00:00:00Z"]);
    }

    #[test]
    fn both_day_fields_restricted_means_either() {
        // The 1st of the month, or a Monday (2026-12-07, 2026-12-14).
        assert_eq!(
            runs("0 9 1 * 1", "UTC", "2026-11-30T12:00:00Z", "2026-12-15T00:00:00Z"),
            ["2026-12-01T09:00:00Z", "2026-12-07T09:00:00Z", "2026-12-14T09:00:00Z"]
        );
    }

    /// New York, 2026: clocks jump from 02:00 to 03:00 on 8 March and fall
    /// back from 02:00 to 01:00 on 1 November.
    #[test]
    fn every_time_in_a_gap_runs_once_shifted_and_folds_as_cronie() {
        let ny = "America/New_York";
        assert_eq!(
            runs("30 2 * * *", ny, "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z"),
            ["2026-03-07T07:30:00Z", "2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"]
        );
        assert_eq!(
            runs("0,30 2 * * *", ny, "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z"),
            ["2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"]
        );
        assert_eq!(
            runs("*/15 2 * * *", ny, "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z"),
            ["2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z", "2026-03-08T07:30:00Z", "2026-03-08T07:45:00Z"]
        );
        // A fixed time in the repeated hour: once, the first time.
        assert_eq!(
            runs("30 1 * * *", ny, "2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z"),
            ["2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
        );
        // A wildcard hour runs through both passes.
        assert_eq!(
            runs("0 * * * *", ny, "2026-11-01T03:30:00Z", "2026-11-01T08:30:00Z"),
            [
                "2026-11-01T04:00:00Z",
                "2026-11-01T05:00:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T07:00:00Z",
                "2026-11-01T08:00:00Z"
            ]
        );
        // Asked from inside the second pass, a fixed time's first run is past.
        let cron = Cron::parse("30 1 * * *").unwrap();
        let zone = TimeZone::get(ny).unwrap();
        assert_eq!(cron.next_after(at("2026-11-01T06:00:00Z"), &zone), Some(at("2026-11-02T06:30:00Z")));
    }

    #[test]
    fn an_expression_with_no_next_time_says_so() {
        assert_eq!(Cron::parse("0 0 30 2 *").unwrap().next_after(at("2026-01-01T00:00:00Z"), &TimeZone::UTC), None);
        let err = Cron::parse("* *").unwrap_err();
        assert!(err.contains("needs 5 fields"), "{err}");
        assert!(Cron::parse("61 * * * *").unwrap_err().contains("is not valid"));
        assert!(Cron::parse("0 0 0 1 1 * 2030").is_err(), "no year field");
        // Six fields: seconds first.
        assert_eq!(
            runs("15 * * * * *", "UTC", "2026-12-01T00:00:00Z", "2026-12-01T00:01:00Z"),
            ["2026-12-01T00:00:15Z"]
        );
    }
}
