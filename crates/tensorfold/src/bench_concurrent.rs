//! `tensorfold bench concurrent`: drives a running `tensorfold serve` with 1, 2, 4, 8… concurrent streamed requests
//! (code and chat prompts, or `--prompt-tokens N` random token ids as serving benchmarks' random datasets do; T = 0
//! and T > 0, stream i seeded seed + i), checks each reply's token_sha against the same request alone (`--alone`)
//! and with `"draft": false` (`--serial`), and prints aggregate and per-stream tok/s, time to first token, time per
//! output token and the gaps between text chunks (inter-token latency).

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use std::io::BufRead;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct ConcurrentArgs {
    /// Server base URL, e.g. http://127.0.0.1:8080
    #[arg(long)]
    pub url: String,
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub levels: Vec<usize>,
    /// Compare every reply with the same request sent alone.
    #[arg(long)]
    pub alone: bool,
    /// Compare every reply with the same request sent with "draft": false.
    #[arg(long)]
    pub serial: bool,
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Send completions of this many pseudo-random token ids (below --prompt-vocab, different for every stream and
    /// level, so no prompt is a cached prefix of another) instead of the code and chat prompts; replies ignore eos.
    #[arg(long)]
    pub prompt_tokens: Option<usize>,
    /// Prompt ids of --prompt-tokens are drawn below this id.
    #[arg(long, default_value_t = 1000)]
    pub prompt_vocab: u64,
    #[arg(long)]
    pub api_key: Option<String>,
}

const CODE: &[&str] = &[
    "import os\n\n\ndef walk_tree(root):\n",
    "class LRUCache:\n    def __init__(self, capacity):\n",
    "def parse_header(line):\n    \"\"\"Split a header line into name and value.\"\"\"\n",
];
const CHAT: &[&str] = &[
    "Write a function that reverses a list.",
    "Explain what a context manager is.",
];

/// splitmix64: the prompt ids of --prompt-tokens, a pure function of (seed, level, stream, place).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Request `i` of a level of `n` streams: alternating code completions and chat, greedy and sampled, or random
/// token ids; always streamed, with the usage chunk that carries the reply's token_sha.
fn request(n: usize, i: usize, a: &ConcurrentArgs) -> (&'static str, Value) {
    let temperature = if i.is_multiple_of(2) { 0.0 } else { 0.8 };
    let mut body = json!({"max_tokens": a.max_tokens, "temperature": temperature, "seed": a.seed + i as u64,
                          "stream": true, "stream_options": {"include_usage": true}});
    if let Some(len) = a.prompt_tokens {
        let base = mix(a.seed ^ mix(((n as u64) << 32) | i as u64));
        let ids: Vec<u64> = (0..len as u64)
            .map(|j| mix(base ^ j) % a.prompt_vocab.max(1))
            .collect();
        body["prompt"] = json!(ids);
    } else if (i / 2).is_multiple_of(2) {
        body["prompt"] = json!(CODE[i % CODE.len()]);
    } else {
        body["messages"] = json!([{"role": "user", "content": CHAT[i % CHAT.len()]}]);
        return ("/v1/chat/completions", body);
    }
    body["ignore_eos"] = json!(true);
    ("/v1/completions", body)
}

struct Reply {
    sha: String,
    tokens: u64,
    /// Seconds from sending to the end of the reply's stream, and to its first text.
    secs: f64,
    first: f64,
    /// Seconds between consecutive text chunks (vLLM's ITL; a drafted round's tokens may share one chunk).
    gaps: Vec<f64>,
}

impl Reply {
    /// Time per output token after the first, as vLLM's benchmarks define it (from the first text to the end of
    /// the stream, over the tokens after the first), or None for replies of one token.
    fn tpot(&self) -> Option<f64> {
        (self.tokens > 1).then(|| (self.secs - self.first) / (self.tokens - 1) as f64)
    }
}

/// Whether a streamed chunk carries reply text (a completion's text, a chat delta's content or reasoning).
fn has_text(chunk: &Value) -> bool {
    let c = &chunk["choices"][0];
    [
        &c["text"],
        &c["delta"]["content"],
        &c["delta"]["reasoning_content"],
    ]
    .iter()
    .any(|t| t.as_str().is_some_and(|t| !t.is_empty()))
}

fn post(a: &ConcurrentArgs, path: &str, body: &Value) -> Result<Reply> {
    let url = format!("{}{path}", a.url.trim_end_matches('/'));
    let mut req = ureq::post(&url);
    if let Some(k) = &a.api_key {
        req = req.set("authorization", &format!("Bearer {k}"));
    }
    let t = Instant::now();
    let resp = req
        .send_json(body.clone())
        .with_context(|| format!("POST {url}"))?;
    let (mut first, mut usage) = (None, None);
    let (mut last_text, mut gaps) = (0.0, Vec::new());
    for line in std::io::BufReader::new(resp.into_reader()).lines() {
        let line = line.with_context(|| format!("reading the stream of {url}"))?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(data).context("a stream chunk is not JSON")?;
        if chunk.get("error").is_some() {
            bail!("{url} streamed an error: {}", chunk["error"]);
        }
        if has_text(&chunk) {
            let now = t.elapsed().as_secs_f64();
            if first.is_none() {
                first = Some(now);
            } else {
                gaps.push(now - last_text);
            }
            last_text = now;
        }
        if chunk["usage"].is_object() && chunk["tensorfold"].is_object() {
            usage = Some(chunk);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let usage = usage.context("the stream ended without its usage chunk")?;
    let sha = usage["tensorfold"]["token_sha"]
        .as_str()
        .context("usage chunk has no tensorfold.token_sha")?
        .to_string();
    let tokens = usage["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    Ok(Reply {
        sha,
        tokens,
        secs,
        first: first.unwrap_or(secs),
        gaps,
    })
}

/// The 99th percentile (nearest rank) and the largest of `v` (empty: zeros).
fn p99_max(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    match v.last() {
        Some(&max) => (v[(v.len() * 99).div_ceil(100) - 1], max),
        None => (0.0, 0.0),
    }
}

/// The median and the largest of `v` (empty: zeros).
fn median_max(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    match v.last() {
        Some(&max) => (v[v.len() / 2], max),
        None => (0.0, 0.0),
    }
}

pub fn run(a: ConcurrentArgs) -> Result<()> {
    let mut differences = 0;
    println!("| streams | aggregate tok/s | per-stream tok/s (mean) | TTFT median / max (s) | TPOT mean (ms) | ITL p99 / max (ms) | wall s | equal alone | equal draft:false |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &n in &a.levels {
        let reqs: Vec<(&str, Value)> = (0..n).map(|i| request(n, i, &a)).collect();
        let t = Instant::now();
        let replies: Vec<Result<Reply>> = std::thread::scope(|s| {
            let handles: Vec<_> = reqs
                .iter()
                .map(|(p, b)| s.spawn(|| post(&a, p, b)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| bail!("client thread panicked")))
                .collect()
        });
        let wall = t.elapsed().as_secs_f64();
        let replies: Vec<Reply> = replies.into_iter().collect::<Result<_>>()?;
        let tokens: u64 = replies.iter().map(|r| r.tokens).sum();
        let per_stream = replies
            .iter()
            .map(|r| r.tokens as f64 / r.secs)
            .sum::<f64>()
            / n as f64;
        let (ttft, ttft_max) = median_max(replies.iter().map(|r| r.first).collect());
        let tpots: Vec<f64> = replies.iter().filter_map(Reply::tpot).collect();
        let tpot = tpots.iter().sum::<f64>() / tpots.len().max(1) as f64;
        let (itl99, itl_max) = p99_max(
            replies
                .iter()
                .flat_map(|r| r.gaps.iter().copied())
                .collect(),
        );
        let (mut alone_eq, mut serial_eq) = (0, 0);
        for ((path, body), r) in reqs.iter().zip(&replies) {
            if a.alone {
                let solo = post(&a, path, body)?;
                if solo.sha == r.sha {
                    alone_eq += 1;
                } else {
                    differences += 1;
                    eprintln!(
                        "DIFF alone: {path} {body} concurrent {} alone {}",
                        r.sha, solo.sha
                    );
                }
            }
            if a.serial {
                let mut b = body.clone();
                b["draft"] = json!(false);
                let serial = post(&a, path, &b)?;
                if serial.sha == r.sha {
                    serial_eq += 1;
                } else {
                    differences += 1;
                    eprintln!(
                        "DIFF draft:false: {path} {body} drafted {} serial {}",
                        r.sha, serial.sha
                    );
                }
            }
        }
        let show = |on: bool, eq: usize| if on { format!("{eq}/{n}") } else { "-".into() };
        println!(
            "| {n} | {:.1} | {:.1} | {ttft:.3} / {ttft_max:.3} | {:.2} | {:.1} / {:.1} | {wall:.2} | {} | {} |",
            tokens as f64 / wall,
            per_stream,
            tpot * 1e3,
            itl99 * 1e3,
            itl_max * 1e3,
            show(a.alone, alone_eq),
            show(a.serial, serial_eq)
        );
    }
    if differences > 0 {
        bail!("{differences} replies differ from their alone/serial twin");
    }
    Ok(())
}
