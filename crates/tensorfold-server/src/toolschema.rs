//! Types Qwen XML tool-call parameter values by the offered tools' JSON schemas: `"3"` becomes 3 for an integer
//! parameter, `{"a":1}` an object for an object one; unknown parameters and values that do not fit stay strings.

use serde_json::{Map, Number, Value};
use std::collections::HashMap;

/// How a parameter's text becomes JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A JSON string (streamed as it is written).
    String,
    /// The schema's types, tried in order; the raw text when none fits.
    Typed(Vec<String>),
}

/// Parameter kinds of every offered function.
#[derive(Clone, Debug, Default)]
pub struct ToolSchemas {
    functions: HashMap<String, HashMap<String, ParamKind>>,
}

impl ToolSchemas {
    /// Reads `tools` entries shaped `{"type": "function", "function": {"name", "parameters"}}`.
    pub fn new(tools: &[Value]) -> Self {
        let mut functions = HashMap::new();
        for tool in tools {
            let Some(func) = tool.get("function") else {
                continue;
            };
            let Some(name) = func.get("name").and_then(Value::as_str) else {
                continue;
            };
            let props = func
                .get("parameters")
                .and_then(|p| p.get("properties"))
                .and_then(Value::as_object);
            let params = props
                .map(|m| m.iter().map(|(k, v)| (k.clone(), kind_of(v))).collect())
                .unwrap_or_default();
            functions.insert(name.to_owned(), params);
        }
        ToolSchemas { functions }
    }

    pub fn kind(&self, function: &str, param: &str) -> ParamKind {
        self.functions
            .get(function)
            .and_then(|p| p.get(param))
            .cloned()
            .unwrap_or(ParamKind::String)
    }
}

/// The kind of one property schema: its `type` (string or list), else the types of `anyOf` / `oneOf`.
fn kind_of(schema: &Value) -> ParamKind {
    let mut types: Vec<String> = Vec::new();
    let mut add = |t: &Value| match t {
        Value::String(s) => types.push(s.clone()),
        Value::Array(a) => types.extend(a.iter().filter_map(Value::as_str).map(str::to_owned)),
        _ => {}
    };
    if let Some(t) = schema.get("type") {
        add(t);
    } else {
        for key in ["anyOf", "oneOf"] {
            for alt in schema
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(t) = alt.get("type") {
                    add(t);
                }
            }
        }
    }
    let non_null: Vec<String> = types.into_iter().filter(|t| t != "null").collect();
    if non_null.is_empty() || non_null.iter().all(|t| t == "string") {
        ParamKind::String
    } else {
        ParamKind::Typed(non_null)
    }
}

/// The JSON value of a typed parameter's text.
pub fn convert(types: &[String], raw: &str) -> Value {
    let text = raw.trim();
    if text == "null" {
        return Value::Null;
    }
    for t in types {
        let v = match t.as_str() {
            "integer" | "int" => text.parse::<i64>().ok().map(Value::from),
            "number" | "float" => parse_number(text),
            "boolean" | "bool" => match text.to_ascii_lowercase().as_str() {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                _ => None,
            },
            "object" | "dict" => serde_json::from_str::<Map<String, Value>>(text)
                .ok()
                .map(Value::Object),
            "array" | "list" => serde_json::from_str::<Vec<Value>>(text)
                .ok()
                .map(Value::Array),
            "string" => Some(Value::String(raw.to_owned())),
            _ => None,
        };
        if let Some(v) = v {
            return v;
        }
    }
    Value::String(raw.to_owned())
}

fn parse_number(text: &str) -> Option<Value> {
    if let Ok(i) = text.parse::<i64>() {
        return Some(Value::from(i));
    }
    let f = text.parse::<f64>().ok()?;
    Number::from_f64(f).map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schemas() -> ToolSchemas {
        ToolSchemas::new(&[
            json!({"type": "function", "function": {"name": "f", "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "temp": {"type": "number"},
                    "metric": {"type": "boolean"},
                    "opts": {"type": "object"},
                    "tags": {"type": ["array", "null"]},
                    "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "choice": {"enum": ["a", "b"]}
                }
            }}}),
        ])
    }

    #[test]
    fn parameters_are_typed_by_their_schema() {
        let s = schemas();
        let conv = |p: &str, raw: &str| match s.kind("f", p) {
            ParamKind::String => Value::String(raw.into()),
            ParamKind::Typed(t) => convert(&t, raw),
        };
        assert_eq!(conv("city", "Paris"), json!("Paris"));
        assert_eq!(conv("days", "3"), json!(3));
        assert_eq!(conv("temp", "21.5"), json!(21.5));
        assert_eq!(conv("metric", "True"), json!(true));
        assert_eq!(conv("opts", "{\"a\": 1}"), json!({"a": 1}));
        assert_eq!(conv("tags", "[1, \"x\"]"), json!([1, "x"]));
        assert_eq!(conv("tags", "null"), Value::Null);
        assert_eq!(conv("either", "7"), json!(7));
        assert_eq!(conv("either", "seven"), json!("seven"));
        assert_eq!(conv("choice", "a"), json!("a"));
        assert_eq!(conv("unknown", "42"), json!("42"));
    }

    #[test]
    fn a_value_that_does_not_fit_its_type_stays_text() {
        let s = schemas();
        let ParamKind::Typed(t) = s.kind("f", "days") else {
            panic!("days is typed");
        };
        assert_eq!(convert(&t, "three"), json!("three"));
        assert_eq!(convert(&t, "1e999"), json!("1e999"));
    }
}
