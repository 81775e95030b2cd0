//! /v1/chat/completions body parsing: messages (system, developer, user, assistant with tool calls, tool results)
//! normalised for the chat template, tools and tool_choice, chat_template_kwargs; bad input → 400 naming the field.

use crate::error::ApiError;
use crate::fields::{parse_body, Fields};
use crate::request::{parse_gen_params, GenParams, Limits};
use serde_json::{json, Map, Value};

const MAX_TOOLS: usize = 512;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// Tools hidden from the prompt, replies never parsed for calls.
    None,
    Auto,
    /// At least one call: the reply is opened with a tool call.
    Required,
    /// A call of this function: the reply is opened with its call.
    Named(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    /// Normalised messages for the template (developer → system, leading system messages merged, text parts
    /// joined, tool-call arguments as objects).
    pub messages: Value,
    /// The offered tools, as sent (`{"type": "function", "function": {...}}`).
    pub tools: Vec<Value>,
    pub tool_choice: ToolChoice,
    pub enable_thinking: Option<bool>,
    /// `chat_template_kwargs` other than `enable_thinking`.
    pub template_kwargs: Map<String, Value>,
    pub add_generation_prompt: bool,
    pub params: GenParams,
}

/// Parses a /v1/chat/completions body.
pub fn parse_chat(body: &[u8], limits: &Limits) -> Result<ChatRequest, ApiError> {
    let map = parse_body(body)?;
    let f = Fields::new(&map);
    let messages = match f.get("messages") {
        None => return Err(ApiError::missing("messages")),
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid(
                "messages",
                "'messages' must contain at least one message",
            ))
        }
        Some(Value::Array(a)) => normalize_messages(a)?,
        Some(v) => return Err(ApiError::wrong_type("messages", "an array", v)),
    };
    let tools = parse_tools(&f)?;
    let tool_choice = parse_tool_choice(&f, &tools)?;
    f.bool("parallel_tool_calls")?;
    let mut enable_thinking = None;
    let mut template_kwargs = Map::new();
    if let Some(kw) = f.nested("chat_template_kwargs")? {
        enable_thinking = kw.bool("enable_thinking")?;
        if let Some(Value::Object(m)) = f.get("chat_template_kwargs") {
            for (k, v) in m {
                if k != "enable_thinking" {
                    template_kwargs.insert(k.clone(), v.clone());
                }
            }
        }
    }
    let add_generation_prompt = f.bool("add_generation_prompt")?.unwrap_or(true);
    if f.bool("continue_final_message")? == Some(true) {
        return Err(ApiError::unsupported(
            "continue_final_message",
            "'continue_final_message' is not supported by this server",
        ));
    }
    let params = parse_gen_params(&f, true, limits)?;
    Ok(ChatRequest {
        messages,
        tools,
        tool_choice,
        enable_thinking,
        template_kwargs,
        add_generation_prompt,
        params,
    })
}

/// Checks every message and rewrites it into the plain form the Qwen template expects.
fn normalize_messages(items: &[Value]) -> Result<Value, ApiError> {
    let mut out: Vec<Value> = Vec::with_capacity(items.len());
    let mut leading_system = true;
    for (i, item) in items.iter().enumerate() {
        let name = format!("messages[{i}]");
        let f = Fields::of(item, &name)?;
        let role = f
            .str("role")?
            .ok_or_else(|| ApiError::missing(&f.name("role")))?;
        let role = match role {
            "system" | "developer" => "system",
            "user" | "assistant" | "tool" => role,
            other => {
                return Err(ApiError::invalid(
                    f.name("role"),
                    format!(
                    "unknown role '{other}': expected system, developer, user, assistant or tool"
                ),
                ))
            }
        };
        let content = content_text(f.get("content"), &f.name("content"))?;
        let mut msg = Map::new();
        msg.insert("role".into(), json!(role));
        match role {
            "assistant" => {
                let calls = assistant_tool_calls(&f)?;
                if content.is_none() && calls.is_none() {
                    return Err(ApiError::missing(&f.name("content")));
                }
                msg.insert("content".into(), json!(content.unwrap_or_default()));
                let reasoning = match f.str("reasoning_content")? {
                    Some(r) => Some(r),
                    None => f.str("reasoning")?,
                };
                if let Some(r) = reasoning {
                    msg.insert("reasoning_content".into(), json!(r));
                }
                if let Some(calls) = calls {
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
            }
            _ => {
                let text = content.ok_or_else(|| ApiError::missing(&f.name("content")))?;
                msg.insert("content".into(), json!(text));
                if role == "tool" {
                    if let Some(id) = f.str("tool_call_id")? {
                        msg.insert("tool_call_id".into(), json!(id));
                    }
                }
            }
        }
        if let Some(n) = f.str("name")? {
            msg.insert("name".into(), json!(n));
        }
        // Leading system and developer messages become one system message, as the template allows one.
        if role == "system" && leading_system && !out.is_empty() {
            if let Some(prev) = out.last_mut().and_then(Value::as_object_mut) {
                let joined = format!(
                    "{}\n\n{}",
                    prev.get("content").and_then(Value::as_str).unwrap_or(""),
                    msg.get("content").and_then(Value::as_str).unwrap_or("")
                );
                prev.insert("content".into(), json!(joined));
                continue;
            }
        }
        leading_system &= role == "system";
        out.push(Value::Object(msg));
    }
    Ok(Value::Array(out))
}

/// `content`: a string, null, or an array of text parts (joined). Images and audio are refused.
fn content_text(value: Option<&Value>, param: &str) -> Result<Option<String>, ApiError> {
    match value {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let pname = format!("{param}[{j}]");
                if let Value::String(s) = part {
                    text.push_str(s);
                    continue;
                }
                let pf = Fields::of(part, &pname)?;
                match pf.str("type")? {
                    Some("text") | None => {
                        let t = pf.str("text")?.ok_or_else(|| ApiError::missing(&pf.name("text")))?;
                        text.push_str(t);
                    }
                    Some(other) => {
                        return Err(ApiError::unsupported(
                            &pf.name("type"),
                            format!("content part type '{other}' is not supported: this server takes text only"),
                        ))
                    }
                }
            }
            Ok(Some(text))
        }
        Some(v) => Err(ApiError::wrong_type(
            param,
            "a string or an array of text parts",
            v,
        )),
    }
}

