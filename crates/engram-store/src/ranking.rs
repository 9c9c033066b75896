//! Ranked reads, written once for every backend: what SearchHistory,
//! Retrieve(query) and recall ask a ranking for ([`Plan`]), and what they
//! make of what it found — pages, the split by kind, what has expired or
//! been hidden since, a user's facts shown once. A backend only runs a
//! plan ([`crate::Ranks::rank`]): `engram_index::pipeline` over its
//! primitives, and the ranked items read back.

use std::collections::HashSet;
use std::ops::Range;
use std::time::Duration;

use async_trait::async_trait;
use engram_core::compaction::normalize;
use engram_core::{AgentId, UserId};
use engram_index::{Filter, Kind};

use crate::ranked::{MAX_CONTEXT, MAX_RANKED, check_user_search, page_bounds, page_token};
use crate::{
    Hit, IndexState, Memory, MemoryQuery, RankedMemories, Recalled, Result, Search, SearchMode,
    SearchPage,
};

/// Whose memory a ranking covers.
#[derive(Debug, Clone, Copy)]
pub enum Over<'a> {
    Agent(&'a AgentId),
    /// Every conversation of a user; `current`'s active transcript is what
    /// an `archived_only` ranking leaves out.
    User {
        user: &'a UserId,
        current: Option<&'a AgentId>,
    },
}

/// One ranking of a [`Plan`].
#[derive(Debug, Clone)]
pub struct Want {
    pub filter: Filter,
    /// How many to rank (at most [`MAX_RANKED`]).
    pub limit: usize,
    /// Leave out the active transcript (what the prompt shows already): of
    /// the agent, or of the user's current conversation.
    pub archived_only: bool,
    /// Which of the ranked to read back.
    pub read: Range<usize>,
    /// Neighbouring messages read back with each trace, each side.
    pub context: usize,
}

impl Want {
    /// What this want ranks within over one agent whose active transcript
    /// starts at `first_active` (none: all of it is archived).
    pub fn agent_filter(&self, first_active: Option<u64>) -> Filter {
        Filter {
            traces_before: self.archived_only.then(|| first_active.unwrap_or(u64::MAX)),
            ..self.filter.clone()
        }
    }

    /// What this want ranks within over a user's conversations, where
    /// `active` holds the places of the current one's active transcript.
    pub fn user_filter(&self, active: Option<(u64, u64)>) -> Filter {
        Filter {
            traces_hidden: active.filter(|_| self.archived_only),
            ..self.filter.clone()
        }
    }

    /// The ranked items this want reads back (its `read` range of them).
    pub fn to_read<'r, T>(&self, ranked: &'r [T]) -> &'r [T] {
        let end = self.read.end.min(ranked.len());
        &ranked[self.read.start.min(end)..end]
    }

    /// Whether what this want finds may hold the active transcript's
    /// traces.
    pub fn may_find_active(&self) -> bool {
        !self.archived_only
            && (self.filter.kinds.is_empty() || self.filter.kinds.contains(&Kind::Trace))
    }
}

/// What a ranked read asks of a backend: the rankings of one question.
#[derive(Debug, Clone)]
pub struct Plan {
    pub query: String,
    pub wants: Vec<Want>,
    /// Wait up to this long for what is searched to be embedded first.
    pub wait: Option<Duration>,
}

/// What a backend found for a [`Plan`].
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// For each want, its `read` range read back, in order (what is no
    /// longer there left out).
    pub read: Vec<Vec<Recalled>>,
    /// For each want, how many it ranked.
    pub ranked: Vec<usize>,
    pub index: IndexState,
}

impl Found {
    /// What `wants` asked of `ranked` (one ranking per want, in order),
    /// each item read back by `read` with the want's context.
    pub fn read_back<T>(
        wants: &[Want],
        ranked: &[Vec<T>],
        index: IndexState,
        mut read: impl FnMut(&T, usize) -> Result<Option<Recalled>>,
    ) -> Result<Found> {
        let mut found = Found {
            index,
            ..Found::default()
        };
        for (want, ranked) in wants.iter().zip(ranked) {
            let mut memories = Vec::new();
            for hit in want.to_read(ranked) {
                memories.extend(read(hit, want.context)?);
            }
            found.read.push(memories);
            found.ranked.push(ranked.len());
        }
        Ok(found)
    }
}

/// Ranked reads over any store: callers keep calling them as methods.
#[async_trait]
pub trait RankedReads {
    /// SearchHistory over traces, active and archived: ranked by relevance
    /// (every acknowledged write searchable), or every word of the query,
    /// newest first.
    async fn search(&self, id: &AgentId, search: &Search) -> Result<SearchPage>;

    /// A ranked page over every conversation of `user` (traces only; each
    /// hit names its agent). INVALID_ARGUMENT for MATCH_ALL_WORDS or a turn
    /// range, which are one agent's.
    async fn search_user(&self, user: &UserId, search: &Search) -> Result<SearchPage>;

    /// Traces (active and archived), summaries and live facts ranked
    /// together for `query.query` (Retrieve, recall), from the same index
    /// as [`RankedReads::search`].
    async fn rank_memories(&self, id: &AgentId, query: &MemoryQuery) -> Result<RankedMemories>;

