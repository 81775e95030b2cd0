//! TensorFold's OpenAI-compatible HTTP server (axum): routes, request validation, chat templates, SSE, tool-call and
//! reasoning parsing over an engine handle; every client error is a JSON 4xx and the server keeps serving.

pub mod chat_request;
pub mod error;
pub mod fields;
pub mod generation;
pub mod handlers;
pub mod metrics;
pub mod misc;
pub mod prompt;
pub mod reasoning;
pub mod request;
pub mod respond;
pub mod state;
pub mod stop;
pub mod stream;
pub mod toolcall;
pub mod toolschema;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use std::future::Future;

pub use error::ApiError;
pub use state::{AppState, ModelAssets, SamplingDefaults, ServerOptions};

/// Every route of the server, with the API-key guard and the body size limit.
pub fn router(state: AppState) -> Router {
    let limit = state.0.options.max_body_bytes;
    Router::new()
        .route("/health", get(misc::health))
        .route("/v1/models", get(misc::models))
        .route("/metrics", get(misc::metrics))
        .route("/v1/metrics", get(misc::metrics))
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/chat/completions", post(handlers::chat_completions))
        .route("/tokenize", post(misc::tokenize))
        .route("/v1/tokenize", post(misc::tokenize))
        .route("/detokenize", post(misc::detokenize))
        .route("/v1/detokenize", post(misc::detokenize))
        .fallback(misc::not_found)
        .method_not_allowed_fallback(misc::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            misc::guard,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Serves on `listener` until `shutdown` resolves, then lets in-flight requests finish. The caller shuts the
/// engine down afterwards (`EngineHandle::shutdown`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
