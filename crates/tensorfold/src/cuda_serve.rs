//! `serve --device cuda`: the checkpoint on the GPU with a KV cache sized from the device memory left after the
//! weights and a round of the widest prompt chunk (vLLM's --gpu-memory-utilization), so the engine admits a request
//! only while its KV pages fit (an unbounded pool let many long requests at once run the device out of memory).

use anyhow::{bail, Result};
use tensorfold_backend::RowRef;
use tensorfold_core::{Checkpoint, LayerKind, ModelConfig};
use tensorfold_cuda::{CudaBackend, PAGE_ROWS};
use tensorfold_model::Qwen35;

/// What the server may take of the device and what its streams hold beside the KV pages.
pub struct ServeMemory {
    /// Share of the device's memory TensorFold may use in all (weights, buffers, states, KV cache).
    pub utilization: f64,
    /// A fixed KV cache in bytes instead of what the share leaves.
    pub kv_bytes: Option<usize>,
    pub parallel: usize,
    pub prefill_chunk: usize,
    /// The prompt cache's device memory (None: a tenth of what is left for the KV cache).
    pub prompt_cache_bytes: Option<usize>,
    pub context: usize,
    /// How the KV cache stores keys and values (`--kv-cache-dtype`): bf16 pages hold twice the tokens.
    pub kv_dtype: tensorfold_backend::KvDtype,
}

/// The prompt cache's share of the memory left for the KV cache when `--prompt-cache-gib` is not given.
const PROMPT_CACHE_SHARE: f64 = 0.1;

const GIB: f64 = (1u64 << 30) as f64;

/// Bytes of one stream's DeltaNet states (recurrent state and conv taps, f32), twice: a round's new states are
/// written beside the kept ones.
fn slot_state_bytes(c: &ModelConfig) -> usize {
    let linear = c
        .layer_types
        .iter()
        .filter(|k| matches!(k, LayerKind::Linear))
        .count();
    let per_layer = c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim
        + c.conv_dim() * c.conv_kernel.saturating_sub(1);
    2 * linear * per_layer * std::mem::size_of::<f32>()
}

/// Loads the checkpoint, runs one round of `prefill_chunk` prompt rows (the scratch pools keep the buffers it
/// took, as serving would), then limits the KV cache to what `mem` leaves of the free memory. Returns the model
/// and the prompt cache's budget in bytes.
pub fn load(ck: &Checkpoint, mem: &ServeMemory) -> Result<(Qwen35<CudaBackend>, usize)> {
    let m = crate::cuda::load(ck, mem.kv_dtype)?;
    // No round takes more prompt rows than the context holds.
    let rows = mem.prefill_chunk.clamp(1, mem.context.max(1));
    // A device error inside an op panics (the Backend ops have no error channel): here, before serving, it becomes
    // a clear error instead.
    let warm = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut slot = m.new_slot();
        let refs: Vec<RowRef> = (0..rows).map(|i| RowRef::chain(0, 0, 0, i)).collect();
        // Logits for a window's worth of rows, as a round that also verifies drafts asks for.
        let logit_rows: Vec<usize> = (rows.saturating_sub(64)..rows).collect();
        m.forward(&refs, &vec![0; rows], &mut [&mut slot], &logit_rows)
            .map(|_| ())
    }));
    match warm {
        Ok(r) => r?,
        Err(_) => bail!(
            "--device cuda: a round of {rows} prompt rows failed on the device (see the message above); lower \
             --prefill-chunk"
        ),
    }
    let (free, total) = m.backend.memory().map_err(anyhow::Error::msg)?;
    let c = &ck.config;
    let page = m.backend.kv_page_bytes(c.num_key_value_heads * c.head_dim);
    let layers = m.attention_layers() + usize::from(m.mtp.is_some());
    let states = mem.parallel * slot_state_bytes(c);
    let used = total.saturating_sub(free);
    // Pages the warm-up round took and gave back are still allocated: they count as room, not as use.
    let cached = m.backend.kv_cached_pages();
    // What the share leaves for the KV cache and the prompt cache together.
    let left =
        ((mem.utilization * total as f64) as usize).saturating_sub(used + states) + cached * page;
    let cache = mem
        .prompt_cache_bytes
        .unwrap_or((left as f64 * PROMPT_CACHE_SHARE) as usize);
    let kv = mem.kv_bytes.unwrap_or(left.saturating_sub(cache));
    let pages = kv / page;
    let tokens = pages / layers.max(1) * PAGE_ROWS;
    if tokens < PAGE_ROWS && mem.kv_bytes.is_some() {
        bail!("--kv-cache-gib leaves less than one KV page for each of the {layers} attention layers: raise it");
    }
    if tokens < PAGE_ROWS {
        bail!(
            "--device cuda: {:.1} of {:.1} GiB are in use after loading and a {rows}-row round, and {} parallel \
             streams' states ({:.1} GiB) and the prompt cache ({:.1} GiB) leave no room for the KV cache at \
             --gpu-memory-utilization {}: raise it, or lower --parallel, --prefill-chunk or --prompt-cache-gib",
            used as f64 / GIB,
            total as f64 / GIB,
            mem.parallel,
            states as f64 / GIB,
            cache as f64 / GIB,
            mem.utilization
        );
    }
    m.backend.set_kv_pages(pages);
    eprintln!(
        "cuda: {:.1} of {:.1} GiB in use after loading and a {rows}-row round; KV cache {:.2} GiB, {tokens} tokens \
         across all streams{}; prompt cache {:.2} GiB",
        used as f64 / GIB,
        total as f64 / GIB,
        (pages * page) as f64 / GIB,
        if tokens < mem.context {
            format!(" (fewer than the context, {}: longer requests are refused)", mem.context)
        } else {
            String::new()
        },
        cache as f64 / GIB
    );
    Ok((m, cache))
}

#[cfg(test)]
mod tests {
    use super::slot_state_bytes;
    use crate::synth::{config, dims, Shape};
    use tensorfold_core::ModelConfig;

    #[test]
    fn a_27b_streams_states_are_two_copies_of_48_layers_of_recurrent_state_and_conv_taps() {
        let json = config(Shape::Q27b, &dims(Shape::Q27b), 64, false, false);
        let c =
            ModelConfig::from_value(&json, std::path::Path::new("config.json")).expect("parses");
        // 48 DeltaNet layers of 48 value heads' 128 × 128 state, and conv taps of 2·16·128 + 48·128 = 10,240
        // channels × 3 earlier positions; f32, twice.
        assert_eq!(
            slot_state_bytes(&c),
            2 * 48 * (48 * 128 * 128 + 10_240 * 3) * 4
        );
    }
}
