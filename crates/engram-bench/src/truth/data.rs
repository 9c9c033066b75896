//! Generated users whose attributes change across dated conversations,
//! and what a summarizer that answers by handle makes of them.
//!
//! Each user has eight attributes; the first conversation states them all,
//! later ones (weeks apart) change about half of them once or twice, in
//! varied words ("I moved to", "these days I'm in", "I sold my … and got
//! …"), restate some unchanged ones in other words, and talk of other
//! things. Values are distinct words, so a prompt or a fact is checked for
//! a value by its word.

use std::collections::HashMap;

/// One attribute: its values, how it is first said, how a change is said
/// (`{old}` and `{new}`), how it is said again, and the question.
pub struct Attribute {
    values: &'static [&'static str],
    first: &'static [&'static str],
    change: &'static [&'static str],
    again: &'static [&'static str],
    /// The fact a careful summarizer writes.
    fact: &'static str,
    pub question: &'static str,
}

pub const ATTRIBUTES: &[Attribute] = &[
    Attribute {
        values: &[
            "Lisbon", "Berlin", "Porto", "Oslo", "Valencia", "Krakow", "Tallinn", "Ghent",
        ],
        first: &["I live in {new}.", "My home is in {new}."],
        change: &[
            "I moved to {new} last month.",
            "These days I'm in {new}.",
            "I relocated from {old} to {new} in the spring.",
        ],
        again: &[
            "Still living in {new}, it is lovely.",
            "Life in {new} suits me.",
        ],
        fact: "Lives in {new}",
        question: "Which city do I live in now?",
    },
    Attribute {
        values: &[
            "nurse",
            "teacher",
            "plumber",
            "architect",
            "librarian",
            "pilot",
            "baker",
            "chemist",
        ],
        first: &["I work as a {new}.", "I'm a {new} by trade."],
        change: &[
            "I quit being a {old} and now I work as a {new}.",
            "I started a new job as a {new}.",
            "Turns out I'm a better {new} than I ever was a {old}; that's my job now.",
        ],
        again: &[
            "Work as a {new} keeps me busy.",
            "Being a {new} is tiring but fun.",
        ],
        fact: "Works as a {new}",
        question: "What is my job these days?",
    },
    Attribute {
        values: &[
            "Octavia", "Niro", "Corolla", "Golf", "Model3", "Clio", "Civic", "Zoe",
        ],
        first: &["I drive a {new}.", "My car is a {new}."],
        change: &[
            "I sold the {old} and got a {new}.",
            "I traded in my {old} for a {new}.",
            "My new car is a {new}.",
        ],
        again: &[
            "The {new} needs new tyres.",
            "I took the {new} to the coast.",
        ],
        fact: "Drives a {new}",
        question: "What car do I drive now?",
    },
    Attribute {
        values: &[
            "curling", "judo", "tennis", "rowing", "fencing", "climbing", "squash", "karate",
        ],
        first: &["I play {new} every week.", "My sport is {new}."],
        change: &[
            "I've gone off {old}; {new} is my thing now.",
            "I took up {new} and stopped {old}.",
            "These days I do {new} instead.",
        ],
        again: &[
            "Had a great {new} session yesterday.",
            "{new} practice was hard today.",
        ],
        fact: "Does {new} as a sport",
        question: "Which sport do I do these days?",
    },
    Attribute {
        values: &[
            "Biscuit", "Pepper", "Mochi", "Rufus", "Luna", "Ziggy", "Nala", "Otis",
        ],
        first: &["My dog is called {new}.", "I have a dog named {new}."],
        change: &[
            "{old} went to live with my parents; I now have a puppy called {new}.",
            "I adopted a new dog, {new}, after {old} passed away.",
        ],
        again: &["{new} chewed my shoes again.", "Walked {new} in the park."],
        fact: "Has a dog called {new}",
        question: "What is my dog's name now?",
    },
    Attribute {
        values: &[
            "cello",
            "banjo",
            "oboe",
            "ukulele",
            "harp",
            "trumpet",
            "accordion",
            "flute",
        ],
        first: &["I play the {new}.", "I practise the {new} at night."],
        change: &[
            "I switched from the {old} to the {new}.",
            "I sold my {old}; I'm learning the {new} now.",
        ],
        again: &[
            "My {new} teacher is strict.",
            "Practised the {new} for an hour.",
        ],
        fact: "Plays the {new}",
        question: "Which instrument do I play now?",
    },
    Attribute {
        values: &[
            "Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Stark", "Wonka",
        ],
        first: &["I work at {new}.", "My employer is {new}."],
        change: &[
            "I left {old} and joined {new}.",
            "Since last month I'm employed by {new}.",
        ],
        again: &["{new} has a nice canteen.", "Busy week at {new}."],
        fact: "Works at {new}",
        question: "Which company do I work for now?",
    },
    Attribute {
        values: &[
            "espresso", "matcha", "kombucha", "rooibos", "cider", "chai", "lemonade", "kefir",
        ],
        first: &[
            "My favourite drink is {new}.",
            "I drink {new} every morning.",
        ],
        change: &[
            "These days I prefer {new} over {old}.",
            "I gave up {old}; I drink {new} now.",
        ],
        again: &[
            "Had my usual {new} this morning.",
            "{new} is the best start to a day.",
        ],
        fact: "Favourite drink is {new}",
        question: "What is my favourite drink now?",
    },
];

