//! What a sentence carries, from its words alone: a fact the user states
//! about themselves or what is theirs, a decision, a request, an outcome,
//! or nothing worth keeping (thanks, greetings, acknowledgements).
//!
//! Deterministic word lists, no model. Each check looks at a bounded number
//! of words, so classifying costs at most a constant per sentence.

use super::sentences::{Sentence, Word, capitalized, words};

/// Longest sentence, in characters, that can be a fact (longer ones are
/// pasted text more often than statements).
const FACT_MAX_CHARS: usize = 600;

/// Leading words that carry nothing ("Oh, and by the way, my …").
const FILLERS: &str = "\
    oh ah and also but so well actually anyway anyways plus btw fyi ps yeah yes yep no nope ok \
    okay hi hey hello unrelated honestly basically then right um uh hmm";

/// Words that open a question even without its question mark.
const INTERROGATIVES: &str = "\
    what what's who who's whom whose where where's when why how how's which do does did is are \
    was were can could would should will shall may am have has had isn't aren't don't doesn't \
    didn't won't can't shouldn't wouldn't couldn't any anything anyone";

/// Words that open a request to the assistant.
const IMPERATIVES: &str = "\
    write draft tell give show make create generate translate rewrite summarize summarise \
    explain help list find check fix compare suggest recommend book send email set add remind \
    search look read describe calculate convert plan let's lets please pretend act play answer \
    count sort pick choose order call remove delete update schedule buy get put keep go try \
    use imagine assume";

/// Words that make a sentence hypothetical or uncertain, never a fact.
const HYPOTHETICAL: &str = "\
    if suppose supposing imagine pretend hypothetically hypothetical would wouldn't might \
    maybe perhaps wish unless whether";

/// Words after which a new clause starts ("… and my sister …").
const JOINERS: &str = "\
    and but so because since as while though although plus also yesterday today tonight now \
    recently finally then or actually honestly anyway btw oh well nowadays";

/// Two words that lead into a statement as a joiner does ("these days
/// I'm in Porto", "turns out I'm not allergic").
const LEADS: &[(&str, &str)] = &[
    ("these", "days"),
    ("turns", "out"),
    ("turned", "out"),
    ("since", "then"),
    ("last", "month"),
    ("last", "year"),
    ("last", "week"),
];

/// Words between a subject and its verb that change nothing for us.
const ADVERBS: &str = "\
    just also really still currently now actually already usually always never often mostly \
    absolutely totally definitely recently finally even so very quite pretty generally \
    normally sometimes basically literally honestly probably too";

/// Nouns after "my" that do not introduce a fact ("my question is …").
const MY_SKIP: &str = "\
    question questions point guess bad pleasure apologies apology thanks god gosh goodness \
    word turn request understanding thoughts thought answer mistake code message prompt \
    previous last";

/// Verbs (and auxiliaries) that may follow "my X" in a statement.
const MY_VERBS: &str = "\
    is are was were has have had will can cannot can't does doesn't did didn't don't isn't \
    aren't wasn't won't just recently also always never still live love like hate prefer \
    called named got went ran made left came became grew began took bought lost won";

/// Verbs a first-person statement of fact uses ("I live …", "we moved …").
const SELF_VERBS: &str = "\
    like love prefer hate dislike enjoy adore stand live lived work worked moved study studied \
    teach taught grew speak drive own use run play cook eat drink started joined graduated \
    retired decided bought adopted booked ordered plan planned want need volunteer coach train \
    practise practice collect support come came got belong married agreed chose switched \
    used sold quit stopped left became relocated changed gave dropped took picked sell leave \
    divorced separated traded swapped exchanged replaced upgraded do";

/// What "I do …" is about when it is no activity of the speaker's.
const DO_SKIP: &str = "\
    not it this that so what think believe know hope agree understand appreciate mean feel \
    see remember want need like love hate wonder apologise apologize have you";

/// What "I like/love/hate …" is about when it is a reaction, not a taste.
const REACTION_OBJECTS: &str = "\
    it it's this that these those your yours both them how what when the";

/// What "I want to / need to …" asks of the assistant rather than states.
const WANT_SKIP: &str = "know ask see check understand make confirm clarify say";

/// What "I got …" must be to state a fact.
const GOT_FACTS: &str = "married engaged divorced promoted hired diagnosed";

