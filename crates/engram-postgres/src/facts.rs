//! Facts that clients manage (`Facts`) on PostgreSQL: not stored here yet
//! (the files backend has them). Every call answers UNIMPLEMENTED, so a
//! client is told so rather than given a partial answer.

use async_trait::async_trait;
use engram_core::blocks::Scope;
use engram_core::facts::{Applied, Op};
use engram_core::memory::SemanticItem;
use engram_store::{Facts, Result, StoreError};

use crate::PgStore;

fn not_yet() -> StoreError {
    StoreError::Unimplemented(
        "managing facts is not built on the PostgreSQL backend yet; use store.backend = \"files\" for it meanwhile".into(),
    )
}

#[async_trait]
impl Facts for PgStore {
    async fn facts(&self, _scope: &Scope) -> Result<Vec<SemanticItem>> {
        Err(not_yet())
    }

    async fn fact_history(&self, _scope: &Scope, _id: &str) -> Result<Vec<SemanticItem>> {
        Err(not_yet())
    }

    async fn change_facts(&self, _scope: &Scope, _op: Op, _limit: u32) -> Result<Applied> {
        Err(not_yet())
    }
}
