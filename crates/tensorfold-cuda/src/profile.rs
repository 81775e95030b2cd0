//! Opt-in profiling of the device (TENSORFOLD_CUDA_PROFILE=1): CUDA events around every launch and host time per
//! launch and upload, summed by kernel name, so one GPU run says where a round's time goes. Off: no cost.

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Launch {
    name: String,
    start: CudaEvent,
    end: CudaEvent,
    host: Duration,
}

#[derive(Default)]
struct Log {
    launches: Vec<Launch>,
    uploads: usize,
    upload_bytes: usize,
    upload_host: Duration,
    /// Host time inside the driver's launch calls alone (no events), and in device allocations.
    launch_calls: Duration,
    allocs: usize,
    alloc_host: Duration,
}

pub struct Profiler {
    pub enabled: bool,
    log: Mutex<Log>,
}

impl Profiler {
    pub fn from_env() -> Self {
        Profiler {
            enabled: std::env::var("TENSORFOLD_CUDA_PROFILE").is_ok_and(|v| v != "0"),
            log: Mutex::new(Log::default()),
        }
    }

    /// A timing event recorded now on `stream` (None when profiling is off or the event fails).
    pub fn mark(&self, ctx: &Arc<CudaContext>, stream: &CudaStream) -> Option<CudaEvent> {
        if !self.enabled {
            return None;
        }
        let ev = ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .ok()?;
        ev.record(stream).ok()?;
        Some(ev)
    }

    pub fn launched(&self, name: &str, start: CudaEvent, end: CudaEvent, host: Duration) {
        let mut g = self.log.lock().unwrap_or_else(|p| p.into_inner());
        g.launches.push(Launch {
            name: name.to_string(),
            start,
            end,
            host,
        });
    }

    pub fn uploaded(&self, bytes: usize, host: Duration) {
        if self.enabled {
            let mut g = self.log.lock().unwrap_or_else(|p| p.into_inner());
            g.uploads += 1;
            g.upload_bytes += bytes;
            g.upload_host += host;
        }
    }

    /// Host time of one launch call into the driver.
    pub fn launch_call(&self, host: Duration) {
        if self.enabled {
            self.log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .launch_calls += host;
        }
    }

    pub fn allocated(&self, host: Duration) {
        if self.enabled {
            let mut g = self.log.lock().unwrap_or_else(|p| p.into_inner());
            g.allocs += 1;
            g.alloc_host += host;
        }
    }

    pub fn reset(&self) {
        *self.log.lock().unwrap_or_else(|p| p.into_inner()) = Log::default();
    }

    /// Per kernel: launches, GPU ms (event to event), host µs per launch; then the GPU's busy share of the span.
    /// The caller synchronises the stream first.
    pub fn report(&self) -> String {
        let g = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let mut by: BTreeMap<&str, (usize, f64, f64)> = BTreeMap::new();
        let mut busy = 0.0f64;
        for l in &g.launches {
            let ms = l.start.elapsed_ms(&l.end).unwrap_or(f32::NAN) as f64;
            let e = by.entry(&l.name).or_default();
            e.0 += 1;
            e.1 += ms;
            e.2 += l.host.as_secs_f64() * 1e6;
            busy += ms;
        }
        let span = match (g.launches.first(), g.launches.last()) {
            (Some(a), Some(b)) => a.start.elapsed_ms(&b.end).unwrap_or(f32::NAN) as f64,
            _ => 0.0,
        };
        let mut rows: Vec<_> = by.into_iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let mut s = String::from(
            "| kernel | launches | GPU ms | GPU µs each | host µs each |\n|---|---|---|---|---|\n",
        );
        for (name, (n, ms, host)) in rows {
            s.push_str(&format!(
                "| {name} | {n} | {ms:.2} | {:.1} | {:.1} |\n",
                1e3 * ms / n as f64,
                host / n as f64
            ));
        }
        s.push_str(&format!(
            "launches {}, GPU busy {busy:.2} ms of a {span:.2} ms span; uploads {} ({} bytes, host {:.2} ms)\n",
            g.launches.len(),
            g.uploads,
            g.upload_bytes,
            g.upload_host.as_secs_f64() * 1e3
        ));
        s.push_str(&format!(
            "host: {:.2} ms inside the driver's launch calls; {} allocations, {:.2} ms\n",
            g.launch_calls.as_secs_f64() * 1e3,
            g.allocs,
            g.alloc_host.as_secs_f64() * 1e3
        ));
        s
    }
}
