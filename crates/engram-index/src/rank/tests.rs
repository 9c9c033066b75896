use super::*;
use crate::lexical::{IndexSource, rank, rank_index};
use crate::{Embedded, Item, WordVectors, order, test_trace};

fn trace(turn: u32, ts: f64, text: &str) -> Item {
    test_trace(&format!("t{turn}"), turn, ts, text)
}

/// A unit vector along `axis` leaning `lean` towards axis 0.
fn toward(axis: usize, lean: f32) -> Vec<f32> {
    let mut v = vec![0.0; 4];
    v[axis] = (1.0 - lean * lean).sqrt();
    v[0] += lean;
    v
}

fn setup() -> (Lexical, Vectors) {
    let mut lexical = Lexical::in_memory().unwrap();
    // Sittings a day apart: no context between them.
    let items = [
        trace(1, 0.0, "the blue bicycle was stolen"),
        trace(2, 86_400.0, "a bicycle race on sunday"),
        trace(3, 172_800.0, "my new puppy chews everything"),
    ];
    lexical.upsert(&items).unwrap();
    lexical.commit("").unwrap();
    let mut vectors = Vectors::in_memory("m", 4);
    let embedded: Vec<Embedded> = items
        .iter()
        .zip([toward(1, 0.1), toward(2, 0.5), toward(3, 0.95)])
        .map(|(i, vector)| Embedded {
            key: i.key.clone(),
            kind: i.kind,
            trace_type: 1,
            order: i.order,
            ts: i.ts,
            vector,
        })
        .collect();
    vectors.write(&embedded, &[]).unwrap();
    (lexical, vectors)
}

fn keys(lexical: &Lexical, ranked: &[Ranked]) -> Vec<String> {
    ranked
        .iter()
        .map(|r| r.body(lexical).unwrap().unwrap())
        .collect()
}

/// The pipeline's words step over `lexical` for one ranking, and the
/// question's terms.
fn by_words(lexical: &mut Lexical, query: &str, params: &Params) -> (Words, Vec<String>) {
    let mut source = IndexSource::new(lexical, None, None);
    let wants = [(Filter::default(), 10)];
    let lexed = rank_index(&mut source, |s| {
        pipeline::by_words(s, query, &wants, params)
    })
    .unwrap();
    let (mut words, terms) = lexed.into_parts();
    let terms = terms.into_iter().map(|t| t.text).collect();
    (words.pop().flatten().unwrap(), terms)
}

/// The pipeline's expansion of a question of `terms` by its vector.
fn expansion(
    lexical: &mut Lexical,
    words: &WordVectors,
    query: &[f32],
    terms: &[String],
    params: &Params,
) -> Vec<(String, f32)> {
    let mut source = IndexSource::new(lexical, None, Some(words));
    rank_index(&mut source, |s| {
        pipeline::expansion(s, query, terms, params)
    })
    .unwrap()
}

/// `words` with `chosen` in its word query, as the pipeline expands it.
fn expand(lexical: &mut Lexical, words: Words, chosen: &[(String, f32)], params: &Params) -> Words {
    let mut source = IndexSource::new(lexical, None, None);
    let expanded = rank_index(&mut source, |s| {
        pipeline::expand(s, vec![Some(words)], chosen, params)
    });
    expanded.unwrap().pop().flatten().unwrap()
}

/// How much of the question each sitting holds, by its weighted terms.
fn sitting_shares(lexical: &mut Lexical, terms: &[(&str, f32)]) -> Vec<f32> {
    let asked: Vec<&str> = terms.iter().map(|(t, _)| *t).collect();
    let counted = lexical.sitting_counts(&asked, 3600.0).unwrap();
    let mut coverage = Coverage::new(&counted.lengths);
    for ((_, weight), counts) in terms.iter().zip(&counted.counts) {
        let mut term = coverage.term(*weight);
        for (sitting, tf) in counts {
            term.add(*sitting, *tf);
        }
        term.done();
    }
    coverage.scores()
}

