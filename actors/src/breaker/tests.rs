//! Tests of the sensitive-read rule.

use super::*;

const POLICY: Policy = Policy {
    threshold: 2,
    match_threshold: 3,
    window_ms: 1_000,
};
const R: Counter = Counter::Read;

#[test]
fn one_principal_at_its_limit_does_not_lock_out_another() {
    let mut counts = Counts::default();
    assert_eq!(
        counts.count("a", R, POLICY, Timestamp(10)),
        Verdict::Allowed
    );
    assert_eq!(
        counts.count("a", R, POLICY, Timestamp(11)),
        Verdict::Allowed
    );
    assert_eq!(
        counts.count("a", R, POLICY, Timestamp(12)),
        Verdict::Refused { reads: 2 }
    );
    assert_eq!(
        counts.count("b", R, POLICY, Timestamp(13)),
        Verdict::Allowed
    );
    assert_eq!(
        (counts.of("a", R), counts.of("b", R), counts.total()),
        (2, 1, 3)
    );
}

#[test]
fn reads_leave_the_window_and_a_zero_threshold_turns_the_breaker_off() {
    let mut counts = Counts::default();
    counts.count("a", R, POLICY, Timestamp(10));
    counts.count("a", R, POLICY, Timestamp(11));
    assert_eq!(
        counts.count("a", R, POLICY, Timestamp(1_011)),
        Verdict::Allowed
    );
    assert_eq!(counts.of("a", R), 1);
    let off = Policy {
        threshold: 0,
        ..POLICY
    };
    for at in 0..10 {
        assert_eq!(
            counts.count("a", R, off, Timestamp(2_000 + at)),
            Verdict::Allowed
        );
    }
}

#[test]
fn anchor_matches_have_their_own_budget() {
    let mut counts = Counts::default();
    for at in 0..2 {
        assert_eq!(
            counts.count("a", R, POLICY, Timestamp(at)),
            Verdict::Allowed
        );
    }
    for at in 0..3 {
        let verdict = counts.count("a", Counter::Match, POLICY, Timestamp(10 + at));
        assert_eq!(verdict, Verdict::Allowed);
    }
    assert_eq!(
        counts.count("a", Counter::Match, POLICY, Timestamp(20)),
        Verdict::Refused { reads: 3 }
    );
    assert_eq!(counts.total(), 5);
}

#[test]
fn a_query_with_several_guesses_counts_them_all_or_is_refused_whole() {
    const M: Counter = Counter::Match;
    let mut counts = Counts::default();
    assert_eq!(
        counts.count_many("a", M, POLICY, Timestamp(10), 2),
        Verdict::Allowed
    );
    assert_eq!(counts.of("a", M), 2);
    // Two more would pass the limit of 3: refused, and nothing counted.
    assert_eq!(
        counts.count_many("a", M, POLICY, Timestamp(11), 2),
        Verdict::Refused { reads: 2 }
    );
    assert_eq!(counts.of("a", M), 2);
    assert_eq!(
        counts.count_many("a", M, POLICY, Timestamp(12), 1),
        Verdict::Allowed
    );
    // A fresh principal asking more than the limit at once leaves no row behind.
    assert_eq!(
        counts.count_many("b", M, POLICY, Timestamp(13), 300),
        Verdict::Refused { reads: 0 }
    );
    assert_eq!((counts.of("b", M), counts.total()), (0, 3));
    // Nothing to count is always allowed.
    assert_eq!(
        counts.count_many("a", M, POLICY, Timestamp(14), 0),
        Verdict::Allowed
    );
}