    /// Ranks for `query` everything `user` owns, as one search: every
    /// conversation's traces and summaries, and the user's facts (each
    /// once); with `archived_only`, `current`'s active transcript is left
    /// out. Each memory names the conversation it is from.
    async fn rank_user_memories(
        &self,
        user: &UserId,
        query: &MemoryQuery,
        current: Option<&AgentId>,
    ) -> Result<RankedMemories>;
}

#[async_trait]
impl<S: crate::Ranks + crate::Searches + Sync + ?Sized> RankedReads for S {
    async fn search(&self, id: &AgentId, search: &Search) -> Result<SearchPage> {
        match search.mode {
            SearchMode::Ranked if search.query.trim().is_empty() => {
                Err(engram_core::CoreError::Invalid(crate::search::EMPTY_QUERY.into()).into())
            }
            SearchMode::Ranked => page(self, Over::Agent(id), search).await,
            SearchMode::AllWords => self.search_all_words(id, search).await,
        }
    }

    async fn search_user(&self, user: &UserId, search: &Search) -> Result<SearchPage> {
        check_user_search(search)?;
        let over = Over::User {
            user,
            current: None,
        };
        page(self, over, search).await
    }

    async fn rank_memories(&self, id: &AgentId, query: &MemoryQuery) -> Result<RankedMemories> {
        memories(self, Over::Agent(id), query).await
    }

    async fn rank_user_memories(
        &self,
        user: &UserId,
        query: &MemoryQuery,
        current: Option<&AgentId>,
    ) -> Result<RankedMemories> {
        memories(self, Over::User { user, current }, query).await
    }
}

/// A ranked page of SearchHistory: the traces its filters allow, one more
/// ranked than the page ends at (whether another page follows).
async fn page<S: crate::Ranks + Sync + ?Sized>(
    store: &S,
    over: Over<'_>,
    search: &Search,
) -> Result<SearchPage> {
    let (from, end) = page_bounds(search)?;
    let want = Want {
        filter: crate::ranked::search_filter(search),
        limit: (end + 1).min(MAX_RANKED),
        archived_only: false,
        read: from..end,
        context: search.neighbours.min(MAX_CONTEXT),
    };
    let plan = Plan {
        query: search.query.clone(),
        wants: vec![want],
        wait: search.wait_for_index,
    };
    let found = store.rank(over, &plan).await?;
    let more = found.ranked.first().is_some_and(|n| *n > end);
    let hits = found.read.into_iter().next().unwrap_or_default();
    Ok(SearchPage {
        hits: shown(hits).filter_map(Hit::of).collect(),
        next_page_token: more.then(|| page_token(end)),
        index: found.index,
    })
}

/// Retrieve(query) and recall: every kind together, then summaries alone
/// and facts alone (so that a few summaries are not crowded out by
/// hundreds of messages; one embedding of the query serves all three).
async fn memories<S: crate::Ranks + Sync + ?Sized>(
    store: &S,
    over: Over<'_>,
    query: &MemoryQuery,
) -> Result<RankedMemories> {
    // As of a time, more are ranked than asked for: some did not stand
    // then and are left out below.
    let more = if query.as_of.is_some() { 2 } else { 1 };
    let want = |kinds: Vec<Kind>, limit: usize, archived_only: bool, context: usize| {
        let limit = (limit * more).min(MAX_RANKED);
        Want {
            filter: Filter {
                kinds,
                ..Filter::default()
            },
            limit,
            archived_only,
            read: 0..limit,
            context,
        }
    };
    let context = query.neighbours.min(MAX_CONTEXT);
    let plan = Plan {
        query: query.query.clone(),
        wants: vec![
            want(vec![], query.limit, query.archived_only, context),
            want(vec![Kind::Episodic], query.episodic, false, 0),
            want(vec![Kind::Semantic], query.semantic, false, 0),
        ],
        wait: query.wait_for_index,
    };
    let found = store.rank(over, &plan).await?;
    let mut read = found.read.into_iter();
    let stood = |r: &Recalled| query.as_of.is_none_or(|at| r.memory.stood_at(at));
    let mut next = || shown(read.next().unwrap_or_default()).filter(stood);
    let memories = next().take(query.limit).collect();
    let episodic = next()
        .filter_map(|r| match r.memory {
            Memory::Episodic(e) => Some(e),
            _ => None,
        })
        .take(query.episodic)
        .collect();
    // A user's facts are folded from each conversation's: the same fact
    // found in several is shown once.
    let mut seen = HashSet::new();
    let semantic = next()
        .filter_map(|r| match r.memory {
            Memory::Semantic(f) => Some(f),
            _ => None,
        })
        .filter(|f| matches!(over, Over::Agent(_)) || seen.insert(normalize(&f.fact)))
        .take(query.semantic)
        .collect();
    Ok(RankedMemories {
        memories,
        episodic,
        semantic,
        index: found.index,
    })
}

/// What a ranking read back that may still be shown: an expired fact is
/// gone from search at once (upkeep purges it), a summary a forget hid
/// since it was ranked is not shown.
fn shown(read: Vec<Recalled>) -> impl Iterator<Item = Recalled> {
    let now = crate::unix_now();
    read.into_iter().filter(move |r| match &r.memory {
        Memory::Semantic(fact) => !fact.is_expired(now),
        Memory::Episodic(summary) => summary.is_shown(),
        Memory::Trace { .. } => true,
    })
}
