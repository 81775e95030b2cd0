//! Engine layer: turns requests into rounds over slots, verifies drafted windows, keeps what the target itself
//! would draw, and streams tokens out. Knows nothing of HTTP.

pub mod api;
pub mod check;
pub mod drafters;
pub mod generate;
pub mod penalties;
mod plan;
pub mod prompt_cache;
mod round;
pub mod scheduler;
mod walk;

pub use api::{
    EngineConfig, EngineTimes, Event, FinishReason, Penalties, Request, Stats, SubmitError,
    TokenLogprob, Usage,
};
/// The drafters module under its first name.
pub use drafters as drafter;
pub use drafters::{ContextCopy, CopyConfig, DraftTree, Drafter, DrafterFactory, NoDrafts};
pub use generate::{generate, GenerateOutput, GenerateRequest};
pub use scheduler::{spawn, EngineHandle};
