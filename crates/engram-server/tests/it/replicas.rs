//! Two `engramd` replicas on one PostgreSQL (`scripts/pg.sh start`, which
//! `make test` runs, or `ENGRAM_TEST_PG_URL`), each test on a schema of its
//! own: clients spread over both write the same and different agents and
//! compact on both; every acknowledged trace is then there exactly once,
//! turns are consecutive, tool results keep their call's turn and no turn
//! is summarized twice. A replica killed mid-compaction loses nothing
//! acknowledged, and the other keeps serving.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use common::*;
use engram_proto::pb;
use tokio::sync::Mutex;

/// Settings of replicas on a schema of their own.
pub(crate) async fn replica_env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let checkout = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let url = engram_postgres::testing::url_or_panic("ENGRAM_TEST_PG_URL", checkout);
    replica_env_on(&url, extra).await
}

/// Settings of replicas on a schema of their own in `url`'s database.
pub(crate) async fn replica_env_on(url: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let schema = engram_postgres::testing::fresh_schema(url, "r")
        .await
        .unwrap();
    let mut env: Vec<(String, String)> = [
        ("ENGRAM__STORE__BACKEND", "postgres"),
        ("ENGRAM__STORE__POSTGRES__URL", url),
        ("ENGRAM__STORE__POSTGRES__SCHEMA", schema.as_str()),
        ("ENGRAM__STORE__POSTGRES__POOL_SIZE", "8"),
        ("ENGRAM__EMBED__PROVIDER", "none"),
        ("ENGRAM__POLICY__RAW_TAIL_TURNS", "1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

pub(crate) fn spawn(env: &[(String, String)]) -> (Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    (Daemon::spawn(dir.path(), &env), dir)
}

/// A turn as two requests, each event with its own id: the question and a
/// tool call, then the call's result and the answer (another client's
/// turn may come between them).
pub(crate) fn turn(client: usize, round: usize) -> [Vec<pb::TraceEvent>; 2] {
    let tag = format!("c{client}r{round}");
    let with_id = |mut e: pb::TraceEvent, id: &str| {
        e.event_id = format!("{tag}-{id}");
        e
    };
    [
        vec![
            with_id(user(&format!("zebra question {tag}")), "q"),
            with_id(tool_call(&format!("call-{tag}"), "zebra_lookup"), "c"),
        ],
        vec![
            with_id(
                tool_result(&format!("call-{tag}"), &format!("zebra result {tag}")),
                "r",
            ),
            with_id(
                event(pb::TraceType::Assistant, &format!("zebra answer {tag}")),
                "a",
            ),
        ],
    ]
}

/// Every trace of `agent`, active and archived, by MATCH_ALL_WORDS search.
async fn every_trace(c: &mut Client, agent: &str) -> Vec<(pb::RawTrace, bool)> {
    let mut out = vec![];
    let mut token = String::new();
    loop {
        let page = c
            .search_history(pb::SearchHistoryRequest {
                agent_id: agent.into(),
                query: "zebra".into(),
                limit: 200,
                page_token: token.clone(),
                mode: pb::SearchMode::MatchAllWords.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        out.extend(
            page.matches
                .into_iter()
                .map(|m| (m.trace.unwrap(), m.archived)),
        );
        if page.next_page_token.is_empty() {
            return out;
        }
        token = page.next_page_token;
    }
}

/// What clients were told was stored: trace id → (agent, event id).
pub(crate) type Acked = Arc<Mutex<HashMap<String, (String, String)>>>;

pub(crate) async fn ingest_acked(
    c: &mut Client,
    agent: &str,
    events: Vec<pb::TraceEvent>,
    acked: &Acked,
) {
    let traces = c
        .ingest(ingest_req(agent, events))
        .await
        .unwrap_or_else(|e| panic!("ingest into {agent}: {e}"))
        .into_inner()
        .traces;
    note_acked(acked, agent, traces).await;
}

/// `traces` of `agent`, as a client was told they were stored.
pub(crate) async fn note_acked(acked: &Acked, agent: &str, traces: Vec<pb::RawTrace>) {
    let mut acked = acked.lock().await;
    for t in traces {
        acked.insert(t.id.clone(), (agent.to_owned(), t.event_id.clone()));
    }
}

/// The guarantees over `agents`, read through `c`: every acknowledged trace
/// once, consecutive turns, results in their call's turn, no turn in two
/// summaries. Returns the number of archived traces.
pub(crate) async fn check(
    c: &mut Client,
    agents: &[String],
    acked: &HashMap<String, (String, String)>,
) -> usize {
    let mut archived = 0;
    for agent in agents {
        let traces = every_trace(c, agent).await;
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (t, _) in &traces {
            *seen.entry(t.id.clone()).or_default() += 1;
        }
        assert!(
            seen.values().all(|n| *n == 1),
            "{agent}: a trace stored twice"
        );
        let mut events: BTreeMap<String, usize> = BTreeMap::new();
        for (t, _) in &traces {
            *events.entry(t.event_id.clone()).or_default() += 1;
        }
        assert!(
            events.values().all(|n| *n == 1),
            "{agent}: an event stored twice"
        );
        let mine: Vec<&String> = acked
            .iter()
            .filter(|(_, (a, _))| a == agent)
            .map(|(id, _)| id)
            .collect();
        for id in &mine {
            assert!(
                seen.contains_key(*id),
                "{agent}: acknowledged trace {id} lost"
            );
        }
        assert_eq!(seen.len(), mine.len(), "{agent}: traces nobody was told of");
        // Each user message opened the next turn: 1, 2, 3, … without gaps.
        let mut user_turns: Vec<u32> = traces
            .iter()
            .filter(|(t, _)| t.trace_type == pb::TraceType::User as i32)
            .map(|(t, _)| turn_number(&t.turn_id))
            .collect();
        user_turns.sort_unstable();
        let expected: Vec<u32> = (1..=user_turns.len() as u32).collect();
        assert_eq!(user_turns, expected, "{agent}: turns not consecutive");
        let call_turn: HashMap<&str, &str> = traces
            .iter()
            .filter(|(t, _)| t.trace_type == pb::TraceType::ToolCall as i32)
            .map(|(t, _)| (t.tool_call_id.as_str(), t.turn_id.as_str()))
            .collect();
        for (t, _) in &traces {
            if t.trace_type == pb::TraceType::ToolResult as i32 {
                assert_eq!(
                    call_turn.get(t.tool_call_id.as_str()),
                    Some(&t.turn_id.as_str()),
                    "{agent}: a result left its call's turn"
                );
            }
        }
        let memories = c
            .retrieve(pb::RetrieveRequest {
                agent_id: agent.clone(),
                max_episodic: Some(u32::MAX),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .bundle
            .unwrap();
        let mut summarized = BTreeSet::new();
        for e in &memories.episodic {
            for turn in &e.turn_ids {
                assert!(
                    summarized.insert(turn.clone()),
                    "{agent}: {turn} summarized twice"
                );
            }
        }
        archived += traces.iter().filter(|(_, a)| *a).count();
    }
    archived
}

fn turn_number(turn_id: &str) -> u32 {
    turn_id
        .trim_start_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or_else(|_| panic!("turn id {turn_id:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_share_agents_and_lose_nothing() {
    let env = replica_env(&[]).await;
    let (a, _da) = spawn(&env);
    let (b, _db) = spawn(&env);
    let replicas = [a.addr, b.addr];
    let acked: Acked = Arc::default();
    const CLIENTS: usize = 16;
    const ROUNDS: usize = 12;
    let agents: Vec<String> = ["shared-0", "shared-1"]
        .iter()
        .map(|s| s.to_string())
        .chain((0..4).map(|i| format!("own-{i}")))
        .collect();
    let mut tasks = vec![];
    for client in 0..CLIENTS {
        let acked = Arc::clone(&acked);
        // Clients 0–11 share two agents across both replicas; 12–15 each
        // have one of their own, on alternating replicas.
        let agent = if client < 12 {
            format!("shared-{}", client % 2)
        } else {
            format!("own-{}", client - 12)
        };
        let mut first = MemoryServiceClient::new(channel(replicas[client % 2]).await);
        let mut other = MemoryServiceClient::new(channel(replicas[(client + 1) % 2]).await);
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let [ask, answer] = turn(client, round);
                ingest_acked(&mut first, &agent, ask.clone(), &acked).await;
                // The answer lands on the other replica; every third
                // question is retried there too (same event ids).
                if round % 3 == 0 {
                    ingest_acked(&mut other, &agent, ask, &acked).await;
                }
                ingest_acked(&mut other, &agent, answer, &acked).await;
                if round % 4 == 3 {
                    // Compactions on both replicas, racing each other and
                    // the writes: each commits or is refused whole.
                    let replica = if round % 8 == 3 {
                        &mut first
                    } else {
                        &mut other
                    };
                    match replica.compact(compact(&agent)).await {
                        Ok(_) => {}
                        Err(s) if s.code() == tonic::Code::Aborted => {}
                        Err(s) => panic!("compact {agent}: {s}"),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let acked = acked.lock().await.clone();
    assert_eq!(acked.len(), CLIENTS * ROUNDS * 4);
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    let archived = check(&mut ca, &agents, &acked).await;
    assert!(archived > 0, "some compaction committed");
    // The other replica sees the same.
    assert_eq!(check(&mut cb, &agents, &acked).await, archived);
}

use engram_proto::pb::memory_service_client::MemoryServiceClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_compaction_loses_nothing() {
    // Replica A's summarizer answers only when the test says (never);
    // B summarizes by itself. The lease of a dead replica lasts 1 s.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let summary = completion(r#"{"episodic_summary": "Zebras.", "semantic_facts": []}"#);
    let (llm, _seen, arrived) = fake_llm_gated(vec![(200, summary)], gate).await;
    let env = replica_env(&[("ENGRAM__STORE__POSTGRES__COMPACTION_LEASE_SECS", "1")]).await;
    let mut env_a = env.clone();
    env_a.push(("ENGRAM__LLM__BASE_URL".into(), llm));
    env_a.push(("ENGRAM__LLM__MODEL".into(), "m".into()));
    let (mut a, _da) = spawn(&env_a);
    let (b, _db) = spawn(&env);
    let acked: Acked = Arc::default();
    let agent = "victim".to_owned();
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    for round in 0..6 {
        let [ask, answer] = turn(0, round);
        let c = if round % 2 == 0 { &mut ca } else { &mut cb };
        ingest_acked(c, &agent, ask, &acked).await;
        ingest_acked(c, &agent, answer, &acked).await;
    }
    let compacting = tokio::spawn(async move { ca.compact(compact("victim")).await });
    arrived.notified().await;
    // A holds the lease and waits on its summarizer; B keeps writing.
    let [ask, answer] = turn(1, 0);
    ingest_acked(&mut cb, &agent, ask, &acked).await;
    a.kill9();
    assert!(
        compacting.await.unwrap().is_err(),
        "the dead replica's call fails"
    );
    ingest_acked(&mut cb, &agent, answer, &acked).await;
    // B compacts once A's lease has run out (1 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let report = cb.compact(compact(&agent)).await.unwrap().into_inner();
        if report.report.is_some_and(|r| r.performed) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never ran out"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let acked = acked.lock().await.clone();
    assert!(check(&mut cb, &[agent], &acked).await > 0);
}

/// Search by meaning on the database, with the real local model: what one
/// replica was told, the other finds by paraphrases that share no word
/// with it, once the indexers (either replica's) have embedded it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn meaning_is_found_through_either_replica() {
    use common::meaning::*;
    let model = model_dir();
    let env = replica_env(&[
        ("ENGRAM__EMBED__PROVIDER", "local"),
        ("ENGRAM__EMBED__MODEL_DIR", &model),
    ])
    .await;
    let (a, _da) = spawn(&env);
    let (b, _db) = spawn(&env);
    tell(&mut a.client().await, "talk").await;
    let mut cb = b.client().await;
    assert_paraphrases_found(&mut cb, "talk").await;
    // Retrieve ranks by the same words and meaning.
    let recalled = cb
        .retrieve(pb::RetrieveRequest {
            agent_id: "talk".into(),
            query: PARAPHRASES[0].0.into(),
            max_recalled: Some(3),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .recalled;
    let first = recalled[0].trace.as_ref().unwrap();
    assert_eq!(first.content, TALK[PARAPHRASES[0].1]);
    assert_eq!(recalled[0].matched_by, pb::MatchedBy::Semantic as i32);
}

/// A TCP relay to the database that the test can cut (every connection
/// through it closed, new ones refused) and restore.
struct Relay {
    addr: std::net::SocketAddr,
    cut: tokio::sync::watch::Sender<bool>,
}

impl Relay {
    async fn to(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, watching) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            loop {
                let (mut client, _) = listener.accept().await.unwrap();
                if *watching.borrow() {
                    continue; // dropped: refused
                }
                let upstream = upstream.clone();
                let mut cut = watching.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Self { addr, cut }
    }
}

/// A replica cut off from the database turns its MemoryService NOT_SERVING
/// (readiness) but not the server (liveness), answers UNAVAILABLE, and
/// serves again once the database is back — with nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_follows_the_database() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let mut env = replica_env(&[("ENGRAM__STORE__POSTGRES__ACQUIRE_TIMEOUT_MS", "1000")]).await;
    let url = env
        .iter_mut()
        .find(|(k, _)| k == "ENGRAM__STORE__POSTGRES__URL")
        .unwrap();
    let host_port = url
        .1
        .split('@')
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let relay = Relay::to(host_port.clone()).await;
    url.1 = url.1.replace(&host_port, &relay.addr.to_string());
    let (a, _da) = spawn(&env);
    let mut c = a.client().await;
    let acked: Acked = Arc::default();
    let [ask, answer] = turn(0, 0);
    ingest_acked(&mut c, "kept", ask, &acked).await;

    let mut health = HealthClient::new(channel(a.addr).await);
    let service = |s: &str| HealthCheckRequest { service: s.into() };
    let mut watch = health
        .watch(service("engram.v1.MemoryService"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );

    relay.cut.send(true).unwrap();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::NotServing as i32
    );
    let overall = health.check(service("")).await.unwrap().into_inner().status;
    assert_eq!(overall, ServingStatus::Serving as i32, "liveness stays up");
    let refused = c
        .ingest(ingest_req("kept", answer.clone()))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused}");

    relay.cut.send(false).unwrap();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    ingest_acked(&mut c, "kept", answer, &acked).await;
    let acked = acked.lock().await.clone();
    check(&mut c, &["kept".to_owned()], &acked).await;
}

/// The seeded fuzz of every RPC (`make chaos`'s short version) against a
/// replica on the database: no crash, panic, hang or INTERNAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_fuzz_on_the_database_finds_no_crash_panic_hang_or_internal() {
    let env = replica_env(&[]).await;
    let report = engram_chaos::fuzz::run(&engram_chaos::fuzz::FuzzConfig {
        binary: env!("CARGO_BIN_EXE_engramd").into(),
        seed: 13,
        cases: 1000,
        concurrency: 4,
        call_timeout: std::time::Duration::from_secs(60),
        verbose: false,
        env,
    })
    .await
    .unwrap();
    println!("{report}");
    assert!(report.clean(), "{report}");
    assert!(
        report.codes.get("Ok").copied().unwrap_or(0) > 150,
        "deep enough: {report}"
    );
}

/// `engramd migrate` brings an empty schema to this build's version; a
/// replica told not to migrate refuses a schema that is behind, saying
/// what to run, and serves once it is current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engramd_migrate_then_replicas_that_do_not() {
    let mut env = replica_env(&[]).await;
    env.push(("ENGRAM__STORE__POSTGRES__MIGRATE".into(), "false".into()));
    let engramd = |args: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_engramd"))
            .args(args)
            .env("ENGRAM__SERVER__LISTEN", "127.0.0.1:0")
            .env("ENGRAM__STORE__DATA_DIR", dir.path())
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .unwrap()
    };
    let refused = engramd(&["serve"]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("engramd migrate"), "{why}");

    let migrated = engramd(&["migrate"]);
    assert!(migrated.status.success(), "{migrated:?}");
    assert!(String::from_utf8_lossy(&migrated.stdout).contains("schema is current"));
    // Again: nothing to do, still fine.
    assert!(engramd(&["migrate"]).status.success());

    let (a, _da) = spawn(&env);
    let acked: Acked = Arc::default();
    let [ask, _] = turn(0, 0);
    ingest_acked(&mut a.client().await, "m", ask, &acked).await;
}
