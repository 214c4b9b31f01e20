//! The cost of the few-shot import's alias scan: a streaming pass of `saphyr_parser` over a
//! 1,000-example document as an export writes it, against serde_yaml_ng's parse of the same
//! document into the import's shape. Prints medians of 30 rounds.
//!
//! `cargo bench -p engram-node --bench yaml_scan`

use std::time::{Duration, Instant};

use serde::Deserialize;

#[derive(Deserialize)]
struct Library {
    examples: Vec<Example>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Example {
    question: String,
    sql: String,
    route: String,
    confidence: f32,
    status: String,
    successes: u32,
    fail_count: u32,
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let mut doc = String::from("examples:\n");
    for i in 0..1000 {
        doc.push_str(&format!(
            "- question: how many orders did region {i} receive last week\n  sql: SELECT \
             count(*) FROM orders WHERE region = {i} AND day >= current_date - 7\n  route: \
             nl2sql\n  confidence: 0.9\n  status: approved\n  successes: 3\n  fail_count: 0\n"
        ));
    }
    let (mut scan, mut parse) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        let started = Instant::now();
        let aliases = saphyr_parser::Parser::new_from_str(&doc)
            .filter(|event| matches!(event, Ok((saphyr_parser::Event::Alias(_), _))))
            .count();
        scan.push(started.elapsed());
        assert_eq!(aliases, 0);
        let started = Instant::now();
        let library: Library = serde_yaml_ng::from_str(&doc).expect("the document parses");
        parse.push(started.elapsed());
        assert_eq!(library.examples.len(), 1000);
    }
    println!(
        "{} KB: alias scan median {:?}, serde_yaml_ng parse median {:?}",
        doc.len() / 1024,
        median(scan),
        median(parse)
    );
}
