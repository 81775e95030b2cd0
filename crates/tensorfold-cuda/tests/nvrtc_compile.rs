//! Compiles every kernel with NVRTC for sm_90 and sm_90a where NVRTC is available (CI's pip wheel, the GPU
//! machine); skips with a note where it is not (unless TENSORFOLD_REQUIRE_NVRTC is set, as in CI), since no GPU or
//! driver is needed to compile. The sm_90a cubin's register counts are checked where occupancy depends on them.

use std::collections::HashMap;
use tensorfold_cuda::{libs, nvrtc};

#[test]
fn every_kernel_compiles_to_an_sm90_cubin_with_nvrtc() {
    match libs::ensure_nvrtc() {
        Err(e) => {
            // CI installs NVRTC from the pip wheel and sets TENSORFOLD_REQUIRE_NVRTC: there a skip is a failure.
            assert!(
                std::env::var_os("TENSORFOLD_REQUIRE_NVRTC").is_none(),
                "NVRTC is required here: {e}"
            );
            eprintln!("skipped: {e}");
        }
        Ok(from) => {
            eprintln!("NVRTC from {from}, version {:?}", nvrtc::nvrtc_version());
            for arch in ["sm_90", "sm_90a"] {
                let t = std::time::Instant::now();
                let cubin = nvrtc::compile_cubin(&nvrtc::program_source(), &nvrtc::options(arch))
                    .unwrap_or_else(|e| panic!("{e}"));
                eprintln!("{arch}: {} bytes in {:?}", cubin.len(), t.elapsed());
                assert!(cubin.len() > 1000);
                // For reading the SASS (cuobjdump -sass) without a GPU.
                if let Some(dir) = std::env::var_os("TENSORFOLD_CUBIN_OUT") {
                    let path = std::path::Path::new(&dir).join(format!("{arch}.cubin"));
                    std::fs::write(&path, &cubin).expect("writing the cubin");
                }
                if arch == "sm_90a" {
                    bf16_decode_kernels_fit_two_blocks_an_sm(&register_counts(&cubin));
                }
            }
        }
    }
}

/// The bf16 decode kernels run 16-warp blocks (project.rs mma_warps) with no minimum in their launch bounds, so
/// nothing but their register count keeps two blocks on an SM: 65,536 registers / 512 threads / 2 = 64. Call 176
/// (an H100) found the 2-row-tile kernel at 71 registers, one block an SM, and 8-row bf16 rounds 16% slower.
fn bf16_decode_kernels_fit_two_blocks_an_sm(regs: &HashMap<String, u32>) {
    for nt in [1, 2, 4] {
        let name = format!("project_mma_bf16_nt{nt}");
        let n = *regs
            .get(&name)
            .unwrap_or_else(|| panic!("{name} not in the cubin"));
        eprintln!("{name}: {n} registers");
        assert!(
            n <= 64,
            "{name} takes {n} registers: one 16-warp block an SM"
        );
    }
}

/// Each kernel's register count in a cubin: the EIATTR_REGCOUNT (0x2f) entries of its `.nv.info` section, each a
/// symbol index and a count. Read by hand: no ELF crate reads NVIDIA's attribute records, and the sections and
/// symbols need only fixed-offset ELF64 headers.
fn register_counts(elf: &[u8]) -> HashMap<String, u32> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let cstr = |o: usize| {
        let end = o + elf[o..]
            .iter()
            .position(|&b| b == 0)
            .expect("a terminated name");
        String::from_utf8_lossy(&elf[o..end]).into_owned()
    };
    // Section headers (64 bytes each): name, type, flags, addr, offset (+24), size (+32), link (+40).
    let (shoff, shnum, shstrndx) = (u64_at(0x28), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * 64;
    let names_at = u64_at(header(shstrndx) + 24);
    let section = |name: &str| {
        (0..shnum)
            .map(header)
            .find(|&h| cstr(names_at + u32_at(h)) == name)
            .unwrap_or_else(|| panic!("no {name} section"))
    };
    let symtab = section(".symtab");
    let (sym_at, sym_size) = (u64_at(symtab + 24), u64_at(symtab + 32));
    let strings_at = u64_at(header(u32_at(symtab + 40)) + 24);
    let symbol = |i: usize| cstr(strings_at + u32_at(sym_at + i * 24));
    assert!(sym_size % 24 == 0);
    let info = section(".nv.info");
    let (mut o, end) = (u64_at(info + 24), u64_at(info + 24) + u64_at(info + 32));
    let mut regs = HashMap::new();
    while o < end {
        // A record: format, attribute, then by format: 0x04 a 16-bit size and that many bytes, 0x03 two bytes,
        // 0x01 none.
        let (format, attribute) = (elf[o], elf[o + 1]);
        match format {
            0x04 => {
                let size = u16_at(o + 2);
                if attribute == 0x2f {
                    regs.insert(symbol(u32_at(o + 4)), u32_at(o + 8) as u32);
                }
                o += 4 + size;
            }
            0x03 => o += 4,
            _ => o += 2,
        }
    }
    regs
}
