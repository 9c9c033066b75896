//! A user's facts as clients manage them (`Facts` in a user_id scope):
//! each fact's row in `user_facts` is its latest version, and
//! `user_fact_versions` keeps every version a client's change made (with
//! the version before it, for a fact a fold wrote). One change is one
//! transaction under the user's advisory lock (the one folds, block
//! writers and DeleteUser take). A delete leaves the id, the versions, the
//! time and the sources, and no text in any row.

use engram_core::UserId;
use engram_core::blocks::Scope;
use engram_core::facts::{Applied, Op, scrubbed};
use engram_core::memory::{Origin, SemanticItem};
use engram_core::users::{self, UserFact};
use engram_store::{Result, new_id, unix_now};
use sqlx::PgConnection;

use crate::{PgStore, db};

pub(crate) fn parse(body: &str) -> Result<UserFact> {
    serde_json::from_str(body)
        .map_err(|e| crate::broken(format!("a stored user fact does not parse: {e}")))
}

/// What a user's fact's row is looked up by besides its body.
pub(crate) struct Looked {
    /// Shown in every prompt of the user's conversations.
    pub pinned: bool,
    /// When the upkeep purges it.
    pub expires_at: Option<f64>,
    /// Its search words.
    pub words: Option<String>,
}

/// The columns of `f`'s row that prompts, search and the upkeep read.
pub(crate) fn looked_up(f: &engram_core::memory::SemanticItem) -> Looked {
    let pinned = f.is_live() && f.managed.pinned;
    let expires_at = f.managed.expires_at.filter(|_| f.is_live() && !pinned);
    // A client's fact (replaced ones too: found with their span) is
    // searched by its own words; any other is found by its
    // conversations' copies.
    let words = (f.managed.deleted_at.is_none() && f.managed.origin == Origin::Client)
        .then(|| crate::rows::item_words(&engram_store::items::semantic_item(f)));
    Looked {
        pinned,
        expires_at,
        words,
    }
}

/// Stores `fact` as the user's fact's row (its latest version), with
/// what prompts and the upkeep look it up by.
pub(crate) async fn store_row(
    conn: &mut sqlx::PgConnection,
    user: &UserId,
    fact: &UserFact,
) -> Result<()> {
    let f = &fact.fact;
    let Looked {
        pinned,
        expires_at,
        words,
    } = looked_up(f);
    sqlx::query(
        "INSERT INTO user_facts (user_id, id, body, pinned, expires_at, words)
         VALUES ($1, $2, $3, $4, $5, to_tsvector('english', $6))
         ON CONFLICT (user_id, id) DO UPDATE
         SET body = excluded.body, pinned = excluded.pinned, expires_at = excluded.expires_at,
             words = excluded.words",
    )
    .bind(user.as_str())
    .bind(&f.id)
    .bind(serde_json::to_string(fact).expect("facts serialize"))
    .bind(pinned)
    .bind(expires_at)
    .bind(words)
    .execute(&mut *conn)
    .await
    .map_err(db("storing a user's facts"))?;
    Ok(())
}

pub(crate) async fn load(conn: &mut sqlx::PgConnection, user: &UserId) -> Result<Vec<UserFact>> {
    let bodies: Vec<String> =
        sqlx::query_scalar("SELECT body FROM user_facts WHERE user_id = $1 ORDER BY seq")
            .bind(user.as_str())
            .fetch_all(&mut *conn)
            .await
            .map_err(db("reading a user's facts"))?;
    bodies.iter().map(|b| parse(b)).collect()
}

impl PgStore {
    /// Every stored version of the user's fact `id`, oldest first.
    pub(crate) async fn user_fact_history(
        &self,
        user: &UserId,
        id: &str,
    ) -> Result<Vec<SemanticItem>> {
        let mut conn = self.conn().await?;
        let mut versions = versions(&mut conn, user, id).await?;
        if versions.is_empty() {
            // Never changed by a client: its one version is its row.
            let body: Option<String> =
                sqlx::query_scalar("SELECT body FROM user_facts WHERE user_id = $1 AND id = $2")
                    .bind(user.as_str())
                    .bind(id)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(db("reading a user's fact"))?;
            if let Some(body) = body {
                versions.push(parse(&body)?);
            }
        }
        Ok(users::history(versions, id))
    }

