//! Test sets for telling a fact said again from a fact that changed: the
//! word rules' tests use them, and the engine's measure of the meaning
//! threshold with the local model (`users::consolidate::SAME_FACT`).

/// Pairs that share most words but say different things: never repeats.
/// Each is (a statement, its negation or change).
pub const NOT_REPEATS: &[(&str, &str)] = &[
    (
        "I am allergic to peanuts",
        "I am no longer allergic to peanuts",
    ),
    ("I am allergic to peanuts", "I am not allergic to peanuts"),
    (
        "I am allergic to peanuts",
        "I'm not allergic to peanuts any more",
    ),
    ("I eat meat", "I don't eat meat"),
    ("I eat meat", "I never eat meat"),
    ("I smoke", "I quit smoking"),
    ("I smoke", "I stopped smoking"),
    ("Works as a nurse", "Used to work as a nurse"),
    ("Works as a nurse", "Former nurse"),
    ("Lives in Lisbon", "No longer lives in Lisbon"),
    ("Lives in Lisbon", "Lives in Berlin"),
    ("Lives in Lisbon", "Moved from Lisbon to Berlin"),
    ("Has a dog", "Has no dog"),
    ("Has a dog", "Lost the dog"),
    ("Has a dog", "Has a cat"),
    ("Is married", "Is not married"),
    ("Is married", "Is divorced"),
    ("Drives a Skoda Octavia", "Sold the Skoda Octavia"),
    ("Drives a Skoda Octavia", "Drives a Kia Niro"),
    ("Plays curling", "Gave up curling"),
    ("Plays curling", "Plays judo"),
    ("Likes coffee", "Doesn't like coffee"),
    ("Likes coffee", "Likes tea"),
    ("Can swim", "Cannot swim"),
    ("Can swim", "Can't swim"),
    ("Is vegetarian", "Is not vegetarian"),
    ("Is vegetarian", "Is vegan"),
    ("Speaks French", "Doesn't speak French"),
    ("Speaks French", "Speaks German"),
    ("Works from home", "No longer works from home"),
    ("Works from home", "Works from the office"),
    ("Has two children", "Has three children"),
    ("Has two children", "Has no children"),
    ("Is 34 years old", "Is 35 years old"),
    ("Takes insulin", "Stopped taking insulin"),
    ("Takes insulin", "Does not take insulin"),
    ("Owns a house", "Doesn't own a house"),
    ("Owns a house", "Rents a flat"),
    ("Is a student", "Is not a student anymore"),
    ("Is a student", "Is a teacher"),
    ("Prefers window seats", "Prefers aisle seats"),
    ("Prefers window seats", "Never wants window seats"),
    ("Uses Vim", "Uses Emacs"),
    ("Uses Vim", "Quit using Vim"),
    ("Drinks alcohol", "Doesn't drink alcohol"),
    ("Drinks alcohol", "Drinks no alcohol"),
    ("Runs marathons", "Ran marathons formerly"),
    ("Is on the night shift", "Is on the day shift"),
    ("Supports Benfica", "Supports Porto"),
    ("Is allergic to cats", "Is allergic to dogs"),
    ("Has diabetes", "Has no diabetes"),
    ("Works at Google", "Left Google"),
    ("Works at Google", "Works at Meta"),
    ("The meeting is on Monday", "The meeting is on Tuesday"),
];

/// The same fact in other function words, order, case or number.
pub const REPEATS: &[(&str, &str)] = &[
    ("The user lives in Lisbon", "I live in Lisbon"),
    ("Lives in Lisbon", "lives in lisbon now!"),
    (
        "I am allergic to peanuts",
        "The user is allergic to peanuts, please remember that",
    ),
    ("Has a dog named Rex", "has a dog named rex"),
    ("Prefers metric units", "The user prefers metric units"),
];

/// The same fact in other words: what only meaning tells (the local
/// model), never the word rules.
pub const MEANING_REPEATS: &[(&str, &str)] = &[
    ("Works as a nurse", "Is a nurse by profession"),
    ("I am allergic to peanuts", "I have a peanut allergy"),
    ("Lives in Lisbon", "Has a home in Lisbon"),
    ("Has a dog named Rex", "Owns a dog called Rex"),
    ("Likes coffee", "Enjoys drinking coffee"),
    (
        "Prefers window seats",
        "Likes to sit by the window on flights",
    ),
    ("Speaks French", "Can speak French"),
    ("Drives a Skoda Octavia", "Their car is a Skoda Octavia"),
    ("Works from home", "Works remotely from home"),
    ("Has two children", "Is the parent of two children"),
    ("Plays curling", "Enjoys playing curling"),
    ("Runs marathons", "Is a marathon runner"),
    ("Supports Benfica", "Is a Benfica fan"),
    ("Uses Vim", "Writes code in Vim"),
    ("Takes insulin", "Is on insulin"),
    ("Is vegetarian", "Follows a vegetarian diet"),
];
