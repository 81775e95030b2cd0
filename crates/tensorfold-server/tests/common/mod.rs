//! Test harness: starts the real server on 127.0.0.1 (ephemeral port) over the tiny fixture, and a minimal blocking
//! HTTP/1.1 client that can send any bytes, read SSE, and hang up mid-stream.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_core::Checkpoint;
use tensorfold_engine::EngineConfig;
use tensorfold_model::Qwen35;
use tensorfold_server::{AppState, ModelAssets, ServerOptions};

pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-wrapper-bf16")
}

#[derive(Clone, Debug)]
pub struct Setup {
    pub parallel: usize,
    pub context: usize,
    pub queue: usize,
    pub api_keys: Vec<String>,
    pub max_tokens: Option<usize>,
    pub max_body_bytes: usize,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            parallel: 4,
            context: 4096,
            queue: 64,
            api_keys: Vec::new(),
            max_tokens: None,
            max_body_bytes: 8 << 20,
        }
    }
}

/// Starts a server on its own thread and runtime; it lives until the test process exits.
pub fn start(setup: Setup) -> SocketAddr {
    let (addr, stop, _) = start_stoppable(setup);
    std::mem::forget(stop);
    addr
}

/// A server that shuts down gracefully when the sender fires (or drops); the join handle ends after the engine
/// has shut down too.
pub fn start_stoppable(
    setup: Setup,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let dir = fixture_dir();
    let ck = Checkpoint::open(&dir, |_, _| {}).expect("fixture checkpoint opens");
    let assets = ModelAssets::from_dir(&dir, &ck.config).expect("fixture assets load");
    let model = Qwen35::load(&ck, CpuBackend::default()).expect("fixture model loads");
    let config = EngineConfig {
        parallel: setup.parallel,
        context: setup.context,
        max_queue: setup.queue,
        ..EngineConfig::default()
    };
    let engine = tensorfold_engine::spawn(model, config);
    let options = ServerOptions {
        model_name: "tiny".into(),
        api_keys: setup.api_keys,
        max_tokens: setup.max_tokens,
        max_body_bytes: setup.max_body_bytes,
    };
    let state = AppState::new(engine.clone(), assets, options);
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let join = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("test runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1:0");
            tx.send(listener.local_addr().expect("local addr"))
                .expect("report address");
            let shutdown = async move {
                let _ = stop_rx.await;
            };
            tensorfold_server::serve(listener, state, shutdown)
                .await
                .expect("serve");
        });
        engine.shutdown();
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("server started");
    (addr, stop_tx, join)
}

/// The server most tests share (default setup).
pub fn shared() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| start(Setup::default()))
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `data:` payloads of an SSE body, in order (`[DONE]` included as a string).
    pub fn sse(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
            .map(|d| d.trim().to_owned())
            .collect()
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to the test server");
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("read timeout");
    s
}

/// Sends one request (`Connection: close`) with `body` as given and reads the whole response.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut s = connect(addr);
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write head");
    s.write_all(body).expect("write body");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, &[], b"")
}

fn parse_response(raw: &[u8]) -> Resp {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        data = &data[eol + 2..];
        if size == 0 || data.len() < size {
            out.extend_from_slice(&data[..size.min(data.len())]);
            break;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[(size + 2).min(data.len())..];
    }
    out
}

/// Opens a streaming request and reads until `min_events` SSE `data:` lines have arrived, then returns the
/// open connection (drop it to hang up).
pub fn open_stream(addr: SocketAddr, path: &str, body: &Value, min_events: usize) -> TcpStream {
    let mut s = connect(addr);
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("write head");
    s.write_all(body.as_bytes()).expect("write body");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while count(&seen, b"data:") < min_events {
        let n = s.read(&mut buf).expect("read stream");
        assert!(
            n > 0,
            "stream closed early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(
        seen.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    s
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Chat content and reasoning concatenated from SSE chunks, with the final chunk's finish_reason and
/// tensorfold block.
pub struct Streamed {
    pub content: String,
    pub reasoning: String,
    pub text: String,
    pub finish_reason: Option<String>,
    pub tensorfold: Value,
    pub usage: Option<Value>,
    pub chunks: Vec<Value>,
}

pub fn collect_stream(resp: &Resp) -> Streamed {
    let events = resp.sse();
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let mut s = Streamed {
        content: String::new(),
        reasoning: String::new(),
        text: String::new(),
        finish_reason: None,
        tensorfold: Value::Null,
        usage: None,
        chunks: Vec::new(),
    };
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).unwrap_or_else(|err| panic!("bad event {e}: {err}"));
        if let Some(c) = v["choices"].get(0) {
            if let Some(t) = c["delta"]["content"].as_str() {
                s.content.push_str(t);
            }
            if let Some(t) = c["delta"]["reasoning_content"].as_str() {
                s.reasoning.push_str(t);
            }
            if let Some(t) = c["text"].as_str() {
                s.text.push_str(t);
            }
            if let Some(f) = c["finish_reason"].as_str() {
                s.finish_reason = Some(f.to_owned());
                s.tensorfold = v["tensorfold"].clone();
            }
        }
        if v["usage"].is_object() {
            s.usage = Some(v["usage"].clone());
        }
        s.chunks.push(v);
    }
    s
}