/// An assistant message's `tool_calls`, with `arguments` parsed into objects for the template.
fn assistant_tool_calls(f: &Fields) -> Result<Option<Vec<Value>>, ApiError> {
    let Some(calls) = f.array("tool_calls")? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(calls.len());
    for (j, call) in calls.iter().enumerate() {
        let cname = f.name(&format!("tool_calls[{j}]"));
        let cf = Fields::of(call, &cname)?;
        let func = cf
            .nested("function")?
            .ok_or_else(|| ApiError::missing(&cf.name("function")))?;
        let name = func
            .str("name")?
            .ok_or_else(|| ApiError::missing(&func.name("name")))?;
        let arguments = match func.get("arguments") {
            None => json!({}),
            Some(Value::Object(m)) => Value::Object(m.clone()),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(m)) => Value::Object(m),
                _ => {
                    return Err(ApiError::invalid(
                        func.name("arguments"),
                        "tool call arguments must be a JSON object (or a string holding one)",
                    ))
                }
            },
            Some(v) => return Err(ApiError::wrong_type(&func.name("arguments"), "a string", v)),
        };
        let mut obj =
            json!({"type": "function", "function": {"name": name, "arguments": arguments}});
        if let Some(id) = cf.str("id")? {
            obj["id"] = json!(id);
        }
        out.push(obj);
    }
    Ok(Some(out))
}

fn parse_tools(f: &Fields) -> Result<Vec<Value>, ApiError> {
    let Some(items) = f.array("tools")? else {
        return Ok(Vec::new());
    };
    if items.len() > MAX_TOOLS {
        return Err(ApiError::invalid(
            "tools",
            format!("at most {MAX_TOOLS} tools, got {}", items.len()),
        ));
    }
    for (i, tool) in items.iter().enumerate() {
        let tf = Fields::of(tool, &format!("tools[{i}]"))?;
        match tf.str("type")? {
            Some("function") | None => {}
            Some(other) => {
                return Err(ApiError::unsupported(
                    &tf.name("type"),
                    format!("tool type '{other}' is not supported; only 'function'"),
                ))
            }
        }
        let func = tf
            .nested("function")?
            .ok_or_else(|| ApiError::missing(&tf.name("function")))?;
        match func.str("name")? {
            Some(n) if !n.is_empty() && !n.contains(['>', '<', '\n']) => {}
            _ => {
                return Err(ApiError::invalid(
                    func.name("name"),
                    "a tool needs a non-empty name without '<', '>' or newlines",
                ))
            }
        }
        func.str("description")?;
        func.object("parameters")?;
    }
    Ok(items.clone())
}

fn parse_tool_choice(f: &Fields, tools: &[Value]) -> Result<ToolChoice, ApiError> {
    let default = if tools.is_empty() {
        ToolChoice::None
    } else {
        ToolChoice::Auto
    };
    let choice = match f.get("tool_choice") {
        None => return Ok(default),
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => default,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("'tool_choice' must be none, auto, required or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got '{other}'"),
                ))
            }
        },
        Some(v @ Value::Object(_)) => {
            let tc = Fields::of(v, "tool_choice")?;
            let name = tc
                .nested("function")?
                .ok_or_else(|| ApiError::missing("tool_choice.function"))?
                .str("name")?
                .ok_or_else(|| ApiError::missing("tool_choice.function.name"))?;
            ToolChoice::Named(name.to_owned())
        }
        Some(v) => return Err(ApiError::wrong_type("tool_choice", "a string or an object", v)),
    };
    match &choice {
        ToolChoice::Required if tools.is_empty() => Err(ApiError::invalid(
            "tool_choice",
            "'tool_choice' is 'required' but no tools were given",
        )),
        ToolChoice::Named(name) if !tools.iter().any(|t| tool_name(t) == Some(name)) => {
            Err(ApiError::invalid(
                "tool_choice",
                format!("'tool_choice' names the function '{name}', which is not among 'tools'"),
            ))
        }
        _ => Ok(choice),
    }
}

/// The function name of a tool entry.
pub fn tool_name(tool: &Value) -> Option<&str> {
    tool.get("function")?.get("name")?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        vocab: 512,
        max_tokens: 100,
    };

    #[test]
    fn leading_system_and_developer_messages_merge_and_text_parts_join() {
        let body = br#"{"messages": [{"role": "system", "content": "A"}, {"role": "developer", "content": "B"},
            {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
              "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
            "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
            "chat_template_kwargs": {"enable_thinking": false, "custom": 1}}"#;
        let r = parse_chat(body, &LIMITS).expect("a valid request");
        let m = r.messages.as_array().expect("messages");
        assert_eq!(m.len(), 4);
        assert_eq!(m[0], json!({"role": "system", "content": "A\n\nB"}));
        assert_eq!(m[1]["content"], "xy");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            json!({"a": 1})
        );
        assert_eq!(m[3]["tool_call_id"], "c1");
        assert_eq!(r.tool_choice, ToolChoice::Required);
        assert_eq!(r.enable_thinking, Some(false));
        assert_eq!(r.template_kwargs.get("custom"), Some(&json!(1)));
    }
}
