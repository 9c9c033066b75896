//! The question prior: a message that mostly asks is seldom what a later
//! question is looking for.
//!
//! "Cool! What type of music do you play?" shares the words and the form
//! of "What instruments does Melanie play?", so both the word search and
//! the model put it near the top; yet it holds no answer: what the
//! speaker says is in the reply, which gains from it as its neighbour.
//! So a message most of whose words are in questions keeps
//! `Params::question_prior` of its score, after the other shares, as the
//! speaker prior weighs the other participants' (issue 28; LoCoMo's dev
//! half: docs/BENCHMARKS.md). It still lends its words to its neighbours.
//! The same holds in a prompt: the user's own question is such a message,
//! and it should not recall itself.

/// Characters of a message read to tell whether it mostly asks: a long
/// message is read by its opening, so the cost stays bounded, and both
/// stores read the same part (a database reads it with `left()`).
pub const ASKING_CHARS: usize = 2000;

/// Whether more than half of the words of `text` (of its first
/// [`ASKING_CHARS`] characters) are in sentences that end in a question
/// mark. A word is a run of letters or digits; a sentence ends at `.`,
/// `!` or `?` (and their full-width forms); words after the last end
/// count as told.
pub fn mostly_asks(text: &str) -> bool {
    let (mut asked, mut total, mut sentence) = (0usize, 0usize, 0usize);
    let mut in_word = false;
    for c in text.chars().take(ASKING_CHARS) {
        if c.is_alphanumeric() {
            if !in_word {
                sentence += 1;
                in_word = true;
            }
            continue;
        }
        in_word = false;
        match c {
            '?' | '？' => {
                asked += sentence;
                total += sentence;
                sentence = 0;
            }
            '.' | '!' | '。' | '！' => {
                total += sentence;
                sentence = 0;
            }
            _ => {}
        }
    }
    total += sentence;
    asked * 2 > total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_mostly_asks_when_most_of_its_words_are_in_questions() {
        for asks in [
            "Cool! What type of music do you play?",
            "What's up with you lately?",
            "Wow, nice spot! Where is it? Got any other features you want?",
            "Is that your third one?!",
            "你在做什么？",
            "How long have you been creating art",
        ] {
            // The last one ends in no mark: its words count as told.
            assert_eq!(mostly_asks(asks), !asks.ends_with("art"), "{asks}");
        }
        for tells in [
            "I play clarinet! Started when I was young and it's been great.",
            "I'm off to go swimming with the kids. Any plans?",
            "Thanks, Caroline! Family time matters to me. What's up with you lately?",
            "",
            "?!?",
            "e.g. 3.5 kg",
        ] {
            assert!(!mostly_asks(tells), "{tells}");
        }
    }

    #[test]
    fn a_long_message_is_read_by_its_opening() {
        let opening = "Why? ".repeat(ASKING_CHARS / 5);
        assert!(mostly_asks(
            &(opening.clone() + &"I know. ".repeat(100_000))
        ));
        let told = "I know. ".repeat(ASKING_CHARS / 8 + 1);
        assert!(!mostly_asks(&(told + &"Why? ".repeat(100_000))));
    }
}
