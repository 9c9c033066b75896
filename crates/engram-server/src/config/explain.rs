//! Configuration errors in the user's terms. The config crate reports
//! what serde saw ("enum FsyncSetting does not have variant constructor
//! sometimes", "unknown field `modeldir` … for key `embed`"); this names
//! the allowed values, the environment variable or file the bad key came
//! from, and the setting that was probably meant.

use std::path::Path;

/// The values of each enum setting, as the config file spells them.
pub(super) const ENUMS: &[(&str, &[&str])] = &[
    ("FsyncSetting", &["always", "interval", "never"]),
    ("BackendSetting", &["files", "postgres"]),
    ("LogFormat", &["human", "json"]),
    ("EmbedProvider", &["local", "http", "none"]),
    (
        "Strategy",
        &["summarize", "trim", "compact_tool_results", "none"],
    ),
];

/// `message` (the config crate's) explained; unchanged when it is not one
/// of the cases above.
pub(super) fn explain(message: &str, env: &[(String, String)], file: Option<&Path>) -> String {
    bad_variant(message)
        .or_else(|| unknown_field(message, env, file))
        .unwrap_or_else(|| message.to_owned())
}

/// "enum E does not have variant constructor V for key `k`".
fn bad_variant(message: &str) -> Option<String> {
    let rest = message.strip_prefix("enum ")?;
    let (name, rest) = rest.split_once(" does not have variant constructor ")?;
    let (value, key) = rest.split_once(" for key `")?;
    let key = key.strip_suffix('`')?;
    let allowed = ENUMS.iter().find(|(n, _)| *n == name)?.1;
    Some(format!(
        "{key} = {value:?} is not a choice; use one of: {}",
        allowed.join(", ")
    ))
}

/// "unknown field `f`, expected one of `a`, `b` [for key `k`]".
fn unknown_field(message: &str, env: &[(String, String)], file: Option<&Path>) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let (expected, section) = match rest.split_once(" for key `") {
        Some((expected, key)) => (expected, key.strip_suffix('`')?),
        None => (rest, ""),
    };
    let expected: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let path = |name: &str| match section {
        "" => name.to_owned(),
        s => format!("{s}.{name}"),
    };
    let var = |name: &str| format!("ENGRAM__{}", path(name).replace('.', "__").to_uppercase());
    let meant = closest(field, &expected);
    let known = if section.is_empty() {
        format!("the sections are {}", expected.join(", "))
    } else {
        format!("[{section}] has {}", expected.join(", "))
    };
    // The variable that set it: the key itself, or one below it.
    let bad = var(field);
    let from_env = env
        .iter()
        .map(|(k, _)| k.to_uppercase())
        .find(|k| *k == bad || k.strip_prefix(&bad).is_some_and(|r| r.starts_with("__")));
    Some(if let Some(variable) = from_env {
        let hint = meant.map_or(String::new(), |m| {
            format!("; did you mean {}{}?", var(m), &variable[bad.len()..])
        });
        format!(
            "{variable} sets {}, which is not a setting{hint} ({known})",
            path(field)
        )
    } else {
        let place = file.map_or(String::new(), |f| format!("{}: ", f.display()));
        let hint = meant.map_or(String::new(), |m| format!("; did you mean {}?", path(m)));
        format!("{place}{} is not a setting{hint} ({known})", path(field))
    })
}

/// The expected name nearest `got` (at most a third of its letters off),
/// if any.
fn closest<'a>(got: &str, expected: &[&'a str]) -> Option<&'a str> {
    let squash = |s: &str| s.replace('_', "").to_lowercase();
    expected
        .iter()
        .map(|e| (distance(&squash(got), &squash(e)), *e))
        .filter(|(d, _)| *d <= got.len().div_ceil(3))
        .min()
        .map(|(_, e)| e)
}

/// Levenshtein distance (setting names are short).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
