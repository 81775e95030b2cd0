//! Engine layer: turns requests into rounds over slots and draws tokens with the keyed rule. Knows nothing of
//! HTTP.

pub mod api;
pub mod generate;
pub mod penalties;
pub mod scheduler;

pub use api::FinishReason;
pub use api::{EngineConfig, Event, Penalties, Request, Stats, SubmitError, TokenLogprob, Usage};
pub use generate::{generate, GenerateOutput, GenerateRequest};
pub use scheduler::{spawn, EngineHandle};
