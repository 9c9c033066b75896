//! SearchHistory's MATCH_ALL_WORDS mode: case-insensitive keyword search
//! over an agent's active and archived traces, newest first, paged (the
//! ranked mode is in `ranked`).
//!
//! Active traces are searched in memory; the archive is read backwards from
//! its end in fixed-size blocks, so memory stays bounded however large it
//! grows. The archive is append-only, so a page cursor (an index into the
//! active traces, or a byte offset into the archive) stays valid between
//! calls.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::Path;

use async_trait::async_trait;
use engram_core::{AgentId, CoreError, RawTrace};

use engram_store::Searches;
use engram_store::search::Query;

use crate::agent::RAW_ARCHIVE;
use crate::{FileStore, Hit, Result, Search, SearchPage, StoreError};

const BLOCK: usize = 64 * 1024;

/// Where a search page starts (a page token, encoded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cursor {
    /// Active traces before this index, then the whole archive.
    Active(usize),
    /// Archived lines ending before this byte offset.
    Archive(u64),
}

impl Cursor {
    fn to_token(self) -> String {
        match self {
            Self::Active(i) => format!("a{i}"),
            Self::Archive(o) => format!("r{o}"),
        }
    }

    fn from_token(token: &str) -> Option<Self> {
        let (kind, n) = token.split_at_checked(1)?;
        match kind {
            "a" => n.parse().ok().map(Self::Active),
            "r" => n.parse().ok().map(Self::Archive),
            _ => None,
        }
    }
}

#[async_trait]
impl Searches for FileStore {
    async fn search_all_words(&self, id: &AgentId, search: &Search) -> Result<SearchPage> {
        self.all_words(id, search).await
    }
}

impl FileStore {
    /// Up to `limit` hits from the page `page_token` names on, newest
    /// first, and the token of the next page if there may be more.
    async fn all_words(&self, id: &AgentId, search: &Search) -> Result<SearchPage> {
        let query = Query::parse(search)?;
        let cursor = search
            .page_token
            .as_deref()
            .map(|t| {
                Cursor::from_token(t).ok_or_else(|| {
                    CoreError::Invalid(
                        "page_token is not one this server issued; pass next_page_token unchanged"
                            .into(),
                    )
                })
            })
            .transpose()?;
        let (hits, next) = self.search_from(id, &query, search.limit, cursor).await?;
        Ok(SearchPage {
            hits,
            next_page_token: next.map(Cursor::to_token),
            index: Default::default(),
        })
    }

    async fn search_from(
        &self,
        id: &AgentId,
        query: &Query,
        limit: usize,
        cursor: Option<Cursor>,
    ) -> Result<(Vec<Hit>, Option<Cursor>)> {
        let (mut hits, next_active, archive, archive_end) = self
            .read(id, |state| {
                let mut hits = vec![];
                let mut next = None;
                if let None | Some(Cursor::Active(_)) = cursor {
                    let end = match cursor {
                        Some(Cursor::Active(i)) => i.min(state.traces.len()),
                        _ => state.traces.len(),
                    };
                    for i in (0..end).rev() {
                        if hits.len() == limit {
                            next = Some(Cursor::Active(i + 1));
                            break;
                        }
                        let t = &state.traces[i];
                        if query.matches(t) {
                            hits.push(Hit::all_words(t.clone(), false));
                        }
                    }
                }
                let archive = state.dir.join(RAW_ARCHIVE);
                let len = std::fs::metadata(&archive).map_or(0, |m| m.len());
                (hits, next, archive, len)
            })
            .await?;
        if let Some(next) = next_active {
            return Ok((hits, Some(next)));
        }
        let from = match cursor {
            Some(Cursor::Archive(o)) => o.min(archive_end),
            _ => archive_end,
        };
        let query = query.clone();
        let want = limit - hits.len();
        let (more, next) =
            engram_store::blocking(move || search_archive(&archive, &query, from, want)).await?;
        hits.extend(more);
        Ok((hits, next))
    }
}

