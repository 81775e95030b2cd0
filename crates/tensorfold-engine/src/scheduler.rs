//! The engine thread: admits requests into slots, runs one round at a time over every live stream (prompt chunks
//! and decode rows side by side), draws each stream's tokens with the keyed rule and streams them back.

use crate::api::{
    EngineConfig, Event, FinishReason, Request, Stats, SubmitError, TokenLogprob, Usage,
};
use crate::penalties::apply_penalties;
use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tensorfold_backend::{Backend, RowRef};
use tensorfold_core::sampling::{draw, token_sha};
use tensorfold_model::{Qwen35, SlotState};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

enum Command {
    Submit(Box<Request>, UnboundedSender<Event>),
    Shutdown,
}

/// A cheap, cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Command>,
    stats: Arc<Mutex<Stats>>,
    config: EngineConfig,
    vocab_size: usize,
    join: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl EngineHandle {
    /// Validates and queues a request; its events arrive on the returned receiver.
    pub fn submit(&self, req: Request) -> Result<UnboundedReceiver<Event>, SubmitError> {
        if req.prompt.is_empty() {
            return Err(SubmitError::Invalid(
                "the prompt is empty: at least one token is needed".into(),
            ));
        }
        if let Some(&bad) = req.prompt.iter().find(|&&t| t as usize >= self.vocab_size) {
            return Err(SubmitError::Invalid(format!(
                "token id {bad} is outside the vocabulary (0..{})",
                self.vocab_size
            )));
        }
        req.sampling
            .validate()
            .map_err(|e| SubmitError::Invalid(e.to_string()))?;
        let needed = req.prompt.len() + req.max_tokens;
        if needed > self.config.context {
            return Err(SubmitError::ContextLength {
                context: self.config.context,
                needed,
                prompt: req.prompt.len(),
                max_tokens: req.max_tokens,
            });
        }
        {
            let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            if s.queue_depth >= self.config.max_queue {
                return Err(SubmitError::QueueFull(s.queue_depth));
            }
            s.queue_depth += 1;
        }
        let (etx, erx) = unbounded_channel();
        self.tx
            .send(Command::Submit(Box::new(req), etx))
            .map_err(|_| SubmitError::ShuttingDown)?;
        Ok(erx)
    }

    pub fn stats(&self) -> Stats {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Refuses new work, lets running and queued requests finish, and waits for the engine thread.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Command::Shutdown);
        if let Some(j) = self.join.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = j.join();
        }
    }
}

struct Stream<B: Backend> {
    req: Request,
    events: UnboundedSender<Event>,
    slot: SlotState<B>,
    /// Prompt rows already run.
    prefilled: usize,
    generated: Vec<u32>,
    /// Drawn but not yet run through the model.
    pending: Option<u32>,
    started: Instant,
    first_token_secs: Option<f64>,
    usage: Usage,
}

/// Starts the engine thread for `model`.
pub fn spawn<B: Backend>(model: Qwen35<B>, config: EngineConfig) -> EngineHandle {
    let (tx, rx) = std::sync::mpsc::channel();
    let stats = Arc::new(Mutex::new(Stats::default()));
    let vocab_size = model.config.vocab_size;
    let thread_stats = stats.clone();
    let thread_config = config.clone();
    let join = std::thread::Builder::new()
        .name("tensorfold-engine".into())
        .spawn(move || engine_loop(model, thread_config, rx, thread_stats))
        .expect("spawning the engine thread");
    EngineHandle {
        tx,
        stats,
        config,
        vocab_size,
        join: Arc::new(Mutex::new(Some(join))),
    }
}

fn engine_loop<B: Backend>(
    model: Qwen35<B>,
    cfg: EngineConfig,
    rx: Receiver<Command>,
    stats: Arc<Mutex<Stats>>,
) {
    let mut queue: VecDeque<(Box<Request>, UnboundedSender<Event>)> = VecDeque::new();
    let mut live: Vec<Stream<B>> = Vec::new();
    let mut draining = false;
    loop {
        // Take commands; block only when there is nothing to run.
        loop {
            let cmd = if live.is_empty() && queue.is_empty() && !draining {
                match rx.recv() {
                    Ok(c) => c,
                    Err(_) => return,
                }
            } else {
                match rx.try_recv() {
                    Ok(c) => c,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        draining = true;
                        break;
                    }
                }
            };
            match cmd {
                Command::Submit(req, events) => queue.push_back((req, events)),
                Command::Shutdown => draining = true,
            }
        }
        while live.len() < cfg.parallel.max(1) {
            let Some((req, events)) = queue.pop_front() else {
                break;
            };
            let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
            s.queue_depth = s.queue_depth.saturating_sub(1);
            s.requests_total += 1;
            drop(s);
            live.push(Stream {
                usage: Usage {
                    prompt_tokens: req.prompt.len(),
                    ..Default::default()
                },
                req: *req,
                events,
                slot: model.new_slot(),
                prefilled: 0,
                generated: Vec::new(),
                pending: None,
                started: Instant::now(),
                first_token_secs: None,
            });
        }
        if live.is_empty() {
            if draining && queue.is_empty() {
                return;
            }
            continue;
        }
        run_round(&model, &cfg, &mut live, &stats);
        let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
        s.requests_running = live.len();
        s.rounds_total += 1;
    }
}

