//! Generation speed of the Qwen2 decoder on this machine: load time, prefill (tokens/s over a
//! chat prompt), greedy decoding and schema-constrained decoding (new tokens/s, time to first
//! token), each repeated for `ENGRAM_BENCH_SECS` (default 5) and reported as medians, for
//! float32 weights and for float16 and int8 linear layers taking turns in the same rounds.
//!
//! ```text
//! cargo bench -p engram-inference --bench generate
//! ```

use std::time::Instant;

use anyhow::{Context, Result};
use engram_inference::constrain::Schema;
use engram_inference::gguf::Gguf;
use engram_inference::qwen2::{KvCache, Qwen2, chat_prompt, token_bytes};
use engram_inference::{Precision, default_model_dir};
use tch::{Device, Tensor};

mod common;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() -> Result<()> {
    let path = default_model_dir().join("qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf");
    let device = Device::cuda_if_available();
    let precisions = [Precision::Float32, Precision::Float16, Precision::Int8];
    let mut models = Vec::new();
    let mut loads = Vec::new();
    for precision in precisions {
        let started = Instant::now();
        models.push(Qwen2::load(&path, device, precision).context("run .ci/models")?);
        loads.push(format!(
            "{precision:?} {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    }
    let tokenizer = Gguf::open(&path)?.tokenizer()?;
    let vocab = token_bytes(&tokenizer);
    let eos = i64::from(
        tokenizer
            .token_to_id("<|im_end|>")
            .context("no <|im_end|>")?,
    );
    let text = chat_prompt(
        "Extract the user's intent as JSON: its type and its target.",
        "帮我取消明天下午三点的预约，另外我的快递还没有送到，我要投诉。",
    );
    let prompt: Vec<i64> = tokenizer
        .encode(text, false)
        .map_err(anyhow::Error::msg)?
        .get_ids()
        .iter()
        .map(|&i| i64::from(i))
        .collect();
    let schema = Schema::from_json(&serde_json::json!({
        "type": "object",
        "properties": {
            "intent_type": {"enum": ["appointment", "complaint", "subscription_renewal",
                "subscription_cancel", "none"]},
            "target": {"type": "string"}
        },
        "required": ["intent_type", "target"]
    }))
    .map_err(anyhow::Error::msg)?;
    println!(
        "## Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M; float32, float16 and int8 weights) on {:?}, {} threads\n",
        device,
        tch::get_num_threads()
    );
    println!(
        "load (read, dequantise, place, pack): {}; prompt: {} tokens\n",
        loads.join(", "),
        prompt.len()
    );

    let window = common::measurement();
    // The precisions take turns in every round, so drift in the shared machine's load hits
    // all alike.
    let mut runs: Vec<Runs> = precisions.iter().map(|_| Runs::default()).collect();
    let until = Instant::now() + window;
    while runs[0].prefill.len() < 3 || Instant::now() < until {
        for (model, runs) in models.iter().zip(&mut runs) {
            runs.measure(model, &prompt, &schema, &vocab, eos);
        }
    }
    for (precision, runs) in precisions.into_iter().zip(runs) {
        println!("### {precision:?} weights\n");
        runs.print();
    }
    Ok(())
}

/// One precision's measurements.
#[derive(Default)]
struct Runs {
    prefill: Vec<f64>,
    ttft: Vec<f64>,
    greedy: Vec<f64>,
    constrained: Vec<f64>,
    greedy_tokens: usize,
    json_len: usize,
}

impl Runs {
    /// Prefill, greedy decoding and a schema-constrained answer, once each.
    fn measure(
        &mut self,
        model: &Qwen2,
        prompt: &[i64],
        schema: &Schema,
        vocab: &[Option<Vec<u8>>],
        eos: i64,
    ) {
        let t = Instant::now();
        let mut cache = KvCache::default();
        let _ = model.next_logits(&Tensor::from_slice(prompt).unsqueeze(0), &mut cache);
        let p = t.elapsed().as_secs_f64();
        self.prefill.push(prompt.len() as f64 / p);
        self.ttft.push(p * 1e3);

        let t = Instant::now();
        let answer = model.generate_greedy(prompt, 32, eos);
        self.greedy_tokens = answer.len();
        let g = t.elapsed().as_secs_f64() - p;
        self.greedy
            .push((answer.len().saturating_sub(1)) as f64 / g.max(1e-9));

        let t = Instant::now();
        let json = model.generate_json(prompt, schema, vocab, 48);
        self.json_len = json.as_ref().map_or(0, String::len);
        let c = t.elapsed().as_secs_f64() - p;
        self.constrained.push(c * 1e3);
    }

    fn print(self) {
        let runs = self.prefill.len();
        println!("| measure | median | runs |");
        println!("|---|---:|---:|");
        println!(
            "| prefill | {:.0} tokens/s | {runs} |",
            median(self.prefill)
        );
        println!(
            "| time to first token (prefill of the prompt) | {:.0} ms | {runs} |",
            median(self.ttft)
        );
        println!(
            "| greedy decoding ({} tokens) | {:.1} tokens/s | {runs} |",
            self.greedy_tokens,
            median(self.greedy)
        );
        println!(
            "| schema-constrained answer ({} bytes of JSON), after prefill | {:.0} ms | {runs} |\n",
            self.json_len,
            median(self.constrained)
        );
    }
}