/// Archived hits before byte `end`, newest first, at most `want`.
fn search_archive(
    path: &Path,
    query: &Query,
    end: u64,
    want: usize,
) -> Result<(Vec<Hit>, Option<Cursor>)> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok((vec![], None)),
        Err(e) => return Err(StoreError::io("opening", path)(e)),
    };
    let mut hits = vec![];
    // `carry` holds the start of a line whose beginning is further back.
    let mut carry: Vec<u8> = vec![];
    let mut pos = end;
    loop {
        let start = pos.saturating_sub(BLOCK as u64);
        let mut block = vec![0; (pos - start) as usize];
        file.seek(SeekFrom::Start(start))
            .map_err(StoreError::io("seeking in", path))?;
        file.read_exact(&mut block)
            .map_err(StoreError::io("reading", path))?;
        block.extend_from_slice(&carry);
        // Lines end at '\n'; the first piece may be incomplete unless start = 0.
        let mut line_end = block.len();
        let mut cut = block.len();
        while let Some(nl) = block[..cut].iter().rposition(|b| *b == b'\n') {
            let line_start = nl + 1;
            if line_start < line_end {
                let line_offset = start + line_start as u64;
                if hits.len() == want {
                    return Ok((
                        hits,
                        Some(Cursor::Archive(
                            line_offset + (line_end - line_start) as u64 + 1,
                        )),
                    ));
                }
                if let Ok(t) = RawTrace::from_line(&block[line_start..line_end])
                    && query.matches(&t)
                {
                    hits.push(Hit::all_words(t, true));
                }
            }
            line_end = nl;
            cut = nl;
        }
        if start == 0 {
            if line_end > 0 {
                if hits.len() == want {
                    return Ok((hits, Some(Cursor::Archive(line_end as u64 + 1))));
                }
                if let Ok(t) = RawTrace::from_line(&block[..line_end])
                    && query.matches(&t)
                {
                    hits.push(Hit::all_words(t, true));
                }
            }
            return Ok((hits, None));
        }
        carry = block[..line_end].to_vec();
        pos = start;
    }
}

#[cfg(test)]
mod tests {
    fn words(q: &str) -> crate::Search {
        crate::Search {
            query: q.into(),
            mode: crate::SearchMode::AllWords,
            ..crate::Search::default()
        }
    }

    use engram_core::NewEvent;
    use engram_core::turns::assign_all;
    use serde_json::json;

    use super::*;

    fn archive(dir: &Path, n: usize) -> Vec<RawTrace> {
        let traces = assign_all((0..n).map(|i| {
            if i % 3 == 0 {
                NewEvent::user(format!("Question {i} about the Weather"))
            } else {
                NewEvent::assistant(format!("answer {i}"))
            }
        }));
        let bytes: Vec<u8> = traces.iter().flat_map(RawTrace::to_line).collect();
        std::fs::write(dir.join(RAW_ARCHIVE), bytes).unwrap();
        traces
    }

    #[test]
    fn the_archive_is_searched_backwards_in_pages_with_bounded_blocks() {
        let dir = tempfile::tempdir().unwrap();
        // Enough lines that pages cross the 64 KiB block boundary.
        let traces = archive(dir.path(), 3000);
        let q = Query::parse(&words("WEATHER question")).unwrap();
        let expected: Vec<&str> = traces
            .iter()
            .rev()
            .filter(|t| q.matches(t))
            .map(|t| t.id.as_str())
            .collect();
        assert_eq!(expected.len(), 1000);
        let path = dir.path().join(RAW_ARCHIVE);
        let end = std::fs::metadata(&path).unwrap().len();
        let mut got = vec![];
        let mut cursor = end;
        loop {
            let (hits, next) = search_archive(&path, &q, cursor, 77).unwrap();
            got.extend(hits.into_iter().map(|h| h.trace.id));
            match next {
                Some(Cursor::Archive(o)) => cursor = o,
                None => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, expected);
        let (none, next) = search_archive(&dir.path().join("missing"), &q, 0, 5).unwrap();
        assert!(none.is_empty() && next.is_none());
    }

    #[test]
    fn queries_match_all_terms_in_any_field() {
        let t = &assign_all([
            NewEvent::user("hi"),
            NewEvent::tool_call("c", "Weather_Lookup", json!({"city": "Oslo"})),
        ])[1];
        assert!(Query::parse(&words("oslo lookup")).unwrap().matches(t));
        assert!(!Query::parse(&words("oslo rome")).unwrap().matches(t));
        assert!(Query::parse(&words("   ")).is_err());
        assert_eq!(
            Cursor::from_token(&Cursor::Archive(42).to_token()),
            Some(Cursor::Archive(42))
        );
        assert_eq!(
            Cursor::from_token(&Cursor::Active(7).to_token()),
            Some(Cursor::Active(7))
        );
        assert_eq!(Cursor::from_token("zz"), None);
        assert_eq!(Cursor::from_token(""), None);
    }
}
