//! The LoCoMo long-conversation benchmark as the eval README describes
//! it: conversations, questions with their evidence turns, and evidence
//! recall@k per question category.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// One message of a conversation.
#[derive(Debug, Clone)]
pub struct Message {
    pub dia_id: String,
    /// Speaker A (the `user`) or not (the `assistant`).
    pub is_a: bool,
    pub speaker: String,
    /// The text, with a shared photo's caption appended.
    pub text: String,
    /// The session's date, epoch seconds.
    pub ts: f64,
}

/// The rows of a table: every question, then each category.
pub const CATEGORIES: [(Option<u8>, &str); 5] = [
    (None, "all"),
    (Some(1), "multi-hop"),
    (Some(2), "temporal"),
    (Some(3), "open-domain"),
    (Some(4), "single-hop"),
];

#[derive(Debug, Clone)]
pub struct Question {
    pub question: String,
    pub category: u8,
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Conversation {
    pub messages: Vec<Message>,
    pub questions: Vec<Question>,
}

/// Every `conv-*.json` under `dir`, by name.
pub fn load_dir(dir: &Path) -> Result<Vec<Conversation>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        bail!("no conversations (*.json) in {}", dir.display());
    }
    paths.iter().map(|p| load(p)).collect()
}

fn load(path: &Path) -> Result<Conversation> {
    let v: Value = serde_json::from_slice(&std::fs::read(path)?)
        .with_context(|| format!("parsing {}", path.display()))?;
    // Some files nest the dialogue under "conversation".
    let conv = v.get("conversation").unwrap_or(&v);
    let a = conv["speaker_a"].as_str().context("speaker_a")?.to_owned();
    let mut sessions = Vec::new();
    for k in 1.. {
        let Some(turns) = conv.get(format!("session_{k}")) else {
            if conv.get(format!("session_{k}_date_time")).is_some() {
                continue;
            }
            break;
        };
        let date = conv[format!("session_{k}_date_time")]
            .as_str()
            .unwrap_or_default();
        let ts = parse_date(date).with_context(|| format!("session {k} date {date:?}"))?;
        sessions.push((ts, turns.as_array().cloned().unwrap_or_default()));
    }
    let mut messages = Vec::new();
    for (ts, turns) in sessions {
        for t in turns {
            let speaker = t["speaker"].as_str().unwrap_or_default().to_owned();
            let mut text = t["text"].as_str().unwrap_or_default().to_owned();
            if let Some(c) = t.get("blip_caption").and_then(Value::as_str) {
                write!(text, " [shares {c}]").ok();
            }
            messages.push(Message {
                dia_id: normalize(t["dia_id"].as_str().unwrap_or_default()),
                is_a: speaker == a,
                speaker,
                text,
                ts,
            });
        }
    }
    let known: HashSet<&str> = messages.iter().map(|m| m.dia_id.as_str()).collect();
    let questions = v["qa"]
        .as_array()
        .context("qa")?
        .iter()
        .filter_map(|q| {
            let category = u8::try_from(q["category"].as_u64()?).ok()?;
            let evidence: Vec<String> = q["evidence"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .flat_map(|e| e.split(';'))
                .map(normalize)
                .filter(|e| known.contains(e.as_str()))
                .collect();
            ((1..=4).contains(&category) && !evidence.is_empty()).then(|| Question {
                question: q["question"].as_str().unwrap_or_default().to_owned(),
                category,
                evidence,
            })
        })
        .collect();
    Ok(Conversation {
        messages,
        questions,
    })
}

/// `D30:05` → `D30:5`.
fn normalize(id: &str) -> String {
    let id = id.trim();
    match id.split_once(':') {
        Some((d, n)) => format!("{d}:{}", n.trim_start_matches('0')),
        None => id.to_owned(),
    }
}

/// "1:56 pm on 8 May, 2023" → epoch seconds (UTC).
pub fn parse_date(s: &str) -> Result<f64> {
    let (time, date) = s.split_once(" on ").context("no ' on '")?;
    let (hm, ampm) = time.trim().split_once(' ').context("no am/pm")?;
    let (h, m) = hm.split_once(':').context("no h:m")?;
    let mut h: i64 = h.parse()?;
    let m: i64 = m.parse()?;
    if ampm.eq_ignore_ascii_case("pm") && h != 12 {
        h += 12;
    } else if ampm.eq_ignore_ascii_case("am") && h == 12 {
        h = 0;
    }
    let parts: Vec<&str> = date.split([' ', ',']).filter(|p| !p.is_empty()).collect();
    let [day, month, year] = parts[..] else {
        bail!("date is not 'D Month, YYYY'");
    };
    let month = engram_index::time::MONTHS
        .iter()
        .position(|n| n.eq_ignore_ascii_case(month))
        .context("month")? as i64
        + 1;
    let days = days_from_civil(year.parse()?, month, day.parse()?);
    Ok((days * 86_400 + h * 3600 + m * 60) as f64)
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// With `RECALL_MISSES` set, prints a question whose evidence is not all
/// in `ranked`'s top 10: where each piece ranked (of the 25) and the top
/// three, labelled by retriever. Where ranking experiments start.
pub fn print_miss(label: &str, conv: &Conversation, q: &Question, ranked: &[String]) {
    let top = &ranked[..ranked.len().min(10)];
    if std::env::var_os("RECALL_MISSES").is_none() || q.evidence.iter().all(|e| top.contains(e)) {
        return;
    }
    let text = |id: &str| {
        conv.messages
            .iter()
            .find(|m| m.dia_id == id)
            .map(|m| format!("{id} {}: {}", m.speaker, m.text))
            .unwrap_or_default()
    };
    println!("MISS [{label}] c{} {}", q.category, q.question);
    for e in &q.evidence {
        let pos = ranked.iter().position(|r| r == e);
        println!("   want {pos:?} {}", text(e));
    }
    for r in ranked.iter().take(3) {
        println!("   got {}", text(r));
    }
}

pub const KS: [usize; 3] = [5, 10, 25];

/// Evidence recall of one retriever: per category, per k, (all, any) hits.
#[derive(Debug, Default, Clone)]
pub struct Score {
    /// category → (questions, [all hits per k], [any hits per k])
    by_category: BTreeMap<u8, (usize, [usize; 3], [usize; 3])>,
}

impl Score {
    /// Records the ranked dia ids returned for `q`.
    pub fn add(&mut self, q: &Question, ranked: &[String]) {
        let e = self.by_category.entry(q.category).or_default();
        e.0 += 1;
        for (i, k) in KS.iter().enumerate() {
            let top: HashSet<&str> = ranked.iter().take(*k).map(String::as_str).collect();
            let found = q
                .evidence
                .iter()
                .filter(|d| top.contains(d.as_str()))
                .count();
            if found == q.evidence.len() {
                e.1[i] += 1;
            }
            if found > 0 {
                e.2[i] += 1;
            }
        }
    }

    /// (all, any) recall at `KS[k]`, over `category` or all when `None`.
    pub fn recall(&self, category: Option<u8>, k: usize) -> (f64, f64) {
        let (mut n, mut all, mut any) = (0, 0, 0);
        for (c, e) in &self.by_category {
            if category.is_none_or(|want| want == *c) {
                n += e.0;
                all += e.1[k];
                any += e.2[k];
            }
        }
        let n = n.max(1) as f64;
        (all as f64 / n, any as f64 / n)
    }

    pub fn questions(&self) -> usize {
        self.by_category.values().map(|e| e.0).sum()
    }

    /// One markdown row per category and overall.
    pub fn table(&self, name: &str) -> String {
        let mut out = String::new();
        for (cat, label) in CATEGORIES {
            write!(out, "| {name} | {label} |").ok();
            for k in 0..KS.len() {
                let (all, any) = self.recall(cat, k);
                write!(out, " {all:.3} / {any:.3} |").ok();
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_ids() {
        assert_eq!(
            parse_date("1:56 pm on 8 May, 2023").unwrap(),
            1_683_554_160.0
        );
        assert_eq!(parse_date("12:05 am on 1 January, 1970").unwrap(), 300.0);
        assert_eq!(normalize(" D30:05"), "D30:5");
    }
}
