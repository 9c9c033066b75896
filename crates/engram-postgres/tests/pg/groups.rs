//! Ingest's group commit: appends of several agents written in one
//! statement, each still checked against its own agent's row.
#![cfg(feature = "fault-injection")]

use std::sync::Arc;

use engram_core::{AgentId, NewEvent};
use engram_postgres::PgStore;
use engram_store::prelude::*;

use super::Postgres;

const AGENTS: usize = 16;
/// The agent another replica writes between this replica's two rounds.
const MOVED: usize = 5;

fn agent(i: usize) -> AgentId {
    AgentId::parse(&format!("group-{i}")).expect("a valid id")
}

async fn said(store: &PgStore, i: usize, text: String) -> engram_store::Result<()> {
    store
        .ingest(&agent(i), &[NewEvent::user(text)], None, None, None)
        .await
        .map(drop)
}

/// Appends queued behind a held group are written as one group; the agent
/// another replica wrote meanwhile is left out of it and takes the locked
/// path; every event is stored once, in order.
#[tokio::test]
async fn appends_of_many_agents_commit_together_and_each_is_checked() {
    let pg = Postgres::new().await;
    let a = Arc::new(PgStore::open(pg.config.clone()).await.expect("opens"));
    let b = PgStore::open(pg.config.clone()).await.expect("opens");
    for i in 0..AGENTS {
        said(&a, i, format!("first {i}"))
            .await
            .expect("ingest accepted");
    }
    // Replica A's cache of this agent is now behind.
    said(&b, MOVED, "from b".into())
        .await
        .expect("ingest accepted");

    let (groups, appends) = a.ingest_groups();
    a.hold_ingest_groups(true);
    let writes: Vec<_> = (0..AGENTS)
        .map(|i| {
            let a = Arc::clone(&a);
            tokio::spawn(async move { said(&a, i, format!("second {i}")).await })
        })
        .collect();
    // One writer holds the first append; the rest queue behind it.
    while a.queued_appends() < AGENTS as u64 - 1 {
        tokio::task::yield_now().await;
    }
    a.hold_ingest_groups(false);
    for w in writes {
        w.await.expect("no panic").expect("ingest accepted");
    }
    assert_eq!(
        a.ingest_groups(),
        (groups + 1, appends + AGENTS as u64),
        "one group of every append"
    );

    let fresh = PgStore::open(pg.config.clone()).await.expect("opens");
    for i in 0..AGENTS {
        let context = fresh.context(&agent(i)).await.expect("the agent exists");
        let texts: Vec<&str> = context
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        let first = format!("first {i}");
        let second = format!("second {i}");
        let want: Vec<&str> = if i == MOVED {
            vec![&first, "from b", &second]
        } else {
            vec![&first, &second]
        };
        assert_eq!(texts, want, "agent {i}");
    }
}
