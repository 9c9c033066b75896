//! Paraphrases: questions that share no word (after stop words and
//! stemming) with the message that answers them — what words alone cannot
//! find and meaning should. Written for this benchmark, not tuned: each
//! pair is checked to share no indexed term, and the set is asked of the
//! index by words alone (in process) and of the real engramd (words and
//! meaning, every message embedded first).

use std::collections::HashSet;
use std::path::Path;

use anyhow::{Result, ensure};
use engram_index::lexical::Lexical;
use engram_index::{Filter, Item, Kind, Params};
use engram_proto::pb;

use crate::server::{Server, connect};

/// (what was said, a question about it in other words).
pub const PAIRS: [(&str, &str); 20] = [
    (
        "I adopted a puppy from the shelter last weekend.",
        "Do they have a pet canine?",
    ),
    (
        "My flight to Lisbon got cancelled because of the storm.",
        "Why was the trip to Portugal's capital called off?",
    ),
    (
        "We finally repainted the kitchen a pale yellow.",
        "Which colour did the cooking room become?",
    ),
    (
        "I started taking piano lessons recently.",
        "Is anybody studying a musical instrument?",
    ),
    (
        "My sister is getting married soon.",
        "Who is having a wedding?",
    ),
    (
        "I've been running five kilometres every morning.",
        "What exercise routine do they follow at dawn?",
    ),
    (
        "Our basement flooded after the heavy rain.",
        "Was there water damage in the cellar?",
    ),
    (
        "I quit my job at the bank to open a bakery.",
        "What career change did they make?",
    ),
    (
        "My grandmother turned ninety yesterday.",
        "Whose elderly relative celebrated a milestone birthday?",
    ),
    (
        "I'm allergic to peanuts, so no satay for me.",
        "Which food causes them a bad reaction?",
    ),
    (
        "We booked a cabin by the lake.",
        "Where will they stay on their summer holiday?",
    ),
    (
        "My laptop died, so I bought a new computer.",
        "Did they replace a broken machine?",
    ),
    (
        "I've started learning Japanese for my trip next year.",
        "Which foreign language are they picking up?",
    ),
    (
        "The doctor said my blood pressure is too high.",
        "What did the physician warn about regarding their health?",
    ),
    (
        "Our cat knocked the vase off the shelf and it shattered.",
        "Which animal broke something fragile?",
    ),
    (
        "I volunteer at the food bank on weekends.",
        "Do they do any charity work?",
    ),
    (
        "My son scored the winning goal in his football match.",
        "How did the child do in the soccer game?",
    ),
    (
        "We moved into a bigger apartment downtown.",
        "Did they relocate to a larger flat in the city centre?",
    ),
    (
        "I lost my wallet on the bus this morning.",
        "Did they misplace their purse during the commute?",
    ),
    (
        "The new manager cancelled all the weekly meetings.",
        "Did the boss scrap the regular gatherings?",
    ),
];

/// The other side's answers between the messages.
const REPLIES: [&str; 4] = [
    "That sounds great!",
    "Tell me more about it.",
    "Oh no, sorry to hear that.",
    "Interesting, thanks for sharing.",
];

const DAY: f64 = 86_400.0;
const START: f64 = 1_700_000_000.0;

/// Hits at 1 and at 5, out of `PAIRS.len()`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Hits {
    pub at1: usize,
    pub at5: usize,
}

impl Hits {
    fn add(&mut self, ranked: &[String], want: &str) {
        let at = ranked.iter().position(|r| r == want);
        self.at1 += usize::from(at == Some(0));
        self.at5 += usize::from(at.is_some_and(|i| i < 5));
    }
}

/// The conversation: each memory said by Jordan, one reply by Sam, a day
/// apart (so no message is another's context).
pub(crate) fn messages() -> Vec<(&'static str, &'static str, f64)> {
    PAIRS
        .iter()
        .enumerate()
        .flat_map(|(i, (said, _))| {
            let at = START + i as f64 * DAY;
            [
                ("Jordan", *said, at),
                ("Sam", REPLIES[i % REPLIES.len()], at + 60.0),
            ]
        })
        .collect()
}

/// Words alone (the index in process) and words with meaning (engramd).
pub async fn run(engramd: &Path, data: &Path) -> Result<(Hits, Hits)> {
    let mut lexical = Lexical::in_memory()?;
    let items: Vec<Item> = messages()
        .into_iter()
        .enumerate()
        .map(|(i, (name, text, ts))| Item {
            key: i.to_string(),
            kind: Kind::Trace,
            trace_type: 1,
            order: engram_index::order(i as u32 + 1, 0),
            ts,
            text: text.into(),
            name: Some(name.into()),
            body: text.into(),
        })
        .collect();
    lexical.upsert(&items)?;
    lexical.commit("")?;
    for (said, question) in PAIRS {
        let mut terms =
            |text: &str| -> HashSet<String> { lexical.query_terms(text, 64).into_iter().collect() };
        let (a, b) = (terms(said), terms(question));
        let shared: Vec<&String> = a.intersection(&b).collect();
        ensure!(
            shared.is_empty(),
            "{question:?} shares {shared:?} with {said:?}"
        );
    }
    let mut words = Hits::default();
    for (said, question) in PAIRS {
        let ranked = engram_index::rank(
            &mut lexical,
            None,
            question,
            &Filter::default(),
            5,
            &Params::default(),
        )?;
        let bodies = ranked
            .iter()
            .map(|r| Ok(r.body(&lexical)?.unwrap_or_default()))
            .collect::<Result<Vec<String>>>()?;
        words.add(&bodies, said);
    }

    let server = Server::start(engramd, data)?;
    let mut client = connect(&server.addr).await?;
    for (name, text, ts) in messages() {
        let trace_type = if name == "Jordan" {
            pb::TraceType::User
        } else {
            pb::TraceType::Assistant
        };
        client
            .ingest(pb::IngestRequest {
                agent_id: "paraphrase".into(),
                events: vec![pb::TraceEvent {
                    trace_type: trace_type.into(),
                    content: text.into(),
                    name: name.into(),
                    ts: Some(ts),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await?;
    }
    let mut both = Hits::default();
    for (said, question) in PAIRS {
        let page = client
            .search_history(pb::SearchHistoryRequest {
                agent_id: "paraphrase".into(),
                query: question.into(),
                limit: 5,
                wait_for_index_ms: 60_000,
                ..Default::default()
            })
            .await?
            .into_inner();
        let ranked: Vec<String> = page
            .matches
            .into_iter()
            .filter_map(|m| m.trace.map(|t| t.content))
            .collect();
        // What a miss came behind says why (printed beside the table).
        if let Some(first) = ranked.first().filter(|first| *first != said) {
            eprintln!("paraphrase missed at 1: {question:?}: {first:?} came first");
        }
        both.add(&ranked, said);
    }
    Ok((words, both))
}
