//! BM25 relevance of short documents (memories) to a query.

use std::collections::HashMap;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Lowercase alphanumeric words.
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The BM25 score of each document for `query` (Okapi BM25 with the
/// non-negative idf variant, k1 = 1.2, b = 0.75).
pub fn scores(query: &str, docs: &[String]) -> Vec<f64> {
    let terms = tokenize(query);
    let docs: Vec<Vec<String>> = docs.iter().map(|d| tokenize(d)).collect();
    if terms.is_empty() || docs.is_empty() {
        return vec![0.0; docs.len()];
    }
    let n = docs.len() as f64;
    let avg_len = docs.iter().map(Vec::len).sum::<usize>() as f64 / n;
    let mut df: HashMap<&str, usize> = HashMap::new();
    for doc in &docs {
        let mut seen: Vec<&str> = doc.iter().map(String::as_str).collect();
        seen.sort_unstable();
        seen.dedup();
        for t in seen {
            *df.entry(t).or_default() += 1;
        }
    }
    docs.iter()
        .map(|doc| {
            let len = doc.len() as f64;
            terms
                .iter()
                .map(|term| {
                    let tf = doc.iter().filter(|w| *w == term).count() as f64;
                    if tf == 0.0 {
                        return 0.0;
                    }
                    let d = df.get(term.as_str()).copied().unwrap_or(0) as f64;
                    let idf = ((n - d + 0.5) / (d + 0.5) + 1.0).ln();
                    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg_len.max(1.0)))
                })
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relevant_documents_score_higher() {
        let docs: Vec<String> = [
            "The user lives in Oslo and likes skiing",
            "Deploys happen on Fridays",
            "Oslo weather was cold; the user asked about Oslo twice",
            "",
        ]
        .map(String::from)
        .to_vec();
        let s = scores("oslo weather", &docs);
        assert!(s[2] > s[0] && s[0] > s[1], "{s:?}");
        assert_eq!(s[1], 0.0);
        assert_eq!(s[3], 0.0);
        assert_eq!(scores("", &docs), vec![0.0; 4]);
        assert!(scores("x", &[]).is_empty());
        assert_eq!(tokenize("Hello, WORLD-42!"), ["hello", "world", "42"]);
    }
}
