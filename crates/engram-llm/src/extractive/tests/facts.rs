//! What the embedded summarizer takes for a fact, and what it does not.

use super::*;

#[test]
fn what_the_user_states_about_themselves_and_theirs_is_a_fact() {
    assert_eq!(
        user_says(&[
            "My favourite colour is teal.",
            "Thanks. Unrelated, but my dog is called Biscuit and he's a three-year-old beagle.",
            "My sister Ottoline is getting married in Lisbon on 14 September.",
        ]),
        [
            "My favourite colour is teal",
            "My dog is called Biscuit and he's a three-year-old beagle",
            "My sister Ottoline is getting married in Lisbon on 14 September",
        ],
        "dates and places verbatim, fillers dropped"
    );
    let cases = [
        ("I like climbing on Sundays.", "I like climbing on Sundays"),
        (
            "I love Agatha Christie novels!",
            "I love Agatha Christie novels",
        ),
        ("I prefer tea to coffee.", "I prefer tea to coffee"),
        ("I hate cold showers", "I hate cold showers"),
        ("I can't stand coriander.", "I can't stand coriander"),
        ("I don't eat meat.", "I don't eat meat"),
        (
            "I live in Chapel Allerton, Leeds.",
            "I live in Chapel Allerton, Leeds",
        ),
        ("We moved to Leeds in 2019.", "We moved to Leeds in 2019"),
        (
            "I work at a freight company as a data engineer.",
            "I work at a freight company as a data engineer",
        ),
        ("I'm allergic to peanuts.", "I'm allergic to peanuts"),
        ("I'm a nurse at St. James's.", "I'm a nurse at St. James's"),
        ("I’m getting married in May.", "I’m getting married in May"),
        (
            "I was born in Porto in 1991.",
            "I was born in Porto in 1991",
        ),
        (
            "I have two kids, Ana and Rui.",
            "I have two kids, Ana and Rui",
        ),
        (
            "We've got a cat called Miso.",
            "We've got a cat called Miso",
        ),
        (
            "Oh, and by the way, my birthday is 3 March.",
            "My birthday is 3 March",
        ),
        (
            "One more thing: my flat lease ends on 30 November.",
            "My flat lease ends on 30 November",
        ),
        (
            "My wife and I moved to Lisbon.",
            "My wife and I moved to Lisbon",
        ),
        (
            "My mum's birthday is on 29 July.",
            "My mum's birthday is on 29 July",
        ),
        (
            "My sister's getting married.",
            "My sister's getting married",
        ),
        (
            "Our team is switching to GitHub Actions.",
            "Our team is switching to GitHub Actions",
        ),
        ("Biscuit is my dog.", "Biscuit is my dog"),
        ("Priya's my neighbour.", "Priya's my neighbour"),
        (
            "Yesterday my sister got engaged.",
            "Yesterday my sister got engaged",
        ),
        ("Call me Maya.", "Call me Maya"),
        (
            "Always answer in metric units.",
            "Always answer in metric units",
        ),
        (
            "Remember: the report is due on Friday.",
            "The report is due on Friday",
        ),
        (
            "Please use British spelling.",
            "Please use British spelling",
        ),
        (
            "I want to learn Portuguese before May.",
            "I want to learn Portuguese before May",
        ),
    ];
    for (said, fact) in cases {
        assert_eq!(user_says(&[said]), [fact], "{said}");
    }
}