/// Talk that changes nothing about the user.
const FILLER: &[&str] = &[
    "Can you suggest a recipe for dinner tonight?",
    "What is a good book about the ocean?",
    "Remind me how compound interest works.",
    "Tell me a fun fact about octopuses.",
    "How long should I boil an egg?",
    "What's the weather usually like in autumn?",
];

/// A deterministic generator (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

/// A user message and what it says about an attribute, if anything.
pub struct Said {
    pub text: String,
    /// (attribute index, the value it states now).
    pub states: Option<(usize, &'static str)>,
}

/// One user's history: conversations of messages, and each attribute's
/// values over time (the last is current).
pub struct History {
    pub conversations: Vec<Vec<Said>>,
    pub values: Vec<Vec<&'static str>>,
}

impl History {
    pub fn changed(&self, attribute: usize) -> bool {
        self.values[attribute].len() > 1
    }

    pub fn current(&self, attribute: usize) -> &'static str {
        self.values[attribute].last().expect("a first value")
    }

    /// The values it had before the current one.
    pub fn stale(&self, attribute: usize) -> &[&'static str] {
        let v = &self.values[attribute];
        &v[..v.len() - 1]
    }
}

fn fill(template: &str, old: &str, new: &str) -> String {
    template.replace("{old}", old).replace("{new}", new)
}

/// User `u`'s history of `conversations` conversations.
pub fn history(rng: &mut Rng, conversations: usize) -> History {
    let mut values: Vec<Vec<&'static str>> = ATTRIBUTES
        .iter()
        .map(|a| vec![a.values[rng.below(a.values.len())]])
        .collect();
    let mut first = vec![];
    for (i, a) in ATTRIBUTES.iter().enumerate() {
        let new = values[i][0];
        first.push(Said {
            text: fill(rng.pick(a.first), "", new),
            states: Some((i, new)),
        });
        first.push(filler(rng));
    }
    let mut all = vec![first];
    // About half of the attributes change, once or twice, in the later
    // conversations.
    let changes: Vec<usize> = (0..ATTRIBUTES.len())
        .map(|_| match rng.below(4) {
            0 | 1 => 0,
            2 => 1,
            _ => 2,
        })
        .collect();
    let later = conversations.saturating_sub(1).max(1);
    let mut plan: Vec<Vec<usize>> = vec![vec![]; later];
    for (i, &n) in changes.iter().enumerate() {
        let mut at: Vec<usize> = (0..later).collect();
        for _ in 0..n.min(later) {
            let k = at.remove(rng.below(at.len()));
            plan[k].push(i);
        }
    }
    for changing in plan.iter().take(conversations.saturating_sub(1)) {
        let mut said = vec![];
        for &i in changing {
            let a = &ATTRIBUTES[i];
            let old = *values[i].last().expect("a value");
            let new = loop {
                let v = a.values[rng.below(a.values.len())];
                if !values[i].contains(&v) {
                    break v;
                }
            };
            values[i].push(new);
            said.push(Said {
                text: fill(rng.pick(a.change), old, new),
                states: Some((i, new)),
            });
            said.push(filler(rng));
        }
        // An unchanged attribute said again, in other words.
        let i = rng.below(ATTRIBUTES.len());
        if !changing.contains(&i) {
            let now = *values[i].last().expect("a value");
            said.push(Said {
                text: fill(rng.pick(ATTRIBUTES[i].again), now, now),
                states: None,
            });
        }
        said.push(filler(rng));
        said.push(filler(rng));
        all.push(said);
    }
    History {
        conversations: all,
        values,
    }
}

fn filler(rng: &mut Rng) -> Said {
    Said {
        text: rng.pick(FILLER).to_owned(),
        states: None,
    }
}

