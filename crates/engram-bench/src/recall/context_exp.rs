//! `--parts context`: the in-process ranking with the local
//! model's vectors, each message embedded alone or after the message
//! before it in its sitting; on LoCoMo and on the paraphrase set.

use anyhow::Result;
use engram_embed::LocalModel;
use engram_index::{Embedded, Filter, Item, Kind, Lexical, Params, Semantic, Vectors};

use super::locomo::{Conversation, Score};

/// (speaker, text, ts) of each message, in order.
type Said<'a> = (&'a str, &'a str, f64);

/// Each message's vector as `mode` reads it; `gap` ends a sitting.
fn embed(model: &LocalModel, mode: &str, msgs: &[Said], gap: f64) -> Result<Vec<Vec<f32>>> {
    let own = |(speaker, text, _): &Said| format!("{speaker}: {text}");
    let before = |i: usize| -> Option<String> {
        let prev = i.checked_sub(1).map(|j| &msgs[j])?;
        ((msgs[i].2 - prev.2).abs() <= gap).then(|| own(prev))
    };
    let tail = |s: &str, n: usize| -> String {
        let chars: Vec<char> = s.chars().collect();
        chars[chars.len().saturating_sub(n)..].iter().collect()
    };
    match mode {
        "pool_own" | "pool_own_all" => {
            // The kept reading is the stores' own (`context_of`).
            let pairs: Vec<(Option<String>, String)> = (0..msgs.len())
                .map(|i| {
                    let b = before(i);
                    let b = if mode == "pool_own" {
                        b.as_deref().map(engram_store::context_of)
                    } else {
                        b
                    };
                    (b, own(&msgs[i]))
                })
                .collect();
            Ok(model.embed_after_blocking(&pairs)?)
        }
        _ => {
            let texts: Vec<String> = (0..msgs.len())
                .map(|i| {
                    let text = own(&msgs[i]);
                    match (mode, before(i)) {
                        ("prev", Some(b)) => format!("{b}\n{text}"),
                        ("prev_own", Some(b)) => {
                            format!("{}\n{text}", tail(&b, text.chars().count().min(300)))
                        }
                        _ => text,
                    }
                })
                .collect();
            Ok(model.embed_blocking(&texts)?)
        }
    }
}

fn index(items: &[Item], vectors: Vec<Vec<f32>>) -> Result<(Lexical, Vectors)> {
    let mut lex = Lexical::in_memory()?;
    lex.upsert(items)?;
    lex.commit("")?;
    let mut v = Vectors::in_memory("m", 384);
    let embedded: Vec<Embedded> = items
        .iter()
        .zip(vectors)
        .map(|(item, vector)| Embedded {
            key: item.key.clone(),
            kind: Kind::Trace,
            trace_type: item.trace_type,
            order: item.order,
            ts: item.ts,
            vector,
        })
        .collect();
    v.write(&embedded, &[])?;
    Ok((lex, v))
}

fn ranked(
    lex: &mut Lexical,
    vectors: &Vectors,
    model: &LocalModel,
    question: &str,
    params: &Params,
) -> Result<Vec<String>> {
    let q = model.embed_blocking(&[question.to_owned()])?.remove(0);
    let semantic = Some(Semantic { vectors, query: &q });
    let hits = engram_index::rank(lex, semantic, question, &Filter::default(), 25, params)?;
    hits.iter()
        .map(|h| Ok(h.body(lex)?.unwrap_or_default()))
        .collect()
}

pub fn run(convs: &[Conversation], params: &Params) -> Result<()> {
    let model = LocalModel::load(std::path::Path::new("models/all-MiniLM-L6-v2"))?;
    let modes = std::env::var("RECALL_CONTEXT_MODES").unwrap_or("plain,prev_own,pool_own".into());
    for mode in modes.split(',') {
        let mut score = Score::default();
        for conv in convs {
            let orders = super::orders(conv);
            let items: Vec<Item> = conv
                .messages
                .iter()
                .zip(&orders)
                .map(|(m, order)| Item {
                    key: m.dia_id.clone(),
                    kind: Kind::Trace,
                    trace_type: if m.is_a { 1 } else { 2 },
                    order: *order,
                    ts: m.ts,
                    text: m.text.clone(),
                    name: Some(m.speaker.clone()),
                    body: m.dia_id.clone(),
                })
                .collect();
            let msgs: Vec<Said> = conv
                .messages
                .iter()
                .map(|m| (m.speaker.as_str(), m.text.as_str(), m.ts))
                .collect();
            let (mut lex, vectors) =
                index(&items, embed(&model, mode, &msgs, params.session_gap)?)?;
            for q in &conv.questions {
                score.add(q, &ranked(&mut lex, &vectors, &model, &q.question, params)?);
            }
        }
        print!("{}", score.table(&format!("in process, {mode}")));
        // The paraphrase set, in process with the same reading.
        let msgs = super::paraphrase::messages();
        let items: Vec<Item> = msgs
            .iter()
            .enumerate()
            .map(|(i, (name, text, ts))| Item {
                key: i.to_string(),
                kind: Kind::Trace,
                trace_type: if *name == "Jordan" { 1 } else { 2 },
                order: engram_index::order(i as u32 + 1, 0),
                ts: *ts,
                text: (*text).into(),
                name: Some((*name).into()),
                body: (*text).into(),
            })
            .collect();
        let (mut lex, vectors) = index(&items, embed(&model, mode, &msgs, params.session_gap)?)?;
        let (mut at1, mut at5) = (0, 0);
        for (said, question) in super::paraphrase::PAIRS {
            let r = ranked(&mut lex, &vectors, &model, question, params)?;
            let at = r.iter().position(|b| b == said);
            at1 += usize::from(at == Some(0));
            at5 += usize::from(at.is_some_and(|i| i < 5));
        }
        println!("paraphrases, {mode}: {at1}/20 @1, {at5}/20 @5");
    }
    Ok(())
}
