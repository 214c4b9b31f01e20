//! Tests of the sensitive-read rule.

use super::*;

const POLICY: Policy = Policy {
    threshold: 2,
    window_ms: 1_000,
};

#[test]
fn one_principal_at_its_limit_does_not_lock_out_another() {
    let mut counts = Counts::default();
    assert_eq!(counts.count("a", POLICY, Timestamp(10)), Verdict::Allowed);
    assert_eq!(counts.count("a", POLICY, Timestamp(11)), Verdict::Allowed);
    assert_eq!(
        counts.count("a", POLICY, Timestamp(12)),
        Verdict::Refused { reads: 2 }
    );
    assert_eq!(counts.count("b", POLICY, Timestamp(13)), Verdict::Allowed);
    assert_eq!((counts.of("a"), counts.of("b"), counts.total()), (2, 1, 3));
}

#[test]
fn reads_leave_the_window_and_a_zero_threshold_turns_the_breaker_off() {
    let mut counts = Counts::default();
    counts.count("a", POLICY, Timestamp(10));
    counts.count("a", POLICY, Timestamp(11));
    assert_eq!(
        counts.count("a", POLICY, Timestamp(1_011)),
        Verdict::Allowed
    );
    assert_eq!(counts.of("a"), 1);
    let off = Policy {
        threshold: 0,
        ..POLICY
    };
    for at in 0..10 {
        assert_eq!(
            counts.count("a", off, Timestamp(2_000 + at)),
            Verdict::Allowed
        );
    }
}