    /// A client's change of the user's facts, in one transaction.
    pub(crate) async fn change_user_facts(&self, user: &UserId, op: Op) -> Result<Applied> {
        let mut tx = self.begin().await?;
        crate::lock_scope(&mut tx, &Scope::User(user.clone())).await?;
        let known = load(&mut tx, user).await?;
        let bytes: usize = known.iter().map(|f| f.fact.fact.len()).sum();
        let (applied, lines) = engram_store::offload_over(bytes as u64, || {
            users::change(&known, op, unix_now(), new_id)
        })?;
        for line in &lines {
            // The version a fold wrote has no row of its own yet.
            let before = known.iter().find(|f| f.fact.id == line.fact.id);
            for v in before.into_iter().chain([line]) {
                store_version(&mut tx, user, v).await?;
            }
            store_row(&mut tx, user, line).await?;
        }
        if let Some(gone) = &applied.erase {
            for v in versions(&mut tx, user, gone).await? {
                let scrubbed = UserFact {
                    fact: scrubbed(&v.fact),
                    sources: v.sources,
                };
                sqlx::query(
                    "UPDATE user_fact_versions SET body = $4
                     WHERE user_id = $1 AND id = $2 AND version = $3",
                )
                .bind(user.as_str())
                .bind(gone)
                .bind(version_of(&scrubbed))
                .bind(serde_json::to_string(&scrubbed).expect("facts serialize"))
                .execute(&mut *tx)
                .await
                .map_err(db("erasing a fact's text"))?;
            }
        }
        tx.commit().await.map_err(db("committing a user's facts"))?;
        Ok(applied)
    }

    /// Some of the users' live facts past their expiry: (user, fact id,
    /// version).
    pub(crate) async fn expired_user_facts(&self) -> Result<Vec<(UserId, String, u64)>> {
        let expired: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT user_id, id, body FROM user_facts WHERE expires_at <= $1
             ORDER BY expires_at LIMIT 1000",
        )
        .bind(unix_now())
        .fetch_all(&self.inner.pool)
        .await
        .map_err(db("finding expired facts"))?;
        let mut found = Vec::with_capacity(expired.len());
        for (user, id, body) in expired {
            if let Ok(user) = UserId::parse(&user) {
                found.push((user, id, parse(&body)?.fact.version()));
            }
        }
        Ok(found)
    }
}

/// The user's facts of the rows `bodies` (its pinned ones), oldest first
/// (every prompt of the user's conversations shows them).
pub(crate) fn pinned<'a>(bodies: impl Iterator<Item = &'a str>) -> Result<Vec<SemanticItem>> {
    let mut pinned = bodies
        .map(|b| parse(b).map(|f| f.fact))
        .collect::<Result<Vec<_>>>()?;
    pinned.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(a.id.cmp(&b.id)));
    Ok(pinned)
}

fn version_of(f: &UserFact) -> i64 {
    i64::try_from(f.fact.version()).unwrap_or(i64::MAX)
}

/// Every version of the user's fact `id` a client's change stored.
async fn versions(conn: &mut PgConnection, user: &UserId, id: &str) -> Result<Vec<UserFact>> {
    let bodies: Vec<String> = sqlx::query_scalar(
        "SELECT body FROM user_fact_versions WHERE user_id = $1 AND id = $2 ORDER BY version",
    )
    .bind(user.as_str())
    .bind(id)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading a fact's versions"))?;
    bodies.iter().map(|b| parse(b)).collect()
}

/// Stores `v` as a version of its fact (a version stored before stays:
/// the one a fold wrote keeps its first state).
async fn store_version(conn: &mut PgConnection, user: &UserId, v: &UserFact) -> Result<()> {
    sqlx::query(
        "INSERT INTO user_fact_versions (user_id, id, version, body) VALUES ($1, $2, $3, $4)
         ON CONFLICT (user_id, id, version) DO NOTHING",
    )
    .bind(user.as_str())
    .bind(&v.fact.id)
    .bind(version_of(v))
    .bind(serde_json::to_string(v).expect("facts serialize"))
    .execute(&mut *conn)
    .await
    .map_err(db("storing a fact's version"))?;
    Ok(())
}