/// States after "I'm"/"I was" that are moods or manners of speaking.
const STATE_SKIP: &str = "\
    sure sorry glad happy wondering thinking curious trying looking asking confused stuck \
    afraid ok okay fine good great done back here there ready worried nervous tired feeling \
    busy bored hungry exhausted stressed annoyed frustrated excited thrilled about having \
    getting going told asked kidding joking serious new not";

/// Whether the state after "I'm" (its first word in [`STATE_SKIP`] or
/// not) is a fact: "I'm a nurse", "I'm getting married", "I'm going to
/// Lisbon", "I'm new to Rust", "I'm not a morning person".
fn state_is_fact(rest: &[Word<'_>]) -> bool {
    let w = |i: usize| rest.get(i).map_or("", |w| w.lower.as_str());
    match w(0) {
        "getting" => among(GOT_FACTS, w(1)),
        "going" => w(1) == "to" && !matches!(w(2), "ask" | "need" | "have" | "try" | "be" | ""),
        "new" => w(1) == "to",
        "not" => !w(1).is_empty() && !among(STATE_SKIP, w(1)),
        "" => false,
        state => !among(STATE_SKIP, state),
    }
}

/// After "I have"/"I've": things that are not facts about the speaker.
const HAVE_SKIP: &str = "\
    a question, another question, a quick question, a few questions, some questions, \
    questions, no idea, a problem, an issue, an error, a bug, a feeling, a look, tried, been \
    trying, been thinking, been wondering, been looking, seen, heard, noticed, read, got a \
    question, got an error, got it, to say, to ask, to admit, to go, to run, to leave, done \
    it, done that, finished, changed, fixed, updated, attached, pasted, shared, included, made \
    a mistake, a nice, a good, a great, fun";

/// Standing instructions and decisions, matched anywhere.
const INSTRUCTIONS: &str = "\
    remember that, call me, we decided, i decided, let's use, we will use, we'll use, please \
    use, don't use, do not use, should always, please always, please never, please don't, \
    please remember, from now on";

/// Decisions and commitments, for the summary.
const DECISIONS: &str = "\
    decided, agreed, settled on, chose, go with, going with, let's go, booked, confirmed, \
    deadline, is due, are due, due on, due by, plan is";

/// What an assistant reports as done, found or failed.
const OUTCOMES: &str = "\
    done sent added created booked saved updated scheduled fixed deployed removed deleted \
    found couldn't failed timed reminder confirmed total median average averages costs cost";

/// Openings of sentences that carry nothing: thanks, greetings, sign-offs.
const SMALL_TALK: &str = "\
    thanks, thank you, thx, you're welcome, no problem, sure, of course, great question, good \
    question, happy to help, glad to help, hope this helps, i hope this helps, let me know, \
    feel free, good luck, have a good, have a great, have fun, nice to meet, i'd be, how can i \
    help, what can i do for you, anything else, is there anything else, i'm happy, i'm glad, \
    happy to, glad to, congratulations, sounds good, got it, noted, that's all, that's enough, \
    good to know, enjoy, cheers, bye";

/// Capitalized words before "is my" that are not names ("This is my …").
const NOT_NAMES: &str = "\
    this that it here there what which who where how why when today tomorrow yesterday \
    everything nothing something i";

/// What a user commits to after "I'll"/"we'll" ("I'll book …") or "I'm
/// going to …".
const COMMITMENTS: &str = "\
    going book take go add use do buy ask raise practise practice move try call";

/// Evaluative words an assistant opens with ("Good plan:", "Great news:").
const EVALUATIVE: &str = "\
    good great lovely nice perfect excellent sensible wonderful plan choice news idea ok okay \
    sure noted fantastic awesome brilliant";

/// Who said a sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaker {
    User,
    Assistant,
}

/// A sentence read: its words and where its content starts.
#[derive(Debug)]
pub struct Reading<'a> {
    sentence: &'a Sentence,
    words: Vec<Word<'a>>,
    /// First word after fillers ("Oh, and …").
    body: usize,
    /// First word after fillers and a short topic ("Work now: …").
    content: usize,
    /// The word that ends that topic with its colon.
    topic: Option<usize>,
}

impl<'a> Reading<'a> {
    pub fn new(sentence: &'a Sentence) -> Self {
        let words = words(&sentence.text);
        let body = skip_fillers(&words, 0);
        let mut content = body;
        // "Work now: …", "One more thing: …": a topic of up to 4 words.
        let topic = (body..words.len().min(body + 4))
            .find(|&i| words[i].raw.ends_with(':'))
            .filter(|&colon| colon + 1 < words.len());
        if let Some(colon) = topic {
            content = skip_fillers(&words, colon + 1);
        }
        Self {
            sentence,
            words,
            body,
            content,
            topic,
        }
    }

