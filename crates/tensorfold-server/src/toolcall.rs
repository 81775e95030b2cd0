//! Incremental parser of Qwen3-Coder XML tool calls (`<tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n
//! </parameter>\n</function>\n</tool_call>`): same result for any chunking; a malformed call becomes content.

use crate::reasoning::partial_suffix;
use crate::toolschema::{convert, ParamKind, ToolSchemas};
use serde_json::Value;

const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";
const FUNC_OPEN: &str = "<function=";
const FUNC_CLOSE: &str = "</function>";
const PARAM_OPEN: &str = "<parameter=";
const PARAM_CLOSE: &str = "</parameter>";
/// Longest function or parameter name accepted before the call counts as malformed.
const MAX_NAME: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolEvent {
    /// Text outside any call.
    Content(String),
    /// A call's function name is complete.
    Start { index: usize, name: String },
    /// The next piece of a call's JSON `arguments`.
    Args { index: usize, fragment: String },
    /// A started call turned out malformed or unfinished; `block` is its raw text so far. The text after it
    /// follows as content.
    Broken { index: usize, block: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Text,
    /// After `<tool_call>`, before the function name.
    Open,
    /// Inside `<function=...>`, between parameters.
    Func {
        index: usize,
    },
    /// Inside a parameter value; `fresh` until the newline after the tag is dropped.
    Param {
        index: usize,
        kind: ParamKind,
        fresh: bool,
    },
    /// After `</function>`, expecting `</tool_call>`.
    AfterFunc,
}

/// Incremental parser for one reply's content.
#[derive(Clone, Debug)]
pub struct ToolCallParser {
    schemas: ToolSchemas,
    state: State,
    buf: String,
    /// Raw text of the current call block consumed so far.
    block: String,
    function: String,
    first_param: bool,
    next_index: usize,
    /// Bytes of `buf` already searched for `</parameter>` (a long typed value is scanned once).
    scanned: usize,
}

/// What a `<name=...>` tag at the start of a buffer holds.
enum Tag {
    Complete { name: String, len: usize },
    Partial,
    Bad,
}

fn read_tag(text: &str, open: &str) -> Tag {
    let Some(rest) = text.strip_prefix(open) else {
        return if open.starts_with(text) {
            Tag::Partial
        } else {
            Tag::Bad
        };
    };
    match rest.find('>') {
        Some(end) => {
            let name = &rest[..end];
            if name.is_empty() || name.len() > MAX_NAME || name.contains(['\n', '<']) {
                Tag::Bad
            } else {
                Tag::Complete {
                    name: name.trim().to_owned(),
                    len: open.len() + end + 1,
                }
            }
        }
        None if rest.len() > MAX_NAME || rest.contains(['\n', '<']) => Tag::Bad,
        None => Tag::Partial,
    }
}

impl ToolCallParser {
    pub fn new(schemas: ToolSchemas) -> Self {
        ToolCallParser {
            schemas,
            state: State::Text,
            buf: String::new(),
            block: String::new(),
            function: String::new(),
            first_param: true,
            next_index: 0,
            scanned: 0,
        }
    }

    /// Moves `n` bytes from the buffer into the current block.
    fn consume(&mut self, n: usize) {
        self.block.push_str(&self.buf[..n]);
        self.buf.drain(..n);
    }

    fn leading_ws(&self) -> usize {
        self.buf.len() - self.buf.trim_start().len()
    }

    pub fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// One state transition; false when more text is needed.
    fn step(&mut self, out: &mut Vec<ToolEvent>) -> bool {
        match self.state.clone() {
            State::Text => {
                if let Some(at) = self.buf.find(CALL_OPEN) {
                    emit_content(out, &self.buf[..at]);
                    self.buf.drain(..at);
                    self.block.clear();
                    self.consume(CALL_OPEN.len());
                    self.state = State::Open;
                    return true;
                }
                let keep = partial_suffix(&self.buf, CALL_OPEN);
                let cut = self.buf.len() - keep;
                emit_content(out, &self.buf[..cut]);
                self.buf.drain(..cut);
                false
            }
            State::Open => {
                let ws = self.leading_ws();
                self.consume(ws);
                match read_tag(&self.buf, FUNC_OPEN) {
                    Tag::Partial => false,
                    Tag::Bad => {
                        // Not a call after all: the opener is plain text.
                        let block = std::mem::take(&mut self.block);
                        emit_content(out, &block);
                        self.state = State::Text;
                        true
                    }
                    Tag::Complete { name, len } => {
                        self.consume(len);
                        let index = self.next_index;
                        self.next_index += 1;
                        self.function = name.clone();
                        self.first_param = true;
                        out.push(ToolEvent::Start { index, name });
                        self.state = State::Func { index };
                        true
                    }
                }
            }
            State::Func { index } => {
                let ws = self.leading_ws();
                self.consume(ws);
                let rest = self.buf.as_str();
                if rest.starts_with(FUNC_CLOSE) {
                    self.consume(FUNC_CLOSE.len());
                    let close = if self.first_param { "{}" } else { "}" };
                    out.push(ToolEvent::Args {
                        index,
                        fragment: close.into(),
                    });
                    self.state = State::AfterFunc;
                    return true;
                }
                if FUNC_CLOSE.starts_with(rest) {
                    return false;
                }
                match read_tag(rest, PARAM_OPEN) {
                    Tag::Partial => false,
                    Tag::Bad => {
                        self.broken(index, out);
                        true
                    }
                    Tag::Complete { name, len } => {
                        self.consume(len);
                        let kind = self.schemas.kind(&self.function, &name);
                        let mut fragment = if self.first_param { "{" } else { ", " }.to_owned();
                        fragment.push_str(&Value::String(name).to_string());
                        fragment.push_str(": ");
                        if kind == ParamKind::String {
                            fragment.push('"');
                        }
                        self.first_param = false;
                        out.push(ToolEvent::Args { index, fragment });
                        self.state = State::Param {
                            index,
                            kind,
                            fresh: true,
                        };
                        true
                    }
                }
            }
            State::Param { index, kind, fresh } => {
                if fresh {
                    if self.buf.is_empty() {
                        return false;
                    }
                    if self.buf.starts_with('\n') {
                        self.consume(1);
                    }
                    self.state = State::Param {
                        index,
                        kind: kind.clone(),
                        fresh: false,
                    };
                }
                let mut from = self.scanned.saturating_sub(PARAM_CLOSE.len());
                while !self.buf.is_char_boundary(from) {
                    from -= 1;
                }
                if let Some(at) = self.buf[from..].find(PARAM_CLOSE).map(|i| from + i) {
                    self.scanned = 0;
                    let raw = self.buf[..at].strip_suffix('\n').unwrap_or(&self.buf[..at]);
                    let fragment = match &kind {
                        ParamKind::String => format!("{}\"", json_str_body(raw)),
                        ParamKind::Typed(types) => convert(types, raw).to_string(),
                    };
                    out.push(ToolEvent::Args { index, fragment });
                    self.consume(at + PARAM_CLOSE.len());
                    self.state = State::Func { index };
                    return true;
                }
                if kind == ParamKind::String {
                    // Stream the value, holding back what may be the closing "\n</parameter>".
                    let keep = partial_suffix(&self.buf, PARAM_CLOSE)
                        .max(partial_suffix(&self.buf, "\n</parameter>"));
                    let cut = self.buf.len() - keep;
                    if cut > 0 {
                        let fragment = json_str_body(&self.buf[..cut]);
                        out.push(ToolEvent::Args { index, fragment });
                        self.consume(cut);
                    }
                }
                self.scanned = self.buf.len();
                false
            }
            State::AfterFunc => {
                let ws = self.leading_ws();
                let rest = &self.buf[ws..];
                if rest.starts_with(CALL_CLOSE) {
                    self.consume(ws + CALL_CLOSE.len());
                } else if CALL_CLOSE.starts_with(rest) {
                    return false;
                }
                // A missing `</tool_call>` after a complete function is tolerated.
                self.block.clear();
                self.state = State::Text;
                true
            }
        }
    }

    fn broken(&mut self, index: usize, out: &mut Vec<ToolEvent>) {
        out.push(ToolEvent::Broken {
            index,
            block: std::mem::take(&mut self.block),
        });
        self.state = State::Text;
    }

    /// The reply ended: flushes held text; a call still open is reported broken.
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let mut out = Vec::new();
        match self.state.clone() {
            State::Text | State::AfterFunc => {}
            State::Open => {
                let block = std::mem::take(&mut self.block);
                emit_content(&mut out, &block);
            }
            State::Func { index } | State::Param { index, .. } => self.broken(index, &mut out),
        }
        let rest = std::mem::take(&mut self.buf);
        emit_content(&mut out, &rest);
        self.state = State::Text;
        out
    }
}

