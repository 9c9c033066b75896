use super::*;
use crate::Filter;
use crate::test_trace as trace;

/// The keys of the matches (each test item's body is its key).
fn keys(index: &mut Lexical, query: &str, filter: &Filter) -> Vec<String> {
    let terms = index.query_terms(query, 64);
    index
        .search(&terms, filter, 10)
        .unwrap()
        .iter()
        .map(|c| index.body(c).unwrap())
        .collect()
}

const MAY_8_2023: f64 = 1_683_554_160.0;

#[test]
fn hidden_traces_are_left_out_memories_are_not() {
    let mut index = Lexical::in_memory().unwrap();
    let mut summary = trace("sum", 2, 0.0, "kayak trip summary");
    summary.kind = Kind::Episodic;
    index
        .upsert(&[
            trace("t1", 1, 0.0, "kayak trip"),
            trace("t2", 2, 0.0, "kayak trip again"),
            trace("t3", 3, 0.0, "kayak trip once more"),
            summary,
        ])
        .unwrap();
    index.commit("").unwrap();
    let hidden = Filter {
        traces_hidden: Some((crate::order(2, 0), crate::order(2, u32::MAX))),
        ..Filter::default()
    };
    let mut found = keys(&mut index, "kayak", &hidden);
    found.sort();
    assert_eq!(found, ["sum", "t1", "t3"]);
}

#[test]
fn stems_rank_and_dates_match() {
    let mut index = Lexical::in_memory().unwrap();
    index
        .upsert(&[
            trace("a", 1, MAY_8_2023, "I went to the support groups"),
            trace("b", 2, MAY_8_2023 + 40.0 * 86_400.0, "painting a sunset"),
        ])
        .unwrap();
    assert!(
        keys(&mut index, "support group", &Filter::default()).is_empty(),
        "not committed"
    );
    index.commit("p1").unwrap();
    assert_eq!(
        keys(&mut index, "a support group?", &Filter::default()),
        ["a"]
    );
    assert_eq!(
        keys(&mut index, "what happened in June", &Filter::default()),
        ["b"]
    );
    assert_eq!(keys(&mut index, "on 8 May", &Filter::default()), ["a"]);
    // Every kind of word the date is written with: weekday, year.
    assert_eq!(keys(&mut index, "that Monday", &Filter::default()), ["a"]);
    let mut both = keys(&mut index, "in 2023", &Filter::default());
    both.sort();
    assert_eq!(both, ["a", "b"]);
    assert_eq!(index.payload().unwrap().as_deref(), Some("p1"));
}

/// Copies the files of an index directory (not its lock files).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if !name.to_string_lossy().ends_with(".lock") {
            std::fs::copy(entry.path(), to.join(name)).unwrap();
        }
    }
}

#[test]
fn a_deletion_file_left_by_a_kill_does_not_stop_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (live, snapshot) = (dir.path().join("live"), dir.path().join("snapshot"));
    let replace_a = |path: &Path| {
        let mut index = Lexical::open(path).unwrap();
        index.upsert(&[trace("a", 1, 0.0, "kayak again")]).unwrap();
        index.commit("2").unwrap();
        index.close().unwrap();
    };
    let mut index = Lexical::open(&live).unwrap();
    index
        .upsert(&[trace("a", 1, 0.0, "kayak"), trace("b", 2, 0.0, "canoe")])
        .unwrap();
    index.commit("1").unwrap();
    index.close().unwrap();
    copy_dir(&live, &snapshot);

    // Replacing "a" writes the first segment's deletions, then the
    // metadata. The state a kill between the two leaves behind: the
    // snapshot's metadata, and the deletion file with the list of
    // managed files that names it.
    replace_a(&live);
    let deletions: Vec<_> = std::fs::read_dir(&live)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".del"))
        .collect();
    assert_eq!(deletions.len(), 1, "{deletions:?}");
    std::fs::copy(live.join(&deletions[0]), snapshot.join(&deletions[0])).unwrap();
    std::fs::copy(live.join(".managed.json"), snapshot.join(".managed.json")).unwrap();

    // After the restart the same replacement reaches the same stamp.
    replace_a(&snapshot);
    let mut index = Lexical::open(&snapshot).unwrap();
    assert_eq!(index.payload().unwrap().as_deref(), Some("2"));
    assert_eq!(keys(&mut index, "kayak", &Filter::default()), ["a"]);
    assert_eq!(index.len(), 2);
}

