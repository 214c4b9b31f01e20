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
use crate::schedule::{next_fire, parse_schedule, parse_time_zone};

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
