//! Reads a checkpoint directory: config, safetensors (one file or sharded by index) through mmap, HF and MLX
//! naming and conventions. Tensors are handed out zero-copy in their stored format; bad files are clear errors.

use crate::config::{ModelConfig, QuantParams, SUPPORTED_BITS, SUPPORTED_GROUPS};
use crate::error::{CoreError, Result};
use crate::stored::{Bytes, DenseDType, StoredMatrix};
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Stored element type of a tensor in a safetensors file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredDType {
    Dense(DenseDType),
    U32,
}

impl StoredDType {
    fn name(self) -> &'static str {
        match self {
            StoredDType::Dense(d) => d.name(),
            StoredDType::U32 => "U32",
        }
    }
}

/// One tensor of the checkpoint, under its canonical (prefix-free) name.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    /// Name as written in the file.
    pub stored_name: String,
    pub file: PathBuf,
    pub dtype: StoredDType,
    pub shape: Vec<usize>,
    pub bytes: Bytes,
}

/// An opened checkpoint: its config and every text tensor by canonical name
/// (`embed_tokens.weight`, `layers.3.linear_attn.in_proj_qkv.weight`, `norm.weight`, `lm_head.weight`, `mtp.*`).
pub struct Checkpoint {
    pub dir: PathBuf,
    pub config: ModelConfig,
    pub tensors: BTreeMap<String, TensorEntry>,
    /// Converted by mlx-lm/mlx-vlm: conv1d stored as `[C, K, 1]` and zero-centred norms stored as `1 + w`.
    pub mlx_layout: bool,
    /// Total bytes of tensor data mapped.
    pub mapped_bytes: usize,
}

/// Maps a stored tensor name to its canonical name; `None` for tensors the text model does not use (vision).
pub fn canonical_name(stored: &str) -> Option<String> {
    for skip in [
        "model.visual.",
        "visual.",
        "vision_tower.",
        "model.vision_tower.",
    ] {
        if stored.starts_with(skip) {
            return None;
        }
    }
    for (prefix, replacement) in [
        ("model.language_model.", ""),
        ("language_model.model.", ""),
        ("language_model.lm_head.", "lm_head."),
        ("model.mtp.", "mtp."),
        ("language_model.mtp.", "mtp."),
        ("mtp.", "mtp."),
        ("lm_head.", "lm_head."),
        ("model.", ""),
    ] {
        if let Some(rest) = stored.strip_prefix(prefix) {
            return Some(format!("{replacement}{rest}"));
        }
    }
    Some(stored.to_string())
}

