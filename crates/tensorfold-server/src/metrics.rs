//! Server counters and latency histograms, rendered with the engine's stats as Prometheus text for /metrics;
//! lock-free atomics so recording never blocks a request.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use tensorfold_engine::Stats;

/// Upper bounds (seconds) of the latency histogram buckets.
const TTFT_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
];
const TOKEN_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// A fixed-bucket histogram (sum kept in microseconds).
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_us: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: (0..bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, secs: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| secs <= b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_us
            .fetch_add((secs.max(0.0) * 1e6) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cumulative += c.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// Everything the server counts itself (the engine counts tokens, cache hits and drafts).
pub struct Metrics {
    pub http_requests: AtomicU64,
    pub http_errors_4xx: AtomicU64,
    pub http_errors_5xx: AtomicU64,
    pub finished_stop: AtomicU64,
    pub finished_length: AtomicU64,
    pub finished_tool_calls: AtomicU64,
    pub cancelled: AtomicU64,
    pub streams_open: AtomicU64,
    pub time_to_first_token: Histogram,
    pub time_per_output_token: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            http_requests: AtomicU64::new(0),
            http_errors_4xx: AtomicU64::new(0),
            http_errors_5xx: AtomicU64::new(0),
            finished_stop: AtomicU64::new(0),
            finished_length: AtomicU64::new(0),
            finished_tool_calls: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            streams_open: AtomicU64::new(0),
            time_to_first_token: Histogram::new(&TTFT_BUCKETS),
            time_per_output_token: Histogram::new(&TOKEN_BUCKETS),
        }
    }
}

