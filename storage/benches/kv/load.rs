//! Loading the turns that the read workload reads: many users' conversation turns appended
//! through `UserData` in large transactions with `synchronous = OFF`.

use std::path::Path;
use std::time::{Duration, Instant};

use engram_storage::Keyspace;
use engram_storage::Store;
use engram_storage::data::UserData;
use engram_storage::sqlite::{SqliteOptions, Synchronous};
use engram_storage::types::{Timestamp, Turn};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::measure::settle;
use crate::report::{bytes, group};
use crate::writes::mix;
use crate::{BenchResult, Config, LOAD_TXN_TURNS, RULE, TENANT};

const VOCABULARY: &str = "show me revenue by region for the last quarter orders table \
    customer churn join on where group monthly active users compare with forecast sales \
    pipeline top 10 products margin and why did it drop in march dashboard filter segment \
    enterprise north america average order value week over returns SKU inventory";
const ROUTES: [&str; 4] = ["sql", "chat", "report", "search"];

pub fn user_id(u: u64) -> String {
    format!("user-{u:07}")
}

pub fn session_id(u: u64) -> String {
    format!("s-{:016x}", mix(u ^ 0x5E55_1011))
}

/// Makes turns with 100 to 300 bytes of text on each side.
struct TurnMaker {
    rng: SmallRng,
    words: Vec<&'static str>,
}

impl TurnMaker {
    fn new(seed: u64) -> Self {
        TurnMaker {
            rng: SmallRng::seed_from_u64(seed),
            words: VOCABULARY.split(' ').collect(),
        }
    }

    fn word(&mut self) -> &'static str {
        self.words[self.rng.random_range(0..self.words.len())]
    }

    fn text(&mut self) -> String {
        let target = self.rng.random_range(100..=300);
        let mut s = String::with_capacity(target + 16);
        while s.len() < target {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(self.word());
        }
        s.truncate(target);
        s
    }

    fn turn(&mut self, u: u64, seq: u64) -> Turn {
        let entities = (0..self.rng.random_range(0..4))
            .map(|_| self.word().to_owned())
            .collect();
        Turn {
            session_id: session_id(u),
            seq,
            request_id: format!("req-{:016x}", self.rng.random::<u64>()),
            trace_id: Some(format!("{:032x}", self.rng.random::<u128>())),
            route: Some(ROUTES[self.rng.random_range(0..ROUTES.len())].to_owned()),
            user_text: self.text(),
            assistant_text: self.text(),
            entities,
            created_at: Timestamp(1_750_000_000_000 + seq as i64 * 60_000),
            written_under: None,
            pii_level: engram_storage::types::PiiLevel::None,
        }
    }
}

pub struct LoadFigures {
    pub turns: u64,
    pub elapsed: Duration,
    pub flush: Duration,
    pub text_bytes: u64,
    pub file_bytes: u64,
}

/// Appends `cfg.turns` turns for each of `cfg.users` users (in key order), ~5,000 turns a
/// transaction, through a store opened with `synchronous = OFF`; closes it (which checkpoints
/// the WAL into the file) and flushes the file.
pub fn load_turns(path: &Path, cfg: &Config) -> BenchResult<LoadFigures> {
    println!(
        "\n## loading {} users x {} turns (synchronous OFF)",
        group(cfg.users as f64),
        cfg.turns
    );
    let keyspace = Keyspace::new("engram");
    let options = SqliteOptions {
        synchronous: Synchronous::Off,
        ..SqliteOptions::default()
    };
    let store = Store::sqlite(path, options)?;
    let users_per_txn = (LOAD_TXN_TURNS / cfg.turns).max(1);
    let mut maker = TurnMaker::new(7);
    let mut text_bytes = 0u64;
    let report_every = (cfg.users / 10).max(1);
    let start = Instant::now();
    let mut first = 0;
    while first < cfg.users {
        let last = (first + users_per_txn).min(cfg.users);
        let batch: Vec<(String, Vec<Turn>)> = (first..last)
            .map(|u| {
                (
                    user_id(u),
                    (0..cfg.turns).map(|s| maker.turn(u, s)).collect(),
                )
            })
            .collect();
        let turns = batch.iter().flat_map(|(_, turns)| turns);
        text_bytes += turns
            .map(|t| (t.user_text.len() + t.assistant_text.len()) as u64)
            .sum::<u64>();
        let misnumbered = store.run_blocking(|txn| {
            let mut misnumbered = 0;
            for (user, turns) in &batch {
                let mut data = UserData::new(txn, &keyspace, TENANT, user);
                for turn in turns {
                    let mut written = turn.clone();
                    data.append_turn(&mut written, RULE)?;
                    misnumbered += usize::from(written.seq != turn.seq);
                }
            }
            Ok(misnumbered)
        })?;
        if misnumbered > 0 {
            return Err(format!("append_turn numbered {misnumbered} turns unexpectedly").into());
        }
        if last / report_every != first / report_every || last == cfg.users {
            let secs = start.elapsed().as_secs_f64();
            let rate = (last * cfg.turns) as f64 / secs;
            println!(
                "{:>9} users {secs:>6.1}s {:>9} turns/s",
                group(last as f64),
                group(rate)
            );
        }
        first = last;
    }
    drop(store);
    let elapsed = start.elapsed();
    let t = Instant::now();
    settle(path.parent().unwrap_or(Path::new(".")))?;
    let flush = t.elapsed();
    let file_bytes = std::fs::metadata(path)?.len();
    println!(
        "loaded in {:.1}s, flushed in {:.1}s, file {}",
        elapsed.as_secs_f64(),
        flush.as_secs_f64(),
        bytes(file_bytes)
    );
    Ok(LoadFigures {
        turns: cfg.users * cfg.turns,
        elapsed,
        flush,
        text_bytes,
        file_bytes,
    })
}
