//! The conversations to summarize once they go quiet: noted as used (the
//! later time stays), taken once each when quiet, kept across a restart,
//! and dropped with a deleted agent or user.

use engram_core::{NewEvent, UserId};

use super::{Harness, id, ingest};
use crate::prelude::*;

pub async fn quiet_conversations_are_noted_and_taken_once<H: Harness>(h: &H) {
    let store = h.open().await;
    let (a, b, c) = (id("quiet-a"), id("quiet-b"), id("quiet-c"));
    for agent in [&a, &b, &c] {
        ingest(&*store, agent, &[NewEvent::user("hello")]).await;
    }
    store
        .note_used(&[(a.clone(), 100.0), (b.clone(), 200.0)])
        .await
        .unwrap();
    // An earlier time, twice in one note, and a time that is no time.
    store
        .note_used(&[(a.clone(), 50.0), (c.clone(), 250.0), (c.clone(), 300.0)])
        .await
        .unwrap();
    store.note_used(&[(b.clone(), f64::NAN)]).await.unwrap();
    store.note_used(&[]).await.unwrap();
    assert!(store.take_quiet(99.0).await.unwrap().is_empty());

    // Across a restart, at or before the time given, once.
    let store = h.reopen(store).await;
    assert_eq!(store.take_quiet(100.0).await.unwrap(), vec![a.clone()]);
    assert!(
        store.take_quiet(100.0).await.unwrap().is_empty(),
        "taken once"
    );
    assert_eq!(
        store.take_quiet(299.0).await.unwrap(),
        vec![b.clone()],
        "c was last used at 300, its later time"
    );

    // Deleted agents and users leave the list.
    let ana = UserId::parse("quiet-ana").unwrap();
    let d = id("quiet-d");
    store
        .ingest(&d, &[NewEvent::user("hi")], None, None, Some(&ana))
        .await
        .unwrap();
    store
        .note_used(&[(a.clone(), 400.0), (d.clone(), 400.0)])
        .await
        .unwrap();
    store.delete_agent(&c).await.unwrap();
    assert_eq!(store.delete_user(&ana).await.unwrap(), 1);
    assert_eq!(store.take_quiet(1e12).await.unwrap(), vec![a.clone()]);

    // Two takers at once: each agent goes to one of them.
    let agents: Vec<_> = (0..40).map(|n| id(&format!("quiet-many-{n}"))).collect();
    let noted: Vec<_> = agents.iter().map(|x| (x.clone(), 10.0)).collect();
    store.note_used(&noted).await.unwrap();
    let (one, two) = tokio::join!(store.take_quiet(20.0), store.take_quiet(20.0));
    let mut taken = one.unwrap();
    taken.extend(two.unwrap());
    taken.sort();
    let mut expected = agents.clone();
    expected.sort();
    assert_eq!(taken, expected, "every agent taken exactly once");
}
