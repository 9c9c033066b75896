//! Whose rows a ranking reads: one agent's, places and keys as stored; or
//! every conversation of a user, each agent's places moved into a range of
//! its own (by a stable ordinal, `engram_store::ranked::place`) and its
//! keys prefixed with its id, so that one search ranks them all together
//! as the file store's user index does. The statements read `agent_id =
//! $1` for one agent (its indexes as ever) and the user's agents as a
//! filter of what the words find ([`Covered::clause`]).

use std::collections::HashMap;

use engram_store::ranked::{key_of, place, split_key};

/// The agents a ranking covers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Covered<'a> {
    Agent(&'a str),
    User(&'a UserOrdinals),
}

/// A user's agents and the ordinal each one's places are moved by.
#[derive(Debug, Default)]
pub(crate) struct UserOrdinals {
    /// The user.
    pub user: String,
    /// The user's agents now, sorted.
    pub agents: Vec<String>,
    /// Every agent's ordinal, kept while the agent is the user's so that
    /// places (and a copy of vectors made with them) stay valid.
    ordinals: HashMap<String, u32>,
    next: u32,
}

impl UserOrdinals {
    /// Takes the user's agents as they are now; returns the ordinals of
    /// the agents that left (their places are void).
    pub(crate) fn update(&mut self, agents: Vec<String>) -> Vec<u32> {
        for a in &agents {
            if !self.ordinals.contains_key(a) {
                self.ordinals.insert(a.clone(), self.next);
                self.next += 1;
            }
        }
        let mut gone = vec![];
        self.ordinals.retain(|a, o| {
            let kept = agents.binary_search(a).is_ok();
            if !kept {
                gone.push(*o);
            }
            kept
        });
        self.agents = agents;
        gone
    }

    pub(crate) fn ordinal(&self, agent: &str) -> Option<u32> {
        self.ordinals.get(agent).copied()
    }
}

impl Covered<'_> {
    /// The condition on the agent id `column` against `$n`. A user's
    /// agents filter the rows a search's words find (`COLLATE "C"` keeps
    /// the planner from probing the (agent, words) index once per agent
    /// and word: a thousand conversations made that a thousand probes).
    pub(crate) fn clause(&self, column: &str, n: usize) -> String {
        match self {
            Covered::Agent(_) => format!("{column} = ${n}"),
            Covered::User(_) => format!("({column} COLLATE \"C\") = ANY(${n})"),
        }
    }

    /// Where the agent's item at `ord` is placed.
    pub(crate) fn place(&self, agent: &str, ord: i64) -> u64 {
        let ord = u64::try_from(ord).unwrap_or(0);
        match self {
            Covered::Agent(_) => ord,
            Covered::User(p) => place(p.ordinal(agent).unwrap_or(u32::MAX), ord),
        }
    }

    /// The key of the agent's item `key`.
    pub(crate) fn key(&self, agent: &str, key: String) -> String {
        match self {
            Covered::Agent(_) => key,
            Covered::User(_) => key_of(agent, &key),
        }
    }

    /// The agent and its own key of an item's `key` ([`Self::key`] undone).
    pub(crate) fn unkey(&self, key: &str) -> Option<(String, String)> {
        match self {
            Covered::Agent(id) => Some(((*id).to_owned(), key.to_owned())),
            Covered::User(_) => match split_key(key) {
                (Some(agent), key) => Some((agent.to_owned(), key.to_owned())),
                (None, _) => None,
            },
        }
    }

    /// The one agent, if it is one.
    pub(crate) fn agent(&self) -> Option<&str> {
        match self {
            Covered::Agent(id) => Some(id),
            Covered::User(_) => None,
        }
    }
}

/// Binds a [`Covered`] to a statement: one id, or the user's ids.
macro_rules! bind_covered {
    ($query:expr, $who:expr) => {
        match $who {
            $crate::covered::Covered::Agent(id) => $query.bind(*id),
            $crate::covered::Covered::User(p) => $query.bind(&p.agents),
        }
    };
}
pub(crate) use bind_covered;

/// Where each place found so far came from (agent, `ord`): a user's
/// places squeeze an agent's turn and seq, so they are looked up, not
/// undone; `known` holds those of a copy of the user's vectors.
#[derive(Debug, Default)]
pub(crate) struct PlaceOrigins<'a> {
    of: HashMap<u64, (String, i64)>,
    known: Option<&'a HashMap<u64, (String, i64)>>,
}

impl<'a> PlaceOrigins<'a> {
    /// Places found by a search, besides those in `known`.
    pub(crate) fn besides(known: &'a HashMap<u64, (String, i64)>) -> Self {
        Self {
            of: HashMap::new(),
            known: Some(known),
        }
    }

    pub(crate) fn note(&mut self, place: u64, agent: &str, ord: i64) {
        if self.known.is_some_and(|k| k.contains_key(&place)) {
            return;
        }
        self.of
            .entry(place)
            .or_insert_with(|| (agent.to_owned(), ord));
    }

    /// The agent and `ord` of `place` (for one agent: itself).
    pub(crate) fn locate(&self, who: &Covered<'_>, place: u64) -> Option<(String, i64)> {
        match who {
            Covered::Agent(id) => Some(((*id).to_owned(), i64::try_from(place).ok()?)),
            Covered::User(_) => self
                .of
                .get(&place)
                .or_else(|| self.known?.get(&place))
                .cloned(),
        }
    }
}
