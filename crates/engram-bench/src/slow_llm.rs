//! A stand-in for a summarizer LLM over HTTP that takes its time: an
//! OpenAI-compatible `/v1/chat/completions` answering every request with
//! the same summary after `delay`, so the agent loop can show what a
//! compaction's wait costs a prompt (and what a summary written ahead
//! saves). Requests are answered concurrently.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SUMMARY: &str =
    r#"{"episodic_summary": "Earlier turns of the research conversation.", "semantic_facts": []}"#;

/// Serves on 127.0.0.1:0 until the runtime stops; returns the base URL.
pub(crate) async fn serve(delay: Duration) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/v1", listener.local_addr()?);
    let content = serde_json::to_string(SUMMARY)?;
    let body = format!(
        r#"{{"id":"bench","object":"chat.completion","model":"bench","choices":[{{"index":0,"finish_reason":"stop","message":{{"role":"assistant","content":{content}}}}}],"usage":{{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}}}"#
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                if read_request(&mut stream).await.is_none() {
                    return;
                }
                tokio::time::sleep(delay).await;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    Ok(base)
}

/// Reads one request (head and `content-length` body); `None` if the
/// client hung up first.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<()> {
    let mut buf = vec![];
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let k = stream.read(&mut chunk).await.ok()?;
        if k == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..k]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + len {
            return Some(());
        }
    }
}
