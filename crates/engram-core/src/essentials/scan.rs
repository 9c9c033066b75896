//! The patterns essentials are found by: identifiers, rules, decisions,
//! list items, errors and completions, each a check of one line, sentence
//! or token (no backtracking: linear in the text).

/// Words that mark a standing rule when a sentence starts with them.
const RULE_STARTS: &[&str] = &[
    "never",
    "always",
    "don't",
    "do not",
    "dont",
    "make sure",
    "remember to",
    "from now on",
    "avoid",
    "rule:",
    "constraint:",
    "important:",
    "note:",
];

/// Phrases that make a rule wherever they are in a sentence.
const RULE_PHRASES: &[&str] = &[
    " must ",
    " must not ",
    " mustn't ",
    " should never ",
    " should always ",
    " we never ",
    " you never ",
    " we always ",
    " you always ",
    " not allowed",
    " is forbidden",
    " are forbidden",
    " from now on",
];

/// Phrases of a decision.
const DECISION_PHRASES: &[&str] = &[
    "decided",
    "decision:",
    "we'll go with",
    "we will go with",
    "let's go with",
    "going with",
    "settled on",
    "we agreed",
    "agreed to",
    "we chose",
    "i chose",
    "opted for",
];

/// Phrases of an error fixed (an assistant's report).
const FIX_PHRASES: &[&str] = &[
    "fixed by",
    "fixed it by",
    "the fix was",
    "the fix is",
    "resolved by",
    "root cause",
    "caused by",
    "was failing because",
];

/// Words of an error in a tool's output.
const ERROR_WORDS: &[&str] = &[
    "error",
    "failed",
    "failure",
    "panicked",
    "exception",
    "traceback",
    "fatal",
    "denied",
    "refused",
    "timeout",
];

/// Words that report a task done.
const DONE_WORDS: &[&str] = &[
    "done",
    "finished",
    "completed",
    "complete",
    "fixed",
    "implemented",
    "merged",
    "shipped",
    "closed",
    "resolved",
    "landed",
    "deployed",
    "added",
    "wrote",
    "written",
    "removed",
    "updated",
    "renamed",
    "migrated",
    "upgraded",
    "bumped",
];

/// Words that say a task is not done after all.
const NOT_DONE: &[&str] = &["not", "t", "still", "yet", "haven", "isn", "wasn", "todo"];

/// Words of a message that lists tasks.
const TASK_CUES: &[&str] = &[
    "todo",
    "to-do",
    "task",
    "tasks",
    "steps",
    "plan",
    "checklist",
    "need",
    "needs",
    "please",
    "next",
    "backlog",
    "remaining",
];

/// File extensions that make a bare word a file name.
const EXTENSIONS: &[&str] = &[
    "rs", "py", "toml", "yaml", "yml", "json", "md", "ts", "tsx", "js", "go", "sql", "sh", "txt",
    "log", "conf", "cfg", "ini", "lock", "proto", "html", "css", "c", "h", "cpp", "java", "kt",
    "rb", "php", "env", "service", "tf", "csv", "xml",
];

/// Function words a coverage check leaves out.
const STOP: &[&str] = &[
    "the", "a", "an", "and", "or", "of", "to", "in", "on", "at", "for", "with", "by", "from", "is",
    "are", "was", "were", "be", "been", "it", "its", "this", "that", "these", "those", "we", "you",
    "i", "me", "my", "our", "your", "they", "them", "he", "she", "so", "as", "into", "then",
    "than", "please", "just", "also", "will", "ll", "s", "d", "m", "re", "ve", "can", "could",
    "should", "would", "let", "us",
];

fn lower(text: &str) -> String {
    format!(" {} ", text.to_lowercase())
}

/// Whether `sentence` (of a user) states a standing rule or constraint.
pub fn is_rule(sentence: &str) -> bool {
    let l = lower(sentence.trim_start_matches(|c: char| !c.is_alphanumeric()));
    if sentence.trim_end().ends_with('?') {
        return false;
    }
    let start = l.trim_start();
    let start = start.strip_prefix("please ").unwrap_or(start);
    RULE_STARTS.iter().any(|s| starts_word(start, s)) || RULE_PHRASES.iter().any(|p| l.contains(p))
}