impl Metrics {
    pub fn finished(&self, reason: &str) {
        let counter = match reason {
            "stop" => &self.finished_stop,
            "length" => &self.finished_length,
            "tool_calls" => &self.finished_tool_calls,
            _ => &self.cancelled,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Prometheus text exposition of the server metrics and the engine's stats.
    pub fn render(&self, s: &Stats) -> String {
        let mut out = String::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        counter(
            &mut out,
            "tensorfold_http_requests_total",
            "HTTP requests received.",
            load(&self.http_requests),
        );
        let _ = writeln!(out, "# HELP tensorfold_http_errors_total HTTP responses with an error status.\n# TYPE tensorfold_http_errors_total counter");
        let _ = writeln!(
            out,
            "tensorfold_http_errors_total{{class=\"4xx\"}} {}",
            load(&self.http_errors_4xx)
        );
        let _ = writeln!(
            out,
            "tensorfold_http_errors_total{{class=\"5xx\"}} {}",
            load(&self.http_errors_5xx)
        );
        let _ = writeln!(out, "# HELP tensorfold_request_success_total Finished generation requests by finish reason.\n# TYPE tensorfold_request_success_total counter");
        for (reason, v) in [
            ("stop", &self.finished_stop),
            ("length", &self.finished_length),
            ("tool_calls", &self.finished_tool_calls),
            ("cancelled", &self.cancelled),
        ] {
            let _ = writeln!(
                out,
                "tensorfold_request_success_total{{finished_reason=\"{reason}\"}} {}",
                load(v)
            );
        }
        counter(
            &mut out,
            "tensorfold_engine_requests_total",
            "Requests admitted by the engine.",
            s.requests_total,
        );
        gauge(
            &mut out,
            "tensorfold_num_requests_running",
            "Requests sharing rounds now.",
            s.requests_running as u64,
        );
        gauge(
            &mut out,
            "tensorfold_num_requests_waiting",
            "Requests queued for a slot (queue depth).",
            s.queue_depth as u64,
        );
        gauge(
            &mut out,
            "tensorfold_streams_open",
            "SSE streams open now.",
            load(&self.streams_open),
        );
        counter(
            &mut out,
            "tensorfold_prompt_tokens_total",
            "Prompt tokens of finished requests.",
            s.prompt_tokens_total,
        );
        counter(
            &mut out,
            "tensorfold_generation_tokens_total",
            "Generated tokens of finished requests.",
            s.completion_tokens_total,
        );
        counter(
            &mut out,
            "tensorfold_prompt_cache_hits_total",
            "Prompts that resumed from the prompt cache.",
            s.prompt_cache_hits,
        );
        counter(
            &mut out,
            "tensorfold_prompt_cache_tokens_total",
            "Prompt tokens restored from the prompt cache.",
            s.cached_tokens_total,
        );
        gauge(
            &mut out,
            "tensorfold_prompt_cache_entries",
            "Snapshots the prompt cache holds.",
            s.prompt_cache_entries as u64,
        );
        gauge(
            &mut out,
            "tensorfold_prompt_cache_bytes",
            "Bytes the prompt cache's snapshots hold (device memory with --device cuda).",
            s.prompt_cache_bytes as u64,
        );
        gauge(
            &mut out,
            "tensorfold_kv_cache_pages_used",
            "KV cache pages (16 positions of one attention layer each) the live streams hold.",
            s.kv_pages_used as u64,
        );
        if let (Some(pages), Some(tokens)) = (s.kv_pages_capacity, s.kv_tokens_capacity) {
            gauge(
                &mut out,
                "tensorfold_kv_cache_pages_capacity",
                "KV cache pages the server may hold at once.",
                pages as u64,
            );
            gauge(
                &mut out,
                "tensorfold_kv_cache_tokens_capacity",
                "Tokens the KV cache holds across all streams.",
                tokens as u64,
            );
            let _ = writeln!(
                out,
                "# HELP tensorfold_kv_cache_usage_ratio Share of the KV cache's pages in use (vLLM's kv_cache_usage_perc).\n# TYPE tensorfold_kv_cache_usage_ratio gauge\ntensorfold_kv_cache_usage_ratio {:.6}",
                s.kv_pages_used as f64 / pages.max(1) as f64
            );
        }
        if !s.kv_dtype.is_empty() {
            let _ = writeln!(
                out,
                "# HELP tensorfold_kv_cache_info How the KV cache stores keys and values (--kv-cache-dtype).\n# TYPE tensorfold_kv_cache_info gauge\ntensorfold_kv_cache_info{{dtype=\"{}\"}} 1",
                s.kv_dtype
            );
        }
        counter(
            &mut out,
            "tensorfold_draft_tokens_total",
            "Draft rows verified.",
            s.drafted_total,
        );
        counter(
            &mut out,
            "tensorfold_accepted_tokens_total",
            "Draft rows accepted.",
            s.accepted_total,
        );
        counter(
            &mut out,
            "tensorfold_rounds_total",
            "Engine rounds run.",
            s.rounds_total,
        );
        let _ = writeln!(out, "# HELP tensorfold_engine_thread_seconds_total The engine thread's time while streams are live, by phase (forward and wait: the device works; the rest is per-round overhead).\n# TYPE tensorfold_engine_thread_seconds_total counter");
        let t = &s.times;
        for (phase, us) in [
            ("forward", t.forward_us),
            ("wait", t.wait_us),
            ("keep", t.keep_us),
            ("walk", t.walk_us),
            ("draft", t.draft_us),
            ("snapshot", t.snapshot_us),
            ("other", t.other_us),
        ] {
            let _ = writeln!(
                out,
                "tensorfold_engine_thread_seconds_total{{phase=\"{phase}\"}} {:.6}",
                us as f64 / 1e6
            );
        }
        self.time_to_first_token.render(
            &mut out,
            "tensorfold_time_to_first_token_seconds",
            "Time from request arrival to its first generated token.",
        );
        self.time_per_output_token.render(
            &mut out,
            "tensorfold_time_per_output_token_seconds",
            "Time between consecutive generated tokens of a request.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_render_cumulative_buckets() {
        let m = Metrics::default();
        m.time_to_first_token.observe(0.003);
        m.time_to_first_token.observe(0.2);
        m.time_to_first_token.observe(1000.0);
        let text = m.render(&Stats::default());
        assert!(text.contains("tensorfold_time_to_first_token_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("tensorfold_time_to_first_token_seconds_bucket{le=\"0.25\"} 2"));
        assert!(text.contains("tensorfold_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3"));
        assert!(text.contains("tensorfold_time_to_first_token_seconds_count 3"));
    }

    #[test]
    fn engine_thread_time_renders_by_phase_in_seconds() {
        let mut s = Stats::default();
        s.times.snapshot_us = 1_500_000;
        s.times.wait_us = 250;
        let text = Metrics::default().render(&s);
        assert!(
            text.contains("tensorfold_engine_thread_seconds_total{phase=\"snapshot\"} 1.500000")
        );
        assert!(text.contains("tensorfold_engine_thread_seconds_total{phase=\"wait\"} 0.000250"));
        assert!(text.contains("tensorfold_engine_thread_seconds_total{phase=\"forward\"} 0.000000"));
    }

    #[test]
    fn the_kv_cache_renders_its_use_capacity_and_dtype_and_no_capacity_when_unbounded() {
        let s = Stats {
            kv_pages_used: 30,
            kv_pages_capacity: Some(120),
            kv_tokens_capacity: Some(480),
            kv_dtype: "bf16",
            ..Stats::default()
        };
        let text = Metrics::default().render(&s);
        assert!(text.contains("tensorfold_kv_cache_pages_used 30"));
        assert!(text.contains("tensorfold_kv_cache_pages_capacity 120"));
        assert!(text.contains("tensorfold_kv_cache_tokens_capacity 480"));
        assert!(text.contains("tensorfold_kv_cache_usage_ratio 0.250000"));
        assert!(text.contains("tensorfold_kv_cache_info{dtype=\"bf16\"} 1"));
        let unbounded = Metrics::default().render(&Stats {
            kv_pages_capacity: None,
            ..s
        });
        assert!(!unbounded.contains("kv_cache_usage_ratio"));
        assert!(unbounded.contains("tensorfold_kv_cache_pages_used 30"));
    }
}
