//! The benches' message text: about 200 tokens of English-like words, or
//! pseudo-words drawn by Zipf's law from a vocabulary.

/// About 200 tokens of varied English-like text.
pub(crate) fn text(seed: usize) -> String {
    const WORDS: &[&str] = &[
        "agent",
        "memory",
        "weather",
        "forecast",
        "city",
        "tool",
        "result",
        "compaction",
        "summary",
        "budget",
        "token",
        "prompt",
        "transcript",
        "provider",
        "latency",
        "durable",
        "archive",
        "question",
        "answer",
        "context",
        "window",
        "cache",
        "payload",
        "render",
        "stream",
    ];
    let mut out = String::with_capacity(1100);
    let mut x = seed as u64 * 2_654_435_761 + 1;
    for i in 0..180 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
        out.push(if i % 15 == 14 { '.' } else { ' ' });
    }
    out
}

/// The bench's messages: `text` (25 words), or pseudo-words drawn by
/// Zipf's law from a vocabulary.
pub(crate) struct Words {
    /// Cumulative weights of ranks 1..=n (1/rank each); empty: `text`.
    cumulative: Vec<f64>,
}

impl Words {
    pub(crate) fn new(vocabulary: usize) -> Self {
        let mut total = 0.0;
        let cumulative = (1..=vocabulary)
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect();
        Self { cumulative }
    }

    /// `n` words for `seed`, a sentence every 15.
    pub(crate) fn text(&self, seed: usize, n: usize) -> String {
        if self.cumulative.is_empty() {
            return first_message(seed, n);
        }
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let mut x = seed as u64 * 2_654_435_761 + 1;
        let mut out = String::with_capacity(n * 8);
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64 * total;
            let rank = self.cumulative.partition_point(|&c| c < u);
            out.push_str(&word(rank));
            out.push(if i % 15 == 14 { '.' } else { ' ' });
        }
        out
    }
}

/// The pseudo-word of `rank`: syllables spelling the number, so each rank
/// has its own word (and no stemmer makes two of them one).
fn word(rank: usize) -> String {
    const SYLLABLES: [&str; 16] = [
        "ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "vu", "be", "do", "fi", "gu", "ha", "jo",
        "ze",
    ];
    let mut n = rank;
    let mut out = String::new();
    loop {
        out.push_str(SYLLABLES[n % 16]);
        n /= 16;
        if n == 0 {
            break;
        }
    }
    out.push('n');
    out
}

/// The first `words` words of the bench's text for `seed`, repeated as
/// needed.
fn first_message(seed: usize, words: usize) -> String {
    let mut out = Vec::with_capacity(words);
    let mut k = 0;
    while out.len() < words {
        let more = text(seed + k);
        out.extend(more.split(' ').take(words - out.len()).map(str::to_owned));
        k += 1_000_000;
    }
    out.join(" ")
}
