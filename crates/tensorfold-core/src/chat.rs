//! Chat templates: renders a checkpoint's Jinja chat template with minijinja set up like transformers'
//! `apply_chat_template` (trim/lstrip blocks, Python-style `tojson` and `str`), so prompts match HF byte for byte.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Value as JinjaValue, ValueKind};
use minijinja::{AutoEscape, Environment, Error as JinjaError, ErrorKind, Output, State};
use serde_json::{Map, Value};

use crate::error::{CoreError, Result};
use crate::tokenizer::{read_tokenizer_config, special_token_text};

const TEMPLATE_NAME: &str = "chat_template";
/// Special-token variables transformers passes to every template (its `special_tokens_map`).
const TOKEN_VARIABLES: [&str; 4] = ["bos_token", "eos_token", "pad_token", "unk_token"];

/// One rendering: the OpenAI-style messages and tools plus the template switches.
#[derive(Debug, Clone, Default)]
pub struct ChatRenderRequest {
    /// A JSON array of message objects (`role`, `content`, `reasoning_content`, `tool_calls`, ...).
    pub messages: Value,
    /// A JSON array of tool schemas, or `None` (rendered as `none`, as transformers does).
    pub tools: Option<Value>,
    pub add_generation_prompt: bool,
    /// Passed as `enable_thinking` when set; left undefined otherwise, so the template's default holds.
    pub enable_thinking: Option<bool>,
    /// `chat_template_kwargs`: extra template variables; the fields above win over same-named keys.
    pub extra: Map<String, Value>,
}

/// A compiled chat template with the special-token variables of its checkpoint.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    tokens: Vec<(String, String)>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl ChatTemplate {
    /// Reads `dir/chat_template.jinja`, else the `chat_template` key of `dir/tokenizer_config.json`
    /// (a string, or a list of `{name, template}` from which "default" is taken). `Ok(None)` when neither exists.
    pub fn from_dir(dir: &Path) -> Result<Option<ChatTemplate>> {
        let config = read_tokenizer_config(dir)?;
        let config_path = dir.join("tokenizer_config.json");
        let jinja_path = dir.join("chat_template.jinja");
        let (source, origin) = if jinja_path.is_file() {
            let text =
                std::fs::read_to_string(&jinja_path).map_err(|e| CoreError::io(&jinja_path, e))?;
            (text, jinja_path)
        } else {
            match config.as_ref().and_then(|c| c.get("chat_template")) {
                None | Some(Value::Null) => return Ok(None),
                Some(value) => (template_from_config(value, &config_path)?, config_path),
            }
        };
        let tokens = config
            .iter()
            .flat_map(|c| {
                TOKEN_VARIABLES.iter().filter_map(|&name| {
                    let text = c.get(name).and_then(special_token_text)?;
                    Some((name.to_owned(), text))
                })
            })
            .collect();
        ChatTemplate::new(source, tokens)
            .map(Some)
            .map_err(|e| match e {
                CoreError::Template(message) => {
                    CoreError::Template(format!("{}: {message}", origin.display()))
                }
                other => other,
            })
    }

    /// Compiles `source`; `tokens` are variables such as `("eos_token", "<|im_end|>")`.
    pub fn new(source: impl Into<String>, tokens: Vec<(String, String)>) -> Result<ChatTemplate> {
        let source = source.into();
        let mut env = hf_environment().map_err(template_error)?;
        env.add_template_owned(TEMPLATE_NAME, source.clone())
            .map_err(template_error)?;
        Ok(ChatTemplate {
            env,
            source,
            tokens,
        })
    }

    /// The template text (e.g. to pick a tool-call parser by the markup it writes).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders the prompt text; template errors (including `raise_exception`) become `CoreError::Template`.
    pub fn render(&self, req: &ChatRenderRequest) -> Result<String> {
        if !req.messages.is_array() {
            return Err(CoreError::Template("messages must be a JSON array".into()));
        }
        let mut ctx: BTreeMap<String, JinjaValue> = BTreeMap::new();
        for (name, text) in &self.tokens {
            ctx.insert(name.clone(), JinjaValue::from(text.as_str()));
        }
        for (key, value) in &req.extra {
            ctx.insert(key.clone(), to_jinja(value));
        }
        ctx.insert(
            "messages".into(),
            to_jinja(&normalize_messages(&req.messages)),
        );
        let tools = req.tools.as_ref().map_or(JinjaValue::from(()), to_jinja);
        ctx.insert("tools".into(), tools);
        ctx.insert("documents".into(), JinjaValue::from(()));
        let add_generation_prompt = JinjaValue::from(req.add_generation_prompt);
        ctx.insert("add_generation_prompt".into(), add_generation_prompt);
        if let Some(on) = req.enable_thinking {
            ctx.insert("enable_thinking".into(), JinjaValue::from(on));
        }
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(template_error)?;
        template
            .render(JinjaValue::from_pairs(ctx))
            .map_err(template_error)
    }
}

