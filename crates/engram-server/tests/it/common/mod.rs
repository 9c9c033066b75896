//! Test harness: the real `run()` on 127.0.0.1:0, or the real `engramd`
//! binary, and gRPC clients for them. The listener is bound before the
//! server starts, so no test waits for readiness.

pub mod meaning;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use engram_proto::pb;
use engram_proto::pb::memory_service_client::MemoryServiceClient;
use engram_server::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tonic::transport::Channel;

pub type Client = MemoryServiceClient<Channel>;

/// An in-process server over a temp data dir; shuts down on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    /// The HTTP listener's, when `ENGRAM__HTTP__LISTEN` asked for one.
    pub http: Option<SocketAddr>,
    pub data_dir: tempfile::TempDir,
    pub stop_tx: Option<oneshot::Sender<()>>,
    pub task: Option<tokio::task::JoinHandle<Result<(), engram_server::ServerError>>>,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Starts with extra `ENGRAM__…` settings.
    pub async fn start_with(env: &[(&str, &str)]) -> Self {
        let data_dir = tempfile::tempdir().unwrap();
        let mut vars = vec![
            (
                "ENGRAM__STORE__DATA_DIR".to_string(),
                data_dir.path().display().to_string(),
            ),
            // As for `Daemon`: other tests' processes must not starve the
            // indexer.
            (
                "ENGRAM__EMBED__BACKGROUND_PRIORITY".to_string(),
                "normal".to_string(),
            ),
        ];
        vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = Config::load_from(None, vars).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let listeners = engram_server::Listeners::bind_for(listener, &config)
            .await
            .unwrap();
        let http = listeners.http.as_ref().map(|l| l.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _held = engram_server::lock_data_dir(&config.store.data_dir)?;
            engram_server::run_on(listeners, config, async {
                let _ = stopped.await;
            })
            .await
        });
        Self {
            addr,
            http,
            data_dir,
            stop_tx: Some(stop),
            task: Some(task),
        }
    }

    pub async fn channel(&self) -> Channel {
        channel(self.addr).await
    }

    pub async fn client(&self) -> Client {
        MemoryServiceClient::new(self.channel().await)
    }

    pub fn agents_dir(&self) -> std::path::PathBuf {
        self.data_dir.path().join("agents")
    }

    /// Requests shutdown and waits for `run` to return.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop_tx.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }
}

