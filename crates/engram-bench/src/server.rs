//! The real `engramd` for the benches: started on port 0 in its own
//! process over a data directory, and a client for it.

use std::path::Path;

use anyhow::Context;
use engram_proto::pb::memory_service_client::MemoryServiceClient;
use tonic::transport::Channel;

/// The real server on port 0 over `data`; killed on drop.
pub(crate) struct Server {
    child: std::process::Child,
    pub(crate) addr: String,
    /// The server's stdout, kept open: it announces more listeners after
    /// the first line.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Server {
    pub(crate) fn start(binary: &Path, data: &Path) -> anyhow::Result<Self> {
        Self::start_with(binary, data, "")
    }

    /// [`Server::start`] with `extra` TOML appended to its configuration.
    pub(crate) fn start_with(binary: &Path, data: &Path, extra: &str) -> anyhow::Result<Self> {
        use std::io::BufRead;
        // A window larger than any transcript here: the bench measures
        // prompts, not the compaction the estimate trigger would start.
        let config = data.join("bench.toml");
        std::fs::write(
            &config,
            format!("[budget.models.\"gpt-4o\"]\ncontext_tokens = 100000000\n{extra}"),
        )?;
        let mut child = std::process::Command::new(binary)
            .arg("--config")
            .arg(&config)
            .env("ENGRAM__SERVER__LISTEN", "127.0.0.1:0")
            .env("ENGRAM__STORE__DATA_DIR", data)
            .env("ENGRAM__LOG__LEVEL", "warn")
            // 10,000 messages of 200 tokens make answers of ~11 MB.
            .env("ENGRAM__SERVER__MAX_MESSAGE_BYTES", (64 << 20).to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .with_context(|| {
                format!(
                    "starting {} (build it with `cargo build --release -p engram-server`)",
                    binary.display()
                )
            })?;
        let mut line = String::new();
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
        stdout.read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("engramd listening on ")
            .with_context(|| format!("unexpected first line {line:?}"))?
            .to_owned();
        Ok(Self {
            child,
            addr,
            _stdout: stdout,
        })
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gRPC client of the server.
pub(crate) type Client = MemoryServiceClient<Channel>;

pub(crate) async fn connect(addr: &str) -> anyhow::Result<Client> {
    // Large answers need HTTP/2 windows that grow (as grpcio's BDP probing
    // does); the 64 KiB default makes a 10 MB answer ~160 round trips.
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .http2_adaptive_window(true)
        .connect()
        .await?;
    Ok(MemoryServiceClient::new(channel).max_decoding_message_size(64 << 20))
}

/// Message `m` of a made-up conversation: the user's at even places, the
/// assistant's at odd ones.
pub(crate) fn alternating(m: usize, content: String) -> engram_proto::pb::TraceEvent {
    use engram_proto::pb::TraceType;
    let speaker = if m.is_multiple_of(2) {
        TraceType::User
    } else {
        TraceType::Assistant
    };
    engram_proto::pb::TraceEvent {
        trace_type: speaker.into(),
        content,
        ..Default::default()
    }
}
