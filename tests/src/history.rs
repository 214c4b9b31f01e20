//! A history recorder and checker for the chaos tests, in the manner of Jepsen's Elle on a
//! list-append workload: each user's session is a list, a write appends a unique value (a
//! turn's text) and a read returns the whole list. Every client operation is recorded with
//! the time it was invoked and the time it completed (or that it failed, or that its outcome
//! is unknown), and every answer each of its tries got. [`History::check`] then compares the
//! history with the final lists:
//!
//! - every acknowledged append is in its user's final list exactly once; nothing unknown is
//!   there, nothing is there twice;
//! - appends keep real-time order: one acknowledged before another was invoked comes first;
//! - every successful read is a prefix of its user's final list (one order, seen by all);
//! - no read misses an append acknowledged before the read was invoked, through whichever
//!   node either went (a stale read), nor holds one invoked after it completed;
//! - one client's reads of a user never go backwards;
//! - no try got an answer outside those the test allows (a 500 hidden by a retry counts).
//!
//! What the final-state check sees is only the first line; the rest needs the history.
//! [`Report`] lists each anomaly with the operations involved, their times and nodes.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Instant;

/// What an operation asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// Append `value` to the user's list.
    Append(String),
    /// Read the user's list.
    Read,
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not completed yet.
    Pending,
    /// Acknowledged; a read's list.
    Ok(Option<Vec<String>>),
    /// Refused: certainly not applied (a read's failure, or an append answered 4xx).
    Failed,
    /// Unknown: an append that may or may not have been applied (it timed out or its last
    /// try got no answer).
    Unknown,
}

/// One try of an operation: the node it went to and what came back (an HTTP status, or 0
/// when the connection failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Try {
    /// Index of the node tried.
    pub node: usize,
    /// The status answered, 0 for no answer.
    pub status: u16,
}

/// One client operation.
#[derive(Debug, Clone)]
pub struct Op {
    /// Its index in the history.
    pub index: usize,
    /// The client (a writer or reader task) that ran it; a client runs one at a time.
    pub client: usize,
    /// The user whose list it touched.
    pub user: String,
    /// What it asked.
    pub call: Call,
    /// When it was invoked.
    pub invoked: Instant,
    /// When it completed.
    pub completed: Option<Instant>,
    /// How it ended.
    pub outcome: Outcome,
    /// Each try, in order.
    pub tries: Vec<Try>,
}

/// A shared, append-only log of operations.
#[derive(Debug)]
pub struct History {
    started: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Default for History {
    fn default() -> Self {
        History {
            started: Instant::now(),
            ops: Mutex::new(Vec::new()),
        }
    }
}

impl History {
    /// An empty history starting now.
    pub fn new() -> Self {
        History::default()
    }

    /// Records that `client` invoked `call` on `user`'s list; returns the operation's index.
    pub fn invoke(&self, client: usize, user: &str, call: Call) -> usize {
        let mut ops = self.ops.lock().unwrap();
        let index = ops.len();
        ops.push(Op {
            index,
            client,
            user: user.to_owned(),
            call,
            invoked: Instant::now(),
            completed: None,
            outcome: Outcome::Pending,
            tries: Vec::new(),
        });
        index
    }

    /// Records a try of operation `index` and what it got.
    pub fn tried(&self, index: usize, node: usize, status: u16) {
        self.ops.lock().unwrap()[index]
            .tries
            .push(Try { node, status });
    }

    /// Records how operation `index` ended.
    pub fn complete(&self, index: usize, outcome: Outcome) {
        let mut ops = self.ops.lock().unwrap();
        ops[index].completed = Some(Instant::now());
        ops[index].outcome = outcome;
    }

    /// Every operation so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }

    /// Acknowledged appends so far.
    pub fn acknowledged(&self) -> usize {
        self.ops
            .lock()
            .unwrap()
            .iter()
            .filter(|o| matches!(o.call, Call::Append(_)) && o.outcome == Outcome::Ok(None))
            .count()
    }

    /// Checks the history against `finals`, each user's list read once the faults are over,
    /// allowing tries to be answered with the statuses in `allowed` (and 200).
    pub fn check(&self, finals: &HashMap<String, Vec<String>>, allowed: &[u16]) -> Report {
        let ops = self.ops();
        check(self.started, &ops, finals, allowed)
    }
}

/// What went wrong, with the operations that show it.
#[derive(Debug, Clone)]
pub struct Anomaly {
    /// Its kind: `lost`, `duplicated`, `unknown-value`, `reordered`, `divergent-read`,
    /// `stale-read`, `future-read`, `non-monotonic-read` or `unexpected-answer`.
    pub kind: &'static str,
    /// What was seen.
    pub detail: String,
    /// Indexes of the operations involved.
    pub ops: Vec<usize>,
}

/// The result of a check.
#[derive(Debug, Clone)]
pub struct Report {
    started: Instant,
    ops: Vec<Op>,
    /// Every anomaly found.
    pub anomalies: Vec<Anomaly>,
    /// Appends acknowledged, failed and of unknown outcome.
    pub appends: (usize, usize, usize),
    /// Reads that returned a list, and those that failed.
    pub reads: (usize, usize),
    /// Tries answered other than 200, by status (0: no answer).
    pub refusals: BTreeMap<u16, usize>,
}

impl Report {
    /// Anomalies of `kind`.
    pub fn of(&self, kind: &str) -> Vec<&Anomaly> {
        self.anomalies.iter().filter(|a| a.kind == kind).collect()
    }

