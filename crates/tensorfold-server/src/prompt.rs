//! Turns a parsed chat request into prompt token ids with the checkpoint's template: tools shown unless
//! tool_choice is none, the reply opened with a tool call for required/named, and a cache mark at the last message.

use crate::chat_request::{ChatRequest, ToolChoice};
use crate::error::ApiError;
use crate::reasoning::prompt_opens_reasoning;
use serde_json::Value;
use tensorfold_core::chat::{ChatRenderRequest, ChatTemplate};
use tensorfold_core::tokenizer::TextTokenizer;

/// A rendered chat prompt and how its reply begins.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatPrompt {
    pub ids: Vec<u32>,
    /// The reply starts inside an open `<think>` block.
    pub starts_in_reasoning: bool,
    /// Text the server wrote at the start of the reply (a forced tool-call opener); parsed as reply text.
    pub prefill: String,
    pub cache_marks: Vec<usize>,
}

/// The opener written for `tool_choice` required (any function) or named (that function).
pub fn tool_prefill(choice: &ToolChoice) -> Option<String> {
    match choice {
        ToolChoice::Required => Some("<tool_call>\n<function=".into()),
        ToolChoice::Named(name) => Some(format!("<tool_call>\n<function={name}>\n")),
        ToolChoice::None | ToolChoice::Auto => None,
    }
}

pub fn build_chat_prompt(
    req: &ChatRequest,
    tokenizer: &TextTokenizer,
    template: &ChatTemplate,
) -> Result<ChatPrompt, ApiError> {
    let tools = match req.tool_choice {
        ToolChoice::None => None,
        _ if req.tools.is_empty() => None,
        _ => Some(Value::Array(req.tools.clone())),
    };
    let render = |messages: Value, add_generation_prompt: bool| {
        template.render(&ChatRenderRequest {
            messages,
            tools: tools.clone(),
            add_generation_prompt,
            enable_thinking: req.enable_thinking,
            extra: req.template_kwargs.clone(),
        })
    };
    let mut text = render(req.messages.clone(), req.add_generation_prompt).map_err(|e| {
        ApiError::invalid(
            "messages",
            format!("the chat template refused these messages: {e}"),
        )
    })?;
    let mut starts_in_reasoning = req.add_generation_prompt && prompt_opens_reasoning(&text);
    let mut prefill = String::new();
    if req.add_generation_prompt {
        if let Some(opener) = tool_prefill(&req.tool_choice) {
            // The call is the answer: close an open think block the way the template does without thinking.
            if starts_in_reasoning {
                text.push_str("\n</think>\n\n");
                starts_in_reasoning = false;
            }
            text.push_str(&opener);
            prefill = opener;
        }
    }
    let ids = tokenizer.encode(&text).map_err(|e| {
        ApiError::invalid("messages", format!("could not tokenize the prompt: {e}"))
    })?;
    let cache_marks = history_mark(req, &ids, tokenizer, &render);
    Ok(ChatPrompt {
        ids,
        starts_in_reasoning,
        prefill,
        cache_marks,
    })
}

/// Where the newest message starts, when the history renders to a token prefix of the prompt.
fn history_mark(
    req: &ChatRequest,
    ids: &[u32],
    tokenizer: &TextTokenizer,
    render: &dyn Fn(Value, bool) -> tensorfold_core::Result<String>,
) -> Vec<usize> {
    let Some(messages) = req.messages.as_array().filter(|m| m.len() > 1) else {
        return Vec::new();
    };
    let history = Value::Array(messages[..messages.len() - 1].to_vec());
    let Ok(text) = render(history, false) else {
        return Vec::new();
    };
    match tokenizer.encode(&text) {
        Ok(prefix)
            if !prefix.is_empty() && prefix.len() < ids.len() && ids.starts_with(&prefix) =>
        {
            vec![prefix.len()]
        }
        _ => Vec::new(),
    }
}
