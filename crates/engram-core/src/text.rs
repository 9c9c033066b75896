//! Small text helpers shared by the summarizers and the snapshot.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_whitespace_become_one_space() {
        assert_eq!(fold_whitespace("  a\n\tb   c \r\n"), "a b c");
        assert_eq!(fold_whitespace(" \n "), "");
    }
}
