//! One distillation round: read the queued messages of a few users, run the generative
//! model on all of them at once (the pool batches them: one request per message, each in its
//! tenant's share), and write each user's results through the intent gate in one transaction
//! fenced by the user's shard, removing the entries it settled.
//!
//! A session's summaries entry ([`DistilTask::Summaries`]) reads the older turns of its
//! window still without a summary (at most [`summaries::SUMMARY_BATCH`]) and summarises
//! each; the entry stays while more are due.
//!
//! A model run that was refused (the pool full) or expired leaves its entry for a later
//! round; one that failed (no whole answer within its bound) is dropped and counted; a
//! result the gate sends back (a required field missing) is queued once more.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use engram_inference::Generation;
use engram_inference::distil::{
    MAX_ANSWER_TOKENS, MAX_SUMMARY_TOKENS, combine, intent_prompt, intent_schema, parse_answer,
    parse_summary, rules, summary_input, summary_prompt, summary_schema,
};
use engram_storage::WorkQueue;
use engram_storage::types::{DistilTask, PendingDistillation, TurnSummary};
use tokio::task::JoinSet;

use super::embedding::{Part, RoundOutcome, fenced, leased, read};
use crate::directory::Directory;
use crate::distillation::Distillation;
use crate::error::Error;
use crate::pipeline::{PipelineConfig, PipelineMetrics};
use crate::request::user::IntentAck;
use crate::user::intents::{Source, Verdict, gate};
use crate::user::summaries;

/// What became of one entry's model runs.
enum Run {
    /// The model's answer (`None`: an answer the schema allows but serde did not read, or a
    /// run that ended without a whole answer).
    Answered(Option<engram_inference::distil::Distilled>),
    /// Summaries of a session's older turns (by sequence number), and whether more turns
    /// wait for one.
    Summarised {
        summaries: Vec<(u64, String)>,
        more: bool,
    },
    /// Refused or expired: the entry waits.
    Deferred,
}

/// Runs one round for `users`.
pub(crate) async fn run(
    directory: &Arc<Directory>,
    config: &PipelineConfig,
    metrics: &PipelineMetrics,
    users: Vec<(crate::placement::UserKey, engram_storage::types::Timestamp)>,
) -> RoundOutcome {
    metrics.rounds.fetch_add(1, Ordering::Relaxed);
    let mut outcome = RoundOutcome::default();
    let services = directory.services();
    let Some(distillation) = services.distillation.clone() else {
        outcome.refused = true;
        return outcome;
    };
    if distillation
        .generator
        .as_ref()
        .is_some_and(|pool| !pool.is_loaded())
    {
        // The decoder is still loading: the messages wait in storage, nothing is read.
        outcome.refused = true;
        outcome.finished = users.into_iter().map(|(k, at)| (k, Some(at))).collect();
        return outcome;
    }
    let parts = leased(services, users, &mut outcome);
    let parts: Vec<Part<PendingDistillation>> = match read(directory, config, parts).await {
        Ok(parts) => parts,
        Err(err) => {
            metrics.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %err, "reading pending distillation failed");
            outcome.refused = true;
            return outcome;
        }
    };
    let runs = generate(directory, &distillation, &parts).await;
    let mut writes = JoinSet::new();
    for (part, runs) in parts.into_iter().zip(runs) {
        if part.entries.is_empty() && part.more {
            // The round's messages were all taken before this user's turn.
            outcome.finished.push((part.key, Some(part.since)));
            continue;
        }
        // (A part without entries is a stale mark: its transaction clears it.)
        if !runs.is_empty() && runs.iter().all(|r| matches!(r, Run::Deferred)) {
            // Nothing to write: the entries wait for a later round.
            outcome.refused = true;
            metrics.refused.fetch_add(1, Ordering::Relaxed);
            outcome.finished.push((part.key, Some(part.since)));
            continue;
        }
        let (directory, distillation) = (Arc::clone(directory), distillation.clone());
        writes.spawn(async move {
            let written = store(&directory, &distillation, &part, runs).await;
            (part, written)
        });
    }
    while let Some(joined) = writes.join_next().await {
        let Ok((part, written)) = joined else {
            continue;
        };
        match written {
            Ok((stored, left)) => {
                metrics.stored.fetch_add(stored, Ordering::Relaxed);
                outcome.finished.push((part.key, left));
            }
            Err(Error::NotOwner(_)) => outcome.not_served.push(part.key),
            Err(err) => {
                metrics.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %err, "storing distilled intents failed; the entries wait");
                outcome.finished.push((part.key, Some(part.since)));
            }
        }
    }
    outcome
}