/// Whether `text` starts with the phrase `p` as whole words.
fn starts_word(text: &str, p: &str) -> bool {
    text.starts_with(p)
        && (p.ends_with(':')
            || text[p.len()..]
                .chars()
                .next()
                .is_none_or(|c| !c.is_alphanumeric()))
}

pub fn is_decision(sentence: &str) -> bool {
    let l = lower(sentence);
    !sentence.trim_end().ends_with('?') && DECISION_PHRASES.iter().any(|p| l.contains(p))
}

pub fn is_fix(sentence: &str) -> bool {
    let l = lower(sentence);
    FIX_PHRASES.iter().any(|p| l.contains(p))
}

/// Whether a line of a tool's output reports an error.
pub fn is_error_line(line: &str) -> bool {
    line.split(|c: char| !c.is_alphanumeric())
        .any(|w| ERROR_WORDS.iter().any(|e| w.eq_ignore_ascii_case(e)))
}

/// Whether `sentence` reports something done (and does not deny it).
pub fn is_done(sentence: &str) -> bool {
    let words: Vec<String> = raw_words(sentence).collect();
    words.iter().any(|w| DONE_WORDS.contains(&w.as_str()))
        && !words.iter().any(|w| NOT_DONE.contains(&w.as_str()))
}

/// Whether a message's text before its list names tasks.
pub fn cues_tasks(text: &str) -> bool {
    raw_words(text).any(|w| TASK_CUES.contains(&w.as_str()))
}

/// A list item's text and whether it is ticked: `- x`, `* x`, `• x`,
/// `1. x`, `2) x`, `- [ ] x`, `[x] x`, `TODO: x`.
pub fn list_item(line: &str) -> Option<(&str, bool)> {
    let t = line.trim_start();
    let rest = if let Some(r) = t
        .strip_prefix("- ")
        .or_else(|| t.strip_prefix("* "))
        .or_else(|| t.strip_prefix("• "))
    {
        r
    } else if let Some(r) = t.strip_prefix("TODO:").or_else(|| t.strip_prefix("TODO ")) {
        r
    } else {
        let digits = t.chars().take_while(char::is_ascii_digit).count();
        let after = &t[digits..];
        if (1..=3).contains(&digits) && (after.starts_with(". ") || after.starts_with(") ")) {
            &after[2..]
        } else if t.starts_with("[ ]") || t.starts_with("[x]") || t.starts_with("[X]") {
            t
        } else {
            return None;
        }
    };
    let rest = rest.trim_start();
    for (mark, ticked) in [("[ ]", false), ("[x]", true), ("[X]", true)] {
        if let Some(r) = rest.strip_prefix(mark) {
            return Some((r.trim(), ticked));
        }
    }
    Some((rest.trim(), false))
}

/// The words of `text`, lowercase (letters, digits, apostrophes split).
fn raw_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// A word's stem for a coverage check: "pushes" and "push", "fixed" and
/// "fix", "retries" and "retry".
fn stem(w: &str) -> String {
    let n = w.chars().count();
    for (suffix, keep) in [("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")] {
        if n > suffix.len() + 2
            && let Some(s) = w.strip_suffix(suffix)
        {
            return format!("{s}{keep}");
        }
    }
    w.to_owned()
}

