//! Fresh questions for `loadgen`'s context reads: the `n`-th question of a run is built from
//! `n` and the run's seed, and no two `n` below [`Questions::len`] give the same text, so a
//! run asks every question once and the node's query cache never answers one.
//!
//! A question is a sentence shape (a dozen, from a five-word follow-up to a two-clause
//! request) filled with a metric, a region, a period, a table, a breakdown and a condition.
//! The slots are numbered in mixed radix and the run's index is scattered over them by a
//! multiplication modulo their product (a bijection: the multiplier is prime to it), so
//! consecutive reads differ in every slot rather than counting up in one.

/// Sentence shapes; `{m}` metric, `{r}` region, `{p}` period, `{t}` table, `{b}` breakdown,
/// `{c}` condition. Every shape uses every slot, so different slots give different texts.
const SHAPES: [&str; 12] = [
    "and {m} in {r}{c} {p}, {b}?",
    "What was {m} for {r} {p}{c}? Use {t}, {b}.",
    "Can you show me {m} {b} for {r} {p}{c}, from {t}?",
    "how did {m} change in {r} {p}{c} ({t}, {b})",
    "Compare {m} of {r} {p} with the period before{c}, {b}; the numbers should come from {t}.",
    "I need {m} {b} — {r}, {p}{c}. Same table as before, {t}.",
    "Why did {m} drop in {r} {p}{c}? Check {t} {b}.",
    "Give me {m} for {r} {p}, {b}{c}, and say which rows of {t} you used.",
    "{m} {r} {p}{c} {b} from {t}",
    "Is {m} in {r} {p}{c} higher than we expected? Break it down {b} using {t}.",
    "Our finance team asks for {m} in {r} {p}{c}; please pull it from {t} {b} so they can reconcile it with last quarter's report.",
    "Quick one: {m}, {r}, {p}{c}, {b}, {t}.",
];
const METRICS: [&str; 14] = [
    "GMV",
    "the order count",
    "the refund rate",
    "the average basket size",
    "active users",
    "repeat purchase rate",
    "net revenue",
    "gross margin",
    "the cancellation rate",
    "new customer signups",
    "average delivery time",
    "inventory turnover",
    "the conversion rate",
    "customer lifetime value",
];
const REGIONS: [&str; 11] = [
    "East China",
    "North China",
    "South China",
    "Central China",
    "the Northeast",
    "the Southwest",
    "Shanghai",
    "Guangdong province",
    "our tier-two cities",
    "the overseas stores",
    "the online channel",
];
const PERIODS: [&str; 13] = [
    "in January",
    "in March 2025",
    "last week",
    "over the last 30 days",
    "in Q2",
    "during the Singles' Day promotion",
    "in the first half of 2024",
    "yesterday",
    "this month so far",
    "in December",
    "between May and July",
    "over the holiday season",
    "in the week after the price change",
];
const TABLES: [&str; 8] = [
    "dw_orders",
    "dw_refunds",
    "dim_customer",
    "fact_sales",
    "dw_inventory",
    "fact_shipments",
    "dw_sessions",
    "fact_payments",
];
const BREAKDOWNS: [&str; 9] = [
    "by week",
    "by day",
    "per store",
    "by product category",
    "by payment method",
    "by customer segment",
    "per sales channel",
    "by hour of the day",
    "per city",
];
const CONDITIONS: [&str; 10] = [
    "",
    " excluding refunded orders",
    " for new customers only",
    " counting only paid orders",
    " without the test accounts",
    " for orders above 200 yuan",
    " among members",
    " for mobile orders",
    " leaving out wholesale buyers",
    " with returns netted out",
];

/// The slots' sizes, in the order the index is read.
const RADICES: [u64; 7] = [
    SHAPES.len() as u64,
    METRICS.len() as u64,
    REGIONS.len() as u64,
    PERIODS.len() as u64,
    TABLES.len() as u64,
    BREAKDOWNS.len() as u64,
    CONDITIONS.len() as u64,
];

/// A prime that divides none of the radices' product (its factors are 2, 3, 5, 7, 11, 13).
const SCATTER: u64 = 1_000_003;

/// The fresh questions of one run.
#[derive(Debug, Clone, Copy)]
pub struct Questions {
    offset: u64,
}

impl Questions {
    /// The questions of a run with this seed (another seed starts elsewhere in the same set).
    pub fn new(seed: u64) -> Self {
        Questions {
            offset: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) % Self::len(),
        }
    }

    /// How many distinct questions there are: past this many a run repeats them.
    pub fn len() -> u64 {
        RADICES.iter().product()
    }

    /// The `n`-th question of the run.
    pub fn get(&self, n: u64) -> String {
        let len = Self::len();
        let scattered = (u128::from(n % len) * u128::from(SCATTER) % u128::from(len)) as u64;
        let mut index = (scattered + self.offset) % len;
        let mut slot = [0usize; RADICES.len()];
        for (s, radix) in slot.iter_mut().zip(RADICES) {
            *s = (index % radix) as usize;
            index /= radix;
        }
        SHAPES[slot[0]]
            .replace("{m}", METRICS[slot[1]])
            .replace("{r}", REGIONS[slot[2]])
            .replace("{p}", PERIODS[slot[3]])
            .replace("{t}", TABLES[slot[4]])
            .replace("{b}", BREAKDOWNS[slot[5]])
            .replace("{c}", CONDITIONS[slot[6]])
    }
}
