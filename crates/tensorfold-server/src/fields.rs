//! Typed, range-checked reads of request fields from a JSON object; every wrong type or value becomes a 400
//! naming the parameter, and `null` reads as absent (as OpenAI's clients send it).

use crate::error::ApiError;
use serde_json::{Map, Value};

/// A request body as a JSON object, with the accessors below.
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    /// Prefix for parameter names in errors, e.g. `stream_options.`.
    prefix: String,
}

/// Parses a request body: it must be UTF-8 JSON whose top level is an object.
pub fn parse_body(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_json(
            "the request body is empty: expected a JSON object",
        ));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_json(format!("the request body is not valid JSON: {e}")))?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::bad_json(format!(
            "the request body must be a JSON object, got {}",
            crate::error::describe_json_type(&other)
        ))),
    }
}

impl<'a> Fields<'a> {
    pub fn new(map: &'a Map<String, Value>) -> Self {
        Fields {
            map,
            prefix: String::new(),
        }
    }

    /// The full parameter name of `key` (with this object's prefix).
    pub fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The raw value, `None` when absent or null.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(ApiError::wrong_type(&self.name(key), "a boolean", v)),
        }
    }

    pub fn str(&self, key: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(ApiError::wrong_type(&self.name(key), "a string", v)),
        }
    }

    /// A finite number within `[lo, hi]`.
    pub fn number(&self, key: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let Some(x) = v.as_f64().filter(|x| x.is_finite()) else {
            return Err(ApiError::wrong_type(&self.name(key), "a number", v));
        };
        if !(lo..=hi).contains(&x) {
            return Err(ApiError::invalid(
                self.name(key),
                format!(
                    "'{}' must be between {lo} and {hi}, got {x}",
                    self.name(key)
                ),
            ));
        }
        Ok(Some(x))
    }

    /// An integer within `[lo, hi]` (a float with no fraction, like `16.0`, counts as an integer).
    pub fn int(&self, key: &str, lo: i128, hi: i128) -> Result<Option<i128>, ApiError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let x =
            as_integer(v).ok_or_else(|| ApiError::wrong_type(&self.name(key), "an integer", v))?;
        if !(lo..=hi).contains(&x) {
            return Err(ApiError::invalid(
                self.name(key),
                format!(
                    "'{}' must be between {lo} and {hi}, got {x}",
                    self.name(key)
                ),
            ));
        }
        Ok(Some(x))
    }

    pub fn array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(v) => Err(ApiError::wrong_type(&self.name(key), "an array", v)),
        }
    }

    pub fn object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(v) => Err(ApiError::wrong_type(&self.name(key), "an object", v)),
        }
    }

    /// The nested object at `key` as `Fields` with a `key.` prefix.
    pub fn nested(&self, key: &str) -> Result<Option<Fields<'a>>, ApiError> {
        Ok(self.object(key)?.map(|map| Fields {
            map,
            prefix: format!("{}{key}.", self.prefix),
        }))
    }

    /// `Fields` of an object found elsewhere (e.g. an array element), named `prefix` in errors.
    pub fn of(value: &'a Value, name: &str) -> Result<Fields<'a>, ApiError> {
        match value {
            Value::Object(map) => Ok(Fields {
                map,
                prefix: format!("{name}."),
            }),
            v => Err(ApiError::wrong_type(name, "an object", v)),
        }
    }
}

/// An exact integer, or a float with no fraction part; huge values stay exact up to i128.
pub fn as_integer(v: &Value) -> Option<i128> {
    let n = v.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(i as i128);
    }
    if let Some(u) = n.as_u64() {
        return Some(u as i128);
    }
    let f = n.as_f64()?;
    // Beyond ±1e30 nothing is in range anyway; clamp so the range check reports it.
    (f.is_finite() && f.fract() == 0.0).then(|| f.clamp(-1e30, 1e30) as i128)
}

/// A token id: an integer in `0..vocab`.
pub fn token_id(v: &Value, param: &str, vocab: usize) -> Result<u32, ApiError> {
    let id = as_integer(v).ok_or_else(|| ApiError::wrong_type(param, "a token id (integer)", v))?;
    if id < 0 || id >= vocab as i128 {
        return Err(ApiError::invalid(
            param,
            format!("token id {id} is outside the vocabulary (0..{vocab})"),
        ));
    }
    Ok(id as u32)
}
