//! Broken checkpoints through the real binary: each gives one clear `error:` line naming the file (and tensor),
//! a non-zero exit, and never a panic.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name)
}

/// Copies a fixture into a fresh temp dir so a test can damage it.
fn damaged_copy(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(fixture(name)).expect("fixture") {
        let p = entry.expect("entry").path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).expect("copy");
    }
    tmp
}

/// Runs `tensorfold run` on `dir` and returns stderr, asserting failure without a panic.
fn run_fails(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args([
            "run",
            "--prompt-ids",
            "1,2,3",
            "--max-tokens",
            "2",
            "--model",
        ])
        .arg(dir)
        .output()
        .expect("binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "expected failure, stderr: {stderr}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "clean exit code, not a panic (101): {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one error line: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    stderr
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_string(&v).unwrap()).unwrap();
}

/// Rewrites a single-file safetensors checkpoint with `edit` applied to its header JSON, keeping the data.
fn edit_header(path: &Path, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut header);
    let mut text = serde_json::Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(path, out).unwrap();
}

#[test]
fn a_missing_config_names_config_json() {
    let tmp = damaged_copy("tiny-flat-f16-notok");
    std::fs::remove_file(tmp.path().join("config.json")).unwrap();
    let err = run_fails(tmp.path());
    assert!(err.contains("config.json"), "{err}");
}

#[test]
fn an_unknown_model_type_is_named() {
    let tmp = damaged_copy("tiny-flat-f16-notok");
    edit_json(&tmp.path().join("config.json"), |v| {
        v["model_type"] = "llama".into()
    });
    let err = run_fails(tmp.path());
    assert!(
        err.contains("config.json") && err.contains("unknown model_type `llama`"),
        "{err}"
    );
}

#[test]
fn a_missing_tensor_is_named() {
    let tmp = damaged_copy("tiny-flat-f16-notok");
    let file = tmp.path().join("model.safetensors");
    edit_header(&file, |h| {
        // Renamed rather than removed: safetensors requires the data offsets to stay contiguous.
        let key = h
            .keys()
            .find(|k| k.ends_with("layers.1.mlp.up_proj.weight"))
            .unwrap()
            .clone();
        let info = h.remove(&key).unwrap();
        h.insert(key.replace("up_proj", "up_projection"), info);
    });
    let err = run_fails(tmp.path());
    assert!(
        err.contains("layers.1.mlp.up_proj.weight") && err.contains("missing"),
        "{err}"
    );
}

#[test]
fn a_misshapen_tensor_names_the_file_tensor_and_both_shapes() {
    let tmp = damaged_copy("tiny-flat-f16-notok");
    let file = tmp.path().join("model.safetensors");
    edit_header(&file, |h| {
        let key = h
            .keys()
            .find(|k| k.ends_with("layers.1.linear_attn.in_proj_b.weight"))
            .unwrap()
            .clone();
        let shape = h[&key]["shape"].as_array().unwrap().clone();
        // Same element count, transposed: a wrong shape that still parses.
        h[&key]["shape"] = serde_json::json!([shape[1], shape[0]]);
    });
    let err = run_fails(tmp.path());
    assert!(
        err.contains("model.safetensors") && err.contains("in_proj_b.weight"),
        "{err}"
    );
    assert!(err.contains("expected shape"), "{err}");
}

#[test]
fn a_truncated_safetensors_file_is_reported() {
    let tmp = damaged_copy("tiny-flat-f16-notok");
    let file = tmp.path().join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let err = run_fails(tmp.path());
    assert!(
        err.contains("model.safetensors") && err.contains("not a valid safetensors file"),
        "{err}"
    );
}

#[test]
fn an_index_naming_a_missing_shard_is_reported() {
    let tmp = damaged_copy("tiny-flat-f32-sharded");
    std::fs::remove_file(tmp.path().join("model-00002-of-00003.safetensors")).unwrap();
    let err = run_fails(tmp.path());
    assert!(
        err.contains("model.safetensors.index.json")
            && err.contains("model-00002-of-00003.safetensors"),
        "{err}"
    );
}

#[test]
fn unsupported_quantization_bits_are_refused() {
    let tmp = damaged_copy("tiny-mlx-4bit");
    edit_json(&tmp.path().join("config.json"), |v| {
        v["quantization"]["bits"] = 7.into();
        v["quantization_config"]["bits"] = 7.into();
    });
    let err = run_fails(tmp.path());
    assert!(
        err.contains("config.json") && err.contains("unsupported quantization bits 7"),
        "{err}"
    );
}

#[test]
fn a_token_id_outside_the_vocabulary_is_an_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["run", "--prompt-ids", "1,999999", "--model"])
        .arg(fixture("tiny-flat-f16-notok"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("outside the vocabulary"), "{stderr}");
}
