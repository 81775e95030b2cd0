//! The one error type of the core layer: every variant names the file (and tensor) it is about,
//! so a bad checkpoint or request turns into one clear line instead of a panic.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON: {message}")]
    Json { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("{path}: tensor `{tensor}`: {message}")]
    Tensor {
        path: PathBuf,
        tensor: String,
        message: String,
    },
    #[error("{path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("out of memory: {0}")]
    Resource(String),
}

pub type Result<T, E = CoreError> = std::result::Result<T, E>;

impl CoreError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CoreError::Io {
            path: path.into(),
            source,
        }
    }
    pub fn config(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        CoreError::Config {
            path: path.into(),
            message: message.into(),
        }
    }
    pub fn tensor(
        path: impl Into<PathBuf>,
        tensor: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        CoreError::Tensor {
            path: path.into(),
            tensor: tensor.into(),
            message: message.into(),
        }
    }
    pub fn checkpoint(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        CoreError::Checkpoint {
            path: path.into(),
            message: message.into(),
        }
    }
}
