//! The checker on histories written by hand: each anomaly it names is found, and a history
//! without one passes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Call, Op, Outcome, Try, check};

struct Script {
    start: Instant,
    ops: Vec<Op>,
}

impl Script {
    fn new() -> Self {
        Script {
            start: Instant::now(),
            ops: Vec::new(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    fn op(&mut self, client: usize, call: Call, from: u64, to: u64, outcome: Outcome) {
        let index = self.ops.len();
        self.ops.push(Op {
            index,
            client,
            user: "u".into(),
            call,
            invoked: self.at(from),
            completed: Some(self.at(to)),
            outcome,
            tries: vec![Try {
                node: 0,
                status: 200,
            }],
        });
    }

    fn append(&mut self, value: &str, from: u64, to: u64) {
        self.op(0, Call::Append(value.into()), from, to, Outcome::Ok(None));
    }

    fn read(&mut self, client: usize, seen: &[&str], from: u64, to: u64) {
        let list = seen.iter().map(|s| (*s).to_owned()).collect();
        self.op(client, Call::Read, from, to, Outcome::Ok(Some(list)));
    }

    fn kinds(&self, last: &[&str]) -> Vec<&'static str> {
        let finals = HashMap::from([(
            "u".to_owned(),
            last.iter().map(|s| (*s).to_owned()).collect(),
        )]);
        let report = check(self.start, &self.ops, &finals, &[503]);
        let mut kinds: Vec<_> = report.anomalies.iter().map(|a| a.kind).collect();
        kinds.sort_unstable();
        kinds
    }
}

#[test]
fn a_history_of_overlapping_appends_and_fresh_reads_is_clean() {
    let mut s = Script::new();
    s.append("a", 0, 10);
    // b and c overlap: either order is fine.
    s.append("b", 20, 40);
    s.append("c", 25, 35);
    s.read(1, &["a"], 5, 15);
    s.read(1, &["a", "c"], 36, 38);
    s.read(2, &["a", "c", "b"], 50, 60);
    assert!(s.kinds(&["a", "c", "b"]).is_empty());
}

#[test]
fn a_lost_a_duplicated_and_an_unknown_value_are_named() {
    let mut s = Script::new();
    s.append("a", 0, 10);
    s.append("b", 20, 30);
    assert_eq!(
        s.kinds(&["b", "b", "x"]),
        ["duplicated", "lost", "unknown-value"]
    );
}

#[test]
fn an_append_placed_before_one_acknowledged_before_it_began_is_reordered() {
    let mut s = Script::new();
    s.append("a", 0, 10);
    s.append("b", 20, 30);
    assert_eq!(s.kinds(&["b", "a"]), ["reordered"]);
}

#[test]
fn a_read_missing_an_earlier_acknowledged_append_is_stale_though_the_final_state_is_right() {
    let mut s = Script::new();
    s.append("a", 0, 10);
    s.append("b", 20, 30);
    s.read(1, &["a"], 40, 45);
    assert_eq!(s.kinds(&["a", "b"]), ["stale-read"]);
}

#[test]
fn reads_of_one_client_going_backwards_are_non_monotonic() {
    let mut s = Script::new();
    s.append("a", 0, 10);
    s.append("b", 20, 30);
    // b overlaps neither read's start, so neither is stale; the second shows less.
    s.read(1, &["a", "b"], 25, 28);
    s.read(1, &["a"], 29, 31);
    assert_eq!(s.kinds(&["a", "b"]), ["non-monotonic-read"]);
}

#[test]
fn a_read_of_another_order_diverges_and_one_of_a_later_append_is_from_the_future() {
    let mut s = Script::new();
    s.append("a", 0, 10);
    s.append("b", 5, 15);
    s.read(1, &["b", "a"], 20, 25);
    s.append("c", 40, 50);
    s.read(2, &["a", "b", "c"], 30, 35);
    assert_eq!(s.kinds(&["a", "b", "c"]), ["divergent-read", "future-read"]);
}

#[test]
fn a_hidden_500_is_an_unexpected_answer_and_an_allowed_503_is_not() {
    let mut s = Script::new();
    s.append("a", 0, 10);
    s.ops[0].tries = vec![
        Try {
            node: 1,
            status: 503,
        },
        Try {
            node: 2,
            status: 500,
        },
        Try {
            node: 0,
            status: 200,
        },
    ];
    assert_eq!(s.kinds(&["a"]), ["unexpected-answer"]);
}

#[test]
fn an_append_of_unknown_outcome_may_be_present_once_or_absent() {
    let mut s = Script::new();
    s.op(0, Call::Append("a".into()), 0, 10, Outcome::Unknown);
    s.op(0, Call::Append("b".into()), 20, 30, Outcome::Unknown);
    assert!(s.kinds(&["a"]).is_empty());
    assert_eq!(s.kinds(&["a", "a"]), ["duplicated"]);
}