/// The attribute a fact's text is about, by the values it names (the
/// last named wins: "I sold the Octavia and got a Niro" is about the Niro).
pub fn value_in(text: &str, attribute: usize) -> Option<&'static str> {
    let lower = text.to_lowercase();
    ATTRIBUTES[attribute]
        .values
        .iter()
        .filter_map(|v| lower.rfind(&v.to_lowercase()).map(|at| (at, *v)))
        .max()
        .map(|(_, v)| v)
}

/// A summarizer that reads what it is shown as a careful LLM would: for
/// each user message stating an attribute (`statements`: the message and
/// what it states), an update of the known fact about that attribute (by
/// its handle) when the value changed, nothing when it is the same, a new
/// fact when none is known. Answers in the format of DESIGN §15.
pub fn answer_by_handle(said: &str, statements: &HashMap<String, (usize, &'static str)>) -> String {
    let mut known: Vec<(String, usize, &'static str)> = vec![];
    let mut turns = false;
    // Per attribute, in the order decided: the handle it replaces (none:
    // a new fact) and the fact as it is now.
    let mut decided: Vec<(usize, Option<String>, String)> = vec![];
    for line in said.lines() {
        if line.starts_with("Turns to summarize:") {
            turns = true;
            continue;
        }
        if !turns {
            // "- [f3] (since 2026-10-03) Lives in Lisbon"
            let Some((handle, text)) = line.strip_prefix("- [").and_then(|r| r.split_once(']'))
            else {
                continue;
            };
            for i in 0..ATTRIBUTES.len() {
                if let Some(v) = value_in(text, i) {
                    known.push((handle.to_owned(), i, v));
                }
            }
            continue;
        }
        let Some(&(i, new)) = line
            .trim()
            .strip_prefix("User: ")
            .and_then(|m| statements.get(m))
        else {
            continue;
        };
        let fact = fill(ATTRIBUTES[i].fact, "", new);
        if let Some(d) = decided.iter_mut().find(|d| d.0 == i) {
            d.2 = fact;
            continue;
        }
        match known.iter().rev().find(|(_, a, _)| *a == i) {
            Some((_, _, v)) if *v == new => {}
            Some((handle, _, _)) => decided.push((i, Some(handle.clone()), fact)),
            None => decided.push((i, None, fact)),
        }
    }
    let (mut facts, mut updates) = (vec![], vec![]);
    for (_, handle, fact) in decided {
        match handle {
            Some(h) => updates.push(serde_json::json!({"replaces": h, "fact": fact})),
            None => facts.push(serde_json::json!({"fact": fact})),
        }
    }
    serde_json::json!({
        "episodic_summary": "The user talked about their life.",
        "semantic_facts": facts,
        "updates": updates,
        "invalidates": [],
    })
    .to_string()
}

/// A fact of a consolidation request about an attribute: its date, its
/// place in the request, its handle and the value it names.
type Shown = (String, usize, String, &'static str);

/// The scripted summarizer's answer to a consolidation request ("Group
/// 1:\n- [f1] (since DATE) …"): within each group, per attribute, the
/// latest fact (by its date, then its place) replaces every earlier one
/// that names another value.
pub fn answer_consolidation(said: &str) -> String {
    let mut by: HashMap<(usize, usize), Vec<Shown>> = HashMap::new();
    let mut group = 0;
    for (place, line) in said.lines().enumerate() {
        if line.starts_with("Group ") {
            group += 1;
            continue;
        }
        let Some((handle, rest)) = line.strip_prefix("- [").and_then(|r| r.split_once(']')) else {
            continue;
        };
        let date = rest
            .trim()
            .strip_prefix("(since ")
            .and_then(|r| r.split_once(')'))
            .map_or("", |(d, _)| d);
        for i in 0..ATTRIBUTES.len() {
            if let Some(v) = value_in(rest, i) {
                by.entry((group, i)).or_default().push((
                    date.to_owned(),
                    place,
                    handle.to_owned(),
                    v,
                ));
            }
        }
    }
    let mut updates = vec![];
    let mut keys: Vec<_> = by.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        let mut facts = by.remove(&key).unwrap_or_default();
        facts.sort();
        let Some((_, _, latest, value)) = facts.last().cloned() else {
            continue;
        };
        for (_, _, handle, v) in &facts[..facts.len() - 1] {
            if *v != value {
                updates.push(serde_json::json!({"replaces": handle, "by": latest}));
            }
        }
    }
    serde_json::json!({"updates": updates, "invalidates": []}).to_string()
}
