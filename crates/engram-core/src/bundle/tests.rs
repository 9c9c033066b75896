use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::blocks::Format;
use crate::compaction::CompactionRecord;
use crate::memory::Provenance;
use crate::users::FactSource;
use crate::{NewEvent, TraceType};

fn trace(id: &str, turn: u32, seq: u32, text: &str) -> RawTrace {
    let mut t = crate::turns::assign_all([NewEvent::user(text)]).remove(0);
    t.id = id.into();
    t.turn_id = crate::turns::turn_id(turn);
    t.seq = seq;
    t
}

fn block(label: &str, version: u64) -> Block {
    Block {
        label: label.into(),
        value: format!("{label} v{version}"),
        format: Format::default(),
        description: String::new(),
        limit_chars: 100,
        read_only: false,
        version,
        updated_at: 10.0 + version as f64,
        deleted: false,
    }
}

fn agent(id: &str, user: Option<&str>) -> AgentRecords {
    let mut result = trace("t3", 2, 1, "r");
    result.trace_type = TraceType::ToolResult;
    result.tool_result = Some(json!("a preview"));
    result.tool_result_ref = Some(crate::spill::spill_path("t3"));
    let mut fact = SemanticItem::new("f1", "lives in Berlin");
    fact.managed.version = 2;
    AgentRecords {
        id: AgentId::parse(id).unwrap(),
        meta: AgentMeta {
            user_id: user.map(str::to_owned),
            epoch: 1,
            snapshot: Some("[MEMORY]".into()),
            snapshot_trace_ids: vec!["t2".into()],
            ..AgentMeta::default()
        },
        archived: vec![trace("t1", 1, 0, "hello ünïcode \n line")],
        active: vec![trace("t2", 2, 0, "next"), result],
        results: vec![StoredResult {
            path: crate::spill::spill_path("t3"),
            json: r#"{"big":"result"}"#.into(),
        }],
        summaries: vec![EpisodicItem {
            id: "s1".into(),
            ts: 3.25,
            turn_ids: vec![crate::turns::turn_id(1)],
            summary: "they said hello".into(),
            tags: vec![],
            salience: 0.5,
            source: Provenance::default(),
            rewriting: false,
            carrying: Default::default(),
        }],
        facts: vec![SemanticItem::new("f1", "lives in Paris"), fact],
        blocks: vec![block("persona", 1), block("persona", 2)],
        compactions: vec![compaction(1), compaction(2)],
    }
}

fn compaction(seq: u64) -> CompactionRecord {
    CompactionRecord {
        seq,
        at: 3.0 + seq as f64,
        duration_secs: 0.5,
        outcome: "summarized".into(),
        trigger: "estimate".into(),
        strategy: "summarize".into(),
        steps: vec!["summarize".into()],
        turn_ids: vec![crate::turns::turn_id(1)],
        episodic_id: "s1".into(),
        semantic_added: 1,
        semantic_updated: 0,
        traces_pruned: 2,
        carried: 0,
        carry_dropped: 0,
        tokens_before: 900,
        tokens_after: 300,
        error: String::new(),
        prepared_in_background: false,
        summarizer: "embedded".into(),
    }
}

fn user_bundle() -> MemoryBundle {
    MemoryBundle {
        scope: BundleScope::User("u1".into()),
        exported_at: 100.5,
        agents: vec![agent("a1", Some("u1")), agent("a2", Some("u1"))],
        user: Some(UserRecords {
            id: UserId::parse("u1").unwrap(),
            facts: vec![UserFact {
                fact: SemanticItem::new("uf1", "likes tea"),
                sources: vec![FactSource {
                    agent_id: "a1".into(),
                    fact_id: "f1".into(),
                    turn_ids: vec![],
                }],
            }],
            blocks: vec![block("human", 1)],
            last: Some(LastConversation {
                agent_id: "a1".into(),
                summaries: vec![],
            }),
        }),
    }
}

fn decode(bytes: &[u8]) -> Result<MemoryBundle, CoreError> {
    let mut d = Decoder::default();
    d.push(bytes)?;
    d.finish()
}

#[test]
fn a_bundle_reads_back_as_written() {
    let bundle = user_bundle();
    let bytes = encode(&bundle);
    assert_eq!(decode(&bytes).unwrap(), bundle);
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.starts_with(r#"{"engram_bundle":1,"user":"u1","exported_at":100.5}"#));
    assert!(text.ends_with("{\"end\":{\"lines\":28}}\n"), "{text}");
    // Every line is one JSON object (jq reads it).
    for line in text.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap()
                .is_object()
        );
    }
}

