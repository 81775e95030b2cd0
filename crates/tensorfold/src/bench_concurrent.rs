//! `tensorfold bench concurrent`: drives a running `tensorfold serve` with 1, 2, 4, 8… concurrent streams of code
//! and chat prompts (T = 0 and T > 0, stream i seeded seed + i), checks each reply's token_sha against the same
//! request alone (`--alone`) and with `"draft": false` (`--serial`), prints aggregate and per-stream tok/s.

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
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

/// Request `i` of a level: alternating code completions and chat, greedy and sampled.
fn request(i: usize, a: &ConcurrentArgs) -> (&'static str, Value) {
    let temperature = if i.is_multiple_of(2) { 0.0 } else { 0.8 };
    let seed = a.seed + i as u64;
    if (i / 2).is_multiple_of(2) {
        let prompt = CODE[i % CODE.len()];
        (
            "/v1/completions",
            json!({"prompt": prompt, "max_tokens": a.max_tokens, "temperature": temperature, "seed": seed, "ignore_eos": true}),
        )
    } else {
        let content = CHAT[i % CHAT.len()];
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": content}], "max_tokens": a.max_tokens, "temperature": temperature, "seed": seed}),
        )
    }
}

struct Reply {
    sha: String,
    tokens: u64,
    secs: f64,
}

fn post(a: &ConcurrentArgs, path: &str, body: &Value) -> Result<Reply> {
    let url = format!("{}{path}", a.url.trim_end_matches('/'));
    let mut req = ureq::post(&url);
    if let Some(k) = &a.api_key {
        req = req.set("authorization", &format!("Bearer {k}"));
    }
    let t = Instant::now();
    let resp: Value = req
        .send_json(body.clone())
        .with_context(|| format!("POST {url}"))?
        .into_json()?;
    let secs = t.elapsed().as_secs_f64();
    let sha = resp["tensorfold"]["token_sha"]
        .as_str()
        .context("reply has no tensorfold.token_sha")?
        .to_string();
    let tokens = resp["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    Ok(Reply { sha, tokens, secs })
}

pub fn run(a: ConcurrentArgs) -> Result<()> {
    let mut differences = 0;
    println!("| streams | aggregate tok/s | per-stream tok/s (mean) | wall s | equal alone | equal draft:false |");
    println!("|---|---|---|---|---|---|");
    for &n in &a.levels {
        let reqs: Vec<(&str, Value)> = (0..n).map(|i| request(i, &a)).collect();
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
            "| {n} | {:.1} | {:.1} | {wall:.2} | {} | {} |",
            tokens as f64 / wall,
            per_stream,
            show(a.alone, alone_eq),
            show(a.serial, serial_eq)
        );
    }
    if differences > 0 {
        bail!("{differences} replies differ from their alone/serial twin");
    }
    Ok(())
}
