//! `tensorfold bench concurrent` against a real `tensorfold serve` on the built-in model: streamed replies are
//! timed (time to first token, time per output token) and each equals the same request alone and undrafted.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server child killed when dropped, so a failing assertion leaves no process behind.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `tensorfold serve` on a free port and waits (up to 120 s) until /health answers.
fn serve() -> (Server, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["serve", "--port", &port.to_string(), "--threads", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary runs");
    let server = Server(child);
    let url = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    while ureq::get(&format!("{url}/health")).call().is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "server did not come up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (server, url)
}

fn bench(url: &str, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfold"))
        .args(["bench", "concurrent", "--url", url, "--levels", "1,3"])
        .args(["--alone", "--serial", "--max-tokens", "6"])
        .args(extra)
        .output()
        .expect("binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The table row of `streams` concurrent streams, split into its cells.
fn row(table: &str, streams: usize) -> Vec<String> {
    table
        .lines()
        .find(|l| l.starts_with(&format!("| {streams} |")))
        .unwrap_or_else(|| panic!("no row for {streams} streams in:\n{table}"))
        .split('|')
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn streamed_concurrent_replies_are_timed_and_equal_their_alone_and_undrafted_twins() {
    let (_server, url) = serve();
    for extra in [&[][..], &["--prompt-tokens", "70"][..]] {
        let table = bench(&url, extra);
        for n in [1, 3] {
            let cells = row(&table, n);
            assert_eq!(cells.len(), 9, "{cells:?}");
            let (ttft, max) = cells[3].split_once(" / ").expect("median / max");
            let (ttft, max): (f64, f64) = (ttft.parse().unwrap(), max.parse().unwrap());
            assert!(ttft > 0.0 && ttft <= max, "{cells:?}");
            let tpot: f64 = cells[4].parse().unwrap();
            assert!(tpot > 0.0, "{cells:?}");
            let (itl99, itl_max) = cells[5].split_once(" / ").expect("p99 / max");
            let (itl99, itl_max): (f64, f64) = (itl99.parse().unwrap(), itl_max.parse().unwrap());
            // A drafted round's tokens may share one chunk, so a short reply can have no gap at all.
            let wall: f64 = cells[6].parse().unwrap();
            assert!(
                0.0 <= itl99 && itl99 <= itl_max && itl_max <= wall * 1e3,
                "{cells:?}"
            );
            assert_eq!(cells[7], format!("{n}/{n}"), "{cells:?}");
            assert_eq!(cells[8], format!("{n}/{n}"), "{cells:?}");
        }
    }
}