    /// A one-line summary of the history.
    pub fn summary(&self) -> String {
        let (ok, failed, unknown) = self.appends;
        format!(
            "{ok} appends acknowledged, {failed} refused, {unknown} unknown; {} reads, {} \
             failed; tries refused {:?}; {} anomalies",
            self.reads.0,
            self.reads.1,
            self.refusals,
            self.anomalies.len()
        )
    }

    /// The anomalies (up to `most`), each with its operations' histories.
    pub fn describe(&self, most: usize) -> String {
        let mut out = self.summary();
        for anomaly in self.anomalies.iter().take(most) {
            let _ = write!(out, "\n- {}: {}", anomaly.kind, anomaly.detail);
            for &i in &anomaly.ops {
                let _ = write!(out, "\n    {}", self.line(&self.ops[i]));
            }
        }
        if self.anomalies.len() > most {
            let _ = write!(out, "\n... and {} more", self.anomalies.len() - most);
        }
        out
    }

    /// Panics with the anomalies found, if any.
    pub fn assert_clean(&self) {
        assert!(self.anomalies.is_empty(), "{}", self.describe(12));
    }

    fn line(&self, op: &Op) -> String {
        let at = |t: Instant| t.saturating_duration_since(self.started).as_secs_f64() * 1e3;
        let what = match (&op.call, &op.outcome) {
            (Call::Append(v), _) => format!("append {v:?}"),
            (Call::Read, Outcome::Ok(Some(list))) => format!(
                "read -> {} values, last {:?}",
                list.len(),
                list.last().map_or("", String::as_str)
            ),
            (Call::Read, _) => "read".to_owned(),
        };
        let tries: Vec<String> = op
            .tries
            .iter()
            .map(|t| format!("n{}:{}", t.node, t.status))
            .collect();
        format!(
            "#{} client {} {} {what}: invoked {:.0} ms, completed {}, {:?}, tries [{}]",
            op.index,
            op.client,
            op.user,
            at(op.invoked),
            op.completed
                .map_or_else(|| "never".to_owned(), |t| format!("{:.0} ms", at(t))),
            op.outcome,
            tries.join(" ")
        )
    }
}

fn check(
    started: Instant,
    ops: &[Op],
    finals: &HashMap<String, Vec<String>>,
    allowed: &[u16],
) -> Report {
    let mut anomalies = Vec::new();
    let mut refusals = BTreeMap::new();
    for op in ops {
        for t in &op.tries {
            // A read of a list not written yet is answered 404: an empty list.
            let answered = t.status == 200 || (op.call == Call::Read && t.status == 404);
            if !answered {
                *refusals.entry(t.status).or_insert(0) += 1;
            }
            if !answered && t.status != 0 && !allowed.contains(&t.status) {
                anomalies.push(Anomaly {
                    kind: "unexpected-answer",
                    detail: format!("a try was answered {} by node {}", t.status, t.node),
                    ops: vec![op.index],
                });
            }
        }
    }
    let mut by_user: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_user.entry(op.user.as_str()).or_default().push(op);
    }
    let empty = Vec::new();
    for (user, user_ops) in &by_user {
        let list = finals.get(*user).unwrap_or(&empty);
        check_user(user, user_ops, list, &mut anomalies);
    }
    let count = |call: fn(&Call) -> bool, outcome: fn(&Outcome) -> bool| {
        ops.iter()
            .filter(|o| call(&o.call) && outcome(&o.outcome))
            .count()
    };
    let is_append = |c: &Call| matches!(c, Call::Append(_));
    let is_read = |c: &Call| matches!(c, Call::Read);
    Report {
        started,
        ops: ops.to_vec(),
        anomalies,
        appends: (
            count(is_append, |o| matches!(o, Outcome::Ok(_))),
            count(is_append, |o| *o == Outcome::Failed),
            count(is_append, |o| {
                matches!(o, Outcome::Unknown | Outcome::Pending)
            }),
        ),
        reads: (
            count(is_read, |o| matches!(o, Outcome::Ok(_))),
            count(is_read, |o| !matches!(o, Outcome::Ok(_))),
        ),
        refusals,
    }
}