    fn lower(&self, i: usize) -> &str {
        self.words.get(i).map_or("", |w| w.lower.as_str())
    }

    /// The sentence holds `phrase` (space-separated words) anywhere.
    fn has(&self, phrase: &str) -> bool {
        (0..self.words.len()).any(|i| starts_with(&self.words[i..], phrase))
    }

    /// Words from the content on.
    fn content_words(&self) -> usize {
        self.words.len().saturating_sub(self.content)
    }

    /// The text without its leading fillers, and without its topic too
    /// unless `keep_topic` ("Back to work: …" keeps "Back to work:").
    pub fn trimmed(&self, keep_topic: bool) -> &'a str {
        let from = if keep_topic { self.body } else { self.content };
        self.words
            .get(from)
            .map_or(self.sentence.text.as_str(), |w| {
                &self.sentence.text[w.start..]
            })
    }

    /// The sentence states a fact about the speaker, the people and things
    /// that are theirs, or a standing instruction: what a user would want
    /// remembered. Questions, hypotheticals and requests never do.
    pub fn is_fact(&self) -> bool {
        if self.sentence.question
            || self.sentence.long
            || self.sentence.text.chars().count() > FACT_MAX_CHARS
        {
            return false;
        }
        let w = &self.words;
        if w.iter().any(|x| {
            among(HYPOTHETICAL, &x.lower) || (x.lower.ends_with("'d") && x.lower.len() > 2)
        }) || self.has("let's say")
        {
            return false;
        }
        let first = self.lower(self.content);
        let rule = first == "don't" || (first == "do" && self.lower(self.content + 1) == "not");
        if among(INTERROGATIVES, first) && !rule {
            return false;
        }
        if self.instruction() {
            return true;
        }
        if among(IMPERATIVES, first) {
            return false;
        }
        (self.content..w.len()).any(|i| {
            (self.possessive(i) || self.first_person(i)) && self.clause_starts(i)
                || self.named_possession(i)
        })
    }

    /// The fact as stored: the sentence without leading fillers and topic,
    /// its closing punctuation dropped, its first letter a capital.
    pub fn fact_text(&self) -> String {
        let text = self
            .trimmed(false)
            .trim_end_matches(|c: char| matches!(c, '.' | '!' | ';' | '…') || c.is_whitespace());
        if self.content > 0 {
            capitalized(text)
        } else {
            text.to_owned()
        }
    }

    fn instruction(&self) -> bool {
        if phrases(INSTRUCTIONS).any(|p| self.has(p))
            || (self.lower(self.body) == "remember" && self.words[self.body].raw.ends_with(':'))
        {
            return true;
        }
        // "Always …", "never …", "must …" as rules: first, or after a
        // subject ("you must be tired" is no rule).
        (self.content..self.words.len()).any(|i| {
            matches!(self.lower(i), "always" | "never" | "must")
                && !(self.lower(i) == "must" && matches!(self.lower(i + 1), "be" | "have"))
                && (i == self.content
                    || matches!(
                        self.lower(i - 1),
                        "i" | "we" | "you" | "please" | "should" | "to" | "and"
                    ))
        })
    }

    /// Word `i` starts the sentence's content or a clause of it.
    fn clause_starts(&self, i: usize) -> bool {
        i == self.content || {
            let prev = &self.words[i - 1];
            let before = if i >= 2 { self.lower(i - 2) } else { "" };
            prev.ends_clause()
                || among(JOINERS, &prev.lower)
                || LEADS.iter().any(|(a, b)| *a == before && *b == prev.lower)
        }
    }

    /// "my X … is/has/lives …", "our team is …", "my sister's getting …".
    fn possessive(&self, i: usize) -> bool {
        if !matches!(self.lower(i), "my" | "our") {
            return false;
        }
        let head = self.lower(i + 1);
        if head.is_empty() || among(MY_SKIP, head) {
            return false;
        }
        if let Some(noun) = head.strip_suffix("'s")
            && !noun.is_empty()
        {
            let next = self.lower(i + 2);
            // "my sister's getting married", "my name's Tom".
            let named = self
                .words
                .get(i + 2)
                .is_some_and(|w| w.capitalized() || w.raw.chars().any(|c| c.is_ascii_digit()));
            if named
                || next.ends_with("ing")
                || matches!(
                    next,
                    "called" | "named" | "a" | "an" | "the" | "been" | "not"
                )
            {
                return true;
            }
        }
        (i + 2..self.words.len().min(i + 6)).any(|j| {
            let w = self.lower(j);
            among(MY_VERBS, w)
                || verb_form(w)
                || (w == "and" && matches!(self.lower(j + 1), "i" | "me"))
        })
    }

    /// "I'm …", "I have …", "I live/work/prefer …", "we moved …".
    fn first_person(&self, i: usize) -> bool {
        let subject = self.lower(i);
        let (next, kind) = match subject {
            "i'm" | "we're" => (i + 1, Kind::State),
            "i've" | "we've" => (i + 1, Kind::Have),
            "i" | "we" => match self.lower(i + 1) {
                "am" | "are" | "was" | "were" => (i + 2, Kind::State),
                "have" => (i + 2, Kind::Have),
                _ => (i + 1, Kind::Verb),
            },
            _ => return false,
        };
        let mut n = next;
        let mut kind = kind;
        loop {
            if among(ADVERBS, self.lower(n)) {
                n += 1;
            } else if self.lower(n) == "no" && self.lower(n + 1) == "longer" {
                // "I no longer eat meat": a change, stated.
                n += 2;
            } else {
                break;
            }
        }
        // "I now have a puppy", "I still am a nurse": the auxiliary after
        // the adverb reads as it would right after the subject.
        if matches!(kind, Kind::Verb) && n > next {
            match self.lower(n) {
                "am" | "are" | "was" | "were" => (kind, n) = (Kind::State, n + 1),
                "have" => (kind, n) = (Kind::Have, n + 1),
                _ => {}
            }
        }
        let rest = &self.words[n.min(self.words.len())..];
        if rest.is_empty() {
            return false;
        }
        match kind {
            Kind::State => state_is_fact(rest),
            Kind::Have => {
                let asks = rest[0].lower == "to"
                    && rest.get(1).is_some_and(|w| among(WANT_SKIP, &w.lower));
                !asks && !phrases(HAVE_SKIP).any(|p| starts_with(rest, p))
            }
            Kind::Verb => {
                let mut v = 0;
                // "I don't eat …", "I can't stand …", "I do not like …".
                if matches!(
                    rest[0].lower.as_str(),
                    "don't" | "can't" | "cannot" | "can" | "won't" | "didn't"
                ) {
                    v = 1;
                } else if rest[0].lower == "do" && rest.get(1).is_some_and(|w| w.lower == "not") {
                    v = 2;
                }
                let verb = rest.get(v).map_or("", |w| w.lower.as_str());
                let object = rest.get(v + 1).map_or("", |w| w.lower.as_str());
                if !among(SELF_VERBS, verb) {
                    return false;
                }
                match verb {
                    "like" | "love" | "prefer" | "hate" | "dislike" | "enjoy" | "adore" => {
                        !object.is_empty() && !among(REACTION_OBJECTS, object)
                    }
                    "want" | "need" | "plan" => {
                        object == "to"
                            && rest.get(v + 2).is_some_and(|w| !among(WANT_SKIP, &w.lower))
                    }
                    "got" => among(GOT_FACTS, object),
                    "come" | "came" => object == "from",
                    "used" => object == "to",
                    "stand" => v > 0,
                    // "I do judo", not "I do think so".
                    "do" => v == 0 && !object.is_empty() && !among(DO_SKIP, object),
                    _ => true,
                }
            }
        }
    }

    /// "Biscuit is my dog", "Priya's my neighbour".
    fn named_possession(&self, i: usize) -> bool {
        if self.lower(i + 1) != "my" || among(MY_SKIP, self.lower(i + 2)) {
            return false;
        }
        let subject = match self.lower(i) {
            "is" | "are" | "was" | "were" if i > 0 => &self.words[i - 1],
            w if w.ends_with("'s") => &self.words[i],
            _ => return false,
        };
        let name = subject.lower.trim_end_matches("'s");
        subject.capitalized() && !among(NOT_NAMES, name)
    }

    /// A decision or commitment ("let's go with …", "I'll book …", "Tom agreed …").
    pub fn is_decision(&self, speaker: Speaker) -> bool {
        if self.sentence.question {
            return false;
        }
        phrases(DECISIONS).any(|p| self.has(p))
            || (speaker == Speaker::User
                && (self.content..self.words.len()).any(|i| {
                    matches!(self.lower(i), "i'll" | "we'll" | "we're" | "i'm")
                        && self.clause_starts(i)
                        && among(COMMITMENTS, self.lower(i + 1))
                        && (self.lower(i) != "i'm" && self.lower(i) != "we're"
                            || self.lower(i + 2) == "to")
                }))
    }

    /// A question or instruction to the assistant.
    pub fn is_request(&self) -> bool {
        let first = self.lower(self.content);
        self.sentence.question
            || among(INTERROGATIVES, first)
            || among(IMPERATIVES, first)
            || self.has("can you")
            || self.has("could you")
            || (first.ends_with("'d") && self.lower(self.content + 1) == "like")
    }

    /// Something done, found or failed, or a figure.
    pub fn is_outcome(&self) -> bool {
        self.words[self.body..]
            .iter()
            .take(12)
            .any(|w| among(OUTCOMES, &w.lower))
    }

    /// Thanks, greetings, acknowledgements, exclamations of a few words.
    pub fn is_small_talk(&self) -> bool {
        let rest = &self.words[self.content.min(self.words.len())..];
        (self.content_words() <= 2 && self.sentence.text.chars().count() < 40)
            || phrases(SMALL_TALK).any(|p| starts_with(rest, p))
            || (self.sentence.text.ends_with('!') && self.content_words() <= 6)
            || (self.body == self.content
                && self.content_words() <= 4
                && self.sentence.text.len() < 60
                && !self.sentence.question
                && !self
                    .words
                    .iter()
                    .any(|w| w.lower.chars().any(|c| c.is_ascii_digit())))
    }

    /// Where an assistant's sentence starts once its evaluative opening
    /// ("Good plan:", "Great news:") is dropped.
    pub fn without_evaluation(&self) -> &'a str {
        if let Some(colon) = self.topic
            && self.words[self.body..=colon]
                .iter()
                .all(|w| among(EVALUATIVE, &w.lower))
        {
            self.trimmed(false)
        } else {
            self.trimmed(true)
        }
    }

    /// Up to 2 points for figures and names: the sentence is specific.
    pub fn specifics(&self) -> u8 {
        let digits = self
            .words
            .iter()
            .any(|w| w.raw.chars().any(|c| c.is_ascii_digit()));
        let names = self.words.iter().skip(self.content + 1).any(|w| {
            w.capitalized()
                && !w.lower.is_empty()
                && !matches!(w.lower.as_str(), "i" | "i'm" | "i'll" | "i've" | "i'd")
        });
        u8::from(digits) + u8::from(names)
    }

    /// Short and without figures or names: "I'll ask her first".
    pub fn is_vague(&self) -> bool {
        self.content_words() < 6 && self.specifics() == 0
    }

    /// Shares a word of three letters or more with `focus` (lowercase words).
    pub fn mentions(&self, focus: &[String]) -> bool {
        self.words
            .iter()
            .any(|w| w.lower.chars().count() >= 3 && focus.contains(&w.lower))
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    State,
    Have,
    Verb,
}

