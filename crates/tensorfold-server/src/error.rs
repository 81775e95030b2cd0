//! API errors in OpenAI's shape `{"error": {message, type, param, code}}` with their HTTP status (and
//! `Retry-After` when retrying helps); every failure a client can cause ends here, never in a panic or a 500.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tensorfold_engine::SubmitError;

#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `rate_limit_error`, `server_error`, ...
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after_secs: None,
        }
    }

    /// 400 for a parameter with a value out of range or not allowed.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        e.param = Some(param.into());
        e.code = Some("invalid_value");
        e
    }

    /// 400 for a parameter of the wrong JSON type.
    pub fn wrong_type(param: &str, expected: &str, got: &Value) -> Self {
        let mut e = Self::invalid(
            param,
            format!(
                "'{param}' must be {expected}, got {}",
                describe_json_type(got)
            ),
        );
        e.code = Some("invalid_type");
        e
    }

    /// 400 for a required parameter that is absent.
    pub fn missing(param: &str) -> Self {
        let mut e = Self::invalid(param, format!("'{param}' is a required property"));
        e.code = Some("missing_required_parameter");
        e
    }

    /// 400 for a parameter this server understands but does not implement.
    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        let mut e = Self::invalid(param, message);
        e.code = Some("unsupported_parameter");
        e
    }

    /// 400 for a body that is not JSON (or not a JSON object).
    pub fn bad_json(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        e.code = Some("invalid_json");
        e
    }

    pub fn context_length(param: &str, message: impl Into<String>) -> Self {
        let mut e = Self::invalid(param, message);
        e.code = Some("context_length_exceeded");
        e
    }

    pub fn unauthorized() -> Self {
        let mut e = Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "Incorrect or missing API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
        );
        e.code = Some("invalid_api_key");
        e
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message);
        e.code = Some("not_found");
        e
    }

    pub fn method_not_allowed() -> Self {
        let mut e = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed on this path",
        );
        e.code = Some("method_not_allowed");
        e
    }

    /// The body was unreadable or over the size limit (413).
    pub fn body(status: StatusCode, message: impl Into<String>) -> Self {
        let mut e = Self::new(status, "invalid_request_error", message);
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            e.code = Some("payload_too_large");
        }
        e
    }

    /// A server-side failure that is not the client's fault.
    pub fn internal(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message);
        e.code = Some("server_error");
        e
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message);
        e.code = Some("server_shutting_down");
        e.retry_after_secs = Some(30);
        e
    }

    /// Maps the engine's refusal; `prompt_param` names the field that carried the prompt.
    pub fn from_submit(e: SubmitError, prompt_param: &str) -> Self {
        match e {
            SubmitError::QueueFull(_) => {
                let mut err = Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    e.to_string(),
                );
                err.code = Some("rate_limit_exceeded");
                err.retry_after_secs = Some(1);
                err
            }
            SubmitError::ContextLength { .. } => Self::context_length(prompt_param, e.to_string()),
            SubmitError::Invalid(m) => Self::invalid(prompt_param, m),
            SubmitError::KvCapacity { .. } => Self::context_length(prompt_param, e.to_string()),
            SubmitError::ShuttingDown => Self::unavailable(e.to_string()),
        }
    }

    /// The JSON body, also sent as an SSE event when a stream fails after it opened.
    pub fn to_json(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.to_json().to_string();
        let mut resp = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if let Some(secs) = self.retry_after_secs {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

/// A JSON value's type in words, for error messages.
pub fn describe_json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
