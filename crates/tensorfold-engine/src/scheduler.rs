//! The engine thread: admits queued requests into slots when their KV pages can be reserved (resuming from the
//! prompt cache when a prefix is cached), runs rounds over every live stream, retires finished ones.

use crate::api::{
    EngineConfig, EngineTimes, Event, FinishReason, Request, Stats, SubmitError, Usage,
};
use crate::drafters::mtp::Backlog;
use crate::plan::{Drafting, Planner};
use crate::prompt_cache::{PromptCache, SnapshotKind};
use crate::round::{run_round, RoundPlan, Stream};
use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tensorfold_backend::{Backend, RowRef};
use tensorfold_core::sampling::token_sha;
use tensorfold_model::Qwen35;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

enum Command {
    Submit(Box<Request>, UnboundedSender<Event>),
    Shutdown,
}

/// How many KV pages a request may need: every attention layer holds prompt + max_tokens rows.
#[derive(Clone, Copy, Debug)]
struct PageMath {
    page_rows: usize,
    capacity: usize,
    attention_layers: usize,
    /// KV layers of the MTP head (0 or 1), reserved only while the pool has room: the head is optional.
    head_layers: usize,
}

impl PageMath {
    fn pages_for(&self, tokens: usize) -> usize {
        self.attention_layers * tokens.div_ceil(self.page_rows.max(1))
    }
    fn head_pages_for(&self, tokens: usize) -> usize {
        self.head_layers * tokens.div_ceil(self.page_rows.max(1))
    }
}

