//! Tool-call parser tests on hand-written model outputs, fed whole and split at every chunk boundary.

use super::*;
use serde_json::json;

fn schemas() -> ToolSchemas {
    ToolSchemas::new(&[
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}}
        }}}),
        json!({"type": "function", "function": {"name": "run", "parameters": {
            "type": "object", "properties": {"cmd": {"type": "string"}, "env": {"type": "object"}}
        }}}),
    ])
}

const ONE_CALL: &str = "I will check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis \"FR\"\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";

/// Runs the streaming parser with the text cut at the given byte offsets.
fn streamed(text: &str, cuts: &[usize]) -> (String, Vec<ParsedCall>) {
    let mut p = ToolCallParser::new(schemas());
    let mut events = Vec::new();
    let mut last = 0;
    for &c in cuts {
        if c > last && c < text.len() && text.is_char_boundary(c) {
            events.extend(p.push(&text[last..c]));
            last = c;
        }
    }
    events.extend(p.push(&text[last..]));
    events.extend(p.finish());
    collect(events)
}

fn args(call: &ParsedCall) -> Value {
    serde_json::from_str(&call.arguments).expect("arguments are JSON")
}

#[test]
fn a_well_formed_call_is_parsed_with_typed_arguments() {
    let (content, calls) = parse_complete(ONE_CALL, &schemas());
    assert_eq!(content, "I will check.\n\n");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(args(&calls[0]), json!({"city": "Paris \"FR\"", "days": 3}));
}

#[test]
fn every_single_split_point_gives_the_same_result() {
    let whole = parse_complete(ONE_CALL, &schemas());
    for cut in 1..ONE_CALL.len() {
        assert_eq!(streamed(ONE_CALL, &[cut]), whole, "cut at {cut}");
    }
}

#[test]
fn byte_by_byte_streaming_gives_the_same_result() {
    let cuts: Vec<usize> = (1..ONE_CALL.len()).collect();
    assert_eq!(
        streamed(ONE_CALL, &cuts),
        parse_complete(ONE_CALL, &schemas())
    );
}

#[test]
fn two_calls_and_multiline_values_are_parsed() {
    let text = "<tool_call>\n<function=run>\n<parameter=cmd>\nls -l\necho </par\n</parameter>\n<parameter=env>\n{\"A\": 1}\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=metric>\ntrue\n</parameter>\n</function>\n</tool_call>";
    let (content, calls) = parse_complete(text, &schemas());
    assert_eq!(content, "\n");
    assert_eq!(calls.len(), 2);
    assert_eq!(
        args(&calls[0]),
        json!({"cmd": "ls -l\necho </par", "env": {"A": 1}})
    );
    assert_eq!(calls[1].name, "get_weather");
    assert_eq!(args(&calls[1]), json!({"metric": true}));
    for step in [1, 2, 3, 5, 7, 13] {
        let cuts: Vec<usize> = (1..text.len()).filter(|c| c % step == 0).collect();
        assert_eq!(
            streamed(text, &cuts),
            (content.clone(), calls.clone()),
            "step {step}"
        );
    }
}

#[test]
fn a_call_without_parameters_has_empty_arguments() {
    let (_, calls) = parse_complete(
        "<tool_call>\n<function=run>\n</function>\n</tool_call>",
        &schemas(),
    );
    assert_eq!(calls[0].arguments, "{}");
}

#[test]
fn an_unknown_function_and_parameter_keep_string_values() {
    let text =
        "<tool_call>\n<function=other>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>";
    let (_, calls) = parse_complete(text, &schemas());
    assert_eq!(calls[0].name, "other");
    assert_eq!(args(&calls[0]), json!({"n": "5"}));
}

#[test]
fn a_tool_call_opener_followed_by_prose_is_content() {
    let text = "See <tool_call> here: no function.";
    assert_eq!(parse_complete(text, &schemas()), (text.to_owned(), vec![]));
    assert_eq!(streamed(text, &[5, 9, 12, 20]), (text.to_owned(), vec![]));
}

#[test]
fn a_malformed_call_comes_back_as_content() {
    let text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\noops\n</function>\n</tool_call>";
    let (content, calls) = parse_complete(text, &schemas());
    assert!(calls.is_empty());
    assert_eq!(content, text);
}

#[test]
fn an_unfinished_call_comes_back_as_content() {
    let text = "ok <tool_call>\n<function=get_weather>\n<parameter=city>\nPar";
    let (content, calls) = parse_complete(text, &schemas());
    assert!(calls.is_empty());
    assert_eq!(content, text);
    let cut: Vec<usize> = (1..text.len()).collect();
    assert_eq!(streamed(text, &cut), (text.to_owned(), vec![]));
}

#[test]
fn a_bad_function_name_is_content() {
    let text = "<tool_call>\n<function=bad\nname>\n</function>\n</tool_call>";
    assert_eq!(parse_complete(text, &schemas()).1, vec![]);
    assert_eq!(parse_complete(text, &schemas()).0, text);
}

#[test]
fn a_missing_closing_tool_call_tag_is_tolerated_at_the_end() {
    let text = "<tool_call>\n<function=run>\n<parameter=cmd>\npwd\n</parameter>\n</function>";
    let (content, calls) = parse_complete(text, &schemas());
    assert_eq!(content, "");
    assert_eq!(args(&calls[0]), json!({"cmd": "pwd"}));
}

#[test]
fn string_arguments_stream_as_they_are_written() {
    let mut p = ToolCallParser::new(schemas());
    let mut ev = p.push("<tool_call>\n<function=run>\n<parameter=cmd>\nls ");
    ev.extend(p.push("-la /tmp"));
    let fragments: Vec<&str> = ev
        .iter()
        .filter_map(|e| match e {
            ToolEvent::Args { fragment, .. } => Some(fragment.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(fragments, vec!["{\"cmd\": \"", "ls ", "-la /tmp"]);
    assert!(matches!(ev[0], ToolEvent::Start { index: 0, .. }));
}

#[test]
fn text_without_calls_passes_through_unchanged() {
    let text = "plain <b>text</b> with <tool_ and more";
    for cut in 1..text.len() {
        assert_eq!(streamed(text, &[cut]), (text.to_owned(), vec![]));
    }
}