/// One round: every live stream contributes its pending row or a prompt chunk; then draw, emit, retire.
fn run_round<B: Backend>(
    model: &Qwen35<B>,
    cfg: &EngineConfig,
    live: &mut Vec<Stream<B>>,
    stats: &Mutex<Stats>,
) {
    let mut rows = Vec::new();
    let mut tokens = Vec::new();
    let mut logit_rows = Vec::new();
    // (stream index, round row index of its logits) for streams that draw this round.
    let mut drawing = Vec::new();
    let mut prompt_budget = cfg.prefill_chunk.max(1);
    for (si, st) in live.iter().enumerate() {
        let base = st.slot.len;
        if st.prefilled < st.req.prompt.len() {
            let take = (st.req.prompt.len() - st.prefilled).min(prompt_budget);
            if take == 0 {
                continue;
            }
            prompt_budget -= take;
            let first = rows.len();
            for i in 0..take {
                rows.push(RowRef::chain(si, base, first, i));
                tokens.push(st.req.prompt[st.prefilled + i]);
            }
            if st.prefilled + take == st.req.prompt.len() {
                logit_rows.push(rows.len() - 1);
                drawing.push((si, logit_rows.len() - 1));
            }
        } else if let Some(t) = st.pending {
            rows.push(RowRef::chain(si, base, rows.len(), 0));
            tokens.push(t);
            logit_rows.push(rows.len() - 1);
            drawing.push((si, logit_rows.len() - 1));
        }
    }
    let mut slots: Vec<&mut SlotState<B>> = live.iter_mut().map(|s| &mut s.slot).collect();
    let result = model.forward_chains(&rows, &tokens, &mut slots, &logit_rows);
    let vocab = model.config.vocab_size;
    let logits = match result {
        Ok(l) => l,
        Err(e) => {
            // A round failing is an engine bug, not a client's fault: fail every stream in it, keep serving.
            for st in live.drain(..) {
                let _ = st.events.send(Event::Error(format!("internal error: {e}")));
            }
            return;
        }
    };
    // Advance prompt progress.
    let mut per_stream_rows = vec![0usize; live.len()];
    for r in &rows {
        per_stream_rows[r.slot] += 1;
    }
    for (si, st) in live.iter_mut().enumerate() {
        if st.prefilled < st.req.prompt.len() {
            st.prefilled += per_stream_rows[si];
        } else if per_stream_rows[si] > 0 {
            st.pending = None;
        }
    }
    let mut finished = vec![None; live.len()];
    for (si, li) in drawing {
        let st = &mut live[si];
        let mut row = logits[li * vocab..(li + 1) * vocab].to_vec();
        apply_penalties(&mut row, &st.req.penalties, &st.req.prompt, &st.generated);
        let pos = st.slot.len as u64;
        let token = draw(&row, &st.req.sampling, pos);
        if !st.req.ignore_eos && st.req.stop_ids.contains(&token) {
            finished[si] = Some(FinishReason::Stop);
            continue;
        }
        let logprob = st
            .req
            .logprobs
            .map(|n| token_logprob(&row, token, n, st.req.sampling.temperature));
        st.generated.push(token);
        st.first_token_secs
            .get_or_insert_with(|| st.started.elapsed().as_secs_f64());
        if st.events.send(Event::Token { id: token, logprob }).is_err() {
            finished[si] = Some(FinishReason::Cancelled);
            continue;
        }
        if st.generated.len() >= st.req.max_tokens {
            finished[si] = Some(FinishReason::Length);
        } else {
            st.pending = Some(token);
        }
    }
    // Streams that asked for zero tokens finish as soon as their prompt is in.
    for (si, st) in live.iter().enumerate() {
        if st.req.max_tokens == 0 && st.prefilled >= st.req.prompt.len() {
            finished[si] = Some(FinishReason::Length);
        }
        if st.events.is_closed() {
            finished[si].get_or_insert(FinishReason::Cancelled);
        }
    }
    let mut i = live.len();
    while i > 0 {
        i -= 1;
        if let Some(finish) = finished[i] {
            let st = live.swap_remove(i);
            let mut usage = st.usage.clone();
            usage.completion_tokens = st.generated.len();
            let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
            s.prompt_tokens_total += usage.prompt_tokens as u64;
            s.completion_tokens_total += usage.completion_tokens as u64;
            drop(s);
            let _ = st.events.send(Event::Done {
                finish,
                token_sha: token_sha(&st.generated),
                usage,
                first_token_secs: st
                    .first_token_secs
                    .unwrap_or_else(|| st.started.elapsed().as_secs_f64()),
                total_secs: st.started.elapsed().as_secs_f64(),
            });
        }
    }
}

/// Log-probability of `token` under softmax(row / T) (T = 1 when greedy) and the `n` best alternatives.
fn token_logprob(row: &[f32], token: u32, n: usize, temperature: f32) -> TokenLogprob {
    let t = if temperature > 0.0 {
        temperature as f64
    } else {
        1.0
    };
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64 / t;
    let lse = m + row
        .iter()
        .map(|&l| (l as f64 / t - m).exp())
        .sum::<f64>()
        .ln();
    let lp = |id: u32| (row[id as usize] as f64 / t - lse) as f32;
    let mut top: Vec<u32> = (0..row.len() as u32).collect();
    let n = n.min(row.len());
    if n > 0 {
        top.select_nth_unstable_by(n - 1, |a, b| {
            row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b))
        });
        top.truncate(n);
        top.sort_by(|a, b| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b)));
    } else {
        top.clear();
    }
    TokenLogprob {
        logprob: lp(token),
        top: top.into_iter().map(|id| (id, lp(id))).collect(),
    }
}
