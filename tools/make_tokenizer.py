#!/usr/bin/env python3
"""Build the tiny Qwen3.5-style tokenizer fixture and its golden renders.

Writes fixtures/tokenizer/{tokenizer.json, tokenizer_config.json, chat_template.jinja,
golden_renders.json, golden_encodings.json}. Deterministic: the same inputs give the same bytes.

    pip install tokenizers jinja2
    python tools/make_tokenizer.py

The BPE model is trained with `tokenizers` on the text embedded below, then written out by hand in
the layout of the published Qwen3.5 tokenizer.json (GPT-2 byte map, NFC normaliser, the Qwen3.5
split regex, byte-level decoder, specials appended right after the BPE vocab). The chat template is
the one shipped with Qwen/Qwen3.5-27B (tokenizer_config.json) and
mlx-community/Qwen3.5-35B-A3B-4bit (chat_template.jinja, sha256 a4aee8af...f715), Apache-2.0; it is
kept in fixtures/tokenizer/chat_template.jinja and checked against that hash here.
Golden renders use jinja2 configured the way transformers' apply_chat_template configures it.
"""

import hashlib
import json
import os
import unicodedata
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fixtures", "tokenizer")

SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TEMPLATE_SHA256 = "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"
TOTAL_VOCAB = 500
# (content, special): Qwen marks only the ChatML control tokens special, so `skip_special_tokens`
# keeps think and tool markup in decoded text.
ADDED = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
]
BPE_VOCAB = TOTAL_VOCAB - len(ADDED)

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran away.",
    "A language model reads text as a sequence of tokens and predicts the next token in the sequence.",
    "When the user asks a question, the assistant thinks about it and then writes a short answer.",
    "It's a small world; we'll see what they've done, and I'm sure you'd agree that's fine.",
    "The weather in Paris is sunny today, with a high of 21 degrees and a light wind from the west.",
    "Please return the result as JSON with the fields name, value and unit.",
    "There are 365 days in a year, 24 hours in a day, and 60 minutes in an hour.",
    "Reading files, parsing numbers and writing tests are the daily work of a software engineer.",
    "Hello, how are you? I am fine, thank you. What would you like to talk about today?",
    "The server streams tokens back to the client as soon as they are ready.",
    "Caf\u00e9 au lait, na\u00efve r\u00e9sum\u00e9, \u00fcber, \u4f60\u597d\u4e16\u754c, \u3053\u3093\u306b\u3061\u306f \U0001f600\U0001f680.",
    "fn main() {\n    let mut total: u64 = 0;\n    for i in 0..10 {\n        total += i * i;\n    }\n"
    '    println!("total = {}", total);\n}\n',
    "pub fn encode(&self, text: &str) -> Result<Vec<u32>> {\n    self.inner.encode(text, false)\n}\n",
    "impl Tokenizer {\n    pub fn new(path: &Path) -> Self {\n        Self { path: path.to_path_buf() }\n    }\n}\n",
    "def get_weather(city: str, days: int = 1) -> dict:\n    \"\"\"Return the forecast for a city.\"\"\"\n"
    "    return {\"city\": city, \"days\": days, \"temp\": 21.5}\n",
    "import json\nfor line in open('data.txt'):\n    record = json.loads(line)\n    print(record['name'])\n",
    "if x > 0 and y < 10:\n    result = [a + b for a, b in zip(xs, ys)]\nelse:\n    result = None\n",
    "class Stream:\n    def __init__(self, items):\n        self.items = list(items)\n\n"
    "    def __len__(self):\n        return len(self.items)\n",
    '{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}',
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
    "<think>\nThe user wants the weather. I should call the tool.\n</think>\n\nLet me check the weather.",
    "The function returns the value of the parameter, and the test checks that the value is right.",
    "Numbers like 3.14159, 2.71828, 1024 and 65536 show up in code and in text.",
]


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
    bs += list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def train_bpe():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    # Byte tokens first in GPT-2 byte order, then merges in rank order: a stable, readable layout.
    byte_map = bytes_to_unicode()
    ordered = [byte_map[b] for b in range(256)]
    seen = set(ordered)
    for a, b in merges:
        if a + b not in seen:
            ordered.append(a + b)
            seen.add(a + b)
    assert set(ordered) == set(vocab), "trained vocab is not bytes + merges"
    assert len(ordered) <= BPE_VOCAB
    return {t: i for i, t in enumerate(ordered)}, merges