fn emit_content(out: &mut Vec<ToolEvent>, text: &str) {
    if text.is_empty() {
        return;
    }
    if let Some(ToolEvent::Content(prev)) = out.last_mut() {
        prev.push_str(text);
    } else {
        out.push(ToolEvent::Content(text.to_owned()));
    }
}

/// `s` escaped as the inside of a JSON string (no quotes).
fn json_str_body(s: &str) -> String {
    let quoted = Value::String(s.to_owned()).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

/// A complete tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    /// JSON text of the arguments object.
    pub arguments: String,
}

/// Parses a whole reply: content (malformed calls included as their raw text) and the well-formed calls.
pub fn parse_complete(text: &str, schemas: &ToolSchemas) -> (String, Vec<ParsedCall>) {
    let mut parser = ToolCallParser::new(schemas.clone());
    let mut events = parser.push(text);
    events.extend(parser.finish());
    collect(events)
}

/// Folds parser events into (content, complete calls); broken calls go back into the content as raw text.
pub fn collect(events: Vec<ToolEvent>) -> (String, Vec<ParsedCall>) {
    let mut content = String::new();
    let mut calls: Vec<(usize, ParsedCall)> = Vec::new();
    for ev in events {
        match ev {
            ToolEvent::Content(t) => content.push_str(&t),
            ToolEvent::Start { index, name } => calls.push((
                index,
                ParsedCall {
                    name,
                    arguments: String::new(),
                },
            )),
            ToolEvent::Args { index, fragment } => {
                if let Some((_, c)) = calls.iter_mut().find(|(i, _)| *i == index) {
                    c.arguments.push_str(&fragment);
                }
            }
            ToolEvent::Broken { index, block } => {
                calls.retain(|(i, _)| *i != index);
                content.push_str(&block);
            }
        }
    }
    (content, calls.into_iter().map(|(_, c)| c).collect())
}

#[cfg(test)]
#[path = "toolcall_tests.rs"]
mod tests;
