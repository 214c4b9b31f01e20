//! Scheduling of the maintenance jobs: each job has a cron schedule (five fields) from
//! `[jobs]`, read in `jobs.time-zone` (UTC by default; an IANA name, daylight saving time
//! included); a task per job sleeps until the next fire time, runs the job once over every
//! user with something due, and logs the counts (never user ids or text).

use std::sync::Arc;

use chrono::Utc;
use chrono_tz::Tz;
use croner::Cron;
use engram_actors::directory::Directory;
use engram_actors::jobs::{self, Job};
use tokio::task::JoinHandle;

use crate::config::JobsConfig;
use crate::metrics::NodeMetrics;

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

/// Starts one task per job; they run until aborted.
pub fn spawn(
    config: &JobsConfig,
    directory: &Arc<Directory>,
    metrics: &Arc<NodeMetrics>,
) -> Vec<JoinHandle<()>> {
    // Validated at start-up; a zone that fails here is logged and UTC serves.
    let zone = parse_time_zone(&config.time_zone)
        .map_err(|err| tracing::error!(%err, "bad time zone; the jobs run in UTC"))
        .unwrap_or(Tz::UTC);
    [
        (Job::ExpirySweep, &config.expiry_sweep),
        (Job::Retention, &config.retention),
        (Job::SessionCleanup, &config.session_cleanup),
    ]
    .into_iter()
    .filter_map(|(job, schedule)| {
        // Validated at start-up; a schedule that fails here is logged and skipped.
        let cron = parse_schedule(schedule)
            .map_err(|err| tracing::error!(job = job.name(), %err, "bad schedule; job disabled"))
            .ok()?;
        let (directory, metrics) = (directory.clone(), metrics.clone());
        Some(tokio::spawn(async move {
            schedule_loop(job, cron, zone, &directory, &metrics).await
        }))
    })
    .collect()
}

async fn schedule_loop(
    job: Job,
    cron: Cron,
    zone: Tz,
    directory: &Directory,
    metrics: &NodeMetrics,
) {
    loop {
        let now = Utc::now();
        let Some(next) = next_fire(&cron, zone, now) else {
            tracing::error!(
                job = job.name(),
                "schedule has no next occurrence; job stopped"
            );
            return;
        };
        let wait = (next - now).to_std().unwrap_or_default();
        tracing::debug!(job = job.name(), next = %next, "job scheduled");
        tokio::time::sleep(wait).await;
        run_once(job, directory, metrics).await;
    }
}

/// Runs `job` now and logs what it did.
pub async fn run_once(job: Job, directory: &Directory, metrics: &NodeMetrics) {
    let started = std::time::Instant::now();
    match jobs::run(directory, job).await {
        Ok(report) => {
            let items = report.expired
                + report.purged
                + report.turns_removed
                + report.archive_purged
                + report.sessions_closed
                + report.intents_expired;
            metrics.job_ran(job.name(), items);
            tracing::info!(
                job = job.name(),
                users = report.users,
                expired = report.expired,
                purged = report.purged,
                turns_removed = report.turns_removed,
                archive_purged = report.archive_purged,
                sessions_closed = report.sessions_closed,
                intents_expired = report.intents_expired,
                failed = report.failed,
                not_owned = report.not_owned,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "job finished"
            );
        }
        Err(err) => tracing::warn!(job = job.name(), %err, "job failed; retried at the next run"),
    }
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