#[test]
fn a_cut_bundle_or_another_version_is_refused() {
    let bytes = encode(&user_bundle());
    let cut = &bytes[..bytes.len() - 25];
    let err = decode(cut).unwrap_err().to_string();
    assert!(err.contains("end line") || err.contains("line"), "{err}");
    let other = String::from_utf8(bytes.clone()).unwrap().replacen(
        "\"engram_bundle\":1",
        "\"engram_bundle\":2",
        1,
    );
    assert!(
        decode(other.as_bytes())
            .unwrap_err()
            .to_string()
            .contains("version 2")
    );
    assert!(decode(b"").unwrap_err().to_string().contains("empty"));
    // A line dropped from the middle: the end line's count disagrees.
    let text = String::from_utf8(bytes).unwrap();
    let without: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"summary\""))
        .collect();
    let err = decode((without.join("\n") + "\n").as_bytes()).unwrap_err();
    assert!(err.to_string().contains("counts"), "{err}");
}

#[test]
fn what_a_store_cannot_take_is_refused_before_anything_is_written() {
    let refused = |change: &dyn Fn(&mut MemoryBundle)| {
        let mut b = user_bundle();
        change(&mut b);
        decode(&encode(&b)).unwrap_err().to_string()
    };
    assert!(refused(&|b| b.agents[0].active[0].id = "t1".into()).contains("appears twice"));
    assert!(
        refused(&|b| b.agents[0].results[0].path = "../../etc/passwd".into())
            .contains("belongs to no trace")
    );
    assert!(
        refused(&|b| b.agents[0].active[1].tool_result_ref = Some("../x".into()))
            .contains("names a stored result")
    );
    assert!(refused(&|b| b.agents[1].meta.user_id = Some("u2".into())).contains("not the user's"));
    assert!(refused(&|b| b.agents[0].meta.unpurged = vec!["k".into()]).contains("unfinished"));
    assert!(refused(&|b| b.agents[0].blocks[1].version = 1).contains("appears twice"));
    assert!(refused(&|b| b.agents[0].facts[1].managed.version = 1).contains("appears twice"));
    assert!(refused(&|b| b.agents[0].active[0].turn_id = "x".into()).contains("no turn"));
    assert!(refused(&|b| b.agents[1].id = AgentId::parse("a1").unwrap()).contains("twice"));
    assert!(refused(&|b| b.agents[0].compactions[1].seq = 1).contains("seq must rise"));
    // JSON has no NaN: a bundle made in memory (an export) is checked too.
    let mut b = user_bundle();
    b.agents[0].compactions[0].at = f64::NAN;
    assert!(b.check().unwrap_err().to_string().contains("no time"));
}

#[test]
fn versions_are_listed_by_fact_then_version_whatever_the_stored_order() {
    let mut superseded = SemanticItem::new("a", "one");
    superseded.superseded_by = Some("b".into());
    let mut a2 = SemanticItem::new("a", "two");
    a2.managed.version = 2;
    let lines = vec![
        a2.clone(),
        SemanticItem::new("b", "b"),
        SemanticItem::new("a", "one"),
        superseded.clone(),
    ];
    let listed = fact_versions(&lines, |f| f);
    assert_eq!(listed, vec![superseded, a2, SemanticItem::new("b", "b")]);
}

proptest! {
    /// Any chunking reads the same bundle.
    #[test]
    fn chunks_cut_anywhere_read_the_same(cuts in proptest::collection::vec(0usize..4000, 0..12)) {
        let bundle = user_bundle();
        let bytes = encode(&bundle);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort();
        let mut d = Decoder::default();
        let mut at = 0;
        for c in cuts.into_iter().chain([bytes.len()]) {
            d.push(&bytes[at..c]).unwrap();
            at = c;
        }
        prop_assert_eq!(d.finish().unwrap(), bundle);
    }

    /// Arbitrary bytes are refused or read, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(flip in 0usize..4000, byte in any::<u8>(), junk in ".{0,40}") {
        let mut bytes = encode(&user_bundle());
        let at = flip % bytes.len();
        bytes[at] = byte;
        bytes.splice(at..at, junk.bytes());
        let _ = decode(&bytes);
    }
}
