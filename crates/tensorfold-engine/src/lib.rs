//! Engine layer: turns requests into rounds over slots, verifies drafted windows, keeps what the target itself
//! would draw, and streams tokens out. Knows nothing of HTTP.

pub mod api;
pub mod check;
pub mod drafter;
pub mod generate;
pub mod penalties;
pub mod prompt_cache;
mod round;
pub mod scheduler;

pub use api::{
    EngineConfig, Event, FinishReason, Penalties, Request, Stats, SubmitError, TokenLogprob, Usage,
};
pub use drafter::{ContextCopy, DraftTree, Drafter, DrafterFactory};
pub use generate::{generate, GenerateOutput, GenerateRequest};
pub use scheduler::{spawn, EngineHandle};
