//! Model layer: a family's graph over a round of rows and its per-slot state layout. Knows nothing of HTTP or
//! scheduling.

pub mod logits;
pub mod mtp;
pub mod qwen35;

pub use logits::Logits;
pub use mtp::{Mtp, MtpOut, MtpSlot};
pub use qwen35::{Qwen35, SlotSnapshot, SlotState};