#[test]
fn meaning_finds_what_shares_no_word_and_lifts_what_does() {
    let (mut lexical, vectors) = setup();
    let query = [1.0, 0.0, 0.0, 0.0];
    let semantic = Some(Semantic {
        vectors: &vectors,
        query: &query,
    });
    // One message a sitting here: each would be weighed by its own score
    // again.
    let params = Params {
        sitting_weight: 0.0,
        ..Params::default()
    };
    let alone = rank(
        &mut lexical,
        None,
        "bicycle",
        &Filter::default(),
        10,
        &params,
    )
    .unwrap();
    assert_eq!(keys(&lexical, &alone).len(), 2);
    assert!(alone.iter().all(|r| r.matched() == Matched::Lexical));
    assert!((alone[0].score - 1.0).abs() < 1e-6, "relative to the best");

    let fused = rank(
        &mut lexical,
        semantic,
        "bicycle",
        &Filter::default(),
        10,
        &params,
    )
    .unwrap();
    // t2 gains by meaning; t1's cosine (0.1) is below the floor; t3
    // shares no word and is found by meaning alone.
    assert_eq!(keys(&lexical, &fused), ["t2", "t1", "t3"]);
    let t2_alone = alone.iter().find(|r| r.order == order(2, 0)).unwrap();
    assert!(fused[0].score > t2_alone.score + 0.3);
    assert_eq!(
        fused.iter().map(Ranked::matched).collect::<Vec<_>>(),
        [Matched::Both, Matched::Lexical, Matched::Semantic]
    );
    assert!((fused[2].score - (0.95 - 0.2) / 0.8).abs() < 0.02);

    let none = Params {
        semantic_weight: 0.0,
        ..params.clone()
    };
    let weightless = rank(
        &mut lexical,
        semantic,
        "bicycle",
        &Filter::default(),
        10,
        &none,
    )
    .unwrap();
    assert_eq!(keys(&lexical, &weightless), keys(&lexical, &alone));
}

#[test]
fn the_filter_binds_both_sides() {
    let (mut lexical, vectors) = setup();
    let query = [1.0, 0.0, 0.0, 0.0];
    let semantic = Some(Semantic {
        vectors: &vectors,
        query: &query,
    });
    let early = Filter {
        order: Some((order(1, 0), order(2, u32::MAX))),
        ..Filter::default()
    };
    let fused = rank(
        &mut lexical,
        semantic,
        "bicycle puppy",
        &early,
        10,
        &Params::default(),
    )
    .unwrap();
    assert_eq!(keys(&lexical, &fused), ["t2", "t1"]);
}

/// A question that names one participant weighs the others' messages
/// at `other_speakers`: the named one's answer comes first although
/// the other's matches the words better; a question naming both, or
/// nobody, ranks as before; the prior lives through a reopening.
#[test]
fn a_question_that_names_one_participant_prefers_their_messages() {
    let dir = tempfile::tempdir().unwrap();
    let said = |turn: u32, name: &str, text: &str| Item {
        name: Some(name.into()),
        ..trace(turn, f64::from(turn) * 86_400.0, text)
    };
    let items = [
        said(1, "Caroline", "I love pottery"),
        said(
            2,
            "Melanie",
            "We take the pottery class, a pottery class we take weekly",
        ),
        said(3, "Melanie", "We painted the fence"),
    ];
    let mut lexical = Lexical::open(dir.path()).unwrap();
    lexical.upsert(&items).unwrap();
    lexical.commit("").unwrap();
    let top = |lexical: &mut Lexical, query: &str, params: &Params| {
        let ranked = rank(lexical, None, query, &Filter::default(), 10, params).unwrap();
        keys(lexical, &ranked)
    };
    let params = Params::default();
    assert_eq!(
        top(&mut lexical, "pottery class", &params)[0],
        "t2",
        "words alone"
    );
    assert_eq!(
        top(
            &mut lexical,
            "What pottery class did Caroline take?",
            &params
        )[0],
        "t1"
    );
    let off = Params {
        other_speakers: 1.0,
        ..Params::default()
    };
    assert_eq!(
        top(&mut lexical, "What pottery class did Caroline take?", &off)[0],
        "t2"
    );
    let both = "pottery class of Caroline and Melanie";
    assert_eq!(
        top(&mut lexical, both, &params),
        top(&mut lexical, both, &off),
        "both named: no prior"
    );
    drop(lexical);
    let mut reopened = Lexical::open(dir.path()).unwrap();
    assert_eq!(
        top(
            &mut reopened,
            "What pottery class did Caroline take?",
            &params
        )[0],
        "t1"
    );
}