/// Runs the model on every entry of every part at once (the pool batches them).
async fn generate(
    directory: &Directory,
    distillation: &Distillation,
    parts: &[Part<PendingDistillation>],
) -> Vec<Vec<Run>> {
    let mut runs: Vec<Vec<Run>> = Vec::with_capacity(parts.len());
    let Some(pool) = distillation.generator.clone() else {
        return parts
            .iter()
            .map(|p| p.entries.iter().map(|_| Run::Deferred).collect())
            .collect();
    };
    let expires = Instant::now() + distillation.config.deadline;
    let mut calls = JoinSet::new();
    for part in parts {
        let types = distillation.types(&part.key.tenant).to_vec();
        let (system, schema) = (intent_prompt(&types), Arc::new(intent_schema(&types)));
        let mut mine = Vec::with_capacity(part.entries.len());
        for (_, entry) in &part.entries {
            let (i, j) = (runs.len(), mine.len());
            mine.push(Run::Deferred);
            let tenant = part.key.tenant.clone();
            match entry.task {
                DistilTask::Intent => {
                    let shots = distillation
                        .library
                        .as_ref()
                        .map_or_else(Vec::new, |library| {
                            library.nearest(&entry.text, distillation.config.examples, &types)
                        });
                    let generation = Generation {
                        system: system.clone(),
                        user: entry.text.clone(),
                        shots,
                        schema: Arc::clone(&schema),
                        max_tokens: MAX_ANSWER_TOKENS,
                    };
                    let pool = pool.clone();
                    calls.spawn(async move {
                        let answer = pool.generate(&tenant, generation, Some(expires)).await;
                        (i, j, Answer::Intent(answer))
                    });
                }
                DistilTask::Summaries => {
                    let due = due_summaries(directory, &part.key, &entry.session_id).await;
                    let pool = pool.clone();
                    calls.spawn(async move {
                        let Ok((turns, more)) = due else {
                            return (i, j, Answer::Deferred);
                        };
                        let schema = Arc::new(summary_schema());
                        let mut asks = JoinSet::new();
                        for turn in turns {
                            let seq = turn.seq;
                            let generation = Generation {
                                system: summary_prompt(),
                                user: summary_input(&turn.user_text, &turn.assistant_text),
                                shots: Vec::new(),
                                schema: Arc::clone(&schema),
                                max_tokens: MAX_SUMMARY_TOKENS,
                            };
                            let (pool, tenant) = (pool.clone(), tenant.clone());
                            asks.spawn(async move {
                                (seq, pool.generate(&tenant, generation, Some(expires)).await)
                            });
                        }
                        let mut answers = Vec::new();
                        while let Some(Ok(answer)) = asks.join_next().await {
                            answers.push(answer);
                        }
                        (i, j, Answer::Summaries(answers, more))
                    });
                }
            }
        }
        runs.push(mine);
    }
    while let Some(joined) = calls.join_next().await {
        let Ok((i, j, answer)) = joined else {
            continue;
        };
        runs[i][j] = settle(&distillation.metrics, answer);
    }
    runs
}

/// What the pool answered for one entry.
enum Answer {
    Intent(engram_inference::Result<String>),
    Summaries(Vec<(u64, engram_inference::Result<String>)>, bool),
    Deferred,
}

/// Whether a model run was refused or expired (its entry waits for a later round).
fn deferred(err: &engram_inference::Error) -> bool {
    matches!(
        err,
        engram_inference::Error::Overloaded { .. }
            | engram_inference::Error::Expired
            | engram_inference::Error::PoolClosed
    )
}

/// Reads what the pool answered into a [`Run`], counting it.
fn settle(metrics: &crate::distillation::DistillationMetrics, answer: Answer) -> Run {
    match answer {
        Answer::Intent(Ok(answer)) => {
            metrics.model_answers.fetch_add(1, Ordering::Relaxed);
            Run::Answered(parse_answer(&answer))
        }
        Answer::Intent(Err(err)) if deferred(&err) => {
            metrics.deferred.fetch_add(1, Ordering::Relaxed);
            Run::Deferred
        }
        Answer::Intent(Err(err)) => {
            metrics.failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %err, "a distillation run failed; its message is dropped");
            Run::Answered(None)
        }
        Answer::Summaries(answers, more) => {
            let mut summaries = Vec::new();
            let mut more = more;
            for (seq, answer) in answers {
                match answer {
                    Ok(answer) => {
                        metrics.model_answers.fetch_add(1, Ordering::Relaxed);
                        if let Some(text) = parse_summary(&answer) {
                            summaries.push((seq, text));
                        }
                    }
                    Err(err) if deferred(&err) => {
                        metrics.deferred.fetch_add(1, Ordering::Relaxed);
                        more = true;
                    }
                    Err(err) => {
                        metrics.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(error = %err, "a summary failed; the extractive one serves");
                    }
                }
            }
            Run::Summarised { summaries, more }
        }
        Answer::Deferred => Run::Deferred,
    }
}

