//! A long, realistic conversation for measuring the extractive summarizer:
//! 60 turns of a user chatting with an assistant about her life, work and
//! plans, with 18 tool calls (two of which fail) as a client would ingest
//! them. With the default policy (a raw tail of 4 turns plus
//! the current one) a compaction summarizes turns 1–55.

use engram_core::turns::assign_all;
use engram_core::{NewEvent, RawTrace};

/// One tool call of a turn: name, JSON arguments, JSON result, error.
type Tool = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
);

/// User message, tool calls, assistant answer.
type Turn = (&'static str, &'static [Tool], &'static str);

const TURNS: &[Turn] = &[
    (
        "Hi! I'm Maya, I'm a data engineer at a freight logistics company in Leeds. I'd like some help planning the next few months, there's a lot going on.",
        &[],
        "Hi Maya, nice to meet you! I'd be glad to help you plan. Tell me what's coming up and we can put it in order: travel, work deadlines, personal things. What's the first thing on your mind?",
    ),
    (
        "The big one: my sister Ottoline is getting married in Lisbon on 14 September. I'm one of the bridesmaids, so I need to be there a few days early.",
        &[],
        "Congratulations to Ottoline! A Lisbon wedding in mid-September should have lovely weather, usually around 25 °C. As a bridesmaid you'll probably want to arrive by 11 or 12 September for fittings and the rehearsal. Would you like me to look at flights from Leeds Bradford or Manchester?",
    ),
    (
        "Yes please, check flights from Manchester to Lisbon around 11 September.",
        &[(
            "flight_search",
            r#"{"from":"MAN","to":"LIS","date":"2025-09-11"}"#,
            r#"{"flights":[{"carrier":"TAP","depart":"07:05","price_gbp":148},{"carrier":"easyJet","depart":"13:40","price_gbp":96}]}"#,
            None,
        )],
        "I found two direct options on 11 September: TAP at 07:05 for £148 and easyJet at 13:40 for £96. The easyJet flight lands around 16:30 local time, which leaves the evening free. Prices for September tend to rise over the summer, so booking soon is sensible.",
    ),
    (
        "Let's go with the easyJet one at 13:40. I'll book it tonight myself.",
        &[],
        "Good choice: easyJet, Manchester to Lisbon, 11 September at 13:40, £96. Remember to add a cabin bag if you're bringing the bridesmaid dress on board rather than checking it. Shall I put the flight in your calendar?",
    ),
    (
        "Yes, add it to my calendar.",
        &[(
            "calendar_create",
            r#"{"title":"Flight MAN-LIS (easyJet)","start":"2025-09-11T13:40","end":"2025-09-11T16:30"}"#,
            r#"{"ok":true,"id":"evt_311"}"#,
            None,
        )],
        "Done: the flight is in your calendar on 11 September, 13:40 to 16:30. I set a reminder for the day before so you can check in online.",
    ),
    (
        "Thanks. Unrelated, but my dog is called Biscuit and he's a three-year-old beagle. Who can look after him while I'm away?",
        &[],
        "Biscuit sounds like great company! For five or six days away you have three usual options: a friend or family member, a dog sitter who stays at your home, or a boarding kennel. Beagles are sociable and can get noisy when left alone, so a home sitter or a kennel with group play often works best. Do you have anyone nearby who knows him?",
    ),
    (
        "My neighbour Priya has walked him before, she lives two doors down. I'll ask her first.",
        &[],
        "That's ideal: Biscuit already knows Priya, which makes the change much easier for him. Give her his feeding routine, the vet's number and his walking schedule in writing. If she can't do it, I can search for kennels near you as a backup.",
    ),
    (
        "Can you find kennels near Headingley just in case?",
        &[(
            "web_search",
            r#"{"query":"dog boarding kennels near Headingley Leeds"}"#,
            r#"{"results":[{"title":"Meanwood Valley Pet Hotel","rating":4.8},{"title":"Adel Dog Lodge","rating":4.6}]}"#,
            None,
        )],
        "Two well-rated options near Headingley: Meanwood Valley Pet Hotel (4.8 stars) and Adel Dog Lodge (4.6 stars). Both ask for up-to-date vaccinations including kennel cough, so check Biscuit's booster date. September books up quickly, so ring them soon if Priya can't help.",
    ),
    (
        "Good to know. Work now: we're migrating our nightly batch jobs from cron to Airflow and I'm leading it.",
        &[],
        "That's a meaty project. A cron-to-Airflow migration usually goes well in phases: inventory every job and its dependencies, port the simplest ones first, run both systems in parallel for a while, then switch off cron job by job. What's the deadline, and how many jobs are there?",
    ),
    (
        "About 40 jobs. The deadline is the end of August, before I go to Lisbon.",
        &[],
        "Forty jobs by the end of August is doable if you port four or five a week. I'd group them by dependency chain so each DAG replaces a whole chain, not a single script. Keep a shared checklist with owner, status and parallel-run results for each job; it makes the cut-over decision easy to justify.",
    ),
    (
        "The trickiest is the customs manifest export, it depends on three upstream jobs and fails randomly about once a week.",
        &[],
        "Random weekly failures often come from timing: an upstream job finishing late while cron starts the export on a fixed schedule. In Airflow you can make the export wait for all three upstream tasks with proper dependencies or sensors, which alone may fix it. It's also worth adding retries with a short delay and alerting on the final failure.",
    ),
    (
        "Could you check the Airflow docs for how ExternalTaskSensor handles timeouts?",
        &[(
            "web_search",
            r#"{"query":"Airflow ExternalTaskSensor timeout mode reschedule"}"#,
            "null",
            Some("search service timed out"),
        )],
        "My search timed out, so from memory: ExternalTaskSensor takes a timeout in seconds and fails when it's exceeded, and with mode='reschedule' it frees its worker slot between checks instead of blocking it. Set execution_delta or execution_date_fn if the upstream DAG runs on a different schedule. I can try the search again later if you want the exact page.",
    ),
    (
        "That's enough for now. We decided to use mode reschedule for all sensors, our workers are scarce.",
        &[],
        "Sensible: reschedule mode keeps worker slots free while sensors wait, which matters when workers are scarce. Pair it with a poke_interval of a few minutes so the scheduler isn't flooded.",
    ),
    (
        "By the way, I prefer answers short and in bullet points when it's technical.",
        &[],
        "Noted, I'll keep technical answers short and in bullet points from now on.",
    ),
    (
        "My favourite colour is teal. Ottoline asked all the bridesmaids to wear teal, so I got lucky!",
        &[],
        "That is lucky! Teal suits late-summer weddings beautifully. If you haven't got the dress yet, shades like peacock or dark teal photograph well in bright sunlight.",
    ),
    (
        "I already ordered the dress, it arrives on 2 August. I'm worried about alterations though.",
        &[],
        "Arriving on 2 August gives you about five weeks, which is enough for most alterations. Book a seamstress now for a fitting in the first week of August; simple hemming takes a few days, bigger changes up to two weeks.",
    ),
    (
        "Find me a seamstress in Leeds city centre with good reviews.",
        &[(
            "web_search",
            r#"{"query":"dress alterations seamstress Leeds city centre reviews"}"#,
            r#"{"results":[{"title":"Stitch & Mend, Briggate","rating":4.9},{"title":"Kirkgate Alterations","rating":4.7}]}"#,
            None,
        )],
        "Two good options in the centre: Stitch & Mend on Briggate (4.9 stars) and Kirkgate Alterations (4.7 stars). Stitch & Mend mentions bridesmaid and bridal work specifically, so I'd call them first.",
    ),
    (
        "I booked Stitch & Mend for 5 August at 10am.",
        &[(
            "calendar_create",
            r#"{"title":"Dress fitting, Stitch & Mend","start":"2025-08-05T10:00"}"#,
            r#"{"ok":true,"id":"evt_312"}"#,
            None,
        )],
        "Great, I've added the fitting at Stitch & Mend on 5 August at 10:00 to your calendar. Bring the shoes you'll wear at the wedding so the hem is right.",
    ),
    (
        "I'm also learning Portuguese on Duolingo, I've done 40 days in a row. I want to give a short toast in Portuguese at the wedding.",
        &[],
        "Forty days is a great streak! A toast is a lovely goal: keep it to four or five sentences you can rehearse until they feel natural. I can help you write it in English first and then translate it, with a pronunciation guide.",
    ),
    (
        "Let's do that later. What's the weather usually like in Lisbon mid September?",
        &[(
            "weather_climate",
            r#"{"city":"Lisbon","month":9}"#,
            r#"{"avg_high_c":26,"avg_low_c":18,"rain_days":4}"#,
            None,
        )],
        "Lisbon in September averages highs of 26 °C and lows of 18 °C, with about four rainy days in the month. Evenings by the river can be breezy, so a light wrap for the reception would be useful.",
    ),
    (
        "My mum's birthday is on 29 July and I have no idea what to get her. She loves gardening and Agatha Christie novels.",
        &[],
        "A few ideas that combine both: an illustrated edition of a Christie novel, a subscription to a seed-of-the-month club, or a day at a garden like RHS Harlow Carr near Harrogate, which isn't far from Leeds. Personal touches go a long way, such as a hand-written card with a plant she's wanted.",
    ),
    (
        "The Harlow Carr idea is perfect, she's never been. How much are tickets?",
        &[(
            "web_search",
            r#"{"query":"RHS Harlow Carr ticket prices 2025"}"#,
            r#"{"adult_gbp":16.5,"concession_gbp":14.85}"#,
            None,
        )],
        "Adult tickets for RHS Harlow Carr are £16.50, or £14.85 for concessions. Betty's tearoom on site makes it a nice full day; booking a table in advance is wise in summer.",
    ),
    (
        "I'll take her on Saturday 26 July then, the weekend before her birthday.",
        &[],
        "Lovely plan: RHS Harlow Carr on Saturday 26 July. Want me to add it to your calendar and remind you to book Betty's?",
    ),
    (
        "Yes please.",
        &[(
            "calendar_create",
            r#"{"title":"Mum: RHS Harlow Carr + Betty's","start":"2025-07-26T10:00"}"#,
            r#"{"ok":true,"id":"evt_313"}"#,
            None,
        )],
        "Added for Saturday 26 July at 10:00, with a reminder on 19 July to book a table at Betty's.",
    ),
    (
        "Back to work stuff: our team is switching from Jenkins to GitHub Actions next quarter too. Honestly too many migrations at once.",
        &[],
        "Two migrations in one season is a lot. If you can, keep the CI switch out of the Airflow critical path: finish porting DAGs first, then move the pipelines repo by repo. It's reasonable to ask your manager to sequence them rather than run them in parallel.",
    ),
    (
        "My manager is called Tom and he's quite reasonable, I'll raise it at our one-to-one on Thursday.",
        &[],
        "Good plan. Come with a concrete proposal: Airflow done by 31 August, GitHub Actions starting in October, with the risk to the customs manifest export as the reason. Managers find it easier to agree to a sequence than to a complaint.",
    ),
    (
        "Draft me three bullet points for that conversation.",
        &[],
        "- Airflow migration: 40 jobs, target 31 August; customs manifest export is the riskiest piece.\n- Proposal: start GitHub Actions in October, after the Airflow cut-over and my leave.\n- Benefit: one migration at a time, fewer incidents, clearer ownership.",
    ),
    (
        "Perfect. I'm allergic to peanuts, by the way, so when you suggest restaurants in Lisbon keep that in mind.",
        &[],
        "Thanks for telling me, I'll keep your peanut allergy in mind for any food suggestions. Peanuts are uncommon in traditional Portuguese cooking, but it's still worth carrying a card in Portuguese that explains the allergy: 'Sou alérgica a amendoins.'",
    ),
    (
        "Suggest a couple of restaurants in Alfama for the night I arrive.",
        &[(
            "web_search",
            r#"{"query":"best restaurants Alfama Lisbon traditional"}"#,
            r#"{"results":[{"title":"Taberna Sal Grosso","rating":4.7},{"title":"Boi-Cavalo","rating":4.6}]}"#,
            None,
        )],
        "For your first night in Alfama: Taberna Sal Grosso, a small tavern with traditional petiscos (4.7 stars), and Boi-Cavalo, more modern and inventive (4.6 stars). Both are small, so book ahead, and mention your peanut allergy when you reserve.",
    ),
    (
        "We'll go to Sal Grosso, Ottoline loves it.",
        &[],
        "Great choice! Sal Grosso seats very few people, so reserve for 11 September as soon as you can.",
    ),
    (
        "I also run on weekends. I'm training for the Leeds half marathon on 12 October.",
        &[],
        "Nice! Training for a half in October fits well around the wedding: you can keep easy runs going in Lisbon, and the river front is flat and lovely in the morning. What's your current longest run?",
    ),
    (
        "Ten kilometres, at about 5:40 per km. I want to finish under two hours.",
        &[],
        "Under two hours needs an average of about 5:41 per km, so you're already at race pace over 10 km. The job now is endurance: build your long run by 1–2 km a week up to 18 km, keep most runs easy and add one tempo session a week.",
    ),
    (
        "Make me a simple plan for the next eight weeks.",
        &[],
        "- Weeks 1–2: long runs of 12 and 13 km, one tempo run of 5 km at 5:30/km.\n- Weeks 3–4: long runs of 14 and 15 km, tempo 6 km.\n- Weeks 5–6: 16 and 17 km, tempo 7 km; easy runs only in Lisbon.\n- Week 7: 18 km long run.\n- Week 8: taper, 10 km easy, rest two days before the race.",
    ),
    (
        "Great. Also my flat lease ends on 30 November and I'm thinking of moving to Chapel Allerton.",
        &[],
        "Chapel Allerton is popular for good reasons: independent cafés, a village feel and a quick bus into the centre. With the lease ending on 30 November, start looking in early October; most landlords list 4–6 weeks ahead.",
    ),
    (
        "What do two-bedroom flats cost there?",
        &[(
            "rent_lookup",
            r#"{"area":"Chapel Allerton, Leeds","bedrooms":2}"#,
            r#"{"median_pcm_gbp":1150,"range_pcm_gbp":[950,1400]}"#,
            None,
        )],
        "Two-bedroom flats in Chapel Allerton have a median rent of £1,150 per month, mostly between £950 and £1,400. Places with parking or a garden sit at the top of that range.",
    ),
    (
        "My budget is 1,100 a month at most, and I need a garden for Biscuit.",
        &[],
        "With £1,100 and a garden, you'll be below the median, so you may need to be flexible: ground-floor flats in converted houses or small terraced houses at the Moortown edge of Chapel Allerton are the most likely matches. Set up alerts now so you see new listings the day they appear.",
    ),
    (
        "Set up a Rightmove alert for that.",
        &[(
            "property_alert",
            r#"{"site":"rightmove","area":"Chapel Allerton","max_pcm":1100,"min_bedrooms":2,"features":["garden"]}"#,
            "null",
            Some("authentication required"),
        )],
        "I couldn't create the alert: Rightmove asked for authentication, which I can't do for you. You can set it up in a minute yourself: search Chapel Allerton, 2 beds, max £1,100 pcm, keyword 'garden', then tap 'Create alert'.",
    ),
    (
        "Fine, I'll do it myself. Remind me on 1 October to start flat hunting.",
        &[(
            "reminder_create",
            r#"{"text":"Start flat hunting in Chapel Allerton","date":"2025-10-01"}"#,
            r#"{"ok":true}"#,
            None,
        )],
        "Reminder set for 1 October: start flat hunting in Chapel Allerton.",
    ),
    (
        "Let's write the toast now. Something warm but short, about Ottoline and her fiancé Rui.",
        &[],
        "Here's a short draft in English: 'Ottoline, you have always been the brave one, the first to jump into the sea and the last to leave a party. Rui, thank you for making her laugh the way she deserves. To both of you: may your home be full of music, good food and friends. To Ottoline and Rui!'",
    ),
    (
        "I love it. Translate it into Portuguese please.",
        &[],
        "'Ottoline, sempre foste a mais corajosa, a primeira a saltar para o mar e a última a sair de uma festa. Rui, obrigada por a fazeres rir como ela merece. Aos dois: que a vossa casa esteja sempre cheia de música, boa comida e amigos. À Ottoline e ao Rui!'",
    ),
    (
        "How do I pronounce 'obrigada por a fazeres rir'?",
        &[],
        "Roughly: oh-bree-GAH-dah poor ah fah-ZEH-resh REER. European Portuguese swallows unstressed vowels, so keep 'por a' quick and light, and tap the r in 'rir' slightly.",
    ),
    (
        "I'll practise it every evening with Duolingo too. What time is it in Lisbon now?",
        &[(
            "world_clock",
            r#"{"city":"Lisbon"}"#,
            r#"{"time":"19:42","utc_offset":"+01:00"}"#,
            None,
        )],
        "It's 19:42 in Lisbon, the same time as in Leeds: Portugal and the UK share the same time zone.",
    ),
    (
        "Really? I didn't know that. OK, for the hen party, Ottoline wants a day trip to Sintra on 12 September.",
        &[],
        "Sintra makes a great hen day: Pena Palace, the Quinta da Regaleira gardens and lunch in the old town. It's about 40 minutes by train from Rossio station, with trains every 20 minutes. Book Pena Palace tickets online with a timed entry, it gets very busy.",
    ),
    (
        "How much are Pena Palace tickets?",
        &[(
            "web_search",
            r#"{"query":"Pena Palace ticket price 2025"}"#,
            r#"{"park_and_palace_eur":20,"park_only_eur":10}"#,
            None,
        )],
        "Park and palace tickets cost €20, or €10 for the park only. For a group of eight that's €160 for the full visit; the timed slots before 10:00 are the quietest.",
    ),
    (
        "We're eight people, so I'll book the 9:30 slot for everyone.",
        &[],
        "Good plan: eight tickets for the 9:30 slot at Pena Palace on 12 September, €160 in total. Take the 8:41 train from Rossio to arrive with time to spare.",
    ),
    (
        "How do I convert 160 euros to pounds?",
        &[(
            "currency_convert",
            r#"{"amount":160,"from":"EUR","to":"GBP"}"#,
            r#"{"amount":136.4,"rate":0.8525}"#,
            None,
        )],
        "€160 is about £136.40 at today's rate of 0.8525.",
    ),
    (
        "Ok. Back to Airflow: 18 of the 40 jobs are ported now and running in parallel with cron.",
        &[],
        "That's 45% done with roughly six weeks to go, right on pace. Have the parallel runs produced identical outputs so far, or have you seen differences?",
    ),
    (
        "Identical except the customs manifest, which still fails sometimes.",
        &[],
        "Then the sensor fix may not be enough on its own. Look at the failure logs for a pattern: the same upstream task late each time, a database lock, or an external API timing out. If it's the API, retries with exponential backoff around that one task are the cheapest fix.",
    ),
    (
        "It's the HMRC API timing out. I'll add retries with exponential backoff, 5 attempts.",
        &[],
        "- Use retries=5 with retry_exponential_backoff=True and a max_retry_delay of 10 minutes.\n- Make the export idempotent so a retry can't send a duplicate manifest.\n- Alert only after the last attempt fails.",
    ),
    (
        "Tom agreed to push GitHub Actions to October, by the way.",
        &[],
        "Great news: the migrations are sequenced now, Airflow first and GitHub Actions from October. That takes a lot of pressure off August.",
    ),
    (
        "What should I pack for Lisbon? I'm staying 6 nights.",
        &[],
        "- Bridesmaid dress, shoes and the alterations receipt.\n- Light clothes for 26 °C days, a wrap for evenings.\n- Comfortable walking shoes: Lisbon's hills and cobbles are hard on heels.\n- Running kit for easy runs by the river.\n- Your allergy card in Portuguese, adaptor plug, and the printed toast.",
    ),
    (
        "Good list. Priya said yes to looking after Biscuit from 11 to 17 September!",
        &[],
        "Wonderful, Biscuit stays at home with someone he knows. Leave Priya his food, lead, the vet's number and a spare key, and maybe a note of his favourite walks.",
    ),
    (
        "Can you email Priya a summary of Biscuit's routine? Her address is priya.n@example.com.",
        &[(
            "send_email",
            r#"{"to":"priya.n@example.com","subject":"Biscuit's routine","body":"Breakfast 7:30, walk 8:00 and 18:00, dinner 18:30, vet: Headingley Vets 0113 496 0000."}"#,
            r#"{"ok":true,"message_id":"m_889"}"#,
            None,
        )],
        "Sent: Priya has an email with Biscuit's routine: breakfast at 7:30, walks at 8:00 and 18:00, dinner at 18:30, and the number of Headingley Vets.",
    ),
    (
        "My friend Jonas is visiting Leeds the weekend after I'm back, he's vegan. Any good vegan places?",
        &[(
            "web_search",
            r#"{"query":"best vegan restaurants Leeds"}"#,
            r#"{"results":[{"title":"Humpit, Call Lane","rating":4.6},{"title":"Roots & Fruits, Grand Arcade","rating":4.5}]}"#,
            None,
        )],
        "Two favourites: Humpit on Call Lane for hummus bowls, and Roots & Fruits in the Grand Arcade, a long-running vegan café. Both are central, so you can walk there from the station.",
    ),
    (
        "Thanks, that's all for today. Actually one more thing: my birthday is 3 March, in case you need it for anything.",
        &[],
        "Thanks, I'll remember that your birthday is 3 March. Have a good evening, Maya, and good luck with the customs manifest fix!",
    ),
    // The raw tail (4 turns) and the current turn: not summarized.
    (
        "Morning! The manifest job ran clean all night with the new retries.",
        &[],
        "Excellent news! One clean night is a good sign; give it a week of clean runs before you switch off the old cron job.",
    ),
    (
        "Will do. Can you remind me what time my flight to Lisbon is?",
        &[],
        "Your easyJet flight from Manchester to Lisbon is on 11 September at 13:40, landing around 16:30 local time.",
    ),
    (
        "And the dress fitting?",
        &[],
        "Your fitting at Stitch & Mend on Briggate is on 5 August at 10:00.",
    ),
    (
        "Great, thanks. I'll go for my long run now, 12 km today.",
        &[],
        "Enjoy it! Keep it easy, around 6:10 per km, and take water if it's warm.",
    ),
];

/// The current turn's question, still unanswered.
const CURRENT: &str = "I'm back, that went well. What should I eat after a long run?";

/// The conversation as traces, the current turn last.
pub fn life_chat() -> Vec<RawTrace> {
    let mut events = vec![];
    let mut call = 0;
    for (user, tools, assistant) in TURNS {
        events.push(NewEvent::user(*user));
        for (name, args, result, error) in *tools {
            call += 1;
            let id = format!("call_{call}");
            events.push(NewEvent::tool_call(
                &id,
                *name,
                serde_json::from_str(args).expect("fixture JSON"),
            ));
            let mut result =
                NewEvent::tool_result(&id, serde_json::from_str(result).expect("fixture JSON"));
            result.tool_error = error.map(str::to_owned);
            events.push(result);
        }
        events.push(NewEvent::assistant(*assistant));
    }
    events.push(NewEvent::user(CURRENT));
    assign_all(events)
}