/// The question prior: a message that mostly asks ranks after the reply
/// that tells, though it holds more of the question's words; a tool's
/// output is no message, and no prior weighs it. Kept across a reopen.
#[test]
fn a_message_that_mostly_asks_ranks_after_one_that_tells() {
    let dir = tempfile::tempdir().unwrap();
    // A sitting each: no context between them.
    let of_type = |turn: u32, trace_type: u8, text: &str| Item {
        trace_type,
        ..trace(turn, f64::from(turn) * 86_400.0, text)
    };
    let items = [
        of_type(1, 1, "Which pottery class do you take? The pottery class?"),
        of_type(2, 2, "I take a pottery class on Mondays."),
        of_type(3, 4, "pottery? class? schedule?"),
    ];
    let mut lexical = Lexical::open(dir.path()).unwrap();
    lexical.upsert(&items).unwrap();
    lexical.commit("").unwrap();
    let question = "Which pottery class does she take?";
    let top = |lexical: &mut Lexical, params: &Params| {
        let ranked = rank(lexical, None, question, &Filter::default(), 10, params).unwrap();
        keys(lexical, &ranked)
    };
    let off = Params {
        question_prior: 1.0,
        ..Params::default()
    };
    assert_eq!(top(&mut lexical, &off)[0], "t1", "by the words");
    assert_eq!(top(&mut lexical, &Params::default())[0], "t2");
    let asks = |lexical: &Lexical| {
        items
            .iter()
            .map(|i| lexical.said(i.order).asks)
            .collect::<Vec<_>>()
    };
    assert_eq!(asks(&lexical), [true, false, false]);
    drop(lexical);
    let mut reopened = Lexical::open(dir.path()).unwrap();
    assert_eq!(asks(&reopened), [true, false, false]);
    assert_eq!(top(&mut reopened, &Params::default())[0], "t2");
}

/// A neighbour that matches nothing itself ranks after every real match,
/// however strong the match it neighbours: it is context, not an answer.
#[test]
fn neighbours_that_match_nothing_come_after_every_real_match() {
    let mut lexical = Lexical::in_memory().unwrap();
    let items = [
        trace(1, 0.0, "my job, my job is teaching: the job I love"),
        trace(2, 60.0, "my sister is getting married in Lisbon"),
        trace(
            3,
            86_400.0,
            "there was a long queue at the bakery this morning, and then the bus came late again, the driver was new, the streets were wet, and on the way we talked about a job",
        ),
    ];
    lexical.upsert(&items).unwrap();
    lexical.commit("").unwrap();
    let ranked = rank(
        &mut lexical,
        None,
        "what is my job?",
        &Filter::default(),
        10,
        &Params::default(),
    )
    .unwrap();
    assert_eq!(keys(&lexical, &ranked), ["t1", "t3", "t2"]);
    assert_eq!(ranked[2].matched(), Matched::Context, "still found, last");
    assert!(ranked[2].score < ranked[1].score);
}

