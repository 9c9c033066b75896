//! EXPERIMENT: fusion of lexical and semantic ranks, in process.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Result;
use engram_embed::LocalModel;
use engram_index::{Filter, Item, Kind, Lexical, Params};

use super::locomo::{Conversation, Score};

fn env(name: &str, default: f32) -> f32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cached(model: &LocalModel, cache: &Path, texts: &[String]) -> Result<Vec<Vec<f32>>> {
    if let Ok(bytes) = std::fs::read(cache) {
        return Ok(serde_json::from_slice(&bytes)?);
    }
    let v = model
        .embed_blocking(texts)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::write(cache, serde_json::to_vec(&v)?)?;
    Ok(v)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub fn run(convs: &[Conversation], model_dir: &Path, cache: &Path, params: &Params) -> Result<()> {
    let model = LocalModel::load(model_dir)?;
    std::fs::create_dir_all(cache)?;
    let mode = std::env::var("FUSION").unwrap_or_else(|_| "rrf".into());
    let ws = env("WS", 0.5);
    let k = env("RRFK", 60.0);
    let c0 = env("C0", 0.2);
    let snw = env("SNW", 0.0);
    let mut score = Score::default();
    let mut sem_only = Score::default();
    for (n, conv) in convs.iter().enumerate() {
        let orders = super::orders(conv);
        let texts: Vec<String> = conv
            .messages
            .iter()
            .map(|m| format!("{}: {}", m.speaker, m.text))
            .collect();
        let vectors = cached(&model, &cache.join(format!("m{n}.json")), &texts)?;
        let questions: Vec<String> = conv.questions.iter().map(|q| q.question.clone()).collect();
        let qv = cached(&model, &cache.join(format!("q{n}.json")), &questions)?;
        let mut lex = Lexical::in_memory()?;
        let items: Vec<Item> = conv
            .messages
            .iter()
            .zip(&orders)
            .map(|(m, &order)| Item {
                key: m.dia_id.clone(),
                kind: Kind::Trace,
                trace_type: 1,
                order,
                ts: m.ts,
                text: m.text.clone(),
                name: Some(m.speaker.clone()),
                body: m.dia_id.clone(),
            })
            .collect();
        lex.upsert(&items)?;
        lex.commit("")?;
        let at: HashMap<u64, usize> = orders.iter().enumerate().map(|(i, o)| (*o, i)).collect();
        for (q, qv) in conv.questions.iter().zip(&qv) {
            let hits =
                engram_index::rank(&mut lex, None, &q.question, &Filter::default(), 256, params)?;
            let lexical: Vec<(usize, f32)> = hits.iter().map(|h| (at[&h.order], h.score)).collect();
            // semantic with neighbour smoothing
            let cos: Vec<f32> = vectors.iter().map(|v| dot(qv, v)).collect();
            let mut sem: Vec<f32> = cos.clone();
            if snw > 0.0 {
                for i in 0..cos.len() {
                    for d in 1..=2usize {
                        let share = snw / d as f32;
                        for j in [i.checked_sub(d), Some(i + d)].into_iter().flatten() {
                            if j < cos.len()
                                && (conv.messages[j].ts - conv.messages[i].ts).abs() <= 3600.0
                            {
                                sem[i] += share * (cos[j] - c0).max(0.0);
                            }
                        }
                    }
                }
            }
            let mut sem_rank: Vec<usize> = (0..sem.len()).collect();
            sem_rank.sort_by(|&a, &b| sem[b].total_cmp(&sem[a]));
            sem_only.add(
                q,
                &sem_rank
                    .iter()
                    .take(25)
                    .map(|&i| conv.messages[i].dia_id.clone())
                    .collect::<Vec<_>>(),
            );
            let mut fused: HashMap<usize, f32> = HashMap::new();
            match mode.as_str() {
                "rrf" => {
                    for (r, (i, _)) in lexical.iter().enumerate() {
                        *fused.entry(*i).or_default() += 1.0 / (k + r as f32 + 1.0);
                    }
                    for (r, i) in sem_rank.iter().take(256).enumerate() {
                        *fused.entry(*i).or_default() += ws / (k + r as f32 + 1.0);
                    }
                }
                "mixn" => {
                    let top = lexical.first().map(|l| l.1).unwrap_or(1.0).max(1e-6);
                    for (i, s) in &lexical {
                        *fused.entry(*i).or_default() += s / top;
                    }
                    let stop = (sem[sem_rank[0]] - c0).max(1e-6);
                    for i in sem_rank.iter().take(256) {
                        *fused.entry(*i).or_default() += ws * ((sem[*i] - c0) / stop).max(0.0);
                    }
                }
                _ => {
                    let top = lexical.first().map(|l| l.1).unwrap_or(1.0).max(1e-6);
                    for (i, s) in &lexical {
                        *fused.entry(*i).or_default() += s / top;
                    }
                    for i in sem_rank.iter().take(256) {
                        *fused.entry(*i).or_default() +=
                            ws * ((sem[*i] - c0) / (1.0 - c0)).max(0.0);
                    }
                }
            }
            let mut ranked: Vec<(usize, f32)> = fused.into_iter().collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
            let cap = env("DIV", 0.0) as usize;
            if cap > 0 {
                let mut per: HashMap<u64, usize> = HashMap::new();
                let (mut first, mut rest) = (Vec::new(), Vec::new());
                for r in ranked {
                    let c = per.entry(conv.messages[r.0].ts.to_bits()).or_default();
                    *c += 1;
                    if *c <= cap {
                        first.push(r)
                    } else {
                        rest.push(r)
                    }
                }
                first.extend(rest);
                ranked = first;
            }
            score.add(
                q,
                &ranked
                    .iter()
                    .take(25)
                    .map(|(i, _)| conv.messages[*i].dia_id.clone())
                    .collect::<Vec<_>>(),
            );
        }
    }
    print!("{}", sem_only.table("semantic only"));
    print!(
        "{}",
        score.table(&format!("fused {mode} ws={ws} k={k} c0={c0} snw={snw}"))
    );
    Ok(())
}
