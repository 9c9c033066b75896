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

#[cfg(test)]
mod tests {
    use super::*;

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
