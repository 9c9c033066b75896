//! The user's own facts in the user's index: read in as their file holds
//! them (each line compared with the one read before), and the vectors of
//! those a client wrote, which this index embeds itself (no conversation's
//! index has their words).

use engram_core::memory::Origin;
use engram_core::users::UserFact;
use engram_index::{Embedded, Item};
use engram_store::items::semantic_item;
use engram_store::ranked::{key_of, place};

use super::{FACTS, UserIndex, vectors_write};
use crate::Result;
use crate::index::index_error;

impl UserIndex {
    /// Takes in the user's facts as `facts` (the last version of each)
    /// holds them, read at `len` bytes of their file: those whose line
    /// changed since the last read (all, the first time after opening).
    pub fn mirror_facts(&mut self, facts: &[UserFact], len: u64) -> Result<()> {
        if len == self.payload.facts {
            return Ok(());
        }
        self.fold_staged()?;
        let mut live = vec![];
        let mut gone = vec![];
        let mut reworded = vec![];
        for f in facts {
            let line = serde_json::to_string(f).expect("facts serialize");
            let hash = hash_of(&line);
            let key = key_of("~", &f.fact.id);
            let before = self.seen_facts.insert(f.fact.id.clone(), hash);
            if before == Some(hash) {
                continue;
            }
            // A replaced or ended fact stays, found with its span.
            if f.fact.managed.deleted_at.is_some() {
                gone.push(key);
                continue;
            }
            // Its words changed (or it is read for the first time since
            // opening, when a vector it has is kept): its vector goes.
            if before.is_some() {
                reworded.push(key.clone());
            }
            let mut item = semantic_item(&f.fact);
            item.key = key;
            item.order = place(FACTS, 0);
            item.body = line;
            live.push((f, item));
        }
        let gone: Vec<&str> = gone.iter().map(String::as_str).collect();
        self.lexical.remove(&gone).map_err(index_error)?;
        for key in &gone {
            self.to_embed.remove(*key);
        }
        let items: Vec<Item> = live.iter().map(|(_, item)| item.clone()).collect();
        self.lexical.upsert(&items).map_err(index_error)?;
        self.written = true;
        if let Some(vectors) = self.vectors.as_mut() {
            let reworded: Vec<&str> = reworded
                .iter()
                .map(String::as_str)
                .filter(|k| vectors.contains(k))
                .collect();
            let mut remove = gone.clone();
            remove.extend(reworded);
            vectors_write(vectors, &[], &remove)?;
            for (f, item) in live {
                if !self.vectors.as_ref().is_some_and(|v| v.contains(&item.key)) {
                    self.await_vector(f, item);
                }
            }
        }
        self.payload.facts = len;
        self.commit()
    }

    /// Whether facts this index embeds itself wait for the model.
    pub fn awaits_embedding(&self) -> bool {
        !self.to_embed.is_empty()
    }

    /// Up to `n` of the user's facts this index embeds itself, for the
    /// embedding model (their keys stay pending until [`Self::embedded`]).
    pub fn to_embed(&self, n: usize) -> Vec<Item> {
        self.to_embed
            .values()
            .take(n)
            .map(|i| engram_store::for_embedding(i.clone()))
            .collect()
    }

    /// Stores the vectors of facts this index embeds, those still waiting
    /// with the same words (one changed or deleted meanwhile waits for
    /// its next embedding, or for none).
    pub fn embedded(&mut self, embedded: Vec<Embedded>) -> Result<()> {
        let Some(vectors) = self.vectors.as_mut() else {
            return Ok(());
        };
        let fresh: Vec<Embedded> = embedded
            .into_iter()
            .filter(|e| self.to_embed.remove(&e.key).is_some())
            .collect();
        vectors_write(vectors, &fresh, &[])
    }

    /// Notes where the vector of the user's fact `fact` (indexed as
    /// `item`) comes from: its first conversation's index for a fact a
    /// compaction wrote, or its own embedding for one a client wrote
    /// (whose words no conversation's index holds).
    pub(super) fn await_vector(&mut self, fact: &UserFact, item: Item) {
        let source = fact
            .sources
            .first()
            .filter(|_| fact.fact.managed.origin == Origin::Compaction);
        match source {
            Some(s) => {
                let pending = self.unvectored.entry(s.agent_id.clone()).or_default();
                pending.insert((item.key, s.fact_id.clone()));
            }
            None => {
                self.to_embed.insert(item.key.clone(), item);
            }
        }
    }
}

fn hash_of(line: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    line.hash(&mut h);
    h.finish()
}
