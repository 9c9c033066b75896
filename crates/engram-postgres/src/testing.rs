//! For tests and benchmarks: the throwaway database `scripts/pg.sh start`
//! runs (`make pg`; `make test` starts one itself), and a schema of its own
//! for each test or run.

use std::path::Path;

/// The URL `scripts/pg.sh` wrote into `<checkout>/target/pg/url`, if it
/// runs one.
pub fn checkout_url(checkout: &Path) -> Option<String> {
    std::fs::read_to_string(checkout.join("target/pg/url"))
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// The database of `env_var`, else the checkout's: what a test needs, or
/// a panic saying how to get it.
pub fn url_or_panic(env_var: &str, checkout: &Path) -> String {
    std::env::var(env_var)
        .ok()
        .or_else(|| checkout_url(checkout))
        .unwrap_or_else(|| {
            panic!("no test PostgreSQL: run `scripts/pg.sh start fast` (make test does) or set {env_var}")
        })
}

/// Creates a schema named `<prefix>_<random>` in `url`'s database.
pub async fn fresh_schema(url: &str, prefix: &str) -> Result<String, sqlx::Error> {
    create(url, "SCHEMA", prefix).await
}

/// Creates a `what` (SCHEMA, DATABASE) named `<prefix>_<random>`.
async fn create(url: &str, what: &str, prefix: &str) -> Result<String, sqlx::Error> {
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(url).await?;
    sqlx::query(&format!("CREATE {what} {name}"))
        .execute(&admin)
        .await?;
    admin.close().await;
    Ok(name)
}

/// Creates a database named `<prefix>_<random>` on `url`'s server and
/// returns its URL. What a test whose VACUUM must not wait for other
/// tests' transactions needs: PostgreSQL keeps a deleted row's tuple while
/// a transaction of the same database might still see it.
pub async fn fresh_database(url: &str, prefix: &str) -> Result<String, sqlx::Error> {
    let name = create(url, "DATABASE", prefix).await?;
    let (server, _) = url
        .rsplit_once('/')
        .expect("a URL ends in its database's name");
    Ok(format!("{server}/{name}"))
}

/// The relations of `schema` (tables, their TOAST tables and every index)
/// whose files hold `text`'s bytes anywhere, read after `VACUUM FULL` of
/// every table and a checkpoint: what an operator's erasure leaves on
/// disk. Waits first until no other session of the database holds a
/// snapshot (one would keep deleted tuples alive through the rewrite).
/// Needs a superuser, as the test PostgreSQL's is.
pub async fn files_holding(
    url: &str,
    schema: &str,
    text: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let pool = sqlx::PgPool::connect(url).await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let others: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND backend_xmin IS NOT NULL",
        )
        .fetch_one(&pool)
        .await?;
        if others == 0 || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let tables = tables_of(&pool, schema).await?;
    for table in tables {
        sqlx::query(&format!("VACUUM FULL {schema}.{table}"))
            .execute(&pool)
            .await?;
    }
    sqlx::query("CHECKPOINT").execute(&pool).await?;
    let holding = sqlx::query_scalar(
        "WITH own AS (
             SELECT oid, reltoastrelid FROM pg_class
             WHERE relnamespace = $1::regnamespace),
         relations AS (
             SELECT oid FROM own
             UNION SELECT reltoastrelid FROM own WHERE reltoastrelid <> 0
             UNION SELECT indexrelid FROM pg_index
                   WHERE indrelid IN (SELECT reltoastrelid FROM own))
         SELECT c.relname::text FROM pg_class c JOIN relations r ON r.oid = c.oid
         WHERE c.relkind IN ('r', 't', 'i', 'm')
           AND position(convert_to($2, 'UTF8')
                        IN pg_read_binary_file(pg_relation_filepath(c.oid))) > 0
         ORDER BY 1",
    )
    .bind(schema)
    .bind(text)
    .fetch_all(&pool)
    .await?;
    pool.close().await;
    Ok(holding)
}

/// Takes, until `tx` ends, the lock an agent's vector writes wait for:
/// what another replica's indexer or compaction holds while it writes.
pub async fn lock_agent_vectors(
    tx: &mut sqlx::PgConnection,
    agent: &str,
) -> Result<(), crate::StoreError> {
    crate::vectors::lock_vector_writes(tx, vec![agent]).await
}

/// Whether a transaction is waiting for `agent`'s vector lock.
pub async fn waits_for_agent_vectors(
    conn: &mut sqlx::PgConnection,
    agent: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
             AND objsubid = 2 AND classid = $2::bigint::oid
             AND objid = (hashtext($1)::bigint & 4294967295)::oid)",
    )
    .bind(agent)
    .bind(i64::from(crate::vectors::VECTOR_WRITES))
    .fetch_one(conn)
    .await
}

/// The names of `schema`'s tables.
async fn tables_of(pool: &sqlx::PgPool, schema: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
}

/// The tables of `schema` with a row whose text (every column, as the
/// row's text form) contains `text`.
pub async fn tables_holding(
    url: &str,
    schema: &str,
    text: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let pool = sqlx::PgPool::connect(url).await?;
    let tables = tables_of(&pool, schema).await?;
    let mut holding = vec![];
    for table in tables {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {schema}.{table} AS t WHERE strpos(t::text, $1) > 0)"
        );
        let found: bool = sqlx::query_scalar(&sql).bind(text).fetch_one(&pool).await?;
        if found {
            holding.push(table);
        }
    }
    pool.close().await;
    Ok(holding)
}

/// Takes, until `tx` ends, a user's scope lock: what a fold into the
/// user, a forget in one of its agents or a change of its facts holds.
pub async fn lock_user_scope(
    tx: &mut sqlx::PgConnection,
    user: &engram_core::UserId,
) -> Result<(), crate::StoreError> {
    crate::lock_scope(tx, &engram_core::blocks::Scope::User(user.clone())).await
}

/// Whether a transaction is waiting for a user's scope lock.
pub async fn waits_for_user_scope(
    conn: &mut sqlx::PgConnection,
    user: &engram_core::UserId,
) -> Result<bool, sqlx::Error> {
    // A one-key advisory lock: the key's high half in classid, low in objid.
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
             AND objsubid = 1
             AND objid = (hashtext($1)::bigint & 4294967295)::oid)",
    )
    .bind(crate::scope_key(&engram_core::blocks::Scope::User(
        user.clone(),
    )))
    .fetch_one(conn)
    .await
}

/// Whether `store`'s table of word vectors holds `word` (query expansion).
pub fn has_word_vector(store: &crate::PgStore, word: &str) -> bool {
    store
        .inner
        .words
        .as_ref()
        .is_some_and(|t| engram_store::read(t).contains(word))
}

/// The words of `agent`'s vocabulary `store` holds, as its last search
/// that expanded read them.
pub fn held_vocabulary(store: &crate::PgStore, agent: &str) -> Vec<String> {
    store.inner.vocabulary.words_of(agent)
}