/// The conversation's words closest in meaning to a question join its word
/// query: "pets" finds the message that says "puppy" by its words, and the
/// question's own words still rank first.
#[test]
fn expansion_finds_by_the_conversations_own_words_what_the_question_names_otherwise() {
    let mut lexical = Lexical::in_memory().unwrap();
    let items = [
        trace(1, 0.0, "we talked about pets and the weather"),
        trace(2, 86_400.0, "my new puppy chews everything"),
        trace(3, 172_800.0, "the bicycle race is on sunday"),
        trace(4, 259_200.0, "puppies and bicycles everywhere"),
    ];
    lexical.upsert(&items).unwrap();
    lexical.commit("").unwrap();
    let vocabulary = lexical.vocabulary().unwrap();
    for word in ["pets", "puppy", "puppies", "chews", "bicycle", "weather"] {
        assert!(vocabulary.contains(&word.to_owned()), "{vocabulary:?}");
    }
    // "pets" and "puppy"/"puppies" are close in meaning; the rest is not.
    let mut words = WordVectors::new(4, 100);
    for (word, v) in [
        ("pets", toward(1, 0.9)),
        ("puppy", toward(1, 0.8)),
        ("puppies", toward(1, 0.79)),
        ("chews", toward(2, 0.1)),
        ("bicycle", toward(3, 0.0)),
        ("bicycles", toward(3, 0.0)),
        ("weather", toward(2, 0.0)),
        ("talked", toward(2, 0.0)),
        ("race", toward(3, 0.0)),
        ("sunday", toward(3, 0.0)),
        ("everywhere", toward(2, 0.0)),
        ("everything", toward(2, 0.0)),
        ("new", toward(2, 0.0)),
    ] {
        words.insert(word, &v);
    }
    let question = toward(1, 0.9);
    let one = Params {
        expansion_words: 1,
        ..Params::default()
    };
    let (unexpanded, terms) = by_words(&mut lexical, "which pets", &one);
    assert_eq!(terms, ["pet"]);
    let chosen = expansion(&mut lexical, &words, &question, &terms, &one);
    // "puppy" and "puppies" share one term, and "pets" is the question's.
    assert_eq!(chosen.len(), 1, "{chosen:?}");
    assert_eq!(chosen[0].0, "puppi");
    // Half of the question's one term.
    assert!((chosen[0].1 - 0.5).abs() < 1e-6, "{chosen:?}");
    let plain = unexpanded
        .fuse_all(None, &one)
        .best(&one, &|_| Said::default(), None);
    assert_eq!(keys(&lexical, &plain)[0], "t1");
    assert!(!keys(&lexical, &plain).contains(&"t2".to_owned()));
    let (asked, _) = by_words(&mut lexical, "which pets", &one);
    let expanded = expand(&mut lexical, asked, &chosen, &one)
        .fuse_all(None, &one)
        .best(&one, &|_| Said::default(), None);
    let found = keys(&lexical, &expanded);
    assert_eq!(found[0], "t1", "the question's own word first: {found:?}");
    assert!(found.contains(&"t2".to_owned()), "{found:?}");
    assert!(found.contains(&"t4".to_owned()), "{found:?}");
    assert!(!found.contains(&"t3".to_owned()), "{found:?}");
    // What matched by the expansion alone matched by meaning: it shares
    // no word with the question.
    let matched = |key: &str| {
        let at = found.iter().position(|k| k == key).unwrap();
        expanded[at].matched()
    };
    assert_eq!(matched("t1"), Matched::Lexical);
    assert_eq!(matched("t2"), Matched::Semantic);

    // A question none of whose words the conversation uses is left to its
    // meaning: the expansion alone would stand in for it at full weight.
    let (asked, _) = by_words(&mut lexical, "which kittens", &one);
    let unknown = expand(&mut lexical, asked, &chosen, &one)
        .fuse_all(None, &one)
        .best(&one, &|_| Said::default(), None);
    assert!(unknown.is_empty(), "{:?}", keys(&lexical, &unknown));

    // Off: no expansion at all.
    let off = Params {
        expansion_words: 0,
        ..Params::default()
    };
    assert!(expansion(&mut lexical, &words, &question, &terms, &off).is_empty());
    // Each word weighs at most as much as one of the question's.
    let many = Params {
        expansion_words: 10,
        expansion_weight: 50.0,
        ..Params::default()
    };
    let heavy = expansion(&mut lexical, &words, &question, &terms, &many);
    assert!(heavy.iter().all(|(_, w)| *w <= 1.0), "{heavy:?}");
}

/// A word in most of the messages singles none out: the expansion passes
/// over it, however close in meaning.
#[test]
fn expansion_passes_over_a_word_most_messages_hold() {
    let mut lexical = Lexical::in_memory().unwrap();
    let items = [
        trace(1, 0.0, "pets are welcome"),
        trace(2, 86_400.0, "the dog barked"),
        trace(3, 172_800.0, "the dog slept"),
        trace(4, 259_200.0, "the dog and the cat"),
    ];
    lexical.upsert(&items).unwrap();
    lexical.commit("").unwrap();
    let mut words = WordVectors::new(4, 100);
    words.insert("dog", &toward(1, 0.9));
    words.insert("cat", &toward(1, 0.8));
    let params = Params::default();
    let chosen = expansion(
        &mut lexical,
        &words,
        &toward(1, 0.9),
        &["pet".to_owned()],
        &params,
    );
    let terms: Vec<&str> = chosen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(terms, ["cat"]);
}

