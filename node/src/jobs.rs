//! Scheduling of the maintenance jobs: each job has a cron schedule (five fields, UTC) from
//! `[jobs]`; a task per job sleeps until the next fire time, runs the job once over every user
//! with something due, and logs the counts (never user ids or text).

use std::sync::Arc;

use chrono::Utc;
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

/// Starts one task per job; they run until aborted.
pub fn spawn(
    config: &JobsConfig,
    directory: &Arc<Directory>,
    metrics: &Arc<NodeMetrics>,
) -> Vec<JoinHandle<()>> {
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
            schedule_loop(job, cron, &directory, &metrics).await
        }))
    })
    .collect()
}

async fn schedule_loop(job: Job, cron: Cron, directory: &Directory, metrics: &NodeMetrics) {
    loop {
        let now = Utc::now();
        let Ok(next) = cron.find_next_occurrence(&now, false) else {
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

    use super::parse_schedule;

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