#[test]
fn questions_hypotheticals_requests_and_reactions_are_not_facts() {
    for said in [
        "What is my dog called?",
        "what is my dog called",
        "Is my sister getting married in Lisbon?",
        "Do you remember what my dog is called",
        "My dog is called what again?",
        "If my dog were called Rex, he would hate it.",
        "Suppose my name is Bob.",
        "Imagine my sister lived in Paris.",
        "Let's say my budget is 500 euros.",
        "Maybe my sister will visit in June.",
        "My dog would love a bigger garden.",
        "I'd love a coffee right now.",
        "I wish I lived in Lisbon.",
        "Tell me what my favourite colour is.",
        "Write a story where my name is Bob and I live on Mars.",
        "Can you check my code, it is broken.",
        "Help me plan my trip to Lisbon.",
        "I love it.",
        "I like that idea a lot.",
        "I'm not sure what to get her.",
        "I'm wondering whether to go.",
        "I was thinking about it all day.",
        "I'm worried about alterations though.",
        "I have a question about my invoice.",
        "I have no idea what to get her.",
        "I want to know what my dog is called.",
        "I need you to summarise this.",
        "I didn't know that.",
        "The Harlow Carr idea is perfect, she's never been.",
        "Thanks for your help with my CV, it was great.",
        "She said my dog is lovely.",
        "This is my code.",
        "Here's my plan for the week.",
        "My question is about the invoice.",
        "I'm going to ask you something.",
        "I'm getting an error when I run it.",
        "My code is throwing a null pointer exception.",
        "I think my dog is sick.",
        "I'm so excited about the trip.",
        "I've been trying to fix this for hours.",
        "You must be tired.",
        "It never rains here in summer.",
        "my bad, I meant Tuesday",
    ] {
        assert_eq!(user_says(&[said]), Vec::<String>::new(), "{said}");
    }
}

#[test]
fn only_the_user_states_facts() {
    let mut t = traces(vec![
        NewEvent::user("Hello there, can you help?"),
        NewEvent::assistant("My name is Claude. I live in the cloud. Your dog is called Biscuit."),
        NewEvent::tool_call("c", "lookup", json!({"q": "my dog"})),
        {
            let mut r = NewEvent::tool_result("c", json!("My dog is called Rex."));
            r.content = "My dog is called Rex.".into();
            r
        },
        NewEvent::assistant("I prefer tea. My favourite colour is blue."),
        NewEvent::user("My favourite colour is teal."),
    ]);
    assert_eq!(facts_of(&t), ["My favourite colour is teal"]);
    // Named participants (a conversation between two people): the user's
    // side still, whatever the names.
    t[0].name = Some("Melanie".into());
    t[1].name = Some("Caroline".into());
    assert_eq!(facts_of(&t), ["My favourite colour is teal"]);
    assert!(
        run(&t).episodic_summary.contains("Caroline: "),
        "names label the sentences"
    );
}

/// A change is a fact like any other, stated whole: the new value and,
/// where the sentence says it, the old one.
#[test]
fn changes_are_facts_and_keep_both_values() {
    let facts = user_says(&[
        "I sold the Octavia and got a Kia Niro.",
        "I've gone off curling; judo is my thing now.",
        "These days I'm in Porto.",
        "Turns out I'm not allergic to peanuts any more.",
        "I no longer eat meat.",
        "I quit my job at the bank last spring.",
        "I moved to Berlin last month.",
    ]);
    for (said, fact) in [
        ("Octavia", "I sold the Octavia and got a Kia Niro"),
        ("curling", "I've gone off curling; judo is my thing now"),
        ("Porto", "These days I'm in Porto"),
        ("allergic", "I'm not allergic to peanuts any more"),
        ("meat", "I no longer eat meat"),
        ("bank", "I quit my job at the bank last spring"),
        ("Berlin", "I moved to Berlin last month"),
    ] {
        assert!(
            facts.iter().any(|f| f.contains(fact)),
            "{said}: {fact:?} not among {facts:?}"
        );
    }
}

#[test]
fn a_change_said_with_an_adverb_or_a_trade_is_a_fact() {
    for said in [
        "My old flat is gone; I now have a place by the river.",
        "I still am a member of the chess club.",
        "I swapped my road bike for a gravel bike.",
        "I traded in the van for an estate car.",
        "I replaced my old laptop with a desktop.",
        "Nowadays I do pottery on Tuesdays.",
    ] {
        assert_eq!(user_says(&[said]).len(), 1, "{said}");
    }
    for said in [
        "I do think so.",
        "I do appreciate it.",
        "I now have a question about taxes.",
        "I do not know.",
    ] {
        assert!(user_says(&[said]).is_empty(), "{said}");
    }
}
