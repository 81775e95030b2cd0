//! `tensorfold serve` arguments through the real binary: a value that cannot work is refused with one clear
//! `error:` line and a non-zero exit before any model is loaded or port opened.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `tensorfold serve ARGS` and returns its stderr, asserting a clean failure (exit 1, no panic) within 60 s:
/// a server that accepted the value would start serving, so it is killed and the test fails.
fn serve_fails(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .arg("serve")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().expect("kill");
            panic!("serve {args:?} was still running after 60 s: it accepted the value");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
    stderr
}

#[test]
fn serve_refuses_a_prefill_chunk_of_zero() {
    let err = serve_fails(&["--prefill-chunk", "0", "--port", "0"]);
    assert!(err.contains("--prefill-chunk must be at least 1"), "{err}");
}

#[test]
fn serve_refuses_zero_parallel_streams() {
    let err = serve_fails(&["--parallel", "0", "--port", "0"]);
    assert!(err.contains("--parallel must be at least 1"), "{err}");
}

#[test]
fn serve_refuses_a_gpu_memory_utilization_outside_zero_to_one() {
    for bad in ["0", "1.5", "NaN"] {
        let err = serve_fails(&["--gpu-memory-utilization", bad, "--port", "0"]);
        assert!(
            err.contains("--gpu-memory-utilization must be above 0 and at most 1"),
            "{err}"
        );
    }
}

#[test]
fn serve_refuses_a_kv_cache_of_zero_gib() {
    let err = serve_fails(&["--kv-cache-gib", "0", "--port", "0"]);
    assert!(
        err.contains("--kv-cache-gib must be a positive number"),
        "{err}"
    );
}
