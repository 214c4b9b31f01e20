//! Generation speed of the Qwen2 decoder on this machine: load time, prefill (tokens/s over a
//! chat prompt), greedy decoding and schema-constrained decoding (new tokens/s, time to first
//! token), each repeated for `ENGRAM_BENCH_SECS` (default 5) and reported as medians.
//!
//! ```text
//! cargo bench -p engram-inference --bench generate
//! ```

use std::time::Instant;

use anyhow::{Context, Result};
use engram_inference::default_model_dir;
use engram_inference::gguf::Gguf;
use engram_inference::qwen2::{KvCache, Qwen2, chat_prompt, token_bytes};
use engram_inference::schema::Schema;
use tch::{Device, Tensor};

mod common;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() -> Result<()> {
    let path = default_model_dir().join("qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf");
    let started = Instant::now();
    let model = Qwen2::load(&path, Device::cuda_if_available()).context("run .ci/models")?;
    let load = started.elapsed().as_secs_f64();
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
        "## Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M, float32 weights) on {:?}, {} threads\n",
        Device::cuda_if_available(),
        tch::get_num_threads()
    );
    println!(
        "load (read, dequantise, place): {load:.1} s; prompt: {} tokens\n",
        prompt.len()
    );

    let window = common::measurement();
    let (mut prefill, mut greedy, mut ttft, mut constrained) = (vec![], vec![], vec![], vec![]);
    let (mut greedy_tokens, mut json_len) = (0, 0);
    let until = Instant::now() + window;
    while prefill.len() < 3 || Instant::now() < until {
        let t = Instant::now();
        let mut cache = KvCache::default();
        let _ = model.next_logits(&Tensor::from_slice(&prompt).unsqueeze(0), &mut cache);
        let p = t.elapsed().as_secs_f64();
        prefill.push(prompt.len() as f64 / p);
        ttft.push(p * 1e3);

        let t = Instant::now();
        let answer = model.generate_greedy(&prompt, 32, eos);
        greedy_tokens = answer.len();
        let g = t.elapsed().as_secs_f64() - p;
        greedy.push((answer.len().saturating_sub(1)) as f64 / g.max(1e-9));

        let t = Instant::now();
        let json = model.generate_json(&prompt, &schema, &vocab, 48);
        json_len = json.as_ref().map_or(0, String::len);
        let c = t.elapsed().as_secs_f64() - p;
        constrained.push(c * 1e3);
    }
    println!("| measure | median | runs |");
    println!("|---|---:|---:|");
    println!(
        "| prefill | {:.0} tokens/s | {} |",
        median(prefill.clone()),
        prefill.len()
    );
    println!(
        "| time to first token (prefill of the prompt) | {:.0} ms | {} |",
        median(ttft),
        prefill.len()
    );
    println!(
        "| greedy decoding ({greedy_tokens} tokens) | {:.1} tokens/s | {} |",
        median(greedy),
        prefill.len()
    );
    println!(
        "| schema-constrained answer ({json_len} bytes of JSON), after prefill | {:.0} ms | {} |",
        median(constrained),
        prefill.len()
    );
    Ok(())
}
