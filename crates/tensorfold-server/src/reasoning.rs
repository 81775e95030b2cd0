//! Splits a thinking model's streamed reply into reasoning (inside `<think>…</think>`) and content; the same
//! output whatever the chunking, and a prompt that already opened `<think>` starts the reply inside reasoning.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";
const TOOL_OPEN: &str = "<tool_call>";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Reasoning(String),
    Content(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Reply start outside reasoning: a leading `<think>` may still open it.
    Start,
    /// Inside reasoning; `fresh` until its first non-newline character.
    Reasoning { fresh: bool },
    /// After reasoning (or without it); `strip` drops the newlines that follow `</think>`.
    Content { strip: bool },
}

/// Incremental splitter for one reply.
#[derive(Clone, Debug)]
pub struct ReasoningSplitter {
    state: State,
    buf: String,
    /// A `<tool_call>` inside unclosed reasoning ends it (the call is the answer).
    tool_call_ends_reasoning: bool,
}

/// True when `prompt` leaves a `<think>` block open, so the reply begins inside reasoning.
pub fn prompt_opens_reasoning(prompt: &str) -> bool {
    match prompt.rfind(OPEN) {
        Some(at) => !prompt[at..].contains(CLOSE),
        None => false,
    }
}

impl ReasoningSplitter {
    pub fn new(starts_in_reasoning: bool, tool_call_ends_reasoning: bool) -> Self {
        ReasoningSplitter {
            state: if starts_in_reasoning {
                State::Reasoning { fresh: true }
            } else {
                State::Start
            },
            buf: String::new(),
            tool_call_ends_reasoning,
        }
    }

    /// True while the reply is inside reasoning (for counting reasoning tokens).
    pub fn in_reasoning(&self) -> bool {
        matches!(self.state, State::Reasoning { .. })
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Start => {
                    let trimmed = self.buf.trim_start();
                    if let Some(rest) = trimmed.strip_prefix(OPEN) {
                        self.buf = rest.to_owned();
                        self.state = State::Reasoning { fresh: true };
                        continue;
                    }
                    if !trimmed.is_empty() && OPEN.starts_with(trimmed) || trimmed.is_empty() {
                        return out;
                    }
                    self.state = State::Content { strip: false };
                }
                State::Reasoning { fresh } => {
                    if fresh {
                        let rest = self.buf.trim_start_matches('\n');
                        if rest.is_empty() {
                            self.buf.clear();
                            return out;
                        }
                        self.buf = rest.to_owned();
                        self.state = State::Reasoning { fresh: false };
                    }
                    let close = self.buf.find(CLOSE);
                    let tool = self
                        .buf
                        .find(TOOL_OPEN)
                        .filter(|_| self.tool_call_ends_reasoning);
                    let end = match (close, tool) {
                        (Some(c), Some(t)) if t < c => Some((t, 0, false)),
                        (Some(c), _) => Some((c, CLOSE.len(), true)),
                        (None, Some(t)) => Some((t, 0, false)),
                        (None, None) => None,
                    };
                    if let Some((at, skip, strip)) = end {
                        push_piece(
                            &mut out,
                            Piece::Reasoning(self.buf[..at].trim_end_matches('\n').to_owned()),
                        );
                        self.buf.drain(..at + skip);
                        self.state = State::Content { strip };
                        continue;
                    }
                    let mut keep = partial_suffix(&self.buf, CLOSE);
                    if self.tool_call_ends_reasoning {
                        keep = keep.max(partial_suffix(&self.buf, TOOL_OPEN));
                    }
                    let body = self.buf[..self.buf.len() - keep].trim_end_matches('\n');
                    let cut = body.len();
                    push_piece(&mut out, Piece::Reasoning(self.buf[..cut].to_owned()));
                    self.buf.drain(..cut);
                    return out;
                }
                State::Content { strip } => {
                    if strip {
                        let rest = self.buf.trim_start_matches('\n');
                        if rest.is_empty() {
                            self.buf.clear();
                            return out;
                        }
                        self.buf = rest.to_owned();
                        self.state = State::Content { strip: false };
                    }
                    let text = std::mem::take(&mut self.buf);
                    push_piece(&mut out, Piece::Content(text));
                    return out;
                }
            }
        }
    }

    /// The reply ended: releases what was held (an unclosed reasoning block stays reasoning).
    pub fn finish(&mut self) -> Vec<Piece> {
        let text = std::mem::take(&mut self.buf);
        let mut out = Vec::new();
        match self.state {
            State::Start => push_piece(&mut out, Piece::Content(text)),
            State::Reasoning { .. } => {
                let text = text.trim_matches('\n').to_owned();
                push_piece(&mut out, Piece::Reasoning(text));
            }
            State::Content { .. } => push_piece(&mut out, Piece::Content(text)),
        }
        out
    }
}

