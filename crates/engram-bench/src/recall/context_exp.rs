//! EXPERIMENT (not kept as is): the in-process ranking with the local
//! model's vectors, each message embedded alone or after the message
//! before it in its sitting.

use anyhow::Result;
use engram_embed::LocalModel;
use engram_index::{Embedded, Filter, Item, Kind, Lexical, Params, Semantic, Vectors};

use super::locomo::{Conversation, Score};

pub fn run(convs: &[Conversation], params: &Params) -> Result<()> {
    let model = LocalModel::load(std::path::Path::new("models/all-MiniLM-L6-v2"))?;
    let modes = std::env::var("RECALL_CONTEXT_MODES").unwrap_or("plain,prev".into());
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
            let mut lex = Lexical::in_memory()?;
            lex.upsert(&items)?;
            lex.commit("")?;
            let texts: Vec<String> = conv
                .messages
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let own = format!("{}: {}", m.speaker, m.text);
                    let prev = i.checked_sub(1).map(|j| &conv.messages[j]);
                    match (mode, prev) {
                        ("prev", Some(p)) if (m.ts - p.ts).abs() <= 3600.0 => {
                            format!("{}: {}\n{own}", p.speaker, p.text)
                        }
                        ("own_first", Some(p)) if (m.ts - p.ts).abs() <= 3600.0 => {
                            format!("{own}\n{}: {}", p.speaker, p.text)
                        }
                        ("prev_cap", Some(p)) if (m.ts - p.ts).abs() <= 3600.0 => {
                            let chars: Vec<char> = p.text.chars().collect();
                            let tail: String =
                                chars[chars.len().saturating_sub(300)..].iter().collect();
                            format!("{}: {tail}\n{own}", p.speaker)
                        }
                        ("prev_own", Some(p)) if (m.ts - p.ts).abs() <= 3600.0 => {
                            let n = m.text.chars().count() + m.speaker.chars().count() + 2;
                            let chars: Vec<char> = p.text.chars().collect();
                            let tail: String = chars[chars.len().saturating_sub(n.min(300))..]
                                .iter()
                                .collect();
                            format!("{tail}\n{own}")
                        }
                        ("prev_q", Some(p))
                            if (m.ts - p.ts).abs() <= 3600.0
                                && p.text.chars().rev().find(|c| matches!(c, '.' | '!' | '?')) == Some('?') =>
                        {
                            let n = m.text.chars().count() + m.speaker.chars().count() + 2;
                            let chars: Vec<char> = p.text.chars().collect();
                            let tail: String = chars[chars.len().saturating_sub(n.min(300))..].iter().collect();
                            format!("{tail}\n{own}")
                        }
                        ("prev_own2", Some(p)) if (m.ts - p.ts).abs() <= 3600.0 => {
                            let n = 2 * (m.text.chars().count() + m.speaker.chars().count() + 2);
                            let chars: Vec<char> = p.text.chars().collect();
                            let tail: String = chars[chars.len().saturating_sub(n.min(300))..]
                                .iter()
                                .collect();
                            format!("{tail}\n{own}")
                        }
                        ("prev_any", Some(p)) => format!("{}: {}\n{own}", p.speaker, p.text),
                        _ => own,
                    }
                })
                .collect();
            let mut vectors = Vectors::in_memory("m", 384);
            let mut embedded = vec![];
            for (chunk, items) in texts.chunks(64).zip(items.chunks(64)) {
                let vs = model.embed_blocking(chunk)?;
                for (v, item) in vs.into_iter().zip(items) {
                    embedded.push(Embedded {
                        key: item.key.clone(),
                        kind: Kind::Trace,
                        trace_type: item.trace_type,
                        order: item.order,
                        ts: item.ts,
                        vector: v,
                    });
                }
            }
            vectors.write(&embedded, &[])?;
            let questions: Vec<String> =
                conv.questions.iter().map(|q| q.question.clone()).collect();
            let qv = model.embed_blocking(&questions)?;
            for (q, v) in conv.questions.iter().zip(&qv) {
                let semantic = Some(Semantic {
                    vectors: &vectors,
                    query: v,
                });
                let hits = engram_index::rank(
                    &mut lex,
                    semantic,
                    &q.question,
                    &Filter::default(),
                    25,
                    params,
                )?;
                let ranked = hits
                    .iter()
                    .map(|h| Ok(h.body(&lex)?.unwrap_or_default()))
                    .collect::<Result<Vec<String>>>()?;
                score.add(q, &ranked);
            }
        }
        print!("{}", score.table(&format!("in process, {mode}")));
    }
    Ok(())
}
