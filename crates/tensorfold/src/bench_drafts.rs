//! `tensorfold bench --drafts`: drafted against plain decoding of three prompt kinds (a copy-heavy rewrite of a
//! long code file, new code, prose), alternating in one run; tokens per round, tok/s both ways, token_sha equality.

use anyhow::{anyhow, bail, Result};
use std::path::Path;
use tensorfold_backend::Backend;
use tensorfold_core::sampling::token_sha;
use tensorfold_core::tokenizer::TextTokenizer;
use tensorfold_engine::{DrafterFactory, EngineConfig, EngineHandle, Event, Request, Usage};
use tensorfold_model::Qwen35;

/// Which drafters the drafted replies use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Drafters {
    Both,
    Copies,
    Mtp,
    /// Neither: the drafted arm runs with drafting on but nothing drafts (a control for the machinery's cost).
    None,
}

/// The long code file of the rewrite prompt: a fixed asset, so the prompt stays the same from commit to commit.
const CODE_FILE: &str = include_str!("../assets/rewrite_source.py");

struct Kind {
    name: &'static str,
    prompt: Vec<u32>,
}

/// The three prompts, as text through the checkpoint's tokenizer, else as synthetic ids of the same shape.
fn kinds(dir: &Path, vocab: usize, rewrite_tokens: usize) -> Result<Vec<Kind>> {
    let Some(tok) = TextTokenizer::from_dir(dir)? else {
        let ids = |seed: u32, n: usize| -> Vec<u32> {
            (0..n as u32)
                .map(|i| {
                    (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503))
                        % vocab.min(480) as u32
                })
                .collect()
        };
        let file = ids(1, rewrite_tokens);
        let mut rewrite = file.clone();
        rewrite.extend_from_slice(&file[..16.min(file.len())]);
        return Ok(vec![
            Kind {
                name: "rewrite (copy-heavy)",
                prompt: rewrite,
            },
            Kind {
                name: "new code",
                prompt: ids(2, 48),
            },
            Kind {
                name: "prose",
                prompt: ids(3, 48),
            },
        ]);
    };
    // Cut the file to about `rewrite_tokens` tokens on a line boundary.
    let file = head_lines(&tok, CODE_FILE, rewrite_tokens)?;
    let first_line = file.lines().next().unwrap_or_default();
    let rewrite = format!(
        "# file: cache.py\n{file}\n# file: cache_copy.py (an exact copy of cache.py, line for line)\n{first_line}\n"
    );
    let code = "import math\n\n\ndef median(values):\n    \"\"\"Return the median of a list of numbers.\"\"\"\n";
    let prose =
        "Write a short story about a lighthouse keeper who finds a message in a bottle.\n\n";
    Ok(vec![
        Kind {
            name: "rewrite (copy-heavy)",
            prompt: tok.encode(&rewrite)?,
        },
        Kind {
            name: "new code",
            prompt: tok.encode(code)?,
        },
        Kind {
            name: "prose",
            prompt: tok.encode(prose)?,
        },
    ])
}

struct Reply {
    tokens: Vec<u32>,
    usage: Usage,
    decode_tok_s: f64,
}

fn reply(engine: &EngineHandle, prompt: &[u32], max_tokens: usize, draft: bool) -> Result<Reply> {
    let mut req = Request::greedy(prompt.to_vec(), max_tokens);
    req.ignore_eos = true;
    req.draft = draft;
    let mut rx = engine.submit(req).map_err(|e| anyhow!("{e}"))?;
    let mut tokens = Vec::new();
    while let Some(ev) = rx.blocking_recv() {
        match ev {
            Event::Token { id, .. } => tokens.push(id),
            Event::Done {
                usage,
                first_token_secs,
                total_secs,
                ..
            } => {
                let decode = (total_secs - first_token_secs).max(1e-9);
                return Ok(Reply {
                    decode_tok_s: tokens.len().saturating_sub(1) as f64 / decode,
                    tokens,
                    usage,
                });
            }
            Event::Error(e) => bail!("{e}"),
        }
    }
    bail!("the engine closed the stream without Done")
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(0.0)
}