/// The checks of one user's operations against its final list.
fn check_user(user: &str, ops: &[&Op], list: &[String], anomalies: &mut Vec<Anomaly>) {
    let mut position: HashMap<&str, usize> = HashMap::new();
    for (i, value) in list.iter().enumerate() {
        if position.insert(value.as_str(), i).is_some() {
            let writers: Vec<usize> = appends_of(ops, value).map(|o| o.index).collect();
            anomalies.push(Anomaly {
                kind: "duplicated",
                detail: format!("{user}: {value:?} is in the final list more than once"),
                ops: writers,
            });
        }
    }
    for value in list {
        if appends_of(ops, value).next().is_none() {
            anomalies.push(Anomaly {
                kind: "unknown-value",
                detail: format!("{user}: {value:?} is in the final list but was never appended"),
                ops: Vec::new(),
            });
        }
    }
    // Acknowledged appends, in the order they completed.
    let mut acked: Vec<(&Op, Instant, &str)> = ops
        .iter()
        .filter_map(|o| match (&o.call, &o.outcome, o.completed) {
            (Call::Append(v), Outcome::Ok(_), Some(done)) => Some((*o, done, v.as_str())),
            _ => None,
        })
        .collect();
    acked.sort_by_key(|(_, done, _)| *done);
    for (op, _, value) in &acked {
        if !position.contains_key(value) {
            anomalies.push(Anomaly {
                kind: "lost",
                detail: format!("{user}: acknowledged {value:?} is not in the final list"),
                ops: vec![op.index],
            });
        }
    }
    // Real-time order: the latest-placed append acknowledged before each one was invoked
    // must sit before it.
    for (op, _, value) in &acked {
        let Some(&here) = position.get(value) else {
            continue;
        };
        let before = acked
            .iter()
            .take_while(|(_, done, _)| *done < op.invoked)
            .filter_map(|(o, _, v)| position.get(v).map(|p| (*p, *o)))
            .max_by_key(|(p, _)| *p);
        if let Some((there, earlier)) = before
            && there > here
        {
            anomalies.push(Anomaly {
                kind: "reordered",
                detail: format!(
                    "{user}: {value:?} sits at {here}, before {:?} at {there}, which was \
                     acknowledged before it was invoked",
                    list[there]
                ),
                ops: vec![earlier.index, op.index],
            });
        }
    }
    let mut last_read: HashMap<usize, (&Op, usize)> = HashMap::new();
    let mut reads: Vec<&&Op> = ops.iter().filter(|o| o.call == Call::Read).collect();
    reads.sort_by_key(|o| o.invoked);
    for read in reads {
        let Outcome::Ok(Some(seen)) = &read.outcome else {
            continue;
        };
        let completed = read.completed.unwrap_or(read.invoked);
        if !list.starts_with(seen) {
            let at = seen
                .iter()
                .zip(list)
                .position(|(a, b)| a != b)
                .unwrap_or(list.len().min(seen.len()));
            anomalies.push(Anomaly {
                kind: "divergent-read",
                detail: format!(
                    "{user}: a read of {} values is not a prefix of the final list of {} \
                     (they differ at {at})",
                    seen.len(),
                    list.len()
                ),
                ops: vec![read.index],
            });
        }
        // Stale: an append acknowledged before the read began, missing from it.
        if let Some((op, done, value)) = acked
            .iter()
            .filter(|(_, done, _)| *done < read.invoked)
            .find(|(_, _, v)| !seen.iter().any(|s| s == v))
        {
            anomalies.push(Anomaly {
                kind: "stale-read",
                detail: format!(
                    "{user}: a read of {} values misses {value:?}, acknowledged {:.0} ms \
                     before the read was invoked",
                    seen.len(),
                    read.invoked.saturating_duration_since(*done).as_secs_f64() * 1e3
                ),
                ops: vec![op.index, read.index],
            });
        }
        // From the future: holding an append invoked only after the read completed.
        if let Some(op) = seen.iter().find_map(|v| {
            appends_of(ops, v)
                .filter(|o| o.invoked > completed)
                .min_by_key(|o| o.invoked)
        }) {
            anomalies.push(Anomaly {
                kind: "future-read",
                detail: format!(
                    "{user}: a read holds a value appended only after the read completed"
                ),
                ops: vec![read.index, op.index],
            });
        }
        if let Some((previous, len)) = last_read.get(&read.client)
            && seen.len() < *len
        {
            anomalies.push(Anomaly {
                kind: "non-monotonic-read",
                detail: format!(
                    "{user}: client {} read {len} values, then {}",
                    read.client,
                    seen.len()
                ),
                ops: vec![previous.index, read.index],
            });
        }
        last_read.insert(read.client, (read, seen.len()));
    }
}

fn appends_of<'a>(ops: &'a [&'a Op], value: &'a str) -> impl Iterator<Item = &'a Op> + 'a {
    ops.iter()
        .copied()
        .filter(move |o| matches!(&o.call, Call::Append(v) if v == value))
}

#[cfg(test)]
mod tests;
