//! A local OpenAI-compatible endpoint that answers every chat completion
//! with a valid summary after a delay, so compactions are in flight when
//! the chaos run kills the server. It counts the calls it is answering.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Default)]
pub struct Calls {
    pub in_flight: AtomicUsize,
    pub total: AtomicUsize,
}

/// Serves on 127.0.0.1:0 until the runtime ends; returns the base URL.
pub async fn serve(delay: Duration, calls: Arc<Calls>) -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let calls = Arc::clone(&calls);
            tokio::spawn(async move {
                calls.in_flight.fetch_add(1, Ordering::SeqCst);
                let n = calls.total.fetch_add(1, Ordering::SeqCst);
                let _ = answer(stream, delay, n).await;
                calls.in_flight.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Ok(base)
}

async fn answer(mut stream: TcpStream, delay: Duration, n: usize) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let k = stream.read(&mut chunk).await?;
        if k == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..k]);
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                break;
            }
        }
    }
    tokio::time::sleep(delay).await;
    let summary = serde_json::json!({
        "episodic_summary": format!("Chaos summary {n}: the writers exchanged numbered messages."),
        "tags": ["chaos"],
        "salience": 0.5,
        "semantic_facts": [{"fact": format!("Chaos fact {}", n % 7), "confidence": 0.8, "salience": 0.5}],
    });
    let body = serde_json::json!({
        "choices": [{"message": {"role": "assistant", "content": summary.to_string()}}]
    })
    .to_string();
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