impl Checkpoint {
    /// Opens `dir`, calling `progress(done_files, total_files)` as shards are mapped.
    pub fn open(dir: &Path, mut progress: impl FnMut(usize, usize)) -> Result<Self> {
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(CoreError::checkpoint(
                &config_path,
                "missing config.json (is this a model directory?)",
            ));
        }
        let config = ModelConfig::from_file(&config_path)?;
        let files = shard_files(dir)?;
        let mut tensors = BTreeMap::new();
        let mut mapped_bytes = 0;
        let total = files.len();
        for (i, (file, expected)) in files.iter().enumerate() {
            let map = map_file(file)?;
            let st = SafeTensors::deserialize(&map[..]).map_err(|e| {
                CoreError::checkpoint(file, format!("not a valid safetensors file: {e}"))
            })?;
            let base = map.as_ptr() as usize;
            let mut found = Vec::new();
            for (name, view) in st.iter() {
                found.push(name.to_string());
                let Some(canonical) = canonical_name(name) else {
                    continue;
                };
                let dtype = match view.dtype() {
                    Dtype::F32 => StoredDType::Dense(DenseDType::F32),
                    Dtype::F16 => StoredDType::Dense(DenseDType::F16),
                    Dtype::BF16 => StoredDType::Dense(DenseDType::BF16),
                    Dtype::U32 => StoredDType::U32,
                    other => {
                        return Err(CoreError::tensor(
                            file,
                            name,
                            format!("dtype {other:?} is not supported (F32, F16, BF16, U32 codes)"),
                        ))
                    }
                };
                let start = view.data().as_ptr() as usize - base;
                mapped_bytes += view.data().len();
                let entry = TensorEntry {
                    stored_name: name.to_string(),
                    file: file.clone(),
                    dtype,
                    shape: view.shape().to_vec(),
                    bytes: Bytes::from_mmap(map.clone(), start, view.data().len()),
                };
                if let Some(prev) = tensors.insert(canonical.clone(), entry) {
                    return Err(CoreError::tensor(
                        file,
                        name,
                        format!(
                            "duplicate of `{}` in {}",
                            prev.stored_name,
                            prev.file.display()
                        ),
                    ));
                }
            }
            for name in expected {
                if !found.contains(name) {
                    return Err(CoreError::tensor(
                        file,
                        name,
                        "listed in model.safetensors.index.json but missing from this shard",
                    ));
                }
            }
            progress(i + 1, total);
        }
        let mlx_layout = detect_mlx_layout(&tensors, &config);
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            config,
            tensors,
            mlx_layout,
            mapped_bytes,
        })
    }

    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn entry(&self, name: &str) -> Result<&TensorEntry> {
        self.tensors
            .get(name)
            .ok_or_else(|| CoreError::tensor(&self.dir, name, "missing from the checkpoint"))
    }

    /// A small dense tensor of exactly `len` elements (any shape whose product is `len`), converted to f32.
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let e = self.entry(name)?;
        let StoredDType::Dense(dt) = e.dtype else {
            return Err(CoreError::tensor(
                &e.file,
                &e.stored_name,
                "expected a float tensor, found U32",
            ));
        };
        let n: usize = e.shape.iter().product();
        if n != len {
            return Err(CoreError::tensor(
                &e.file,
                &e.stored_name,
                format!("expected {len} elements, found shape {:?}", e.shape),
            ));
        }
        Ok(dt.to_f32_vec(&e.bytes))
    }

    /// The matrix `{module}.weight` of shape `[rows, cols]`, dense or MLX affine (`.scales`/`.biases` beside it).
    pub fn matrix(&self, module: &str, rows: usize, cols: usize) -> Result<StoredMatrix> {
        let wname = format!("{module}.weight");
        let w = self.entry(&wname)?;
        let scales_name = format!("{module}.scales");
        if !self.has(&scales_name) {
            let StoredDType::Dense(dtype) = w.dtype else {
                return Err(CoreError::tensor(
                    &w.file,
                    &w.stored_name,
                    format!("U32 codes without `{scales_name}`: incomplete quantized tensor"),
                ));
            };
            if w.shape != [rows, cols] {
                return Err(CoreError::tensor(
                    &w.file,
                    &w.stored_name,
                    format!("expected shape [{rows}, {cols}], found {:?}", w.shape),
                ));
            }
            return Ok(StoredMatrix::Dense {
                dtype,
                data: w.bytes.clone(),
                rows,
                cols,
            });
        }
        let s = self.entry(&scales_name)?;
        let b = self.entry(&format!("{module}.biases"))?;
        let bad = |e: &TensorEntry, m: String| CoreError::tensor(&e.file, &e.stored_name, m);
        if w.dtype != StoredDType::U32 {
            return Err(bad(
                w,
                format!(
                    "quantized weight must be U32 codes, found {}",
                    w.dtype.name()
                ),
            ));
        }
        if w.shape.len() != 2 || w.shape[0] != rows || s.shape.len() != 2 || s.shape[0] != rows {
            return Err(bad(
                w,
                format!(
                    "expected {rows} rows of codes and scales, found weight {:?} scales {:?}",
                    w.shape, s.shape
                ),
            ));
        }
        if (w.shape[1] * 32) % cols != 0 {
            return Err(bad(
                w,
                format!(
                    "{} packed words per row do not fit {cols} columns",
                    w.shape[1]
                ),
            ));
        }
        let bits = (w.shape[1] * 32 / cols) as u32;
        if !SUPPORTED_BITS.contains(&bits) {
            return Err(bad(
                w,
                format!("unsupported quantization bits {bits} (supported: 2, 3, 4, 5, 6, 8)"),
            ));
        }
        if s.shape[1] == 0 || !cols.is_multiple_of(s.shape[1]) {
            return Err(bad(
                s,
                format!("{} groups per row do not divide {cols} columns", s.shape[1]),
            ));
        }
        let group_size = cols / s.shape[1];
        if !SUPPORTED_GROUPS.contains(&group_size) {
            return Err(bad(
                s,
                format!("unsupported group size {group_size} (supported: 32, 64, 128)"),
            ));
        }
        let StoredDType::Dense(scale_dtype) = s.dtype else {
            return Err(bad(s, "scales must be float".into()));
        };
        if b.shape != s.shape || b.dtype != s.dtype {
            return Err(bad(
                b,
                format!(
                    "biases {:?} {} do not match scales {:?} {}",
                    b.shape,
                    b.dtype.name(),
                    s.shape,
                    s.dtype.name()
                ),
            ));
        }
        let declared = self.config.quant_params_for(
            w.stored_name
                .strip_suffix(".weight")
                .unwrap_or(&w.stored_name),
        );
        if let Some(QuantParams {
            bits: db,
            group_size: dg,
        }) = declared
        {
            if (db, dg) != (bits, group_size) {
                return Err(bad(w, format!(
                    "config.json declares {db}-bit group {dg} but the tensor shapes say {bits}-bit group {group_size}")));
            }
        }
        Ok(StoredMatrix::Affine {
            bits,
            group_size,
            codes: w.bytes.clone(),
            scales: s.bytes.clone(),
            biases: b.bytes.clone(),
            scale_dtype,
            rows,
            cols,
        })
    }
}

