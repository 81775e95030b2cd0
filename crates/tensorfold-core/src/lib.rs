//! Core layer: errors, config parsing, checkpoint reading, tokenizer and chat template, keyed sampling and
//! token_sha. Knows nothing about compute.

pub mod chat;
pub mod checkpoint;
pub mod config;
pub mod error;
pub mod sampling;
pub mod stored;
pub mod tokenizer;

pub use checkpoint::Checkpoint;
pub use config::{LayerKind, ModelConfig};
pub use error::{CoreError, Result};
pub use stored::{Bytes, DenseDType, MatrixRef, StoredMatrix};
