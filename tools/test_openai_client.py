"""The official `openai` Python client against a running `tensorfold serve` (tiny fixture): completions, chat,
streaming, tool calls, token-id prompts, exactness receipts and error mapping. Exits non-zero on any failure.

Usage: python tools/test_openai_client.py --base-url http://127.0.0.1:PORT/v1 --api-key KEY
"""

import argparse
import sys
import traceback

import openai
from openai import OpenAI

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


def extra(obj, key):
    """A non-OpenAI field of a response object (the client keeps them in model_extra)."""
    return (obj.model_extra or {}).get(key)


def sha(obj):
    return extra(obj, "tensorfold")["token_sha"]


def test_models(c, model):
    ids = [m.id for m in c.models.list().data]
    assert ids == [model], ids


def test_text_completion(c, model):
    r = c.completions.create(model=model, prompt="The quick brown fox", max_tokens=8, temperature=0,
                             extra_body={"ignore_eos": True})
    assert r.object == "text_completion"
    assert isinstance(r.choices[0].text, str)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8
    assert len(sha(r)) == 12


def test_token_id_prompt_equals_text_prompt(c, model):
    ids = c.post("/tokenize", body={"prompt": "Once upon a time"}, cast_to=object)["tokens"]
    a = c.completions.create(model=model, prompt=ids, max_tokens=10, temperature=0,
                             extra_body={"ignore_eos": True})
    b = c.completions.create(model=model, prompt="Once upon a time", max_tokens=10, temperature=0,
                             extra_body={"ignore_eos": True})
    assert a.usage.prompt_tokens == len(ids)
    assert sha(a) == sha(b), (sha(a), sha(b))
    assert a.choices[0].text == b.choices[0].text


def test_chat(c, model):
    r = c.chat.completions.create(model=model, max_completion_tokens=10, temperature=0,
                                  messages=[{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "Hello!"}])
    assert r.object == "chat.completion"
    m = r.choices[0].message
    assert m.role == "assistant"
    reasoning = extra(m, "reasoning_content") or ""
    assert (m.content or "") + reasoning != ""
    details = r.usage.completion_tokens_details
    assert details is not None and details.reasoning_tokens <= 10
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_streamed_chat_equals_whole(c, model):
    kw = dict(model=model, max_tokens=16, temperature=0.8, seed=11,
              messages=[{"role": "user", "content": "Tell me a story"}], extra_body={"ignore_eos": True})
    whole = c.chat.completions.create(**kw)
    content, reasoning, finish, usage, receipt = "", "", None, None, None
    chunks = list(c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    for ch in chunks:
        if ch.choices:
            d = ch.choices[0].delta
            content += d.content or ""
            reasoning += extra(d, "reasoning_content") or ""
            if ch.choices[0].finish_reason:
                finish = ch.choices[0].finish_reason
                receipt = extra(ch, "tensorfold")
        if ch.usage:
            usage = ch.usage
    m = whole.choices[0].message
    assert content == (m.content or ""), (content, m.content)
    assert reasoning == (extra(m, "reasoning_content") or "")
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 16
    assert receipt["token_sha"] == sha(whole)


def test_streamed_completion(c, model):
    whole = c.completions.create(model=model, prompt="abc", max_tokens=6, temperature=0,
                                 extra_body={"ignore_eos": True})
    text = "".join(ch.choices[0].text for ch in c.completions.create(
        model=model, prompt="abc", max_tokens=6, temperature=0, stream=True, extra_body={"ignore_eos": True})
        if ch.choices)
    assert text == whole.choices[0].text


def test_draft_false_equals_drafted(c, model):
    kw = dict(model=model, prompt="ab ab ab ab ab ab", max_tokens=24, temperature=0)
    a = c.completions.create(extra_body={"ignore_eos": True, "draft": True}, **kw)
    b = c.completions.create(extra_body={"ignore_eos": True, "draft": False}, **kw)
    assert sha(a) == sha(b)


def test_named_tool_call(c, model):
    kw = dict(model=model, max_tokens=24, temperature=0, tools=[WEATHER],
              tool_choice={"type": "function", "function": {"name": "get_weather"}},
              messages=[{"role": "user", "content": "Weather in Paris?"}])
    r = c.chat.completions.create(**kw)
    m = r.choices[0].message
    # Random weights rarely finish the call: it is parsed, or comes back as text, never an error.
    if m.tool_calls:
        assert m.tool_calls[0].function.name == "get_weather"
        assert m.tool_calls[0].id.startswith("call_")
        assert r.choices[0].finish_reason in ("tool_calls", "length")
    else:
        assert "<function=get_weather>" in (m.content or ""), m
    names = []
    for ch in c.chat.completions.create(stream=True, **kw):
        for tc in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
            if tc.function and tc.function.name:
                names.append(tc.function.name)
    assert names[:1] == ["get_weather"], names


def test_tool_history_round_trip(c, model):
    r = c.chat.completions.create(model=model, max_tokens=4, tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C and sunny"},
    ])
    assert r.usage.prompt_tokens > 40


def test_logprobs(c, model):
    r = c.chat.completions.create(model=model, max_tokens=3, logprobs=True, top_logprobs=2,
                                  messages=[{"role": "user", "content": "x"}], extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs.content
    assert len(lp) == 3 and len(lp[0].top_logprobs) == 2 and lp[0].logprob <= 0


def test_errors(c, model, base_url):
    try:
        c.completions.create(model=model, prompt="x", n=2)
        raise AssertionError("n=2 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "n", e.body
    try:
        c.chat.completions.create(model=model, messages=[], max_tokens=2)
        raise AssertionError("empty messages were accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "messages", e.body
    try:
        c.completions.create(model=model, prompt=list(range(400)) * 20, max_tokens=5)
        raise AssertionError("an over-long prompt was accepted")
    except openai.BadRequestError as e:
        assert e.body["code"] == "context_length_exceeded", e.body
    bad = OpenAI(base_url=base_url, api_key="wrong-key", max_retries=0)
    try:
        bad.models.list()
        raise AssertionError("a wrong API key was accepted")
    except openai.AuthenticationError as e:
        assert e.status_code == 401
    # The server keeps serving after all of that.
    assert c.completions.create(model=model, prompt="ok", max_tokens=2).choices


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--model", default="tiny")
    args = ap.parse_args()
    c = OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=60)
    tests = [(name, fn) for name, fn in globals().items() if name.startswith("test_") and callable(fn)]
    passed = failed = 0
    for name, fn in tests:
        try:
            if name == "test_errors":
                fn(c, args.model, args.base_url)
            else:
                fn(c, args.model)
            passed += 1
            print(f"ok   {name}")
        except Exception:  # noqa: BLE001 - report every failure and keep going
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
