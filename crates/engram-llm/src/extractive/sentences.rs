//! Sentences and words of a message, in one pass over its text.
//!
//! A sentence ends at `.`, `!`, `?`, `…` or `;` followed by a space (so
//! `3.5`, `example.com` and `priya.n@x` stay whole), at a line break, and
//! never after an abbreviation or an initial (`Dr.`, `e.g.`, `Sept.`,
//! `J.`). Fenced code blocks are skipped; list markers are dropped.

use engram_core::text::fold_whitespace;

/// Longest sentence kept whole, in bytes; the rest of a longer one is cut
/// (and the sentence marked [`Sentence::long`]).
const MAX_BYTES: usize = 2000;
/// Words of a sentence the classifier looks at.
const MAX_WORDS: usize = 64;

/// Words that end in a dot without ending the sentence.
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "approx", "inc", "ltd", "co",
    "mt", "ft", "cf", "fig", "no", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
    "oct", "nov", "dec",
];

#[derive(Debug, Clone, PartialEq)]
pub struct Sentence {
    /// On one line, its closing punctuation kept, a list marker dropped.
    pub text: String,
    /// It ends with a question mark.
    pub question: bool,
    /// It was longer than [`MAX_BYTES`] and is cut.
    pub long: bool,
}

/// The sentences of `text` with at least 8 bytes and a letter or digit.
pub fn split(text: &str) -> Vec<Sentence> {
    let mut out = vec![];
    let mut in_code = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_code = !in_code;
            continue;
        }
        if !in_code {
            split_line(line, &mut out);
        }
    }
    out
}

fn split_line(line: &str, out: &mut Vec<Sentence>) {
    let mut start = 0;
    let mut chars = line.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        // Not at ';': the clauses it joins belong together ("I've gone off
        // curling; judo is my thing now" names the old value and the new).
        if !matches!(c, '.' | '!' | '?' | '…') {
            continue;
        }
        let mut question = c == '?';
        let mut end = i + c.len_utf8();
        let mut run = 1;
        // The whole run of closing punctuation and quotes.
        while let Some(&(j, d)) = chars.peek() {
            match d {
                '.' | '!' | '?' | '…' => {
                    question |= d == '?';
                    run += 1;
                }
                '"' | '\'' | '”' | '’' | ')' | ']' | '»' | '*' | '_' => {}
                _ => break,
            }
            end = j + d.len_utf8();
            chars.next();
        }
        if chars.peek().is_some_and(|&(_, d)| !d.is_whitespace()) {
            continue;
        }
        if c == '.' && run == 1 && abbreviation(&line[start..i]) {
            continue;
        }
        push(&line[start..end], question, out);
        start = end;
    }
    push(&line[start..], false, out);
}

/// Whether the last word of `before` is an abbreviation or an initial.
fn abbreviation(before: &str) -> bool {
    let word = before
        .rsplit(char::is_whitespace)
        .next()
        .unwrap_or_default()
        .trim_start_matches(|c: char| !c.is_alphanumeric());
    let mut letters = word.chars();
    match (letters.next(), letters.next()) {
        (None, _) => false,
        (Some(c), None) => c.is_alphabetic(),
        _ => {
            // "e.g", "a.m", "U.S": letters in ones and twos between dots.
            (word.contains('.')
                && word
                    .split('.')
                    .all(|part| part.chars().count() <= 2 && part.chars().all(char::is_alphabetic)))
                || ABBREVIATIONS.iter().any(|a| a.eq_ignore_ascii_case(word))
        }
    }
}

fn push(piece: &str, question: bool, out: &mut Vec<Sentence>) {
    let piece = piece.trim_start_matches(|c: char| {
        c.is_whitespace() || matches!(c, '-' | '*' | '•' | '–' | '—' | '·' | '>' | '#')
    });
    let long = piece.len() > MAX_BYTES;
    let piece = if long {
        let mut end = MAX_BYTES;
        while !piece.is_char_boundary(end) {
            end -= 1;
        }
        &piece[..end]
    } else {
        piece
    };
    let text = fold_whitespace(piece);
    if text.len() >= 8 && text.chars().any(char::is_alphanumeric) {
        out.push(Sentence {
            text,
            question,
            long,
        });
    }
}

/// A word of a sentence: as written, and lowercased without the
/// punctuation around it (`"Biscuit,"` → `biscuit`, `I’m` → `i'm`).
#[derive(Debug, Clone, PartialEq)]
pub struct Word<'a> {
    pub raw: &'a str,
    pub lower: String,
    /// Byte offset in the sentence.
    pub start: usize,
}

impl Word<'_> {
    /// Written with a capital (a name, or the first word).
    pub fn capitalized(&self) -> bool {
        self.raw
            .chars()
            .find(|c| c.is_alphanumeric())
            .is_some_and(char::is_uppercase)
    }

    /// The written word ends a clause (`Thanks,`, `one:`).
    pub fn ends_clause(&self) -> bool {
        self.raw.ends_with([',', ':', ';', '—', '–', '-'])
    }
}

/// The first [`MAX_WORDS`] words of `text` (one line, single spaces).
pub fn words(text: &str) -> Vec<Word<'_>> {
    let mut out = Vec::with_capacity(16);
    let mut start = 0;
    for raw in text.split(' ') {
        if out.len() == MAX_WORDS {
            break;
        }
        let core = raw
            .trim_matches(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
            .trim_matches(|c: char| c == '\'' || c == '’');
        out.push(Word {
            raw,
            lower: core.to_lowercase().replace('’', "'"),
            start,
        });
        start += raw.len() + 1;
    }
    out
}

/// `text` with its first letter a capital, unless its first word has one
/// already (`easyJet`, `iPhone` stay as written).
pub fn capitalized(text: &str) -> String {
    let first_word = text.split(' ').next().unwrap_or_default();
    let mut chars = text.chars();
    match chars.next() {
        Some(c) if c.is_lowercase() && !first_word.chars().any(char::is_uppercase) => {
            c.to_uppercase().chain(chars).collect()
        }
        _ => text.to_owned(),
    }
}
