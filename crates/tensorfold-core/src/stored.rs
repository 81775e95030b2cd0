//! Weights as they are stored in a checkpoint: dense f32/f16/bf16 or MLX affine-quantized codes, viewed
//! zero-copy over the mmap. Compute layers read these directly; nothing here dequantizes a whole matrix.

/// Element type of a dense stored tensor (also of MLX scales and biases).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseDType {
    F32,
    F16,
    BF16,
}

impl DenseDType {
    pub fn size(self) -> usize {
        match self {
            DenseDType::F32 => 4,
            DenseDType::F16 | DenseDType::BF16 => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DenseDType::F32 => "F32",
            DenseDType::F16 => "F16",
            DenseDType::BF16 => "BF16",
        }
    }
    /// Reads element `i` of little-endian bytes `data` (no alignment assumed).
    #[inline]
    pub fn read(self, data: &[u8], i: usize) -> f32 {
        match self {
            DenseDType::F32 => f32::from_le_bytes([
                data[4 * i],
                data[4 * i + 1],
                data[4 * i + 2],
                data[4 * i + 3],
            ]),
            DenseDType::F16 => {
                half::f16::from_bits(u16::from_le_bytes([data[2 * i], data[2 * i + 1]])).to_f32()
            }
            DenseDType::BF16 => {
                f32::from_bits((u16::from_le_bytes([data[2 * i], data[2 * i + 1]]) as u32) << 16)
            }
        }
    }
    /// Converts a whole little-endian byte slice to f32.
    pub fn to_f32_vec(self, data: &[u8]) -> Vec<f32> {
        (0..data.len() / self.size())
            .map(|i| self.read(data, i))
            .collect()
    }
}

/// A 2-D weight matrix `[rows, cols]` (nn.Linear convention: y = x Wᵀ, one row per output feature) in its
/// stored format. Byte slices are little-endian and carry no alignment guarantee.
#[derive(Clone, Copy, Debug)]
pub enum MatrixRef<'a> {
    Dense {
        dtype: DenseDType,
        data: &'a [u8],
        rows: usize,
        cols: usize,
    },
    /// MLX affine quantization: `w[o,c] = scales[o, c/gs] * q[o,c] + biases[o, c/gs]`; the codes of one row
    /// form an LSB-first bitstream of `cols * bits` bits packed in little-endian u32 words.
    Affine {
        bits: u32,
        group_size: usize,
        codes: &'a [u8],
        scales: &'a [u8],
        biases: &'a [u8],
        scale_dtype: DenseDType,
        rows: usize,
        cols: usize,
    },
}

impl<'a> MatrixRef<'a> {
    pub fn rows(&self) -> usize {
        match *self {
            MatrixRef::Dense { rows, .. } | MatrixRef::Affine { rows, .. } => rows,
        }
    }
    pub fn cols(&self) -> usize {
        match *self {
            MatrixRef::Dense { cols, .. } | MatrixRef::Affine { cols, .. } => cols,
        }
    }
    /// Bytes read to use the whole matrix once (for bandwidth accounting).
    pub fn stored_bytes(&self) -> usize {
        match *self {
            MatrixRef::Dense { data, .. } => data.len(),
            MatrixRef::Affine {
                codes,
                scales,
                biases,
                ..
            } => codes.len() + scales.len() + biases.len(),
        }
    }
    /// Bytes of one packed code row of an affine matrix: `cols * bits / 32` u32 words.
    pub fn affine_row_bytes(cols: usize, bits: u32) -> usize {
        cols * bits as usize / 32 * 4
    }
}

/// Shared, immutable bytes: a range of a memory-mapped file or an owned buffer (synthetic weights, tests).
#[derive(Clone)]
pub struct Bytes {
    owner: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bytes({} bytes)", self.len)
    }
}

impl Bytes {
    pub fn from_mmap(map: std::sync::Arc<memmap2::Mmap>, start: usize, len: usize) -> Self {
        Bytes {
            owner: map,
            start,
            len,
        }
    }
    pub fn from_vec(v: Vec<u8>) -> Self {
        let len = v.len();
        Bytes {
            owner: std::sync::Arc::new(v),
            start: 0,
            len,
        }
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }
}

/// An owned handle to a stored matrix (cheap to clone: the bytes are shared).
#[derive(Clone, Debug)]
pub enum StoredMatrix {
    Dense {
        dtype: DenseDType,
        data: Bytes,
        rows: usize,
        cols: usize,
    },
    Affine {
        bits: u32,
        group_size: usize,
        codes: Bytes,
        scales: Bytes,
        biases: Bytes,
        scale_dtype: DenseDType,
        rows: usize,
        cols: usize,
    },
}

impl StoredMatrix {
    pub fn view(&self) -> MatrixRef<'_> {
        match self {
            StoredMatrix::Dense {
                dtype,
                data,
                rows,
                cols,
            } => MatrixRef::Dense {
                dtype: *dtype,
                data,
                rows: *rows,
                cols: *cols,
            },
            StoredMatrix::Affine {
                bits,
                group_size,
                codes,
                scales,
                biases,
                scale_dtype,
                rows,
                cols,
            } => MatrixRef::Affine {
                bits: *bits,
                group_size: *group_size,
                codes,
                scales,
                biases,
                scale_dtype: *scale_dtype,
                rows: *rows,
                cols: *cols,
            },
        }
    }
    pub fn rows(&self) -> usize {
        self.view().rows()
    }
    pub fn cols(&self) -> usize {
        self.view().cols()
    }
    /// A human label of the storage format, e.g. `BF16` or `MLX 4-bit g64`.
    pub fn format_label(&self) -> String {
        match self {
            StoredMatrix::Dense { dtype, .. } => dtype.name().to_string(),
            StoredMatrix::Affine {
                bits, group_size, ..
            } => format!("MLX {bits}-bit g{group_size}"),
        }
    }
}