/// Appends a non-empty piece, merging it with the previous one of the same kind.
fn push_piece(out: &mut Vec<Piece>, piece: Piece) {
    match (out.last_mut(), piece) {
        (_, Piece::Reasoning(t) | Piece::Content(t)) if t.is_empty() => {}
        (Some(Piece::Reasoning(a)), Piece::Reasoning(b))
        | (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
        (_, p) => out.push(p),
    }
}

/// Bytes at the end of `text` that are a proper prefix of `tag`.
pub fn partial_suffix(text: &str, tag: &str) -> usize {
    let max = (tag.len() - 1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| {
            let start = text.len() - n;
            text.is_char_boundary(start) && tag.starts_with(&text[start..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (reasoning, content) of `text` fed in pieces of `step` bytes (on char boundaries).
    fn split(text: &str, starts_in: bool, tools: bool, step: usize) -> (String, String) {
        let mut s = ReasoningSplitter::new(starts_in, tools);
        let mut pieces = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let mut n = step.min(rest.len());
            while !rest.is_char_boundary(n) {
                n += 1;
            }
            pieces.extend(s.push(&rest[..n]));
            rest = &rest[n..];
        }
        pieces.extend(s.finish());
        let (mut r, mut c) = (String::new(), String::new());
        for p in pieces {
            match p {
                Piece::Reasoning(t) => r.push_str(&t),
                Piece::Content(t) => c.push_str(&t),
            }
        }
        (r, c)
    }

    #[test]
    fn a_reply_that_starts_inside_reasoning_is_split_at_the_closing_tag() {
        let text = "\nLet me think.\nYes.\n</think>\n\nThe answer is 4.";
        for step in 1..12 {
            assert_eq!(
                split(text, true, false, step),
                ("Let me think.\nYes.".into(), "The answer is 4.".into()),
                "step {step}"
            );
        }
    }

    #[test]
    fn a_reply_that_opens_its_own_think_block_is_split_too() {
        let text = "<think>\nhmm\n</think>\n\nhi";
        for step in 1..9 {
            assert_eq!(split(text, false, false, step), ("hmm".into(), "hi".into()));
        }
    }

    #[test]
    fn a_reply_without_thinking_is_all_content() {
        assert_eq!(
            split("Hello <b>", false, false, 2),
            ("".into(), "Hello <b>".into())
        );
        assert_eq!(
            split("  <thin", false, false, 3),
            ("".into(), "  <thin".into())
        );
    }

    #[test]
    fn an_unclosed_think_block_stays_reasoning() {
        assert_eq!(
            split("\nstill going\n", true, false, 3),
            ("still going".into(), "".into())
        );
    }

    #[test]
    fn a_tool_call_inside_unclosed_reasoning_ends_it_when_tools_are_offered() {
        let text = "plan\n<tool_call>\n<function=f>";
        assert_eq!(
            split(text, true, true, 4),
            ("plan".into(), "<tool_call>\n<function=f>".into())
        );
        assert_eq!(split(text, true, false, 4), (text.into(), "".into()));
    }

    #[test]
    fn newlines_inside_reasoning_are_kept() {
        assert_eq!(
            split("a\n\nb</think>c", true, false, 1),
            ("a\n\nb".into(), "c".into())
        );
    }

    #[test]
    fn a_prompt_with_an_open_think_block_is_detected() {
        assert!(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_reasoning(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        ));
        assert!(!prompt_opens_reasoning("<|im_start|>assistant\n"));
    }
}
