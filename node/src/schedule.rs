//! Cron schedules and time zones of the maintenance jobs (`[jobs]`): parsing the five-field
//! schedules and the IANA zone names, and the next time a schedule fires in its zone. A leaf:
//! the configuration's validation and the job scheduler ([`crate::jobs`]) both use it.

use chrono::Utc;
use chrono_tz::Tz;
use croner::Cron;

/// Parses a five-field cron schedule.
pub fn parse_schedule(schedule: &str) -> Result<Cron, String> {
    schedule.parse::<Cron>().map_err(|e| e.to_string())
}

/// Parses an IANA time zone name (`UTC`, `Asia/Shanghai`).
pub fn parse_time_zone(name: &str) -> Result<Tz, String> {
    name.parse::<Tz>().map_err(|_| {
        format!("{name:?} is not an IANA time zone name (such as \"UTC\" or \"Asia/Shanghai\")")
    })
}

/// The next time `cron` fires after `now`, read in `zone`.
pub fn next_fire(
    cron: &Cron,
    zone: Tz,
    now: chrono::DateTime<Utc>,
) -> Option<chrono::DateTime<Utc>> {
    cron.find_next_occurrence(&now.with_timezone(&zone), false)
        .ok()
        .map(|next| next.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::{next_fire, parse_schedule, parse_time_zone};

    #[test]
    fn the_schedule_runs_in_the_configured_time_zone_daylight_saving_included() {
        let cron = parse_schedule("0 4 * * *").unwrap();
        // 04:00 in Shanghai (UTC+8, no daylight saving) is 20:00 UTC the day before.
        let shanghai = parse_time_zone("Asia/Shanghai").unwrap();
        let from = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
        assert_eq!(
            next_fire(&cron, shanghai, from),
            Some(Utc.with_ymd_and_hms(2026, 11, 29, 20, 0, 0).unwrap())
        );
        // 04:00 in Berlin is 03:00 UTC in winter and 02:00 UTC in summer.
        let berlin = parse_time_zone("Europe/Berlin").unwrap();
        let winter = Utc.with_ymd_and_hms(2026, 1, 10, 12, 0, 0).unwrap();
        let summer = Utc.with_ymd_and_hms(2026, 7, 10, 12, 0, 0).unwrap();
        assert_eq!(
            next_fire(&cron, berlin, winter),
            Some(Utc.with_ymd_and_hms(2026, 1, 11, 3, 0, 0).unwrap())
        );
        assert_eq!(
            next_fire(&cron, berlin, summer),
            Some(Utc.with_ymd_and_hms(2026, 7, 11, 2, 0, 0).unwrap())
        );
        assert_eq!(
            next_fire(&cron, parse_time_zone("UTC").unwrap(), from),
            Some(Utc.with_ymd_and_hms(2026, 11, 30, 4, 0, 0).unwrap())
        );
        let err = parse_time_zone("Mars/Olympus").unwrap_err();
        assert!(err.contains("IANA"), "{err}");
    }

    #[test]
    fn the_default_schedule_fires_daily_at_four_utc() {
        let cron = parse_schedule("0 4 * * *").unwrap();
        let from = Utc.with_ymd_and_hms(2026, 11, 29, 23, 0, 0).unwrap();
        let next = cron.find_next_occurrence(&from, false).unwrap();
        assert_eq!(next, Utc.with_ymd_and_hms(2026, 11, 30, 4, 0, 0).unwrap());
        assert!(parse_schedule("every day").is_err());
        assert!(parse_schedule("61 4 * * *").is_err());
    }
}

#[cfg(test)]
mod default_tests {
    use chrono::{TimeZone, Utc};

    use super::{next_fire, parse_schedule, parse_time_zone};
    use crate::config::JobsConfig;

    #[test]
    fn the_working_memory_session_loop_runs_hourly_and_retention_daily_at_four() {
        let jobs = JobsConfig::default();
        let utc = parse_time_zone(&jobs.time_zone).unwrap();
        let from = Utc.with_ymd_and_hms(2026, 11, 29, 10, 20, 0).unwrap();
        let next = |schedule: &str| next_fire(&parse_schedule(schedule).unwrap(), utc, from);
        assert_eq!(
            next(&jobs.session_cleanup),
            Some(Utc.with_ymd_and_hms(2026, 11, 29, 11, 0, 0).unwrap())
        );
        for daily in [&jobs.retention, &jobs.expiry_sweep] {
            assert_eq!(
                next(daily),
                Some(Utc.with_ymd_and_hms(2026, 11, 30, 4, 0, 0).unwrap())
            );
        }
    }
}
