//! The bench's made-up questions: synthetic analytics questions from templates (the large
//! set, the few-shot library), and questions no one asked before.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Synthetic analytics questions from templates, distinct, in a seeded order. `salt` keeps
/// sets made for different purposes apart.
pub(crate) fn synthetic_questions(n: usize, salt: &str, seed: u64) -> Vec<String> {
    const METRICS: [&str; 12] = [
        "total revenue",
        "number of orders",
        "average order value",
        "gross margin",
        "units sold",
        "refund amount",
        "new customers",
        "churned customers",
        "open support tickets",
        "inventory on hand",
        "headcount",
        "marketing spend",
    ];
    const SUBJECTS: [&str; 20] = [
        "the north region",
        "the south region",
        "east china",
        "germany",
        "japan",
        "brazil",
        "product line a",
        "product line b",
        "the premium tier",
        "the enterprise segment",
        "online channel",
        "retail stores",
        "warehouse 3",
        "the shanghai office",
        "the london office",
        "key accounts",
        "new product launches",
        "the mobile app",
        "partner resellers",
        "the outlet stores",
    ];
    const TIMES: [&str; 10] = [
        "yesterday",
        "last week",
        "this month",
        "last month",
        "this quarter",
        "last quarter",
        "year to date",
        "in 2024",
        "over the last 90 days",
        "since january",
    ];
    const SHAPES: [&str; 5] = [
        "",
        " by day",
        " broken down by category",
        " compared with the year before",
        " for the top 10 customers",
    ];
    let mut all = Vec::with_capacity(METRICS.len() * SUBJECTS.len() * TIMES.len() * SHAPES.len());
    for m in METRICS {
        for s in SUBJECTS {
            for t in TIMES {
                for shape in SHAPES {
                    all.push(format!("{salt}what was the {m} for {s} {t}{shape}"));
                }
            }
        }
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    all.shuffle(&mut rng);
    // Past the template space, a numbered store makes each question distinct.
    let mut i = 0;
    while all.len() < n {
        all.push(format!(
            "{salt}what was the {} for store {i} {}",
            METRICS[i % METRICS.len()],
            TIMES[i % TIMES.len()]
        ));
        i += 1;
    }
    all.truncate(n);
    all
}

/// Questions no one asked before: a numbered store and day make each distinct.
pub(crate) fn new_questions(n: usize, tag: &str, rng: &mut SmallRng) -> Vec<String> {
    const EN: [&str; 4] = [
        "how many orders did store {s} ship on day {d} of the month",
        "what was the revenue of store {s} on day {d}",
        "list the refunds of store {s} issued on day {d}",
        "average basket size at store {s} on day {d}",
    ];
    const ZH: [&str; 4] = [
        "{s}号门店在本月第{d}天发了多少单",
        "{s}号门店第{d}天的销售额是多少",
        "列出{s}号门店第{d}天的退款",
        "{s}号门店第{d}天的平均客单价",
    ];
    (0..n)
        .map(|i| {
            let template = if i % 2 == 0 {
                EN[i / 2 % 4]
            } else {
                ZH[i / 2 % 4]
            };
            let store = rng.random_range(100..1_000_000).to_string();
            template
                .replace("{s}", &format!("{tag}{store}"))
                .replace("{d}", &(1 + i % 28).to_string())
        })
        .collect()
}

/// A stored question reworded so that no one asked it before (likely a hit): a reference
/// of letters (digits would be literals to the guard) makes it new.
pub(crate) fn reworded(
    stored: &[(String, String)],
    tag: &str,
    i: usize,
    rng: &mut SmallRng,
) -> (String, String) {
    let (q, domain) = &stored[rng.random_range(0..stored.len())];
    let mut reference = String::from("x");
    let mut n = i;
    loop {
        reference.push(char::from(b'a' + (n % 26) as u8));
        n /= 26;
        if n == 0 {
            break;
        }
    }
    (
        format!("{q}, please (ref {tag}{reference})"),
        domain.clone(),
    )
}

/// `n` questions no one asked before, alternately a reworded stored question (likely a hit)
/// and an unrelated one (a miss): `(question, domain)`.
pub(crate) fn fresh_questions(
    n: usize,
    tag: &str,
    stored: &[(String, String)],
    rng: &mut SmallRng,
) -> Vec<(String, String)> {
    let unrelated = new_questions(n, tag, rng);
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                reworded(stored, tag, i, rng)
            } else {
                let domain = &stored[rng.random_range(0..stored.len())].1;
                (unrelated[i].clone(), domain.clone())
            }
        })
        .collect()
}