def tokenizer_json(vocab, merges, split_regex=SPLIT_REGEX):
    base = len(vocab)
    added = [
        {
            "id": base + i,
            "content": content,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": special,
        }
        for i, (content, special) in enumerate(ADDED)
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split_regex}, "behavior": "Isolated", "invert": False},
                byte_level,
            ],
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def tokenizer_config(base):
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(base + i): {
                "content": content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for i, (content, special) in enumerate(ADDED)
        },
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def hf_env():
    """jinja2 set up as transformers' apply_chat_template sets it up."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a <city> & 'region', in \u00b0C or \u00b0F \u2014 \u4f60\u597d.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "days": {"type": "integer", "minimum": 1},
                "units": {"type": "string", "enum": ["metric", "imperial"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": []},
    },
}

CASES = [
    {"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": True},
    {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant.\n"},
            {"role": "user", "content": "What is 2 + 2?"},
        ],
        "add_generation_prompt": True,
        "enable_thinking": True,
    },
    {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "reasoning_content": "Any colour will do.", "content": "Blue."},
            {"role": "user", "content": "Another one?"},
            {"role": "assistant", "content": "<think>\nPick a different one.\n</think>\n\nGreen."},
            {"role": "user", "content": "And a third?"},
            {"role": "assistant", "reasoning_content": "\nRed is left.\n", "content": "Red."},
        ],
        "add_generation_prompt": False,
    },
    {
        "messages": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "Weather in Paris and Tokyo for 3 days?"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "I need the tool twice.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": {"city": "Paris", "days": 3, "detailed": True, "extra": None},
                        },
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": {"city": "T\u014dky\u014d", "days": 3, "ratio": 0.5,
                                          "units": ["metric", "<raw>"], "opts": {"a": 1, "b": "x & y"}},
                        },
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
            {"role": "tool", "tool_call_id": "call_2", "content": "{\"temp\": 18}"},
            {"role": "assistant", "content": "Paris 21\u00b0C, Tokyo 18\u00b0C."},
            {"role": "user", "content": "Thanks. Search for umbrellas."},
            {
                "role": "assistant",
                "content": "Searching now.",
                "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "umbrella"}}}],
            },
            {"role": "tool", "content": "No results."},
        ],
        "tools": [WEATHER_TOOL, SEARCH_TOOL],
        "add_generation_prompt": True,
    },
    {
        "messages": [
            {"role": "user", "content": "Hi there."},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Tell me a joke."},
        ],
        "add_generation_prompt": True,
        "enable_thinking": False,
    },
    {
        "messages": [
            {"role": "user", "content": "Say yes."},
            {"role": "assistant", "content": "Yes."},
        ],
        "add_generation_prompt": False,
        "enable_thinking": True,
    },
    {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "System as parts."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look: "},
                    {"type": "image", "image": "cat.png"},
                    {"type": "text", "text": " and "},
                    {"type": "video", "video": "cat.mp4"},
                ],
            },
        ],
        "tools": [SEARCH_TOOL],
        "add_generation_prompt": True,
    },
]

ENCODE_TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "fn main() {\n    println!(\"{}\", 12345);\n}\n",
    "It's 3.14159 o'clock; we'll SEE.  Spaces   and\ttabs\r\n\n",
    "Caf\u00e9 na\u00efve \u4f60\u597d \U0001f600 e\u0301",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nOk<|im_end|>",
    "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call><|endoftext|>",
    "<|fim_prefix|>def f(<|fim_suffix|>):<|fim_middle|>",
    "",
]


FILTER_VALUE = {
    "b": [1, 2.5, {"c": None, "d": []}],
    "a": "\u00e9<&>'\"\n\u0001\U0001f600",
    "e": {},
    "f": True,
    "g": 1e-07,
}
FILTER_TEMPLATES = [
    "{{ x | tojson }}",
    "{{ x | tojson(indent=2) }}",
    "{{ x | tojson(ensure_ascii=true, sort_keys=true) }}",
    "{{ x | tojson(separators=(',', ':')) }}",
    "{{ x | tojson(indent=1, separators=(', ', ': ')) }}|{{ x.b | tojson(indent='\\t') }}|{{ [] | tojson(indent=0) }}",
    "{{ x }}|{{ x.b }}|{{ x.f }}|{{ x.g }}|{{ none }}|{{ x.b[1] | string }}|{{ x.f | string }}",
    "{{ ' a b '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'xAy'.lower() }}|{{ x.get('zz', 'dflt') }}",
    "{%- for k, v in x | items %}{{ k }}={{ v }};{% endfor %}",
    "{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
]


def render_filters():
    env = hf_env()
    return [
        {"template": t, "context": {"x": FILTER_VALUE}, "text": env.from_string(t).render(x=FILTER_VALUE)}
        for t in FILTER_TEMPLATES
    ]


def render_golden(template):
    env = hf_env()
    compiled = env.from_string(template)
    out = []
    for case in CASES:
        kwargs = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
        if "enable_thinking" in case:
            kwargs["enable_thinking"] = case["enable_thinking"]
        text = compiled.render(
            messages=case["messages"],
            tools=case.get("tools"),
            documents=None,
            add_generation_prompt=case["add_generation_prompt"],
            **kwargs,
        )
        out.append(
            {
                "messages": case["messages"],
                "tools": case.get("tools"),
                "add_generation_prompt": case["add_generation_prompt"],
                "enable_thinking": case.get("enable_thinking"),
                "text": text,
            }
        )
    return out


def write_json(name, obj, indent=2):
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent)
        f.write("\n")
    return path


def main():
    os.makedirs(OUT, exist_ok=True)
    template_path = os.path.join(OUT, "chat_template.jinja")
    with open(template_path, "rb") as f:
        raw = f.read()
    digest = hashlib.sha256(raw).hexdigest()
    assert digest == TEMPLATE_SHA256, f"chat_template.jinja drifted from the published text: {digest}"

    vocab, merges = train_bpe()
    tj = tokenizer_json(vocab, merges)
    path = os.path.join(OUT, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
    write_json("tokenizer_config.json", tokenizer_config(len(vocab)))

    tok = Tokenizer.from_file(path)
    assert tok.get_vocab_size(with_added_tokens=True) == TOTAL_VOCAB, tok.get_vocab_size(True)
    encodings = []
    for text in ENCODE_TEXTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == unicodedata.normalize("NFC", text), text
        encodings.append(
            {"text": text, "ids": ids, "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)}
        )
    write_json("golden_encodings.json", encodings, indent=None)
    write_json("golden_renders.json", render_golden(raw.decode("utf-8")), indent=1)
    write_json("golden_filters.json", render_filters(), indent=1)
    print(f"vocab {len(vocab)} BPE + {len(ADDED)} added; merges {len(merges)}; wrote {OUT}")


if __name__ == "__main__":
    main()