/// A third-person or past verb form after a noun ("ends", "barked").
fn verb_form(w: &str) -> bool {
    let n = w.chars().count();
    n >= 4
        && !w.contains('\'')
        && ((w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is"))
            || w.ends_with("ed"))
}

fn skip_fillers(words: &[Word<'_>], mut i: usize) -> usize {
    loop {
        let w = words.get(i).map_or("", |w| w.lower.as_str());
        if among(FILLERS, w) {
            i += 1;
        } else if w == "by"
            && words.get(i + 1).is_some_and(|w| w.lower == "the")
            && words.get(i + 2).is_some_and(|w| w.lower == "way")
        {
            i += 3;
        } else if w.is_empty() && i < words.len() {
            // A dash or an emoji.
            i += 1;
        } else {
            return i;
        }
    }
}

/// `word` is one of the space-separated words of `list`.
fn among(list: &str, word: &str) -> bool {
    !word.is_empty() && list.split(' ').any(|w| w == word)
}

/// The comma-separated phrases of `list`.
fn phrases(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim)
}

/// `words` start with the words of `phrase` (space-separated).
fn starts_with(words: &[Word<'_>], phrase: &str) -> bool {
    let mut n = 0;
    for p in phrase.split(' ') {
        if words.get(n).is_none_or(|w| w.lower != p) {
            return false;
        }
        n += 1;
    }
    n > 0
}
