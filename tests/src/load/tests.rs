//! The workload's sampler and bookkeeping.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::{Distribution, Op, Stats, UserPicker, human};

fn histogram(picker: &UserPicker, draws: usize) -> Vec<usize> {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut counts = vec![0; picker.users()];
    for _ in 0..draws {
        counts[picker.pick(&mut rng)] += 1;
    }
    counts
}

#[test]
fn zipf_picks_rank_one_about_twice_as_often_as_rank_two_when_s_is_one() {
    let picker = UserPicker::new(100, &Distribution::Zipf(1.0));
    let counts = histogram(&picker, 200_000);
    let harmonic: f64 = (1..=100).map(|k| 1.0 / f64::from(k)).sum();
    let expected_first = 200_000.0 / harmonic;
    assert!(
        (counts[0] as f64 - expected_first).abs() < expected_first * 0.05,
        "{counts:?}"
    );
    let ratio = counts[0] as f64 / counts[1] as f64;
    assert!((1.8..2.2).contains(&ratio), "rank 1 / rank 2 = {ratio}");
    assert!(counts[99] > 0, "the tail is reachable");
}

#[test]
fn uniform_and_zipf_zero_cover_every_user_evenly() {
    for distribution in [Distribution::Uniform, Distribution::Zipf(0.0)] {
        let counts = histogram(&UserPicker::new(10, &distribution), 100_000);
        for (user, &n) in counts.iter().enumerate() {
            assert!(
                (9_000..11_000).contains(&n),
                "{distribution:?}: user {user} drawn {n} times"
            );
        }
    }
}

#[test]
fn one_user_is_always_picked() {
    let counts = histogram(&UserPicker::new(1, &Distribution::Zipf(1.2)), 1_000);
    assert_eq!(counts, vec![1_000]);
}

#[test]
fn stats_merge_and_print_only_the_operations_that_ran() {
    let mut a = Stats::default();
    a.record(Op::Append, Duration::from_micros(500));
    a.error(Op::Append);
    let mut b = Stats::default();
    b.record(Op::Append, Duration::from_millis(3));
    a.merge(&b);
    assert_eq!(
        (
            a.count(Op::Append),
            a.errors(Op::Append),
            a.count(Op::Context)
        ),
        (2, 1, 0)
    );
    let table = a.table(Duration::from_secs(2));
    assert!(table.contains("| append turn | 2 | 1 | 1 |"), "{table}");
    assert!(!table.contains("context read"), "{table}");
    assert_eq!(
        (
            human(Duration::from_micros(850)),
            human(Duration::from_micros(12_345))
        ),
        ("850 µs".into(), "12.35 ms".into())
    );
}

#[test]
fn a_run_never_asks_the_same_question_twice_within_its_first_200_000_reads() {
    let questions = super::questions::Questions::new(1);
    let mut seen = std::collections::HashSet::new();
    for n in 0..200_000 {
        let q = questions.get(n);
        assert!(seen.insert(q.clone()), "read {n} repeats {q:?}");
    }
}

#[test]
fn questions_vary_in_length_like_real_ones_and_follow_the_seed() {
    let questions = super::questions::Questions::new(7);
    let words: Vec<usize> = (0..1_000)
        .map(|n| questions.get(n).split_whitespace().count())
        .collect();
    let (short, long) = (words.iter().min().unwrap(), words.iter().max().unwrap());
    assert!(*short <= 10 && *long >= 30, "{short} to {long} words");
    assert_eq!(questions.get(5), super::questions::Questions::new(7).get(5));
    assert_ne!(questions.get(5), super::questions::Questions::new(8).get(5));
}
