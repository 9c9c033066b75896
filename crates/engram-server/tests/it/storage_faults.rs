//! A full disk and a failed fsync against the real server, as a database
//! would handle them: a refused write is invisible, writes come back when
//! space is freed, and a failed flush turns health NOT_SERVING.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use engram_proto::pb;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// A small tmpfs, unmounted on drop; `None` where mounting is not allowed
/// (not root). CI runs as root.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

async fn serving(server: &TestServer) -> i32 {
    HealthClient::new(server.channel().await)
        .check(HealthCheckRequest {
            service: "engram.v1.MemoryService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

fn message(marker: &str) -> pb::IngestRequest {
    ingest_req(
        "full",
        vec![user(&format!("{marker} {}", "x".repeat(60_000)))],
    )
}

async fn found(c: &mut Client, marker: &str) -> usize {
    c.search_history(pb::SearchHistoryRequest {
        agent_id: "full".into(),
        query: marker.into(),
        mode: pb::SearchMode::MatchAllWords.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .matches
    .len()
}

/// How often each marker occurs in the agent's active file and archive.
fn stored_markers(agent_dir: &Path) -> Vec<String> {
    let mut out = vec![];
    for file in ["raw_traces.jsonl", "raw_traces_archive.jsonl"] {
        let text = std::fs::read_to_string(agent_dir.join(file)).unwrap_or_default();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let content = v["content"].as_str().unwrap_or_default();
            out.push(content.split(' ').next().unwrap_or_default().to_owned());
        }
    }
    out.sort();
    out
}

fn assert_clean(status: &tonic::Status, root: &Path) {
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let m = status.message();
    assert!(m.contains("disk full"), "{m}");
    assert!(
        !m.contains(&*root.to_string_lossy()) && !m.contains("os error"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_invisibly_and_writes_resume_when_space_is_freed() {
    let Some(fs) = Tmpfs::mount("8m") else {
        eprintln!(
            "skipped: mounting a tmpfs needs root (the store's unit tests inject ENOSPC instead)"
        );
        return;
    };
    // Ballast to free later: half the volume.
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; 4 << 20]).unwrap();
    let data: PathBuf = fs.path().join("data");
    let data_env = data.display().to_string();
    let mut server = TestServer::start_with(&[("ENGRAM__STORE__DATA_DIR", &data_env)]).await;
    let mut c = server.client().await;

    let mut acked = vec![];
    let refused = loop {
        let marker = format!("acked{:03}", acked.len());
        match c.ingest(message(&marker)).await {
            Ok(_) => acked.push(marker),
            Err(status) => break status,
        }
        assert!(acked.len() < 200, "the disk never filled");
    };
    assert_clean(&refused, fs.path());
    let first_refused = format!("acked{:03}", acked.len());
    for j in 0..3 {
        let status = c.ingest(message(&format!("refused{j}"))).await.unwrap_err();
        assert_clean(&status, fs.path());
    }
    // Refused means invisible; the disk being full is no reason to restart.
    for marker in [first_refused.as_str(), "refused0", "refused2"] {
        assert_eq!(found(&mut c, marker).await, 0, "{marker}");
    }
    assert_eq!(found(&mut c, &acked[0]).await, 1);
    assert_eq!(serving(&server).await, ServingStatus::Serving as i32);
    // A compaction on a full disk fails cleanly and prunes nothing.
    let report = compact_now(&mut c, "full").await;
    assert!(!report.performed, "{report:?}");
    assert!(report.error.contains("disk full"), "{}", report.error);
    assert!(
        !report.error.contains(&*fs.path().to_string_lossy()),
        "{}",
        report.error
    );
    assert_eq!(all_traces(&mut c, "full").await.len(), acked.len());

    // Space is freed: writes work again, no restart.
    std::fs::remove_file(&ballast).unwrap();
    c.ingest(message("after")).await.unwrap();
    acked.push("after".into());
    let report = compact_now(&mut c, "full").await;
    assert!(report.performed, "{report:?}");

    // Everything acknowledged is stored exactly once, across a restart;
    // nothing refused is.
    server.stop().await;
    let server = TestServer::start_with(&[("ENGRAM__STORE__DATA_DIR", &data_env)]).await;
    let mut c = server.client().await;
    assert_eq!(found(&mut c, "after").await, 1);
    let mut want = acked.clone();
    want.sort();
    assert_eq!(stored_markers(&data.join("agents/full")), want);
}

/// Needs the `fault-injection` build (`make test`).
#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_turns_health_not_serving_and_refuses_everything() {
    let data = tempfile::tempdir().unwrap();
    let config = engram_server::Config::load_from(
        None,
        [(
            "ENGRAM__STORE__DATA_DIR".to_string(),
            data.path().display().to_string(),
        )],
    )
    .unwrap();
    let store = std::sync::Arc::new(
        engram_files::FileStore::open(config.store_config())
            .await
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(engram_server::serve(
        engram_server::Listeners {
            grpc: listener,
            metrics: None,
            http: None,
        },
        config,
        store.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    let mut c = pb::memory_service_client::MemoryServiceClient::new(channel(addr).await);
    c.ingest(ingest_req("a", vec![user("kept")])).await.unwrap();
    let mut health = HealthClient::new(channel(addr).await);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );

    store.inject_log_sync_failure();
    let status = c
        .ingest(ingest_req("a", vec![user("lost")]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        !status.message().contains("fdatasync"),
        "{}",
        status.message()
    );
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::NotServing as i32
    );
    // Reads too: they could show the write that was never acknowledged.
    let status = c
        .retrieve(pb::RetrieveRequest {
            agent_id: "a".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    // An open health watch is a call in flight: close it before draining.
    drop((watch, health, c));
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}