/// A cheap, cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Command>,
    stats: Arc<Mutex<Stats>>,
    config: EngineConfig,
    vocab_size: usize,
    pages: PageMath,
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
        let pages = self.pages.pages_for(needed);
        if pages > self.pages.capacity {
            return Err(SubmitError::KvCapacity {
                needed: pages,
                capacity: self.pages.capacity,
                tokens: needed,
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
        if self.tx.send(Command::Submit(Box::new(req), etx)).is_err() {
            let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            s.queue_depth = s.queue_depth.saturating_sub(1);
            return Err(SubmitError::ShuttingDown);
        }
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

/// Starts the engine thread for `model`.
pub fn spawn<B: Backend>(model: Qwen35<B>, config: EngineConfig) -> EngineHandle {
    let (tx, rx) = std::sync::mpsc::channel();
    let stats = Arc::new(Mutex::new(Stats::default()));
    let (page_rows, capacity, _) = model.backend.kv_pages();
    let pages = PageMath {
        page_rows,
        capacity,
        attention_layers: model.attention_layers(),
        head_layers: usize::from(model.mtp.is_some() && config.drafts && config.mtp),
    };
    let vocab_size = model.config.vocab_size;
    let mut engine = Engine::new(model, config.clone(), pages, stats.clone());
    // Before the thread starts, so that a caller's first timings never include it.
    if config.drafts && config.plan_widths && config.calibrate_secs > 0.0 {
        engine.calibrate();
    }
    let join = std::thread::Builder::new()
        .name("tensorfold-engine".into())
        .spawn(move || engine.run(rx))
        .expect("spawning the engine thread");
    EngineHandle {
        tx,
        stats,
        config,
        vocab_size,
        pages,
        join: Arc::new(Mutex::new(Some(join))),
    }
}

struct Engine<B: Backend> {
    model: Qwen35<B>,
    cfg: EngineConfig,
    pages: PageMath,
    stats: Arc<Mutex<Stats>>,
    queue: VecDeque<(Box<Request>, UnboundedSender<Event>)>,
    live: Vec<Stream<B>>,
    cache: PromptCache<B>,
    reserved: usize,
    planner: Planner,
    times: EngineTimes,
    /// When the last round ended while streams were still live (the time to the next round is overhead).
    round_end: Option<Instant>,
}

impl<B: Backend> Engine<B> {
    fn new(model: Qwen35<B>, cfg: EngineConfig, pages: PageMath, stats: Arc<Mutex<Stats>>) -> Self {
        let cache = PromptCache::new(cfg.prompt_cache_bytes);
        Engine {
            model,
            cfg,
            pages,
            stats,
            queue: VecDeque::new(),
            live: Vec::new(),
            cache,
            reserved: 0,
            planner: Planner::default(),
            times: EngineTimes::default(),
            round_end: None,
        }
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(mut self, rx: Receiver<Command>) {
        let mut draining = false;
        loop {
            // Take commands; block only when there is nothing to run.
            loop {
                let cmd = if self.live.is_empty() && self.queue.is_empty() && !draining {
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
                    Command::Submit(req, events) => self.queue.push_back((req, events)),
                    Command::Shutdown => draining = true,
                }
            }
            self.admit();
            if self.live.is_empty() {
                if draining && self.queue.is_empty() {
                    return;
                }
                continue;
            }
            self.round();
        }
    }

    /// Times forward rounds of 1, 2, 4 … rows (logits at every row, as a window needs) on a scratch slot, the
    /// median of three each, widest last, until the time budget is spent; the window planner starts from these
    /// costs and keeps following live rounds. Nothing is kept, so the slot's pages go back when it drops.
    fn calibrate(&mut self) {
        let budget = std::time::Duration::from_secs_f64(self.cfg.calibrate_secs);
        let started = Instant::now();
        let widest = (self.cfg.max_draft + 1).min(self.cfg.max_round_rows.max(1));
        let vocab = self.model.config.vocab_size.max(1);
        let mut slot = self.model.new_slot();
        let mut costs = Vec::new();
        // One untimed round of the widest width first: buffers and pages are allocated, caches are warm.
        let refs: Vec<RowRef> = (0..widest).map(|i| RowRef::chain(0, 0, 0, i)).collect();
        let all: Vec<usize> = (0..widest).collect();
        if self
            .model
            .forward(&refs, &vec![0; widest], &mut [&mut slot], &all)
            .is_err()
        {
            return;
        }
        let mut rows = 1;
        while rows <= widest && started.elapsed() < budget {
            let refs: Vec<RowRef> = (0..rows).map(|i| RowRef::chain(0, 0, 0, i)).collect();
            let tokens: Vec<u32> = (0..rows)
                .map(|i| ((i * 7919 + 13) % vocab) as u32)
                .collect();
            let all: Vec<usize> = (0..rows).collect();
            let mut times = Vec::with_capacity(5);
            for _ in 0..5 {
                let t = Instant::now();
                if self
                    .model
                    .forward(&refs, &tokens, &mut [&mut slot], &all)
                    .is_err()
                {
                    return;
                }
                times.push(t.elapsed().as_secs_f64());
                if started.elapsed() > budget {
                    break;
                }
            }
            times.sort_by(f64::total_cmp);
            let median = times[times.len() / 2];
            self.planner.record_round(rows, median);
            costs.push((rows, (median * 1e6) as u64));
            rows = if rows < 4 { rows + 1 } else { rows * 2 };
            if rows > widest && costs.last().is_some_and(|&(r, _)| r < widest) {
                rows = widest;
            }
        }
        self.stats().round_costs_us = costs;
    }

    /// Moves queued requests into slots while slots and KV pages allow, in arrival order.
    fn admit(&mut self) {
        while self.live.len() < self.cfg.parallel.max(1) {
            let Some((req, _)) = self.queue.front() else {
                break;
            };
            let need = self.pages.pages_for(req.prompt.len() + req.max_tokens);
            if self.reserved + need > self.pages.capacity {
                break;
            }
            let Some((req, events)) = self.queue.pop_front() else {
                break;
            };
            {
                let mut s = self.stats();
                s.queue_depth = s.queue_depth.saturating_sub(1);
                s.requests_total += 1;
            }
            if events.is_closed() {
                continue;
            }
            self.reserved += need;
            let mut usage = Usage {
                prompt_tokens: req.prompt.len(),
                ..Default::default()
            };
            let cached = self.cache.lookup(&req.prompt);
            let hidden = self.model.config.hidden_size;
            let head_context = cached.and_then(|(snap, head)| {
                Backlog::from_context(head?, &req.prompt[..=snap.len], hidden)
            });
            let slot = match cached.map(|(snap, _)| self.model.restore(snap)) {
                Some(Ok(slot)) => {
                    usage.cached_tokens = slot.len;
                    let mut s = self.stats();
                    s.prompt_cache_hits += 1;
                    s.cached_tokens_total += slot.len as u64;
                    slot
                }
                _ => self.model.new_slot(),
            };
            let drafts = self.cfg.drafts && req.draft;
            let drafter = drafts.then(|| self.cfg.drafter.build());
            // The MTP head's KV takes pages from the same pool: it drafts only when they can be reserved too.
            let head_need = self.pages.head_pages_for(req.prompt.len() + req.max_tokens);
            let mtp = match &self.model.mtp {
                Some(head)
                    if drafts
                        && self.pages.head_layers > 0
                        && self.reserved + head_need <= self.pages.capacity =>
                {
                    self.reserved += head_need;
                    Some(head.new_slot(&self.model.backend))
                }
                _ => None,
            };
            let reserved_pages = need + if mtp.is_some() { head_need } else { 0 };
            self.live.push(Stream {
                tokens: req.prompt.clone(),
                req: *req,
                events,
                slot,
                pending: None,
                drafter,
                reserved_pages,
                started: Instant::now(),
                first_token_secs: None,
                usage,
                finished: None,
                drafting: Drafting::new(&self.planner, head_context.filter(|_| mtp.is_some())),
                mtp,
                next: None,
            });
        }
    }

    fn marks_for(&self, st: &Stream<B>) -> Vec<usize> {
        if !self.cache.enabled() {
            return Vec::new();
        }
        // One row before the prompt's end: the same prompt again resumes there with one row to run, and so does a
        // longer prompt that extends it. A mark at the end itself would save that prompt one row, at the price of
        // a second snapshot as large (0.27 GiB for a 1,024-token prompt of the 27B shape on the GPU). In call 137,
        // 16 such prompts left 48 snapshots for a 4.2 GiB cache, and none of the prompts' own was left for the
        // same requests sent again.
        let last = st.req.prompt.len().saturating_sub(1);
        let mut marks = st.req.cache_marks.clone();
        if last > 0 {
            marks.push(last);
        }
        if let Some(n) = last.checked_div(self.cfg.cache_every) {
            marks.extend((1..=n).map(|i| i * self.cfg.cache_every));
        }
        marks
    }

    fn round(&mut self) {
        // From the end of the last round while streams were live (commands and admission count too).
        let start = self.round_end.take().unwrap_or_else(Instant::now);
        let phases = self.times.total_us();
        let marks: Vec<Vec<usize>> = self.live.iter().map(|s| self.marks_for(s)).collect();
        let plan = RoundPlan {
            prompt_budget: self.cfg.prefill_chunk,
            max_draft: if self.cfg.drafts {
                self.cfg.max_draft
            } else {
                0
            },
            marks: marks.clone(),
            max_round_rows: self.cfg.max_round_rows,
            mtp_depth: if self.cfg.mtp { self.cfg.mtp_depth } else { 0 },
            mtp_min_prob: self.cfg.mtp_min_prob,
            plan_widths: self.cfg.plan_widths,
            mtp_history: self.cfg.mtp_history,
        };
        let before: Vec<usize> = self.live.iter().map(|s| s.slot.len).collect();
        let ran = run_round(
            &self.model,
            &mut self.live,
            &plan,
            &mut self.planner,
            &mut self.times,
        );
        match ran {
            Ok((drafted, accepted)) => {
                let mut s = self.stats();
                s.rounds_total += 1;
                s.drafted_total += drafted as u64;
                s.accepted_total += accepted as u64;
            }
            Err(e) => {
                // A failed round is an engine fault, not a client's: fail its streams, keep serving the rest.
                for st in self.live.iter_mut() {
                    let _ = st.events.send(Event::Error(format!("internal error: {e}")));
                    st.finished = Some(FinishReason::Cancelled);
                }
            }
        }
        // Prompt-cache snapshots at marks reached this round (each times itself).
        for (i, st) in self.live.iter().enumerate() {
            let len = st.slot.len;
            if len != before[i] && len <= st.req.prompt.len() && marks[i].contains(&len) {
                store_snapshot(&mut self.cache, &self.model, st, &mut self.times);
            }
        }
        // Published before retire sends Done too, so a caller reading stats after its reply sees its rounds.
        self.publish();
        self.retire();
        // What no phase took: the loop between rounds, planning marks, retiring streams.
        let spent = start.elapsed().as_micros() as u64;
        self.times.other_us += spent.saturating_sub(self.times.total_us() - phases);
        self.round_end = (!self.live.is_empty()).then(Instant::now);
        self.publish();
    }

    /// The engine thread's phase times and the prompt cache's size, for /metrics and callers.
    fn publish(&self) {
        let mut s = self.stats();
        s.times = self.times.clone();
        s.prompt_cache_entries = self.cache.len();
        s.prompt_cache_bytes = self.cache.used();
        let (_, capacity, used) = self.model.backend.kv_pages();
        // A pool of usize::MAX / 2 pages (the CPU's default) is bounded by memory alone.
        let bounded = capacity < usize::MAX / 4;
        s.kv_pages_used = used;
        s.kv_pages_capacity = bounded.then_some(capacity);
        // Every attention layer's pages, and the MTP head's when it drafts (as serve sizes the pool).
        let layers = self.pages.attention_layers + self.pages.head_layers;
        s.kv_tokens_capacity = bounded.then(|| capacity / layers.max(1) * self.pages.page_rows);
        s.kv_dtype = self.model.backend.kv_dtype().name();
    }

    /// Sends Done for finished or abandoned streams, keeps their final state in the cache, frees their pages.
    fn retire(&mut self) {
        let mut i = 0;
        while i < self.live.len() {
            let st = &mut self.live[i];
            if st.finished.is_none() && st.events.is_closed() {
                st.finished = Some(FinishReason::Cancelled);
            }
            if st.finished.is_none()
                && st
                    .req
                    .end
                    .as_ref()
                    .is_some_and(|e| e.load(std::sync::atomic::Ordering::Acquire))
            {
                st.finished = Some(FinishReason::Stop);
            }
            if st.finished.is_none() && st.req.max_tokens == 0 && !st.prefilling() {
                st.finished = Some(FinishReason::Length);
            }
            let Some(finish) = st.finished else {
                i += 1;
                continue;
            };
            let st = self.live.swap_remove(i);
            // Before its pages go back (when `st` drops) and before Done: a reader never sees a stream's pages freed
            // while it still counts as running.
            let running = self.live.len();
            self.stats().requests_running = running;
            self.reserved -= st.reserved_pages;
            if self.cache.enabled() && st.slot.len > 0 && finish != FinishReason::Cancelled {
                store_snapshot(&mut self.cache, &self.model, &st, &mut self.times);
                // Before Done: a caller that reads the stats after its reply sees its snapshot.
                self.publish();
            }
            let generated = st.tokens[st.req.prompt.len()..].to_vec();
            let mut usage = st.usage.clone();
            usage.completion_tokens = generated.len();
            {
                let mut s = self.stats();
                s.prompt_tokens_total += usage.prompt_tokens as u64;
                s.completion_tokens_total += usage.completion_tokens as u64;
            }
            let _ = st.events.send(Event::Done {
                finish,
                token_sha: token_sha(&generated),
                usage,
                first_token_secs: st
                    .first_token_secs
                    .unwrap_or_else(|| st.started.elapsed().as_secs_f64()),
                total_secs: st.started.elapsed().as_secs_f64(),
            });
        }
        let running = self.live.len();
        self.stats().requests_running = running;
    }
}

/// Caches the stream's committed state under the tokens that produced it, with the head's context before its end;
/// a state past the prompt is filed as a reply's end, which the cache evicts first.
fn store_snapshot<B: Backend>(
    cache: &mut PromptCache<B>,
    model: &Qwen35<B>,
    st: &Stream<B>,
    times: &mut EngineTimes,
) {
    let mut lap = Instant::now();
    let len = st.slot.len;
    let kind = if len > st.req.prompt.len() {
        SnapshotKind::ReplyEnd
    } else {
        SnapshotKind::Prompt
    };
    let key = st.tokens[..len].to_vec();
    if cache.contains(&key) {
        return;
    }
    let snap = model.snapshot(&st.slot);
    let bytes = model.snapshot_bytes(&snap);
    let head = st.mtp.as_ref().and(st.drafting.latest.context_before(len));
    cache.insert(key, snap, head, bytes, kind);
    EngineTimes::lap(&mut times.snapshot_us, &mut lap);
}