fn template_from_config(value: &Value, path: &Path) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Array(items) => items
            .iter()
            .find(|item| item.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|item| item.get("template"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                CoreError::config(path, "chat_template list has no template named \"default\"")
            }),
        _ => Err(CoreError::config(
            path,
            "chat_template must be a string or a list of {name, template}",
        )),
    }
}

/// Tool-call `arguments` sent as a JSON string (OpenAI wire form) become the object templates iterate over,
/// as vLLM does before rendering.
fn normalize_messages(messages: &Value) -> Value {
    let mut messages = messages.clone();
    let calls = messages
        .as_array_mut()
        .into_iter()
        .flatten()
        .filter_map(|m| m.get_mut("tool_calls").and_then(Value::as_array_mut))
        .flatten();
    for call in calls {
        let target = match call.get_mut("function") {
            Some(function) if function.is_object() => function,
            _ => call,
        };
        if let Some(args) = target.get_mut("arguments") {
            if let Some(Value::Object(parsed)) = args
                .as_str()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
            {
                *args = Value::Object(parsed);
            }
        }
    }
    messages
}

fn to_jinja(value: &Value) -> JinjaValue {
    JinjaValue::from(minijinja::value::Serde(value))
}

/// A template error with its causes, on one line.
fn template_error(e: JinjaError) -> CoreError {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        let _ = write!(message, ": {cause}");
        source = cause.source();
    }
    CoreError::Template(message)
}

/// minijinja configured like transformers' `_compile_jinja_template` sandbox.
fn hf_environment() -> std::result::Result<Environment<'static>, JinjaError> {
    let mut env = Environment::new();
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()?;
    env.set_syntax(syntax);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(python_formatter);
    env.add_filter("tojson", tojson_filter);
    env.add_filter("string", string_filter);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    Ok(env)
}

fn raise_exception(message: String) -> std::result::Result<JinjaValue, JinjaError> {
    Err(JinjaError::new(
        ErrorKind::InvalidOperation,
        format!("raise_exception: {message}"),
    ))
}

/// `{{ x }}` prints what Python's `str(x)` would: `True`, `None`, `['a', 1]`, `1e-05`.
fn python_formatter(
    out: &mut Output,
    state: &mut State,
    value: &JinjaValue,
) -> std::result::Result<(), JinjaError> {
    match python_str(value) {
        Some(text) => out.write_str(&text).map_err(JinjaError::from),
        None => minijinja::escape_formatter(out, state, value),
    }
}

/// The `string` filter with Python's `str()` semantics for non-strings.
fn string_filter(value: &JinjaValue) -> std::result::Result<JinjaValue, JinjaError> {
    if value.is_undefined() {
        return Ok(JinjaValue::from(""));
    }
    if value.kind() == ValueKind::String {
        return Ok(value.clone());
    }
    Ok(JinjaValue::from(
        python_str(value).unwrap_or_else(|| value.to_string()),
    ))
}

/// Python `str()` of none, bools, numbers, lists and dicts; `None` for kinds minijinja already prints alike.
fn python_str(value: &JinjaValue) -> Option<String> {
    match value.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Number | ValueKind::Seq | ValueKind::Map => {
            let json = serde_json::to_value(value).ok()?;
            let mut out = String::new();
            py_repr(&json, &mut out);
            Some(out)
        }
        _ => None,
    }
}

fn py_repr(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => push_number(n, out),
        Value::String(s) => py_repr_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr_str(key, out);
                out.push_str(": ");
                py_repr(item, out);
            }
            out.push('}');
        }
    }
}

/// Python's `repr(str)`: single quotes unless the text has `'` but no `"`.
fn py_repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

fn push_number(n: &serde_json::Number, out: &mut String) {
    match n.as_f64() {
        Some(f) if n.is_f64() => out.push_str(&py_float(f)),
        _ => out.push_str(&n.to_string()),
    }
}