/// One stream, no prompt cache, the chosen drafters; `plan_widths` off drafts at full width every round.
fn engine_config(drafters: Drafters, context: usize, plan_widths: bool) -> EngineConfig {
    EngineConfig {
        parallel: 1,
        context,
        prompt_cache_bytes: 0,
        mtp: matches!(drafters, Drafters::Both | Drafters::Mtp),
        drafter: match drafters {
            Drafters::Both | Drafters::Copies => DrafterFactory::context_copy(),
            Drafters::Mtp | Drafters::None => DrafterFactory::none(),
        },
        plan_widths,
        ..EngineConfig::default()
    }
}

/// Runs the sweep: for each kind, `repeat` drafted and plain replies alternating (the order flips every repeat).
pub fn bench_drafts<B: Backend>(
    model: Qwen35<B>,
    dir: &Path,
    decode_tokens: usize,
    rewrite_tokens: usize,
    repeat: usize,
    drafters: Drafters,
) -> Result<()> {
    let kinds = kinds(dir, model.config.vocab_size, rewrite_tokens)?;
    let has_head = model.mtp.is_some();
    println!(
        "model: {} ({}), backend {}, MTP head: {}",
        dir.display(),
        model.format,
        model.backend_name(),
        if has_head { "yes" } else { "no" }
    );
    let longest = kinds.iter().map(|k| k.prompt.len()).max().unwrap_or(0);
    let engine = tensorfold_engine::spawn(
        model,
        engine_config(drafters, longest + decode_tokens, true),
    );
    println!(
        "greedy, {decode_tokens} tokens per reply, {repeat} drafted ({drafters:?}) and {repeat} plain replies per \
         kind, alternating; decode tok/s is the median"
    );
    println!("| prompt | prompt tokens | tokens per round | accepted / drafted | drafted tok/s | plain tok/s | drafted / plain | token_sha drafted | token_sha plain |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut unequal = 0;
    for kind in &kinds {
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        let (mut shas_d, mut shas_p) = (Vec::new(), Vec::new());
        let mut usage = Usage::default();
        for rep in 0..repeat.max(1) {
            for draft in [rep % 2 == 0, rep % 2 == 1] {
                let r = reply(&engine, &kind.prompt, decode_tokens, draft)?;
                if draft {
                    fast.push(r.decode_tok_s);
                    shas_d.push(token_sha(&r.tokens));
                    usage = r.usage;
                    usage.completion_tokens = r.tokens.len();
                } else {
                    slow.push(r.decode_tok_s);
                    shas_p.push(token_sha(&r.tokens));
                }
            }
        }
        shas_d.dedup();
        shas_p.dedup();
        if shas_d != shas_p || shas_d.len() != 1 {
            unequal += 1;
        }
        let (d, p) = (median(fast), median(slow));
        println!(
            "| {} | {} | {:.2} | {} / {} | {:.1} | {:.1} | {:.2}× | {} | {} |",
            kind.name,
            kind.prompt.len(),
            usage.completion_tokens as f64 / usage.rounds.max(1) as f64,
            usage.accepted,
            usage.drafted,
            d,
            p,
            d / p.max(1e-9),
            shas_d.join(" "),
            shas_p.join(" "),
        );
    }
    let stats = engine.stats();
    engine.shutdown();
    println!(
        "engine: {} rounds, {} drafted, {} accepted",
        stats.rounds_total, stats.drafted_total, stats.accepted_total
    );
    if unequal > 0 {
        bail!("{unequal} prompt kinds gave different tokens drafted and plain");
    }
    Ok(())
}

/// The file's first lines, cut on a line boundary once they reach `min_tokens` tokens (the whole file if shorter).
fn head_lines(tok: &TextTokenizer, text: &str, min_tokens: usize) -> Result<String> {
    let mut out = String::new();
    for line in text.lines() {
        if tok.encode(&out)?.len() >= min_tokens {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

/// What `bench_files` measures.
pub struct FilesBench<'a> {
    pub files: &'a [std::path::PathBuf],
    pub decode_tokens: usize,
    pub rewrite_tokens: usize,
    pub prefix_tokens: usize,
    pub drafters: Drafters,
    pub fixed_widths: bool,
}

/// One prompt kind's sums over the files.
struct KindTotals {
    kind: &'static str,
    completion: usize,
    rounds: usize,
    drafted: usize,
    accepted: usize,
    drafted_tok_s: Vec<f64>,
    plain_tok_s: Vec<f64>,
}

/// `--drafts --files …`: per file, a copy-heavy whole-file rewrite (the file, then the start of an exact copy) and
/// a continuation of its first lines (new code); one drafted and one plain greedy reply each, tokens compared.
/// Prints one row per file and prompt kind, then the totals per kind: tokens per round (completion tokens /
/// rounds), drafted, accepted, acceptance rate.
pub fn bench_files<B: Backend>(model: Qwen35<B>, dir: &Path, b: FilesBench) -> Result<()> {
    let FilesBench {
        files,
        decode_tokens,
        rewrite_tokens,
        prefix_tokens,
        drafters,
        fixed_widths,
    } = b;
    let tok = TextTokenizer::from_dir(dir)?
        .ok_or_else(|| anyhow!("--files needs a checkpoint with a tokenizer"))?;
    let mut prompts: Vec<(String, &'static str, Vec<u32>)> = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = name.trim_end_matches(".py");
        let file = head_lines(&tok, &text, rewrite_tokens)?;
        let first_line = file.lines().next().unwrap_or_default();
        let rewrite = format!(
            "# file: {name}\n{file}\n# file: {stem}_copy.py (an exact copy of {name}, line for line)\n{first_line}\n"
        );
        prompts.push((name.clone(), "rewrite", tok.encode(&rewrite)?));
        prompts.push((
            name,
            "continuation",
            tok.encode(&head_lines(&tok, &text, prefix_tokens)?)?,
        ));
    }
    let has_head = model.mtp.is_some();
    println!(
        "model: {} ({}), backend {}, MTP head: {}",
        dir.display(),
        model.format,
        model.backend_name(),
        if has_head { "yes" } else { "no" }
    );
    let longest = prompts.iter().map(|p| p.2.len()).max().unwrap_or(0);
    let engine = tensorfold_engine::spawn(
        model,
        engine_config(drafters, longest + decode_tokens, !fixed_widths),
    );
    println!(
        "greedy, {decode_tokens} tokens per reply (ignore_eos), drafters {drafters:?}, widths {}; one drafted and \
         one plain reply per prompt",
        if fixed_widths { "fixed" } else { "planned" }
    );
    println!("| file | prompt | prompt tokens | tokens per round | accepted / drafted | drafted tok/s | plain tok/s | same tokens |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut totals: Vec<KindTotals> = Vec::new();
    let mut unequal = 0;
    for (name, kind, prompt) in &prompts {
        let d = reply(&engine, prompt, decode_tokens, true)?;
        let p = reply(&engine, prompt, decode_tokens, false)?;
        let same = d.tokens == p.tokens;
        if !same {
            unequal += 1;
        }
        let u = &d.usage;
        println!(
            "| {name} | {kind} | {} | {:.2} | {} / {} | {:.1} | {:.1} | {} |",
            prompt.len(),
            d.tokens.len() as f64 / u.rounds.max(1) as f64,
            u.accepted,
            u.drafted,
            d.decode_tok_s,
            p.decode_tok_s,
            if same { "yes" } else { "NO" }
        );
        let i = match totals.iter().position(|t| t.kind == *kind) {
            Some(i) => i,
            None => {
                totals.push(KindTotals {
                    kind,
                    completion: 0,
                    rounds: 0,
                    drafted: 0,
                    accepted: 0,
                    drafted_tok_s: Vec::new(),
                    plain_tok_s: Vec::new(),
                });
                totals.len() - 1
            }
        };
        let t = &mut totals[i];
        t.completion += d.tokens.len();
        t.rounds += u.rounds;
        t.drafted += u.drafted;
        t.accepted += u.accepted;
        t.drafted_tok_s.push(d.decode_tok_s);
        t.plain_tok_s.push(p.decode_tok_s);
    }
    engine.shutdown();
    println!();
    println!("| drafters | prompt | files | tokens per round | drafted | accepted | acceptance | drafted / plain tok/s (median) |");
    println!("|---|---|---|---|---|---|---|---|");
    for t in totals {
        let files = t.drafted_tok_s.len();
        let (d, p) = (median(t.drafted_tok_s), median(t.plain_tok_s));
        println!(
            "| {drafters:?} | {} | {files} | {:.2} | {} | {} | {:.1}% | {:.2}× |",
            t.kind,
            t.completion as f64 / t.rounds.max(1) as f64,
            t.drafted,
            t.accepted,
            100.0 * t.accepted as f64 / t.drafted.max(1) as f64,
            d / p.max(1e-9)
        );
    }
    if unequal > 0 {
        bail!("{unequal} prompts gave different tokens drafted and plain");
    }
    Ok(())
}
