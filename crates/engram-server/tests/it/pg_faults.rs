//! PostgreSQL itself failing under two replicas that take writes and
//! compact: a fast shutdown and restart, then a kill -9 of the postmaster
//! (crash recovery on restart). Clients retry what was refused, with the
//! same event ids, as a client of a replicated service does. Afterwards
//! every acknowledged event is there once, no turn is summarized twice,
//! and both replicas served again within 10 s of the database coming
//! back, without a restart of their own. While it was down every refusal
//! was UNAVAILABLE (or ABORTED for a compaction), never a storage error.
//!
//! The cluster is the test's own (`scripts/pg.sh` with `ENGRAM_PG_STATE`),
//! not the shared one the other tests use.

use crate::common::*;
use crate::replicas::{Acked, check, note_acked, replica_env_on, spawn, turn};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use engram_proto::pb;
use tokio::sync::Mutex;

/// A PostgreSQL cluster of this test's own, removed on drop.
struct Cluster {
    state: tempfile::TempDir,
    url: String,
}

impl Cluster {
    fn start() -> Self {
        let state = tempfile::tempdir().unwrap();
        let out = Self::script(state.path(), "start");
        Self {
            state,
            url: out.trim().to_owned(),
        }
    }

    fn script(state: &std::path::Path, command: &str) -> String {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg.sh");
        let out = std::process::Command::new(script)
            .arg(command)
            .env("ENGRAM_PG_STATE", state)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg.sh {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn run(&self, command: &str) {
        Self::script(self.state.path(), command);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        Self::script(self.state.path(), "stop");
    }
}

/// Every status code the clients were answered with, by name.
type Codes = Arc<Mutex<BTreeMap<String, usize>>>;

/// Sends `events` until they are stored (the same event ids each time:
/// stored once however often sent), noting each refusal's code.
async fn ingest_until_stored(
    c: &mut Client,
    agent: &str,
    events: Vec<pb::TraceEvent>,
    acked: &Acked,
    codes: &Codes,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match c.ingest(ingest_req(agent, events.clone())).await {
            Ok(reply) => return note_acked(acked, agent, reply.into_inner().traces).await,
            Err(s) => {
                *codes
                    .lock()
                    .await
                    .entry(format!("{:?}", s.code()))
                    .or_default() += 1;
                assert!(Instant::now() < deadline, "{agent}: never stored: {s}");
                // A client's back-off; the retry is what is under test.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// How long until both replicas store a write again.
async fn until_both_serve(replicas: &[std::net::SocketAddr; 2], phase: &str) -> Duration {
    let start = Instant::now();
    let acked = Acked::default();
    let codes = Codes::default();
    for (i, addr) in replicas.iter().enumerate() {
        let mut c = pb::memory_service_client::MemoryServiceClient::new(channel(*addr).await);
        let mut probe = user(&format!("probe {phase} {i}"));
        probe.event_id = format!("probe-{phase}-{i}");
        ingest_until_stored(&mut c, "probe", vec![probe], &acked, &codes).await;
    }
    start.elapsed()
}

/// Waits (polling: the writers are the clock) until `n` more traces have
/// been acknowledged.
async fn progress(acked: &Acked, n: usize) {
    let start = acked.lock().await.len();
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked.lock().await.len() < start + n {
        assert!(Instant::now() < deadline, "the writers made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_and_killed_under_two_replicas_loses_nothing() {
    let cluster = Cluster::start();
    let env = replica_env_on(
        &cluster.url,
        &[("ENGRAM__STORE__POSTGRES__ACQUIRE_TIMEOUT_MS", "1000")],
    )
    .await;
    let (a, _da) = spawn(&env);
    let (b, _db) = spawn(&env);
    let replicas = [a.addr, b.addr];
    // A third replica whose summarizer answers when the test says: its
    // compaction is in flight when the database dies.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let summary = completion(r#"{"episodic_summary": "Zebras.", "semantic_facts": []}"#);
    let (llm, _seen, arrived) = fake_llm_gated(vec![(200, summary)], gate.clone()).await;
    let mut env_c = env.clone();
    env_c.push(("ENGRAM__LLM__BASE_URL".into(), llm));
    env_c.push(("ENGRAM__LLM__MODEL".into(), "m".into()));
    let (c, _dc) = spawn(&env_c);
    let acked = Acked::default();
    let codes = Codes::default();
    let stop = Arc::new(AtomicBool::new(false));
    const CLIENTS: usize = 6;
    let agents: Vec<String> = (0..CLIENTS).map(|c| format!("agent-{}", c % 4)).collect();
    let mut writers = vec![];
    for (client, agent) in agents.iter().cloned().enumerate() {
        let (acked, codes, stop) = (acked.clone(), codes.clone(), stop.clone());
        let mut first = pb::memory_service_client::MemoryServiceClient::new(
            channel(replicas[client % 2]).await,
        );
        let mut other = pb::memory_service_client::MemoryServiceClient::new(
            channel(replicas[(client + 1) % 2]).await,
        );
        writers.push(tokio::spawn(async move {
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                // The question on one replica, the answer on the other;
                // every fourth round a compaction on either.
                let [ask, answer] = turn(client, round);
                ingest_until_stored(&mut first, &agent, ask, &acked, &codes).await;
                ingest_until_stored(&mut other, &agent, answer, &acked, &codes).await;
                if round % 4 == 3 {
                    let replica = if round % 8 == 3 {
                        &mut first
                    } else {
                        &mut other
                    };
                    if let Err(s) = replica.compact(compact(&agent)).await {
                        *codes
                            .lock()
                            .await
                            .entry(format!("{:?}", s.code()))
                            .or_default() += 1;
                    }
                }
                round += 1;
            }
        }));
    }

    progress(&acked, 100).await;
    cluster.run("down");
    progress_stalls(&acked).await;
    cluster.run("up");
    let after_restart = until_both_serve(&replicas, "restart").await;
    progress(&acked, 100).await;

    let mut cc = c.client().await;
    let mut cb = b.client().await;
    for round in 0..4 {
        for events in turn(99, round) {
            ingest_until_stored(&mut cb, "held", events, &acked, &codes).await;
        }
    }
    let held = tokio::spawn(async move { cc.compact(compact("held")).await });
    arrived.notified().await;

    cluster.run("kill9");
    progress_stalls(&acked).await;
    // C's summary arrives with the database gone: its commit fails and
    // its lease cannot be cleared.
    gate.add_permits(1);
    let cut_short = held.await.unwrap().map(|r| r.into_inner().report.unwrap());
    assert!(
        cut_short.as_ref().map_or(true, |r| !r.performed),
        "{cut_short:?}"
    );
    cluster.run("up");
    let after_kill = until_both_serve(&replicas, "kill").await;
    progress(&acked, 100).await;

    // That lease is cleared by C once the database answers, long before
    // it would run out (10 minutes): B summarizes those turns.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let report = cb.compact(compact("held")).await.unwrap().into_inner();
        if report.report.unwrap().performed {
            break;
        }
        assert!(Instant::now() < deadline, "the orphaned lease held on");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    println!("served again {after_restart:?} after the restart, {after_kill:?} after kill -9");
    assert!(
        after_restart <= Duration::from_secs(10),
        "{after_restart:?}"
    );
    assert!(after_kill <= Duration::from_secs(10), "{after_kill:?}");

    let codes = codes.lock().await.clone();
    println!("refusals: {codes:?}");
    assert!(
        codes.contains_key("Unavailable"),
        "the outages were seen: {codes:?}"
    );
    for code in codes.keys() {
        assert!(
            ["Unavailable", "Aborted"].contains(&code.as_str()),
            "a refusal other than UNAVAILABLE or ABORTED: {codes:?}"
        );
    }

    let acked = acked.lock().await.clone();
    println!("{} traces acknowledged", acked.len());
    let mut agents = agents;
    agents.push("held".into());
    agents.sort();
    agents.dedup();
    let mut ca = a.client().await;
    let archived = check(&mut ca, &agents, &acked).await;
    assert!(archived > 0, "some compaction committed");
    assert_eq!(check(&mut cb, &agents, &acked).await, archived);
}

/// Waits until the writers are refused (nothing acknowledged for a second,
/// the replicas' wait for a connection): the outage is felt, and retried,
/// before the database comes back.
async fn progress_stalls(acked: &Acked) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = acked.lock().await.len();
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = acked.lock().await.len();
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= Duration::from_secs(1) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "writes went on with the database down"
        );
    }
}
