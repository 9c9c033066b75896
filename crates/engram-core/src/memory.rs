//! Long-term memories: episodic summaries and semantic facts, as stored in
//! `episodic.jsonl` and `semantic.jsonl`, and how they are picked.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

/// A summary of a block of whole turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodicItem {
    pub id: String,
    pub ts: f64,
    pub turn_ids: Vec<String>,
    pub summary: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub salience: f32,
}

/// A stable fact, preference, constraint or decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SemanticItem {
    pub id: String,
    pub ts: f64,
    pub fact: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub confidence: f32,
    #[serde(default)]
    pub salience: f32,
    /// Id of the item that replaced this one; superseded items stay on disk
    /// for history but are not served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
}

impl SemanticItem {
    /// Not superseded: the fact as it stands now.
    pub fn is_live(&self) -> bool {
        self.superseded_by.is_none()
    }
}

/// The `n` most recent episodic items, oldest first (file order is
/// append order, so the tail of the file is the most recent).
pub fn recent_episodic(items: &[EpisodicItem], n: usize) -> Vec<EpisodicItem> {
    items[items.len().saturating_sub(n)..].to_vec()
}

/// The `n` live semantic items with the highest salience, most recent first
/// among equals.
pub fn top_semantic(items: &[SemanticItem], n: usize) -> Vec<SemanticItem> {
    let mut live: Vec<(usize, &SemanticItem)> = items
        .iter()
        .enumerate()
        .filter(|(_, item)| item.is_live())
        .collect();
    live.sort_by(|(ia, a), (ib, b)| {
        b.salience
            .partial_cmp(&a.salience)
            .unwrap_or(Ordering::Equal)
            .then(b.ts.partial_cmp(&a.ts).unwrap_or(Ordering::Equal))
            .then(ib.cmp(ia))
    });
    live.into_iter()
        .take(n)
        .map(|(_, item)| item.clone())
        .collect()
}

/// The `n` episodic items most relevant to `query` (BM25 over summary and
/// tags), ties by salience, then recency; most relevant first.
pub fn relevant_episodic(items: &[EpisodicItem], query: &str, n: usize) -> Vec<EpisodicItem> {
    let docs: Vec<String> = items
        .iter()
        .map(|i| format!("{} {}", i.summary, i.tags.join(" ")))
        .collect();
    let order = rank(
        &crate::bm25::scores(query, &docs),
        items.iter().map(|i| (i.salience, i.ts)),
    );
    order
        .into_iter()
        .take(n)
        .map(|i| items[i].clone())
        .collect()
}

/// The `n` live semantic items most relevant to `query` (BM25 over fact and
/// tags), ties by salience, then recency; most relevant first.
pub fn relevant_semantic(items: &[SemanticItem], query: &str, n: usize) -> Vec<SemanticItem> {
    let live: Vec<&SemanticItem> = items.iter().filter(|i| i.is_live()).collect();
    let docs: Vec<String> = live
        .iter()
        .map(|i| format!("{} {}", i.fact, i.tags.join(" ")))
        .collect();
    let order = rank(
        &crate::bm25::scores(query, &docs),
        live.iter().map(|i| (i.salience, i.ts)),
    );
    order.into_iter().take(n).map(|i| live[i].clone()).collect()
}

/// Indices by score, then salience, then recency (ts, then file order),
/// all descending.
fn rank(scores: &[f64], keys: impl Iterator<Item = (f32, f64)>) -> Vec<usize> {
    let keys: Vec<(f32, f64)> = keys.collect();
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| {
        scores[b]
            .total_cmp(&scores[a])
            .then(keys[b].0.total_cmp(&keys[a].0))
            .then(keys[b].1.total_cmp(&keys[a].1))
            .then(b.cmp(&a))
    });
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(id: &str, ts: f64, salience: f32) -> SemanticItem {
        SemanticItem {
            id: id.into(),
            ts,
            fact: format!("fact {id}"),
            tags: vec![],
            confidence: 0.9,
            salience,
            superseded_by: None,
        }
    }

    #[test]
    fn semantic_ranks_by_salience_then_recency_and_skips_superseded() {
        let mut old = fact("old", 1.0, 0.99);
        old.superseded_by = Some("new".into());
        let items = vec![
            fact("a", 1.0, 0.5),
            fact("b", 2.0, 0.9),
            fact("c", 3.0, 0.5),
            old,
            fact("d", 4.0, 0.1),
        ];
        let ids: Vec<_> = top_semantic(&items, 3).into_iter().map(|i| i.id).collect();
        assert_eq!(ids, ["b", "c", "a"]);
        assert_eq!(top_semantic(&items, 0).len(), 0);
        assert_eq!(top_semantic(&items, 10).len(), 4);
    }

    #[test]
    fn a_query_ranks_by_relevance_then_salience_then_recency() {
        let mut items = vec![
            fact("tea", 1.0, 0.2),
            fact("oslo-old", 1.0, 0.5),
            fact("oslo-new", 2.0, 0.5),
            fact("oslo-salient", 0.5, 0.9),
        ];
        items[0].fact = "likes tea".into();
        items[1].fact = "lives in Oslo".into();
        items[2].fact = "lives in Oslo".into();
        items[3].fact = "lives in Oslo".into();
        let mut gone = fact("oslo-gone", 3.0, 1.0);
        gone.fact = "lives in Oslo".into();
        gone.superseded_by = Some("x".into());
        items.push(gone);
        let ids: Vec<_> = relevant_semantic(&items, "where in oslo", 10)
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(ids, ["oslo-salient", "oslo-new", "oslo-old", "tea"]);
        let episodes = vec![
            EpisodicItem {
                id: "e1".into(),
                ts: 1.0,
                turn_ids: vec![],
                summary: "Planned a trip to Rome".into(),
                tags: vec![],
                salience: 0.5,
            },
            EpisodicItem {
                id: "e2".into(),
                ts: 2.0,
                turn_ids: vec![],
                summary: "Fixed the deploy script".into(),
                tags: vec!["devops".into()],
                salience: 0.5,
            },
        ];
        let ids: Vec<_> = relevant_episodic(&episodes, "rome trip", 1)
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(ids, ["e1"]);
        let ids: Vec<_> = relevant_episodic(&episodes, "devops", 2)
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(ids, ["e2", "e1"], "tags count");
    }

    #[test]
    fn episodic_keeps_the_most_recent() {
        let item = |id: &str| EpisodicItem {
            id: id.into(),
            ts: 0.0,
            turn_ids: vec![],
            summary: String::new(),
            tags: vec![],
            salience: 0.5,
        };
        let items = vec![item("1"), item("2"), item("3")];
        let ids: Vec<_> = recent_episodic(&items, 2)
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(ids, ["2", "3"]);
        assert_eq!(recent_episodic(&items, 9).len(), 3);
    }
}