/// The pipeline's second half ranks each ranking of a question as its
/// steps one after the other do; without a table of word vectors there
/// is no expansion.
#[test]
fn the_pipeline_ranks_as_its_steps_do() {
    let (mut lexical, vectors) = setup();
    let mut table = WordVectors::new(4, 100);
    table.insert("puppy", &toward(3, 0.95));
    table.insert("bicycle", &toward(1, 0.0));
    let query = toward(3, 0.9);
    // Sittings are scored in their own test.
    let params = Params {
        sitting_weight: 0.0,
        ..Params::default()
    };
    let question = "the stolen race";
    let (words, terms) = by_words(&mut lexical, question, &params);
    let chosen = expansion(&mut lexical, &table, &query, &terms, &params);
    // "bicycle" is in two messages of three: passed over.
    assert_eq!(chosen, [("puppi".to_owned(), 1.0)]);
    let semantic = Semantic {
        vectors: &vectors,
        query: &query,
    };
    let sequential = expand(&mut lexical, words, &chosen, &params)
        .fuse_all(Some(semantic), &params)
        .best(&params, &|o| lexical.said(o), None);
    let whole = |lexical: &mut Lexical, table: Option<&WordVectors>| {
        let mut source = IndexSource::new(lexical, Some(&vectors), table);
        let wants = [(Filter::default(), 10), (Filter::default(), 0)];
        let lexed = rank_index(&mut source, |s| {
            pipeline::by_words(s, question, &wants, &params)
        })
        .unwrap();
        rank_index(&mut source, |s| {
            pipeline::by_meaning(s, lexed, Some(&query), &params)
        })
        .unwrap()
    };
    let together = whole(&mut lexical, Some(&table));
    assert_eq!(together.len(), 2);
    assert!(together[1].is_empty(), "nothing asked, nothing ranked");
    assert_eq!(together[0], sequential);
    assert_eq!(keys(&lexical, &together[0])[0], "t3");
    let unexpanded = whole(&mut lexical, None);
    assert!(unexpanded[0].iter().all(|r| r.expansion == 0.0));
    assert!(together[0].iter().any(|r| r.expansion > 0.0));
}

/// A sitting that as a whole holds the question's words lifts its
/// messages: here one that shares a single word with the question, and
/// scores below another such message on its own, comes first once
/// sittings are scored. Its neighbours are too far to lend it theirs.
#[test]
fn a_sitting_that_holds_the_question_lifts_its_messages() {
    let mut lexical = Lexical::in_memory().unwrap();
    let filler = [
        "the weather stayed grey all week",
        "coffee tastes better in the morning",
        "I repainted the hallway",
        "the train was late again",
    ];
    let mut items = vec![trace(1, 0.0, "the camping weekend went well overall")];
    // The rest of its sitting, a minute apart; the question's other words
    // three messages on.
    for (i, text) in filler.iter().enumerate() {
        items.push(trace(2 + i as u32, 60.0 * (i + 1) as f64, text));
    }
    items.push(trace(6, 400.0, "the kids asked about the lake trip"));
    // Another sitting, a day later: one shorter message on camping alone.
    items.push(trace(7, 86_400.0, "camping gear sale this week"));
    for (i, text) in filler.iter().enumerate() {
        items.push(trace(8 + i as u32, 86_460.0 + 60.0 * i as f64, text));
    }
    lexical.upsert(&items).unwrap();
    lexical.commit("").unwrap();
    let ask = |lexical: &mut Lexical, sitting_weight| {
        let params = Params {
            sitting_weight,
            ..Params::default()
        };
        let ranked = rank(
            lexical,
            None,
            "camping with the kids at the lake",
            &Filter::default(),
            10,
            &params,
        )
        .unwrap();
        let camping: Vec<String> = keys(lexical, &ranked)
            .into_iter()
            .filter(|k| k == "t1" || k == "t7")
            .collect();
        camping
    };
    assert_eq!(
        ask(&mut lexical, 0.0),
        ["t7", "t1"],
        "alone, the shorter wins"
    );
    assert_eq!(ask(&mut lexical, 0.3), ["t1", "t7"], "its sitting lifts it");

    let sittings = lexical.sittings(3600.0).unwrap();
    assert_eq!(sittings.len(), 2);
    assert_eq!(
        (sittings.of(order(6, 0)), sittings.of(order(7, 0))),
        (Some(0), Some(1))
    );
    // How much of the question each sitting holds: the first both words,
    // the second one of the two.
    let scores = sitting_shares(&mut lexical, &[("kid", 1.0), ("camp", 1.0)]);
    assert!(scores[0] > 0.8 && scores[0] <= 1.0, "{scores:?}");
    assert!(scores[1] > 0.2 && scores[1] < 0.6, "{scores:?}");
    // The word the second lacks weighs less: it holds more of the question.
    let weighted = sitting_shares(&mut lexical, &[("kid", 0.5), ("camp", 1.0)]);
    assert!(weighted[1] > scores[1], "{weighted:?}");
    let none = sitting_shares(&mut lexical, &[("zebra", 1.0)]);
    assert_eq!(none, [0.0, 0.0]);
}
