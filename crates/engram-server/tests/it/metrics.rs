//! The Prometheus endpoint of the real binary: every named family moves
//! when the thing it counts happens.

use crate::common;

use common::{Daemon, compact_now, ingest_req, turns, user};
use engram_proto::pb;

async fn scrape(addr: &str) -> String {
    let res = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert!(res.status().is_success());
    let content_type = res.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    res.text().await.unwrap()
}

/// The value of the sample whose name and labels are exactly `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn metrics_count_calls_commits_compactions_and_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::spawn(
        dir.path(),
        &[("ENGRAM__SERVER__METRICS_LISTEN", "127.0.0.1:0")],
    );
    let line = daemon.next_line();
    let metrics = line
        .strip_prefix("engramd metrics on ")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .to_owned();
    let mut c = daemon.client().await;

    turns(&mut c, "metered", 6).await;
    let err = c
        .ingest(ingest_req("bad id!", vec![user("x")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let report = compact_now(&mut c, "metered").await;
    assert!(report.performed, "{report:?}");
    c.list_agents(pb::ListAgentsRequest::default())
        .await
        .unwrap();

    let text = scrape(&metrics).await;
    let value =
        |series: &str| sample(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    assert_eq!(
        value(r#"engram_rpc_requests_total{method="Ingest",code="OK"}"#),
        6.0
    );
    assert_eq!(
        value(r#"engram_rpc_requests_total{method="Ingest",code="INVALID_ARGUMENT"}"#),
        1.0
    );
    assert_eq!(
        value(r#"engram_rpc_duration_seconds_count{method="Compact",code="OK"}"#),
        1.0
    );
    assert_eq!(value("engram_traces_ingested_total"), 12.0);
    // fsync = always: at least one group commit per acknowledged Ingest
    // batch, each with at least one append.
    assert!(value("engram_fsync_duration_seconds_count") >= 1.0);
    assert!(value("engram_fsync_batch_appends_sum") >= value("engram_fsync_batch_appends_count"));
    assert!(value("engram_fsync_batch_bytes_sum") > 0.0);
    assert_eq!(
        value(r#"engram_compactions_total{trigger="manual",outcome="summarized"}"#),
        1.0
    );
    assert_eq!(value("engram_summarizer_duration_seconds_count"), 1.0);
    assert_eq!(value("engram_summarizer_circuit_open"), 0.0);
    assert_eq!(value("engram_agents_loaded"), 1.0);
    assert_eq!(value("engram_index_unembedded_items"), 0.0, "no model here");
    assert!(value("engram_disk_bytes") > 1000.0);
    assert!(text.contains("# HELP engram_rpc_requests_total"), "{text}");
    // Latency is a histogram with buckets, not a summary.
    assert!(
        text.contains(
            r#"engram_rpc_duration_seconds_bucket{method="Ingest",code="OK",le="0.001"}"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn metrics_are_off_unless_configured() {
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::spawn(dir.path(), &[]);
    let mut c = daemon.client().await;
    c.ingest(ingest_req("quiet", vec![user("x")]))
        .await
        .unwrap();
    // The binary prints no metrics line; the next line is EOF once stopped.
    daemon.kill9();
    assert_eq!(daemon.next_line(), "");
}