/// The safetensors files of `dir` and, for a sharded checkpoint, the tensor names the index expects in each.
fn shard_files(dir: &Path) -> Result<Vec<(PathBuf, Vec<String>)>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| CoreError::io(&index, e))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| CoreError::Json {
            path: index.clone(),
            message: e.to_string(),
        })?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| CoreError::checkpoint(&index, "missing `weight_map` object"))?;
        let mut per_file: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (tensor, file) in map {
            let file = file.as_str().ok_or_else(|| {
                CoreError::tensor(&index, tensor, "weight_map value is not a file name")
            })?;
            per_file
                .entry(file.to_string())
                .or_default()
                .push(tensor.clone());
        }
        let mut out = Vec::new();
        for (file, names) in per_file {
            let path = dir.join(&file);
            if !path.is_file() {
                return Err(CoreError::checkpoint(
                    &index,
                    format!(
                        "names shard `{file}` (for tensor `{}`), which does not exist",
                        names[0]
                    ),
                ));
            }
            out.push((path, names));
        }
        return Ok(out);
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![(single, Vec::new())]);
    }
    // Some exports use other names (e.g. `weights.safetensors`): take every safetensors file, sorted.
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| CoreError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(CoreError::checkpoint(
            dir,
            "no *.safetensors files and no model.safetensors.index.json",
        ));
    }
    Ok(found.into_iter().map(|p| (p, Vec::new())).collect())
}

fn map_file(path: &Path) -> Result<Arc<memmap2::Mmap>> {
    let file = std::fs::File::open(path).map_err(|e| CoreError::io(path, e))?;
    // SAFETY: the checkpoint files are treated as read-only for the life of the process; a concurrent writer
    // truncating them is outside what we can defend against (as with every mmap-based loader).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| CoreError::io(path, e))?;
    Ok(Arc::new(map))
}

/// MLX converters move conv1d to `[C, K, 1]`; the raw HF layout is `[C, 1, K]` (qwen35.md §4.1).
fn detect_mlx_layout(tensors: &BTreeMap<String, TensorEntry>, config: &ModelConfig) -> bool {
    let k = config.conv_kernel;
    let mut seen: HashMap<bool, usize> = HashMap::new();
    for (name, e) in tensors {
        if name.ends_with("linear_attn.conv1d.weight") && e.shape.len() == 3 {
            *seen.entry(e.shape[2] == 1 && e.shape[1] == k).or_default() += 1;
        }
    }
    seen.get(&true).copied().unwrap_or(0) > 0
}
