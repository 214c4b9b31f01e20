//! The reader on files written here: every value type, the tensor table, alignment, a header
//! longer than the first read, and malformed files.

use std::io::Write;

use super::*;

/// Writes GGUF files the way llama.cpp's writer lays them out.
#[derive(Default)]
pub(crate) struct Writer {
    metadata: Vec<u8>,
    entries: u64,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl Writer {
    pub(crate) fn entry(&mut self, key: &str, kind: u32, value: &[u8]) -> &mut Self {
        put_string(&mut self.metadata, key);
        self.metadata.extend(kind.to_le_bytes());
        self.metadata.extend(value);
        self.entries += 1;
        self
    }

    pub(crate) fn string(&mut self, key: &str, value: &str) -> &mut Self {
        let mut v = Vec::new();
        put_string(&mut v, value);
        self.entry(key, 8, &v)
    }

    pub(crate) fn tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        code: u32,
        data: Vec<u8>,
    ) -> &mut Self {
        self.tensors.push((name.into(), dims.to_vec(), code, data));
        self
    }

    pub(crate) fn bytes(&self, alignment: u64) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(b"GGUF");
        out.extend(3_u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend(self.entries.to_le_bytes());
        out.extend(&self.metadata);
        let mut offset = 0_u64;
        let mut offsets = Vec::new();
        for (name, dims, code, data) in &self.tensors {
            put_string(&mut out, name);
            out.extend((dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(code.to_le_bytes());
            out.extend(offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + data.len() as u64).div_ceil(alignment) * alignment;
        }
        let start = (out.len() as u64).div_ceil(alignment) * alignment;
        out.resize(start as usize, 0);
        for ((_, _, _, data), at) in self.tensors.iter().zip(offsets) {
            out.resize((start + at) as usize, 0);
            out.extend(data);
        }
        out
    }
}

pub(crate) fn write(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(bytes).unwrap();
    file
}

fn reason(err: Error) -> String {
    if let Error::Format { reason, .. } = err {
        reason
    } else {
        panic!("expected a format error, got {err:?}")
    }
}

#[test]
fn a_written_file_reads_back_with_every_value_type_its_tensors_and_aligned_data() {
    let mut array = Vec::new();
    array.extend(8_u32.to_le_bytes());
    array.extend(3_u64.to_le_bytes());
    for token in ["<|im_start|>", "你好", "Ġthe"] {
        put_string(&mut array, token);
    }
    let f32_data: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let q8_data: Vec<u8> = (0..34).collect();
    let mut w = Writer::default();
    w.string("general.architecture", "qwen2")
        .entry("general.alignment", 4, &64_u32.to_le_bytes())
        .entry("qwen2.block_count", 4, &24_u32.to_le_bytes())
        .entry("qwen2.rope.freq_base", 6, &1_000_000_f32.to_le_bytes())
        .entry("u8", 0, &[7])
        .entry("i8", 1, &[0xff])
        .entry("u16", 2, &513_u16.to_le_bytes())
        .entry("i16", 3, &(-2_i16).to_le_bytes())
        .entry("i32", 5, &(-3_i32).to_le_bytes())
        .entry("u64", 10, &(1_u64 << 40).to_le_bytes())
        .entry("i64", 11, &(-4_i64).to_le_bytes())
        .entry("f64", 12, &0.5_f64.to_le_bytes())
        .entry("flag", 7, &[1])
        .entry("tokenizer.ggml.tokens", 9, &array)
        .tensor("a.weight", &[4, 2], 0, f32_data.clone())
        .tensor("b.weight", &[32], 8, q8_data.clone());
    let file = write(&w.bytes(64));
    let gguf = Gguf::open(file.path()).unwrap();

    assert_eq!(gguf.version, 3);
    assert_eq!(gguf.require_str("general.architecture").unwrap(), "qwen2");
    assert_eq!(gguf.require_u64("qwen2.block_count").unwrap(), 24);
    assert_eq!(gguf.require_f64("qwen2.rope.freq_base").unwrap(), 1e6);
    assert_eq!(gguf.get("u8"), Some(&Value::U8(7)));
    assert_eq!(gguf.get("i8"), Some(&Value::I8(-1)));
    assert_eq!(gguf.get("u16"), Some(&Value::U16(513)));
    assert_eq!(gguf.get("i16"), Some(&Value::I16(-2)));
    assert_eq!(gguf.get("i32"), Some(&Value::I32(-3)));
    assert_eq!(gguf.require_u64("u64").unwrap(), 1 << 40);
    assert_eq!(gguf.get("i64"), Some(&Value::I64(-4)));
    assert_eq!(gguf.require_f64("f64").unwrap(), 0.5);
    assert_eq!(gguf.get("flag"), Some(&Value::Bool(true)));
    let tokens: Vec<&str> = gguf
        .get("tokenizer.ggml.tokens")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(tokens, ["<|im_start|>", "你好", "Ġthe"]);
    assert!(gguf.require_u64("general.architecture").is_err());

    assert_eq!(gguf.data_offset % 64, 0);
    let a = gguf.tensor("a.weight").unwrap();
    assert_eq!(
        (a.dims.as_slice(), a.kind, a.elements()),
        (&[4, 2][..], TensorType::F32, 8)
    );
    assert_eq!(gguf.tensor_bytes(a).unwrap(), f32_data);
    let b = gguf.tensor("b.weight").unwrap();
    assert_eq!((b.kind, b.offset, b.byte_len()), (TensorType::Q8_0, 64, 34));
    assert_eq!(gguf.tensor_bytes(b).unwrap(), q8_data);
    assert!(gguf.tensor("c.weight").is_none());
}

#[test]
fn a_header_longer_than_the_first_read_is_read_whole() {
    let long = "x".repeat(FIRST_READ + 1000);
    let mut w = Writer::default();
    w.string("general.license", &long)
        .tensor("t", &[1], 0, 1_f32.to_le_bytes().to_vec());
    let file = write(&w.bytes(32));
    let gguf = Gguf::open(file.path()).unwrap();
    assert_eq!(
        gguf.require_str("general.license").unwrap().len(),
        long.len()
    );
    assert_eq!(
        gguf.tensor_bytes(&gguf.tensors[0]).unwrap(),
        1_f32.to_le_bytes()
    );
}

#[test]
fn malformed_files_are_format_errors_that_say_what_is_wrong() {
    let file = write(b"GGML\x03\0\0\0");
    assert!(reason(Gguf::open(file.path()).unwrap_err()).contains("magic"));

    let mut bytes = Writer::default().bytes(32);
    bytes[4] = 9;
    let file = write(&bytes);
    assert!(reason(Gguf::open(file.path()).unwrap_err()).contains("version 9"));

    let mut w = Writer::default();
    w.tensor("t", &[8], 0, vec![0; 32]);
    let mut bytes = w.bytes(32);
    bytes.truncate(bytes.len() - 1);
    let file = write(&bytes);
    assert!(reason(Gguf::open(file.path()).unwrap_err()).contains("past the end"));

    let mut w = Writer::default();
    w.tensor("t", &[31], 8, vec![0; 34]);
    let file = write(&w.bytes(32));
    assert!(reason(Gguf::open(file.path()).unwrap_err()).contains("whole blocks"));

    let mut w = Writer::default();
    w.tensor("t", &[8], 99, vec![0; 32]);
    let file = write(&w.bytes(32));
    assert!(reason(Gguf::open(file.path()).unwrap_err()).contains("ggml type 99"));

    let mut w = Writer::default();
    w.entry("k", 8, &u64::MAX.to_le_bytes());
    let file = write(&w.bytes(32));
    assert!(reason(Gguf::open(file.path()).unwrap_err()).contains("truncated in the k "));

    let missing = std::path::Path::new("/nonexistent/model.gguf");
    assert!(matches!(
        Gguf::open(missing).unwrap_err(),
        Error::ModelMissing { .. }
    ));
}

#[test]
fn dequantising_checks_whole_blocks_and_names_an_unsupported_type() {
    let mut out = Vec::new();
    // One Q8_0 block: scale 0.5 (f16 0x3800), codes -1, 0, 1, 2, ...
    let mut block = vec![0x00, 0x38];
    block.extend((0..32).map(|i| (i as i8 - 1) as u8));
    dequantize(TensorType::Q8_0, &block, &mut out).unwrap();
    assert_eq!(&out[..4], &[-0.5, 0.0, 0.5, 1.0]);
    assert!(
        dequantize(TensorType::Q8_0, &block[..33], &mut out)
            .unwrap_err()
            .contains("whole blocks")
    );
    assert!(
        dequantize(TensorType::Q2K, &[0; 84], &mut out)
            .unwrap_err()
            .contains("Q2K")
    );
}
