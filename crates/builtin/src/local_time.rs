//! The local time zone for the prompt's date line, as the C library (and
//! so Python's `datetime.now().astimezone()`) finds it: `TZ` (a zone name
//! under `TZDIR` or `/usr/share/zoneinfo`, a path, or a POSIX rule; empty
//! is UTC), else `/etc/localtime`.
//!
//! Not jiff's `TimeZone::system()`: to learn the zone's *name*, it indexes
//! the whole zoneinfo directory (~900 files, ~2.7 M instructions) the first
//! time a process asks, about 1 ms of every `bub run`. The date line needs
//! only the offset, which the zone's own TZif file gives.

use std::{
    path::{Path, PathBuf},
    sync::Mutex,
    time::{Duration, Instant},
};

use jiff::tz::TimeZone;

/// How long a read zone is used before the system's is read again (jiff's
/// own cache does the same): a gateway that runs for weeks follows a change
/// of the machine's zone.
const FRESH_FOR: Duration = Duration::from_secs(300);

/// What a zone was read from: `TZ` and `TZDIR` (`None`: unset).
type Source = (Option<String>, Option<String>);

/// The local time zone for the host's variables `environment` (its `TZ`
/// and `TZDIR`); UTC when none can be read.
pub fn zone(environment: &bub_runtime::settings::Environment) -> TimeZone {
    // `Environment::get` treats an empty value as unset; for TZ, empty is UTC.
    let var = |name: &str| environment.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_owned());
    let source: Source = (var("TZ"), var("TZDIR"));
    static ZONE: Mutex<Option<(Source, Instant, TimeZone)>> = Mutex::new(None);
    let mut kept = bub_abi::sync::lock(&ZONE);
    if let Some((from, read, zone)) = &*kept {
        if *from == source && read.elapsed() < FRESH_FOR {
            return zone.clone();
        }
    }
    let zone = read_zone(source.0.as_deref(), source.1.as_deref().map(PathBuf::from));
    *kept = Some((source, Instant::now(), zone.clone()));
    zone
}

/// The zone `TZ` names (`None`: unset), zone files under `tzdir`.
fn read_zone(tz: Option<&str>, tzdir: Option<PathBuf>) -> TimeZone {
    let tzif = |path: &Path| std::fs::read(path).ok().and_then(|data| TimeZone::tzif("localtime", &data).ok());
    let zone = match tz {
        None => tzif(Path::new("/etc/localtime")),
        Some(tz) => {
            let name = tz.strip_prefix(':').unwrap_or(tz);
            let file = match name {
                "" => None,
                absolute if absolute.starts_with('/') => Some(PathBuf::from(absolute)),
                // A name never climbs out of the zone directory.
                relative if relative.split('/').any(|part| part == "..") => None,
                relative => Some(tzdir.unwrap_or_else(|| "/usr/share/zoneinfo".into()).join(relative)),
            };
            file.and_then(|f| tzif(&f)).or_else(|| TimeZone::posix(name).ok())
        }
    };
    zone.unwrap_or(TimeZone::UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset_at(zone: &TimeZone, ts: &str) -> i32 {
        zone.to_offset(ts.parse().unwrap()).seconds()
    }

    /// The zone follows the host's variables, not the process's: two hosts
    /// with different `TZ` in one process each get theirs.
    #[test]
    fn the_zone_is_the_hosts_tz() {
        let env = |tz: &str| bub_runtime::settings::Environment::from_pairs([("TZ", tz)]);
        let ts: jiff::Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        assert_eq!(zone(&env("EST5")).to_offset(ts).seconds(), -5 * 3600);
        assert_eq!(zone(&env("")).to_offset(ts).seconds(), 0, "empty TZ is UTC");
        assert_eq!(zone(&env("JST-9")).to_offset(ts).seconds(), 9 * 3600);
    }

    /// The C library's rules, checked against a zone file the test writes
    /// (a copy of one of the machine's when it has them) and POSIX rules.
    #[test]
    fn tz_names_paths_posix_rules_and_empty_are_read_as_the_c_library_does() {
        let summer = "2026-07-01T12:00:00Z";
        let winter = "2026-01-01T12:00:00Z";
        // A POSIX rule: Central European time with its summer time.
        let cet = read_zone(Some("CET-1CEST,M3.5.0,M10.5.0/3"), None);
        assert_eq!(offset_at(&cet, winter), 3600);
        assert_eq!(offset_at(&cet, summer), 7200);
        // Empty is UTC; so is a name that is neither a file nor a rule.
        assert_eq!(offset_at(&read_zone(Some(""), None), summer), 0);
        assert_eq!(offset_at(&read_zone(Some("No/Such_Zone"), Some("/nonexistent".into())), summer), 0);
        // A name is read from TZDIR, with or without the leading ':'.
        let Ok(data) = std::fs::read("/usr/share/zoneinfo/Asia/Kolkata") else {
            eprintln!("skipping the zone-file part: /usr/share/zoneinfo/Asia/Kolkata is not installed");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("Test")).unwrap();
        std::fs::write(dir.path().join("Test/Zone"), &data).unwrap();
        for tz in ["Test/Zone", ":Test/Zone"] {
            let zone = read_zone(Some(tz), Some(dir.path().to_owned()));
            assert_eq!(offset_at(&zone, summer), 19800, "{tz}");
        }
        // A path, and no climbing out of the directory.
        let path = dir.path().join("Test/Zone");
        assert_eq!(offset_at(&read_zone(Some(path.to_str().unwrap()), None), summer), 19800);
        let sub = dir.path().join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(offset_at(&read_zone(Some("../Test/Zone"), Some(sub)), summer), 0);
    }
}
