//! Engine layer: turns requests into rounds over slots and draws tokens with the keyed rule. Knows nothing of
//! HTTP.

pub mod generate;

pub use generate::{generate, FinishReason, GenerateOutput, GenerateRequest};