/// The older turns of `session` still without a summary.
async fn due_summaries(
    directory: &Directory,
    key: &crate::placement::UserKey,
    session: &str,
) -> crate::error::Result<(Vec<summaries::DueTurn>, bool)> {
    let services = directory.services();
    let (ks, key, session) = (services.keyspace.clone(), key.clone(), session.to_owned());
    let (now, retention_ms) = (services.clock.now(), services.settings.retention_ms);
    Ok(services
        .store
        .read(move |txn| {
            let mut u = engram_storage::data::UserData::new(txn, &ks, &key.tenant, &key.user);
            summaries::due(&mut u, &session, now, retention_ms)
        })
        .await?)
}

/// Writes a user's results through the gate in one fenced transaction; returns the versions
/// written and when the entries left were queued.
async fn store(
    directory: &Directory,
    distillation: &Distillation,
    part: &Part<PendingDistillation>,
    runs: Vec<Run>,
) -> crate::error::Result<(u64, Option<engram_storage::types::Timestamp>)> {
    let services = directory.services();
    let now = services.clock.now();
    let types = distillation.types(&part.key.tenant).to_vec();
    let rules_set = distillation.gate_rules(services.settings.intent_versions);
    let items: Vec<(String, PendingDistillation, Run)> = part
        .entries
        .iter()
        .cloned()
        .zip(runs)
        .map(|((id, entry), run)| (id, entry, run))
        .collect();
    let metrics = Arc::clone(&distillation.metrics);
    let model = distillation
        .generator
        .as_ref()
        .map(|g| g.model_name().to_owned())
        .unwrap_or_default();
    let (tally, left) = fenced(directory, &part.key, part.epoch, move |u| {
        // Counted after the commit: a transaction closure may run more than once.
        let mut tally = Tally::default();
        for (id, entry, run) in &items {
            // The entry may be gone (the user forgotten) or replaced since it was read.
            if matches!(run, Run::Deferred)
                || u.queued::<PendingDistillation>(id)?.as_ref() != Some(entry)
            {
                continue;
            }
            let answer = match run {
                Run::Answered(answer) => answer,
                Run::Summarised { summaries, more } => {
                    for (seq, text) in summaries {
                        let summary = TurnSummary {
                            text: text.clone(),
                            model: model.clone(),
                            created_at: now,
                        };
                        if u.put_summary(&entry.session_id, *seq, &summary)? {
                            tally.summaries += 1;
                        }
                    }
                    if !more {
                        u.clear_queued(WorkQueue::Distillation, id)?;
                    }
                    continue;
                }
                Run::Deferred => continue,
            };
            let rule = rules::apply(&entry.text);
            let decided = match combine(&entry.text, rule.as_ref(), answer.as_ref()) {
                // The rules' result was written with the message; the model added nothing.
                Some(d) if rule.as_ref() == Some(&d) => None,
                other => other,
            };
            let turn = (entry.turn_seq > 0).then_some(entry.turn_seq);
            let verdict = match &decided {
                Some(d) => gate(
                    u,
                    now,
                    entry.queued_at,
                    d,
                    Source::Model,
                    &entry.text,
                    turn,
                    &types,
                    entry.attempts,
                    &rules_set,
                )?,
                None => Verdict::Dropped("no intent"),
            };
            match verdict {
                Verdict::Written(ack) => {
                    tally.written.push(ack);
                    u.clear_queued(WorkQueue::Distillation, id)?;
                }
                Verdict::Retry => {
                    tally.retried += 1;
                    let mut again = entry.clone();
                    again.attempts += 1;
                    u.put_queued(id, &again)?;
                }
                Verdict::Dropped(why) => {
                    if why == "missing target" {
                        tally.incomplete += 1;
                    } else {
                        tally.no_intent += 1;
                    }
                    u.clear_queued(WorkQueue::Distillation, id)?;
                }
            }
        }
        let left = u.settle_queue::<PendingDistillation>()?;
        Ok((tally, left))
    })
    .await?;
    for ack in &tally.written {
        metrics.count_written(ack);
    }
    for (n, counter) in [
        (tally.retried, &metrics.retried),
        (tally.incomplete, &metrics.dropped_incomplete),
        (tally.no_intent, &metrics.no_intent),
        (tally.summaries, &metrics.summaries),
    ] {
        counter.fetch_add(n, Ordering::Relaxed);
    }
    Ok((tally.written.len() as u64 + tally.summaries, left))
}

/// What one user's transaction did, counted once it committed.
#[derive(Default)]
struct Tally {
    written: Vec<IntentAck>,
    retried: u64,
    incomplete: u64,
    no_intent: u64,
    summaries: u64,
}