pub async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The real `engramd` binary on port 0; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub addr: SocketAddr,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Daemon {
    pub fn spawn(data_dir: &Path, env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_engramd"));
        cmd.env("ENGRAM__SERVER__LISTEN", "127.0.0.1:0")
            .env("ENGRAM__STORE__DATA_DIR", data_dir)
            .env("ENGRAM__LOG__LEVEL", "warn")
            // Tests share the machine with other tests' processes, which
            // idle priority would let starve the indexer for minutes.
            .env("ENGRAM__EMBED__BACKGROUND_PRIORITY", "normal")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn engramd");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("engramd listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        Self {
            child,
            addr,
            stdout,
        }
    }

    /// The next line the daemon printed (e.g. `engramd metrics on ADDR`).
    pub fn next_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_owned()
    }

    pub async fn client(&self) -> Client {
        MemoryServiceClient::new(channel(self.addr).await)
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tokens file in `dir` holding `toml` (its `[[tokens]]` tables): the
/// value for `ENGRAM__AUTH__TOKENS_FILE`.
pub fn tokens_file(dir: &Path, toml: &str) -> String {
    let file = dir.join("tokens.toml");
    std::fs::write(&file, toml).unwrap();
    file.display().to_string()
}

pub fn event(trace_type: pb::TraceType, content: &str) -> pb::TraceEvent {
    pb::TraceEvent {
        trace_type: trace_type.into(),
        content: content.into(),
        ..Default::default()
    }
}

/// A tool call `id` of tool `name`, no arguments.
pub fn tool_call(id: &str, name: &str) -> pb::TraceEvent {
    pb::TraceEvent {
        tool_call_id: id.into(),
        tool_name: name.into(),
        ..event(pb::TraceType::ToolCall, "")
    }
}

/// The result of call `id`, as text.
pub fn tool_result(id: &str, text: &str) -> pb::TraceEvent {
    pb::TraceEvent {
        tool_call_id: id.into(),
        ..event(pb::TraceType::ToolResult, text)
    }
}

pub fn user(content: &str) -> pb::TraceEvent {
    event(pb::TraceType::User, content)
}

pub fn ingest_req(agent: &str, events: Vec<pb::TraceEvent>) -> pb::IngestRequest {
    pb::IngestRequest {
        agent_id: agent.into(),
        events,
        ..Default::default()
    }
}

/// Every trace of an agent, via Retrieve with a tail wide enough.
pub async fn all_traces(client: &mut Client, agent: &str) -> Vec<pb::RawTrace> {
    client
        .retrieve(pb::RetrieveRequest {
            agent_id: agent.into(),
            raw_tail_turns: Some(u32::MAX),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .raw_tail
}

/// Runs the providers' schemas and rules (validate.py, warnings as errors)
/// over `(name, format, payload JSON)` items in one Python process.
pub fn assert_valid_payloads(items: &[(String, &str, String)]) {
    use std::io::Write;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = std::env::var("ENGRAM_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            let venv = root.join(".venv/bin/python");
            if venv.exists() {
                venv
            } else {
                "python3".into()
            }
        });
    let mut child = Command::new(&python)
        .arg(root.join("scripts/validate_payloads.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    {
        let mut stdin = child.stdin.take().unwrap();
        for (name, format, payload) in items {
            writeln!(
                stdin,
                "{{\"name\": {}, \"format\": \"{format}\", \"payload\": {payload}}}",
                serde_json::to_string(name).unwrap()
            )
            .unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "payloads rejected by validate.py:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// Compaction helpers shared by the compaction test files.

/// A local OpenAI-compatible endpoint answering each request with the next
/// scripted (status, body); records request paths.
pub async fn fake_llm(script: Vec<(u16, String)>) -> (String, Arc<Mutex<Vec<String>>>) {
    let open = Arc::new(tokio::sync::Semaphore::new(usize::MAX >> 4));
    let (base, seen, _) = fake_llm_gated(script, open).await;
    (base, seen)
}

/// Like [`fake_llm`], answering each request only once `gate` hands out a
/// permit (so a test decides when "the LLM" is done); `arrived` is notified
/// as each request comes in.
pub async fn fake_llm_gated(
    script: Vec<(u16, String)>,
    gate: Arc<tokio::sync::Semaphore>,
) -> (String, Arc<Mutex<Vec<String>>>, Arc<tokio::sync::Notify>) {
    let (base, seen, _, arrived) = fake_llm_recording(script, gate).await;
    (base, seen, arrived)
}

/// Like [`fake_llm_gated`], also recording each request's body.
pub async fn fake_llm_recording(
    script: Vec<(u16, String)>,
    gate: Arc<tokio::sync::Semaphore>,
) -> (
    String,
    Arc<Mutex<Vec<String>>>,
    Arc<Mutex<Vec<String>>>,
    Arc<tokio::sync::Notify>,
) {
    let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = Arc::clone(&bodies);
    let arrived = Arc::new(tokio::sync::Notify::new());
    let notify = Arc::clone(&arrived);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let (status, body) = script[n.min(script.len() - 1)].clone();
            n += 1;
            let Some((head, request)) = read_request(&mut stream).await else {
                continue;
            };
            kept.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&request).into_owned());
            log.lock()
                .unwrap()
                .push(head.split_whitespace().nth(1).unwrap().to_owned());
            notify.notify_one();
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let gate = Arc::clone(&gate);
            tokio::spawn(async move {
                gate.acquire().await.unwrap().forget();
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    (base, seen, bodies, arrived)
}

/// One HTTP/1.1 request off `stream`: its head and its body (by
/// `content-length`); `None` if the client hung up first.
/// An OpenAI-compatible chat endpoint whose answer `respond` works out
/// from each request's user message (a summarizer that reads what it is
/// shown: the known facts' handles). Returns the base URL and every user
/// message asked.
pub async fn fake_llm_answering(
    respond: impl Fn(&str) -> String + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&asked);
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let Some((_, request)) = read_request(&mut stream).await else {
                continue;
            };
            let body: serde_json::Value = serde_json::from_slice(&request).unwrap_or_default();
            let said = body["messages"][1]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let answer = completion(&respond(&said));
            log.lock().unwrap().push(said);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
        }
    });
    (base, asked)
}

pub async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = vec![];
    let mut chunk = [0u8; 8192];
    loop {
        let k = stream.read(&mut chunk).await.ok()?;
        if k == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..k]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        if buf.len() >= end + 4 + len {
            return Some((head, buf[end + 4..end + 4 + len].to_vec()));
        }
    }
}

