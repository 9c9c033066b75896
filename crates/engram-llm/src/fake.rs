//! A local HTTP server speaking just enough of the OpenAI API for the real
//! clients' tests, scripted to succeed and to fail on purpose.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone)]
pub enum Reply {
    /// Status, extra headers, body.
    Http(u16, Vec<(&'static str, String)>, String),
    /// Read the request, never answer.
    Stall,
    /// Send the headers and part of the body, then stall.
    SlowBody,
    /// Read the request and hang up.
    Hangup,
}

#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
    pub at: Instant,
}

/// A one-request-per-connection HTTP/1.1 server answering from a script
/// (the last reply repeats).
pub struct FakeLlm {
    pub base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeLlm {
    pub async fn start(script: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut n = 0;
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let reply = script[n.min(script.len() - 1)].clone();
                n += 1;
                let log = Arc::clone(&log);
                tokio::spawn(serve(stream, reply, log));
            }
        });
        Self { base_url, seen }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(mut stream: TcpStream, reply: Reply, log: Arc<Mutex<Vec<Seen>>>) {
    let mut buf = vec![];
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_owned())
        })
    };
    let len: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + len {
        let n = stream.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    log.lock().unwrap().push(Seen {
        path,
        authorization: header("authorization"),
        body: serde_json::from_slice(&buf[header_end..header_end + len]).unwrap_or(Value::Null),
        at: Instant::now(),
    });
    match reply {
        Reply::Http(status, headers, body) => {
            let mut out = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            out.push_str("\r\n");
            out.push_str(&body);
            let _ = stream.write_all(out.as_bytes()).await;
        }
        Reply::Stall => std::future::pending::<()>().await,
        Reply::SlowBody => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"choices\":")
                .await;
            std::future::pending::<()>().await;
        }
        Reply::Hangup => {}
    }
}