/// Candidates' keys are read together per segment, in the order of the
/// key dictionary: each still names its own document (a test item's body
/// is its key), across segments and past a dictionary block.
#[test]
fn every_candidate_has_its_own_key() {
    let mut index = Lexical::in_memory().unwrap();
    for batch in 0..3 {
        let items: Vec<Item> = (0..400)
            .map(|i| {
                let n = batch * 400 + i;
                // Keys whose order is not the documents' order.
                let key = format!("{:04}-{}", (n * 7919) % 1200, "x".repeat(n % 40));
                let text = format!("kayak trip {}", "again ".repeat(n % 9));
                trace(&key, n as u32 + 1, 0.0, &text)
            })
            .collect();
        index.upsert(&items).unwrap();
        index.commit("").unwrap();
    }
    let terms = index.query_terms("kayak trip", 8);
    let found = index.search(&terms, &Filter::default(), 2000).unwrap();
    assert_eq!(found.len(), 1200);
    let segments: std::collections::HashSet<u32> = found
        .iter()
        .filter_map(|c| c.address.map(|a| a.segment))
        .collect();
    assert!(segments.len() > 1, "more than one segment searched");
    for c in &found {
        assert_eq!(c.key, index.body(c).unwrap());
    }
}

/// The filter is checked on what the pruned union offers (`top.rs`): for
/// every filter, a search finds the best of what filtering every match
/// would leave, in the same order.
#[test]
fn a_pruned_search_within_a_filter_finds_the_best_of_every_match() {
    let mut index = Lexical::in_memory().unwrap();
    let words = ["kayak", "trip", "lake", "paddle", "storm"];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for batch in 0..3 {
        let items: Vec<Item> = (0..300)
            .map(|i| {
                let n = batch * 300 + i;
                let text: Vec<&str> = (0..1 + next(12))
                    .map(|_| words[next(words.len() as u64) as usize])
                    .collect();
                let mut item = trace(
                    &format!("k{n}"),
                    n as u32 / 3 + 1,
                    n as f64,
                    &text.join(" "),
                );
                item.kind = [Kind::Trace, Kind::Trace, Kind::Episodic, Kind::Semantic][n % 4];
                item.trace_type = (n % 3) as u8;
                item.order = crate::order(n as u32 / 3 + 1, n as u32 % 3);
                item
            })
            .collect();
        index.upsert(&items).unwrap();
        index.commit("").unwrap();
    }
    index.remove(&["k5", "k17"]).unwrap();
    index.commit("").unwrap();
    let at = |turn: u32| crate::order(turn, 0);
    let filters = [
        Filter::default(),
        Filter {
            kinds: vec![Kind::Trace],
            ..Filter::default()
        },
        Filter {
            kinds: vec![Kind::Episodic, Kind::Semantic],
            trace_types: vec![0],
            ..Filter::default()
        },
        Filter {
            trace_types: vec![1, 2],
            order: Some((at(20), at(200))),
            ts: Some((30.0, 700.0)),
            ..Filter::default()
        },
        Filter {
            traces_before: Some(at(150)),
            traces_hidden: Some((at(40), at(90))),
            ..Filter::default()
        },
    ];
    for query in ["kayak trip", "storm", "paddle lake storm kayak"] {
        let terms = index.query_terms(query, 8);
        let every = index.search(&terms, &Filter::default(), 10_000).unwrap();
        assert!(every.len() > 500, "{}", every.len());
        for filter in &filters {
            let fields = |c: &Candidate| {
                let body = index.body(c).unwrap();
                let n: usize = body[1..].parse().unwrap();
                let kind = [Kind::Trace, Kind::Trace, Kind::Episodic, Kind::Semantic][n % 4];
                (kind, (n % 3) as u8)
            };
            let want: Vec<String> = every
                .iter()
                .filter(|c| {
                    let (kind, trace_type) = fields(c);
                    filter.accepts(kind, trace_type, c.order, c.ts)
                })
                .take(25)
                .map(|c| c.key.clone())
                .collect();
            let got: Vec<String> = index
                .search(&terms, filter, 25)
                .unwrap()
                .into_iter()
                .map(|c| c.key)
                .collect();
            assert_eq!(got, want, "{query:?} within {filter:?}");
        }
    }
}

/// Every file under `dir`, read whole: what the disk holds.
fn disk_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        out.extend(std::fs::read(entry.unwrap().path()).unwrap_or_default());
    }
    out
}

