//! A user's locks on PostgreSQL: DeleteUser takes them in the order every
//! other writer of a user does, so it never deadlocks against them.
#![cfg(feature = "fault-injection")]

use std::time::{Duration, Instant};

use engram_core::{AgentId, NewEvent, UserId};
use engram_postgres::PgStore;
use engram_store::prelude::*;

use super::Postgres;

/// DeleteUser waits for the user's lock before it locks the user's agents'
/// rows: a fold or a forget holds the user's lock and then reads the
/// agent's row, so the other order deadlocked against them (the database
/// aborted one side with a storage error; CI's seeded fuzz met it).
#[tokio::test]
async fn deleting_a_user_takes_the_users_lock_before_its_agents() {
    let pg = Postgres::new().await;
    let store = std::sync::Arc::new(PgStore::open(pg.config.clone()).await.expect("opens"));
    let user = UserId::parse("lock-order-user").expect("a valid id");
    let agent = AgentId::parse("lock-order-agent").expect("a valid id");
    store
        .ingest(&agent, &[NewEvent::user("hello")], None, None, Some(&user))
        .await
        .expect("ingest accepted");

    let admin = sqlx::PgPool::connect(&pg.config.url)
        .await
        .expect("connects");
    let schema = pg.config.schema.clone().expect("a schema");
    // What a fold into the user holds while it reads the agent's row.
    let mut fold = admin.begin().await.expect("begins");
    engram_postgres::testing::lock_user_scope(&mut fold, &user)
        .await
        .expect("locks");

    let deleting = tokio::spawn({
        let (store, user) = (store.clone(), user.clone());
        async move { store.delete_user(&user).await }
    });
    let mut conn = admin.acquire().await.expect("connects");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !engram_postgres::testing::waits_for_user_scope(&mut conn, &user)
        .await
        .expect("pg_locks")
    {
        assert!(
            Instant::now() < deadline,
            "DeleteUser never waited for the user's lock"
        );
        tokio::task::yield_now().await;
    }
    // The fold's next step: the agent's row, which DeleteUser must not hold.
    let read = sqlx::query_scalar::<_, i32>(&format!(
        "SELECT 1 FROM {schema}.agents WHERE id = $1 FOR SHARE NOWAIT"
    ))
    .bind(agent.as_str())
    .fetch_optional(&mut *fold)
    .await;
    assert!(
        matches!(read, Ok(Some(1))),
        "DeleteUser held the agent's row while it waited for the user's lock: {read:?}"
    );
    fold.commit().await.expect("commits");

    let deleted = deleting
        .await
        .expect("no panic")
        .expect("DeleteUser succeeds");
    assert_eq!(deleted, 1, "the user's one agent");
    assert!(store.user_agents(&user).await.expect("lists").is_empty());
    assert!(matches!(
        store.context(&agent).await,
        Err(engram_store::StoreError::NotFound(_))
    ));
}