pub fn completion(content: &str) -> String {
    serde_json::json!({"choices": [{"message": {"role": "assistant", "content": content}}]})
        .to_string()
}

pub async fn turns(c: &mut Client, agent: &str, n: usize) {
    for t in 1..=n {
        c.ingest(ingest_req(
            agent,
            vec![
                user(&format!("I prefer answer number {t}. What is {t} squared?")),
                event(
                    pb::TraceType::Assistant,
                    &format!(
                        "{} it is. {}",
                        t * t,
                        "Squaring multiplies a number by itself. ".repeat(20)
                    ),
                ),
            ],
        ))
        .await
        .unwrap();
    }
}

/// The memory bundle Retrieve gives for `agent` with its defaults.
pub async fn bundle(c: &mut Client, agent: &str) -> pb::MemoryBundle {
    c.retrieve(pb::RetrieveRequest {
        agent_id: agent.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .bundle
    .unwrap()
}

/// A manual Compact of `agent` (focus "numbers"); its report.
pub async fn compact_now(c: &mut Client, agent: &str) -> pb::CompactionReport {
    c.compact(compact(agent))
        .await
        .unwrap()
        .into_inner()
        .report
        .unwrap()
}

pub fn compact(agent: &str) -> pb::CompactRequest {
    pb::CompactRequest {
        agent_id: agent.into(),
        focus: "numbers".into(),
        strategy: String::new(),
    }
}

#[allow(unused_imports)]
pub use engram_chaos::raw::call_raw;

/// Every file under `dir` whose bytes hold `needle`.
pub fn files_holding(dir: &std::path::Path, needle: &[u8]) -> Vec<String> {
    let mut found = vec![];
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if std::fs::read(&path)
            .unwrap_or_default()
            .windows(needle.len())
            .any(|w| w == needle)
        {
            found.push(path.display().to_string());
        }
    }
    found
}

/// A summarizer's answer (for a fake LLM) with a summary and one fact.
pub fn summary_with_fact(fact: &str) -> String {
    completion(&format!(
        r#"{{"episodic_summary": "Talked.", "semantic_facts": [{{"fact": "{fact}", "confidence": 0.9, "salience": 0.5}}]}}"#
    ))
}

/// A conversation of `user` that says `first`, then four turns, compacted
/// (all but its last turn).
pub async fn compacted_conversation(c: &mut Client, user_id: &str, agent: &str, first: &str) {
    c.ingest(pb::IngestRequest {
        user_id: user_id.into(),
        ..ingest_req(agent, vec![user(first)])
    })
    .await
    .unwrap();
    turns(c, agent, 4).await;
    let report = compact_now(c, agent).await;
    assert!(report.performed, "{report:?}");
}

/// User `user_id`'s facts as ListMemories lists them: the live ones, or
/// with `superseded` the replaced and ended ones too.
pub async fn user_facts(c: &mut Client, user_id: &str, superseded: bool) -> Vec<pb::SemanticItem> {
    c.list_memories(pb::ListMemoriesRequest {
        scope: Some(pb::MemoryScope {
            scope: Some(pb::memory_scope::Scope::UserId(user_id.into())),
        }),
        include_superseded: superseded,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .memories
}