/// Python's `repr(float)`: shortest round-trip digits, positional for exponents -4..16, else `1e-05` style.
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let body = if exp >= 0 {
            let point = exp as usize + 1;
            if digits.len() > point {
                format!("{}.{}", &digits[..point], &digits[point..])
            } else {
                format!("{digits}{}.0", "0".repeat(point - digits.len()))
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{body}")
    } else {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs())
    }
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`;
/// no HTML escaping, `", "` / `": "` separators (`","` with indent), key order kept.
fn tojson_filter(
    value: &JinjaValue,
    kwargs: Kwargs,
) -> std::result::Result<JinjaValue, JinjaError> {
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let indent: Option<JinjaValue> = kwargs.get("indent")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let invalid = |m: &str| JinjaError::new(ErrorKind::InvalidOperation, format!("tojson: {m}"));
    let indent = match indent.filter(|v| !v.is_none()) {
        None => None,
        Some(v) => match (v.as_str(), v.as_i64()) {
            (Some(s), _) => Some(s.to_owned()),
            (None, Some(n)) => Some(" ".repeat(n.max(0) as usize)),
            _ => return Err(invalid("indent must be an integer or a string")),
        },
    };
    let (item_sep, key_sep) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => return Err(invalid("separators must be a pair of strings")),
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };
    let json = serde_json::to_value(value)
        .map_err(|e| JinjaError::new(ErrorKind::BadSerialization, format!("tojson: {e}")))?;
    let dumper = PyJson {
        ensure_ascii: ensure_ascii.unwrap_or(false),
        sort_keys: sort_keys.unwrap_or(false),
        indent,
        item_sep,
        key_sep,
    };
    let mut out = String::new();
    dumper.write(&json, 0, &mut out);
    Ok(JinjaValue::from_safe_string(out))
}

/// Python's `json.dumps` writer.
struct PyJson {
    ensure_ascii: bool,
    sort_keys: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
}

impl PyJson {
    fn write(&self, value: &Value, depth: usize, out: &mut String) {
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => push_number(n, out),
            Value::String(s) => self.write_str(s, out),
            Value::Array(items) if items.is_empty() => out.push_str("[]"),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.separate(i, depth + 1, out);
                    self.write(item, depth + 1, out);
                }
                self.close(depth, out);
                out.push(']');
            }
            Value::Object(map) if map.is_empty() => out.push_str("{}"),
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    self.separate(i, depth + 1, out);
                    self.write_str(key, out);
                    out.push_str(&self.key_sep);
                    self.write(item, depth + 1, out);
                }
                self.close(depth, out);
                out.push('}');
            }
        }
    }

    fn separate(&self, i: usize, depth: usize, out: &mut String) {
        match &self.indent {
            Some(indent) => {
                if i > 0 {
                    out.push_str(&self.item_sep);
                }
                out.push('\n');
                out.push_str(&indent.repeat(depth));
            }
            None if i > 0 => out.push_str(&self.item_sep),
            None => {}
        }
    }

    fn close(&self, depth: usize, out: &mut String) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth));
        }
    }

    fn write_str(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !(' '..='~').contains(&c)) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// `strftime_now(format)`: the current time (UTC) formatted with the common `strftime` codes.
fn strftime_now(format: String) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    strftime(&format, secs)
}

const MONTHS: &str =
    "January February March April May June July August September October November December";
const WEEKDAYS: &str = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday";

/// Formats Unix time `secs` (UTC); unknown codes are kept as written, as glibc does.
pub(crate) fn strftime(format: &str, secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil-from-days (Howard Hinnant), proleptic Gregorian.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_march = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_march + 2) / 153;
    let day = doy_march - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let cumulative = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cumulative[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday; Monday = 0
    let month_name = MONTHS.split(' ').nth((month - 1) as usize).unwrap_or("");
    let weekday_name = WEEKDAYS.split(' ').nth(weekday).unwrap_or("");
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        // `%-d` style (no padding) as on glibc.
        let unpadded = chars.peek() == Some(&'-');
        if unpadded {
            chars.next();
        }
        let Some(code) = chars.next() else {
            out.push('%');
            break;
        };
        let num = |n: i64, width: usize| {
            if unpadded {
                n.to_string()
            } else {
                format!("{n:0width$}")
            }
        };
        let piece = match code {
            'Y' => year.to_string(),
            'y' => num(year.rem_euclid(100), 2),
            'm' => num(month, 2),
            'd' => num(day, 2),
            'e' => format!("{day:2}"),
            'H' => num(hour, 2),
            'I' => num(hour12, 2),
            'M' => num(minute, 2),
            'S' => num(second, 2),
            'j' => num(yday, 3),
            'p' => if hour < 12 { "AM" } else { "PM" }.to_owned(),
            'B' => month_name.to_owned(),
            'b' | 'h' => month_name.get(..3).unwrap_or("").to_owned(),
            'A' => weekday_name.to_owned(),
            'a' => weekday_name.get(..3).unwrap_or("").to_owned(),
            'F' => format!("{year}-{month:02}-{day:02}"),
            'T' => format!("{hour:02}:{minute:02}:{second:02}"),
            'Z' => "UTC".to_owned(),
            'z' => "+0000".to_owned(),
            '%' => "%".to_owned(),
            other => format!("%{}{other}", if unpadded { "-" } else { "" }),
        };
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_formats_a_known_instant() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(strftime("%Y-%m-%d %H:%M:%S", t), "2024-02-29 13:05:09");
        assert_eq!(
            strftime("%d %B %Y, %A (%a %b) %j %I%p", t),
            "29 February 2024, Thursday (Thu Feb) 060 01PM"
        );
        assert_eq!(strftime("%-d %-m %% %Q", t), "29 2 % %Q");
    }
}