/// The content words of `text`, stemmed: what a summary must name to hold
/// it.
pub fn content_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = raw_words(text)
        .filter(|w| !STOP.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// What `token` names, if it is an identifier: a path, URL, file name,
/// host and port, commit hash, ticket or error code, IP address, version
/// or environment variable. Surrounding punctuation is not part of it.
pub fn identifier(token: &str) -> Option<&str> {
    let t = token.trim_matches(|c: char| {
        matches!(
            c,
            '(' | ')' | '[' | ']' | '{' | '}' | ',' | ';' | '"' | '\'' | '`' | '<' | '>'
        )
    });
    let t = t.trim_end_matches(['.', ':', '!', '?']);
    let n = t.chars().count();
    if !(3..=200).contains(&n) {
        return None;
    }
    let has_alpha = t.chars().any(|c| c.is_ascii_alphabetic());
    let has_digit = t.chars().any(|c| c.is_ascii_digit());
    if t.starts_with("http://") || t.starts_with("https://") {
        return Some(t);
    }
    // A file's line and column ("src/a.rs:88:5") do not hide its
    // extension.
    let file = without_position(t);
    if t.contains('/') {
        let segments = t.split('/').filter(|s| !s.is_empty()).count();
        let rooted = t.starts_with('/') || t.starts_with("~/") || t.starts_with("./");
        if has_alpha && (rooted && segments >= 1 || segments >= 3 || has_extension(file)) {
            return Some(t);
        }
        return None;
    }
    if has_extension(file)
        && t.chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '.')
    {
        return Some(t);
    }
    // host:port, or an IP address.
    if let Some((host, port)) = t.rsplit_once(':')
        && (2..=5).contains(&port.len())
        && port.chars().all(|c| c.is_ascii_digit())
        && host.chars().any(|c| c.is_alphabetic() || c == '.')
        && host
            .chars()
            .all(|c| c.is_alphanumeric() || c == '.' || c == '-')
    {
        return Some(t);
    }
    let parts: Vec<&str> = t.split('.').collect();
    if parts.len() == 4
        && parts
            .iter()
            .all(|p| (1..=3).contains(&p.len()) && p.chars().all(|c| c.is_ascii_digit()))
    {
        return Some(t);
    }
    // A version: v1.2 or v1.2.3.
    if let Some(v) = t.strip_prefix('v')
        && v.contains('.')
        && v.chars().all(|c| c.is_ascii_digit() || c == '.')
        && v.chars().next().is_some_and(|c| c.is_ascii_digit())
    {
        return Some(t);
    }
    // A commit hash: 7 to 40 hex digits, letters and digits both.
    if (7..=40).contains(&n)
        && t.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        && has_digit
        && has_alpha
    {
        return Some(t);
    }
    // A ticket (QL-1234), an error code (E0382, ERR_4411).
    if let Some((head, tail)) = t.split_once(['-', '_'])
        && (1..=10).contains(&head.len())
        && head
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        && head.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && (1..=8).contains(&tail.len())
        && tail.chars().all(|c| c.is_ascii_digit())
    {
        return Some(t);
    }
    let letters = t.chars().take_while(char::is_ascii_uppercase).count();
    if (1..=4).contains(&letters)
        && (3..=6).contains(&(n - letters))
        && t[letters..].chars().all(|c| c.is_ascii_digit())
    {
        return Some(t);
    }
    // An environment variable: DATABASE_URL.
    if t.contains('_')
        && n >= 4
        && t.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && t.chars().next().is_some_and(|c| c.is_ascii_uppercase())
    {
        return Some(t);
    }
    None
}

/// `t` without a trailing `:line` or `:line:column`.
fn without_position(t: &str) -> &str {
    let mut s = t;
    for _ in 0..2 {
        match s.rsplit_once(':') {
            Some((head, n)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => s = head,
            _ => break,
        }
    }
    s
}

fn has_extension(t: &str) -> bool {
    t.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.is_empty() && EXTENSIONS.contains(&ext) && stem.chars().any(|c| c.is_alphabetic())
    })
}

/// "port 7421" in `line`: a port named in words.
pub fn ports(line: &str) -> impl Iterator<Item = String> + '_ {
    let words: Vec<&str> = line.split_whitespace().collect();
    let found: Vec<String> = words
        .windows(2)
        .filter(|w| w[0].eq_ignore_ascii_case("port"))
        .filter_map(|w| {
            let n = w[1].trim_end_matches(|c: char| !c.is_ascii_digit());
            ((2..=5).contains(&n.len()) && n.chars().all(|c| c.is_ascii_digit()))
                .then(|| format!("port {n}"))
        })
        .collect();
    found.into_iter()
}

/// The sentences of a line of prose: split after `.`, `!` or `?` that a
/// space follows (a path's or version's dots stay inside).
pub fn sentences(line: &str) -> impl Iterator<Item = &str> {
    let mut rest = line;
    std::iter::from_fn(move || {
        let trimmed = rest.trim_start();
        if trimmed.is_empty() {
            return None;
        }
        let bytes = trimmed.as_bytes();
        let end = (0..bytes.len())
            .find(|&i| {
                matches!(bytes[i], b'.' | b'!' | b'?')
                    && bytes.get(i + 1).is_none_or(|b| b.is_ascii_whitespace())
            })
            .map_or(trimmed.len(), |i| i + 1);
        let (s, r) = trimmed.split_at(end);
        rest = r;
        Some(s.trim())
    })
}
