//! The plain BM25 every retriever is compared with: rank_bm25's Okapi
//! BM25 (k1 = 1.5, b = 0.75, negative idf floored at 0.25 × the mean idf)
//! over lower-cased alphanumeric words of each message, nothing tuned.

use std::collections::HashMap;

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

pub struct Bm25 {
    docs: Vec<HashMap<String, f64>>,
    lens: Vec<f64>,
    avg_len: f64,
    idf: HashMap<String, f64>,
}

impl Bm25 {
    pub fn new<'a>(texts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut docs = Vec::new();
        let mut lens = Vec::new();
        let mut df: HashMap<String, f64> = HashMap::new();
        for text in texts {
            let w = words(text);
            lens.push(w.len() as f64);
            let mut tf: HashMap<String, f64> = HashMap::new();
            for t in w {
                *tf.entry(t).or_default() += 1.0;
            }
            for t in tf.keys() {
                *df.entry(t.clone()).or_default() += 1.0;
            }
            docs.push(tf);
        }
        let n = docs.len() as f64;
        let mut idf: HashMap<String, f64> = df
            .into_iter()
            .map(|(t, f)| (t, ((n - f + 0.5) / (f + 0.5)).ln()))
            .collect();
        let mean = idf.values().sum::<f64>() / idf.len().max(1) as f64;
        for v in idf.values_mut() {
            if *v < 0.0 {
                *v = 0.25 * mean;
            }
        }
        let avg_len = lens.iter().sum::<f64>() / n.max(1.0);
        Self {
            docs,
            lens,
            avg_len,
            idf,
        }
    }

    /// Document indices, best first, at most `k`.
    pub fn top(&self, query: &str, k: usize) -> Vec<usize> {
        let (k1, b) = (1.5, 0.75);
        let q = words(query);
        let mut scored: Vec<(f64, usize)> = self
            .docs
            .iter()
            .enumerate()
            .map(|(i, tf)| {
                let norm = k1 * (1.0 - b + b * self.lens[i] / self.avg_len);
                let s = q
                    .iter()
                    .map(|t| {
                        let f = tf.get(t).copied().unwrap_or(0.0);
                        self.idf.get(t).copied().unwrap_or(0.0) * f * (k1 + 1.0) / (f + norm)
                    })
                    .sum::<f64>();
                (s, i)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(k).map(|(_, i)| i).collect()
    }
}