#[test]
fn a_commit_in_memory_is_searchable_at_once_and_on_disk_only_once_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Lexical::open(dir.path()).unwrap();
    index
        .upsert(&[trace("a", 1, 0.0, "the kayak on the lake")])
        .unwrap();
    index.commit("one").unwrap();
    index
        .upsert(&[trace("b", 2, 0.0, "a zeppelin over the harbour")])
        .unwrap();
    index.commit_in_memory("two").unwrap();
    index.release_writer().unwrap();
    assert_eq!(keys(&mut index, "zeppelin", &Filter::default()), ["b"]);
    assert!(index.unpersisted_bytes() > 0);
    let zeppelin = |bytes: &[u8]| bytes.windows(8).any(|w| w == b"zeppelin");
    assert!(!zeppelin(&disk_bytes(dir.path())), "nothing written");

    // Killed before a persist: the disk holds the last persisted commit.
    drop(index);
    let mut index = Lexical::open(dir.path()).unwrap();
    assert_eq!(index.payload().unwrap().as_deref(), Some("one"));
    assert!(keys(&mut index, "zeppelin", &Filter::default()).is_empty());
    assert_eq!(keys(&mut index, "kayak", &Filter::default()), ["a"]);

    index
        .upsert(&[trace("b", 2, 0.0, "a zeppelin over the harbour")])
        .unwrap();
    index.commit_in_memory("two").unwrap();
    index.release_writer().unwrap();
    index.persist().unwrap();
    assert_eq!(index.unpersisted_bytes(), 0);
    drop(index);
    let mut index = Lexical::open(dir.path()).unwrap();
    assert_eq!(index.payload().unwrap().as_deref(), Some("two"));
    assert_eq!(keys(&mut index, "zeppelin", &Filter::default()), ["b"]);
}

#[test]
fn an_erased_item_leaves_the_disk_once_purged_and_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = Lexical::open(dir.path()).unwrap();
    index
        .upsert(&[
            trace("a", 1, 0.0, "my secret is xylophone"),
            trace("b", 2, 0.0, "the weather is fine"),
        ])
        .unwrap();
    index.commit("one").unwrap();
    index.remove(&["a"]).unwrap();
    index.commit_in_memory("two").unwrap();
    let secret = |bytes: &[u8]| bytes.windows(9).any(|w| w == b"xylophone");
    assert!(keys(&mut index, "xylophone", &Filter::default()).is_empty());
    index.release_writer().unwrap();
    index.persist().unwrap();
    assert!(
        secret(&disk_bytes(dir.path())),
        "a removal only marks: its segment still holds the text"
    );
    // Rewritten, and written out before this returns.
    index.purge_removed().unwrap();
    assert!(!secret(&disk_bytes(dir.path())));
    assert_eq!(index.unpersisted_bytes(), 0);
    drop(index);
    let mut index = Lexical::open(dir.path()).unwrap();
    assert_eq!(index.payload().unwrap().as_deref(), Some("two"));
    assert_eq!(keys(&mut index, "weather", &Filter::default()), ["b"]);
}

/// In a user's index (conversations one after another, by their places'
/// high bits), a message's neighbours are of its own conversation only.
#[test]
fn neighbours_stay_within_their_conversation() {
    let mut index = Lexical::in_memory().unwrap();
    index.set_conversation_bits(40);
    let at = |conversation: u64, turn: u32| (conversation << 40) | crate::order(turn, 0);
    let mut items = vec![];
    for (key, conversation, turn) in [("a1", 1, 1), ("a2", 1, 2), ("b1", 2, 1), ("b2", 2, 2)] {
        let mut item = trace(key, turn, 60.0 * f64::from(turn), "hello there");
        item.order = at(conversation, turn);
        items.push(item);
    }
    index.upsert(&items).unwrap();
    index.commit("").unwrap();
    let places = |v: Vec<crate::Placed>| v.into_iter().map(|(o, _)| o).collect::<Vec<_>>();
    let (before, after) = index.neighbours(at(2, 1), 2);
    assert_eq!(
        places(before),
        Vec::<u64>::new(),
        "conversation 1 is not its context"
    );
    assert_eq!(places(after), [at(2, 2)]);
    let (before, after) = index.neighbours(at(1, 2), 2);
    assert_eq!((places(before), places(after)), (vec![at(1, 1)], vec![]));
}
