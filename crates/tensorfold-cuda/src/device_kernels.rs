//! The kernel module's contents as the host knows them: every kernel it must export, and which take dynamic
//! shared memory.

/// Name prefixes of the kernels that take dynamic shared memory past the default 48 KB.
pub(super) const DYNAMIC_SMEM_KERNELS: &[&str] = &[
    "attn_block_",
    "attn_chunk_g6",
    "project_wgmma_gemm_",
    "project_wgmma_bf16",
];

/// Every kernel the module must export.
pub fn kernel_names() -> Vec<String> {
    let mut v: Vec<String> = [
        "copy_words",
        "copy_pages",
        "rms_norm",
        "add_assign",
        "swiglu",
        "gather_rows",
        "attn_prep",
        "attn_chunk_g1",
        "attn_chunk_g2",
        "attn_chunk_g3",
        "attn_chunk_g6",
        "attn_merge",
        "kv_keep",
        "dn_conv",
        "dn_recur_v1",
        "dn_recur_v2",
        "dn_recur_v16",
        "dn_recur_ring_v1",
        "dn_recur_ring_v2",
        "dn_recur_ring_v16",
        "dn_recur_batch_v1",
        "dn_recur_batch_v2",
        "dn_recur_batch_v16",
        "dn_recur_oct",
        "dn_norm",
        "dn_tail_keep",
        "prepare_x",
        "add_rms_norm",
        "rms_norm_c4",
        "add_rms_norm_c4",
        "rms_norm_c8",
        "add_rms_norm_c8",
        "draw_partial",
        "draw_finish",
        "row_top",
        "edit_logits",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for dt in ["f32", "f16", "bf16"] {
        v.push(format!("project_dense_{dt}"));
        v.push(format!("embed_dense_{dt}"));
        for bits in [2, 3, 4, 5, 6, 8] {
            v.push(format!("project_affine_{bits}_{dt}"));
            v.push(format!("embed_affine_{bits}_{dt}"));
        }
        v.push(format!("embed_affine_4_tiled_{dt}"));
        for nt in [1, 2, 4] {
            for g in [1, 2, 4] {
                v.push(format!("project_mma_a4_g{g}_{dt}_nt{nt}"));
                v.push(format!("project_stream_a4_g{g}_{dt}_nt{nt}_s4_m1"));
                if g < 4 {
                    v.push(format!("project_stream_a4_g{g}_{dt}_nt{nt}_s8_m1"));
                    v.push(format!("project_stream_a4_g{g}_{dt}_nt{nt}_s4_m2"));
                }
                if g == 2 {
                    v.push(format!("project_stream_a4_g2_{dt}_nt{nt}_s4_m1_w8"));
                }
            }
        }
        for g in [1, 2] {
            v.push(format!("project_gemm_a4_g{g}_{dt}"));
        }
        for suffix in ["", "_n16", "_m1", "_n16_m1", "_n64"] {
            v.push(format!("project_wgmma_a4_g2_{dt}{suffix}"));
        }
    }
    for nt in [1, 2, 4] {
        v.push(format!("project_mma_bf16_nt{nt}"));
    }
    for suffix in ["", "_n16", "_n64"] {
        v.push(format!("project_wgmma_bf16{suffix}"));
    }
    v.push("project_gemm_bf16".into());
    v.push("project_wgmma_gemm_bf16_w2n256".into());
    for wgs in [2, 3] {
        v.push(format!("project_wgmma_gemm_bf16_w{wgs}"));
        for dt in ["f32", "f16", "bf16"] {
            v.push(format!("project_wgmma_gemm_a4_g2_{dt}_w{wgs}"));
        }
    }
    for hd in crate::attention::BLOCK_HEAD_DIMS {
        for qt in ["2", "3", "3k4", "3k8"] {
            v.push(format!("attn_block_d{hd}_q{qt}"));
            v.push(format!("attn_block_d{hd}_q{qt}_kvbf16"));
        }
    }
    // The attention kernels for bf16 KV pages (--kv-cache-dtype bf16).
    for name in [
        "attn_chunk_g1",
        "attn_chunk_g2",
        "attn_chunk_g3",
        "attn_chunk_g6",
        "kv_keep",
    ] {
        v.push(format!("{name}_kvbf16"));
    }
    v
}
