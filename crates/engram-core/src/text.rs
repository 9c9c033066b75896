//! Small text helpers shared by the summarizers, the snapshot, the search
//! index and recall.

/// `text` on one line: every run of whitespace (newlines too) becomes one
/// space, and the ends are trimmed.
pub fn fold_whitespace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// `text` in at most `max` characters: cut short, it ends with "…".
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

/// Part of a text: characters `from..to` of the `of` it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excerpt {
    /// The part, with "…" where it was cut.
    pub text: String,
    pub from: usize,
    pub to: usize,
    pub of: usize,
}

impl Excerpt {
    /// Whether anything was left out.
    pub fn is_cut(&self) -> bool {
        self.from > 0 || self.to < self.of
    }
}

/// Most query words an excerpt looks for.
const EXCERPT_WORDS: usize = 32;

/// `text` in at most `max` characters, around where it names `words`
/// (content words, lowercase, a plural's "s" dropped: `merge::content_words`):
/// the stretch naming the most of them (different words first, then
/// occurrences), with a little of what comes before. A text naming none,
/// or short enough, is cut from its start as [`shorten`] does. Linear in
/// the text: one pass to find the words, one sliding window over them.
pub fn excerpt(text: &str, max: usize, words: &[String]) -> Excerpt {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    if n <= max {
        return Excerpt {
            text: text.to_owned(),
            from: 0,
            to: n,
            of: n,
        };
    }
    let words = &words[..words.len().min(EXCERPT_WORDS)];
    // (start, end, which word) of each occurrence, in order.
    let mut hits: Vec<(usize, usize, usize)> = Vec::new();
    let mut i = 0;
    while i < n {
        if !chars[i].is_alphanumeric() {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && chars[i].is_alphanumeric() {
            i += 1;
        }
        let word: String = chars[start..i]
            .iter()
            .flat_map(|c| c.to_lowercase())
            .collect();
        if let Some(k) = words.iter().position(|w| names(&word, w)) {
            hits.push((start, i, k));
        }
    }
    let shown = max.saturating_sub(2).max(1);
    if hits.is_empty() {
        let cut = shorten(text, max);
        let to = cut.chars().count().saturating_sub(1);
        return Excerpt {
            text: cut,
            from: 0,
            to,
            of: n,
        };
    }
    // The window of hits that fits four fifths of what is shown (the rest
    // is what leads up to it), naming the most.
    let room = shown * 4 / 5;
    let mut counts = vec![0usize; words.len()];
    let (mut distinct, mut lo) = (0, 0);
    let mut best = (0, 0, 0, 0); // (distinct, hits, first, last)
    for hi in 0..hits.len() {
        counts[hits[hi].2] += 1;
        if counts[hits[hi].2] == 1 {
            distinct += 1;
        }
        while hits[hi].1 - hits[lo].0 > room && lo < hi {
            counts[hits[lo].2] -= 1;
            if counts[hits[lo].2] == 0 {
                distinct -= 1;
            }
            lo += 1;
        }
        if (distinct, hi - lo + 1) > (best.0, best.1) {
            best = (distinct, hi - lo + 1, lo, hi);
        }
    }
    let (first, last) = (hits[best.2].0, hits[best.3].1);
    let lead = shown.saturating_sub(last - first) / 4;
    let mut from = first.saturating_sub(lead);
    let mut to = (from + shown).min(n);
    if to == n {
        from = n.saturating_sub(shown);
    }
    // Whole words at the ends, where a space is near.
    if from > 0
        && let Some(k) = (from..first.min(from + 24)).find(|&k| chars[k - 1].is_whitespace())
    {
        from = k;
    }
    if to < n
        && let Some(k) = (last.max(to.saturating_sub(24))..to)
            .rev()
            .find(|&k| chars[k].is_whitespace())
    {
        to = k;
    }
    let mut out = String::with_capacity(to - from + 8);
    if from > 0 {
        out.push('…');
    }
    out.extend(&chars[from..to]);
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    if to < n {
        out.push('…');
    }
    Excerpt {
        text: out,
        from,
        to,
        of: n,
    }
}

/// Whether a text's `word` (lowercase) is the content word `w`: the same,
/// or, for a word of four letters or more, with an ending ("biscuits",
/// "deploying").
fn names(word: &str, w: &str) -> bool {
    word == w || (w.chars().count() >= 4 && word.starts_with(w) && word.len() - w.len() <= 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Any text and words: an excerpt of its own characters, in
        /// bounds, no longer than asked (its two "…" aside).
        #[test]
        fn an_excerpt_is_a_part_of_the_text_in_bounds(
            text in "[a-zé .\n]{0,400}",
            words in proptest::collection::vec("[a-z]{1,6}", 0..5),
            max in 1usize..120,
        ) {
            let e = excerpt(&text, max, &words);
            let n = text.chars().count();
            proptest::prop_assert_eq!(e.of, n);
            proptest::prop_assert!(e.from <= e.to && e.to <= n);
            proptest::prop_assert!(e.text.chars().count() <= max.max(2) + 1, "{:?}", e);
            let inner = e.text.trim_start_matches('…').trim_end_matches('…');
            proptest::prop_assert!(text.contains(inner.trim()), "{:?}", e);
        }
    }

    #[test]
    fn an_excerpt_is_cut_around_the_words_it_names() {
        let text = format!(
            "{} the build failed with error E4012 in ledger.rs {}",
            "setup line ".repeat(60),
            "trailing output ".repeat(60)
        );
        let words = vec!["error".to_owned(), "e4012".to_owned()];
        let e = excerpt(&text, 120, &words);
        assert!(e.text.contains("error E4012 in ledger.rs"), "{e:?}");
        assert!(e.text.starts_with('…') && e.text.ends_with('…'), "{e:?}");
        assert!(e.text.chars().count() <= 120, "{}", e.text.chars().count());
        assert!(e.is_cut() && e.from > 0 && e.to < e.of);
        let of: Vec<char> = text.chars().collect();
        let inner: String = of[e.from..e.to].iter().collect();
        assert!(e.text.contains(inner.trim()));
        // The last line of a long output.
        let tail = format!(
            "{} result: 41 passed, 1 failed (test_refund)",
            "ok ".repeat(400)
        );
        let e = excerpt(&tail, 100, &["refund".to_owned()]);
        assert!(e.text.ends_with("failed (test_refund)"), "{e:?}");
        assert_eq!(e.to, e.of);
        // Naming none, or short: from the start.
        assert_eq!(excerpt(&text, 50, &["zebra".to_owned()]).from, 0);
        assert!(!excerpt("short", 50, &words).is_cut());
        // The stretch naming more different words wins over repeats.
        let both = format!(
            "{} alpha alpha alpha {} alpha beta {}",
            "x ".repeat(100),
            "y ".repeat(100),
            "z ".repeat(100)
        );
        let e = excerpt(&both, 40, &["alpha".to_owned(), "beta".to_owned()]);
        assert!(e.text.contains("alpha beta"), "{e:?}");
    }

    #[test]
    fn cuts_keep_whole_characters() {
        assert_eq!(cut("héllo".into(), 2), "h");
        assert_eq!(cut("héllo".into(), 3), "hé");
        assert_eq!(cut("abc".into(), 9), "abc");
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(shorten("ab cdef", 4), "ab…");
        assert_eq!(shorten("abc", 3), "abc");
    }

    #[test]
    fn runs_of_whitespace_become_one_space() {
        assert_eq!(fold_whitespace("  a\n\tb   c \r\n"), "a b c");
        assert_eq!(fold_whitespace(" \n "), "");
    }
}
