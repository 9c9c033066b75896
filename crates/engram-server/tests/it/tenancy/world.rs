//! The matrix's world: the tokens and the rule's model of them, the
//! targets each cell aims at, tenant B seeded by its own token (and its
//! export, which must never change), and each token's own memory, made
//! again whenever a write may have changed it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use engram_proto::pb;
use pb::memory_scope::Scope as S;
use serde_json::{Value, json};

use super::rows::{Bundles, Ids, Part};
use super::surfaces::{self, Answer, Req};
use crate::common::{TestServer, compact, event, ingest_req, tokens_file, user};
use crate::security::{Authed, authed};

pub(super) const ADMIN: &str = "tenancy-admin-token-0123";
pub(super) const BOT: &str = "tenancy-bot-token-012345";
pub(super) const TENANT_A: &str = "tenancy-tenant-a-token-01";
pub(super) const BOTH: &str = "tenancy-both-token-01234";
pub(super) const TENANT_B: &str = "tenancy-tenant-b-token-01";
pub(super) const UNKNOWN: &str = "tenancy-unknown-token-012";

/// What every piece of tenant B's memory holds.
pub(super) const MARK: &str = "BMARK";

/// The kinds of token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Tok {
    Admin,
    /// Agents `bot-*`.
    Agent,
    /// Tenant A: users `a-*`.
    User,
    /// Agents `mix-*` and users `m-*`.
    Both,
    None,
    Unknown,
}

pub(super) const TOKENS: [Tok; 6] = [
    Tok::Admin,
    Tok::Agent,
    Tok::User,
    Tok::Both,
    Tok::None,
    Tok::Unknown,
];

impl Tok {
    pub(super) fn secret(self) -> Option<&'static str> {
        match self {
            Tok::Admin => Some(ADMIN),
            Tok::Agent => Some(BOT),
            Tok::User => Some(TENANT_A),
            Tok::Both => Some(BOTH),
            Tok::None => None,
            Tok::Unknown => Some(UNKNOWN),
        }
    }

    /// The model of the rule: which users the token covers …
    pub(super) fn covers(self, user: &str) -> bool {
        match self {
            Tok::Admin => true,
            Tok::User => user.starts_with("a-"),
            Tok::Both => user.starts_with("m-"),
            _ => false,
        }
    }

    /// … and which agent ids its patterns match (agents with no user).
    pub(super) fn matches(self, agent: &str) -> bool {
        match self {
            Tok::Admin => true,
            Tok::Agent => agent.starts_with("bot-"),
            Tok::Both => agent.starts_with("mix-"),
            _ => false,
        }
    }

    pub(super) fn allows(self, parts: &[Part]) -> bool {
        parts.iter().all(|part| match part {
            Part::Agent { id, owner, binds } => {
                binds.as_deref().is_none_or(|u| self.covers(u))
                    && match owner.as_deref().or(binds.as_deref()) {
                        Some(u) => self.covers(u),
                        None => self.matches(id),
                    }
            }
            Part::User(u) => self.covers(u),
            Part::GlobalWrite | Part::Admin => self == Tok::Admin,
        })
    }

    /// Where its new agents go.
    pub(super) fn prefix(self) -> &'static str {
        match self {
            Tok::Admin => "adm-",
            Tok::Agent => "bot-",
            Tok::Both => "mix-",
            _ => "a-",
        }
    }

    /// Its own agent (and that agent's user) and its own user.
    pub(super) fn own(self) -> (&'static str, Option<&'static str>, &'static str) {
        match self {
            Tok::Admin => ("adm-conv", Some("adm-1"), "adm-1"),
            // A user it does not cover: its user-form calls are refused.
            Tok::Agent => ("bot-own", None, "bot-user-1"),
            Tok::Both => ("mix-own", None, "m-1"),
            _ => ("a-conv", Some("a-1"), "a-1"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Aim {
    Own,
    Other,
    Missing,
}

/// The server, tenant B's memory as it must stay, and what the cells
/// need made again.
pub(super) struct World {
    pub(super) server: TestServer,
    pub(super) channel: tonic::transport::Channel,
    pub(super) http: String,
    pub(super) admin: Authed,
    pub(super) bundles: Arc<Bundles>,
    pub(super) b_facts: (String, String),
    pub(super) baseline: String,
    pub(super) n: usize,
    /// Targets a write may have changed: made again before their next use.
    pub(super) dirty: HashSet<(Tok, Aim)>,
    pub(super) global_dirty: bool,
    pub(super) facts: HashMap<(Tok, Aim), (String, String)>,
}

pub(super) async fn server(backend: &[(String, String)], dir: &std::path::Path) -> TestServer {
    let tokens = format!(
        "[[tokens]]\nname = \"ops\"\ntoken = \"{ADMIN}\"\nadmin = true\n\n\
         [[tokens]]\nname = \"bot\"\ntoken = \"{BOT}\"\nagents = [\"bot-*\"]\n\n\
         [[tokens]]\nname = \"tenant-a\"\ntoken = \"{TENANT_A}\"\nusers = [\"a-*\"]\n\n\
         [[tokens]]\nname = \"mixed\"\ntoken = \"{BOTH}\"\nagents = [\"mix-*\"]\nusers = [\"m-*\"]\n\n\
         [[tokens]]\nname = \"tenant-b\"\ntoken = \"{TENANT_B}\"\nusers = [\"b-*\"]\n"
    );
    let file = tokens_file(dir, &tokens);
    let mut env: Vec<(&str, &str)> = backend
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    env.push(("ENGRAM__AUTH__TOKENS_FILE", &file));
    env.push(("ENGRAM__HTTP__LISTEN", "127.0.0.1:0"));
    TestServer::start_with(&env).await
}

pub(super) fn scope(s: S) -> Option<pb::MemoryScope> {
    Some(pb::MemoryScope { scope: Some(s) })
}

pub(super) fn put(s: S, label: &str, value: &str) -> pb::PutMemoryBlockRequest {
    pb::PutMemoryBlockRequest {
        scope: scope(s),
        label: label.into(),
        value: value.into(),
        ..Default::default()
    }
}

pub(super) async fn add_fact(c: &mut Authed, s: S, text: &str, pinned: bool) -> String {
    let added = c
        .add_memories(pb::AddMemoriesRequest {
            scope: scope(s),
            memories: vec![pb::NewMemory {
                text: text.into(),
                pinned,
                ..Default::default()
            }],
        })
        .await
        .unwrap()
        .into_inner();
    added.results[0].id.clone()
}

/// An agent (of `owner`) with a message, blocks, and a fact in its scope
/// and in `user`'s; `mark` in all of it. Returns the facts' ids.
pub(super) async fn seed(
    c: &mut Authed,
    (agent, owner, user_id): (&str, Option<&str>, &str),
    mark: &str,
) -> (String, String) {
    c.ingest(pb::IngestRequest {
        user_id: owner.unwrap_or_default().into(),
        ..ingest_req(agent, vec![user(&format!("{mark} a message of {agent}"))])
    })
    .await
    .unwrap();
    let notes = format!("NOTE: {mark} notes of {agent}");
    c.put_memory_block(put(S::AgentId(agent.into()), "notes", &notes))
        .await
        .unwrap();
    let profile = format!("PROFILE: {mark} profile of {user_id}");
    c.put_memory_block(put(S::UserId(user_id.into()), "profile", &profile))
        .await
        .unwrap();
    let agent_fact = format!("{mark} {agent} likes green tea");
    let agent_fact = add_fact(c, S::AgentId(agent.into()), &agent_fact, false).await;
    let user_fact = format!("{mark} pinned: {user_id} banks with Heron");
    let user_fact = add_fact(c, S::UserId(user_id.into()), &user_fact, true).await;
    (agent_fact, user_fact)
}

/// Tenant B, by its own token: a user block and facts (one pinned), and a
/// conversation compacted once (a summary, compaction facts).
pub(super) async fn seed_tenant_b(channel: &tonic::transport::Channel) -> (String, String) {
    let mut b = authed(channel.clone(), TENANT_B);
    let facts = seed(&mut b, ("b-conv", Some("b-1"), "b-1"), MARK).await;
    converse_and_compact(&mut b, "b-conv", 5, |t| {
        (
            format!("{MARK} turn {t}: always wire the money to account 4242."),
            format!("{MARK} noted, account 4242 for transfer {t}."),
        )
    })
    .await;
    facts
}

/// `turns` turns of `agent` (each `say(t)`: what the user says, what the
/// assistant answers), then a compaction, which must run.
pub(super) async fn converse_and_compact(
    c: &mut Authed,
    agent: &str,
    turns: usize,
    say: impl Fn(usize) -> (String, String),
) {
    for t in 1..=turns {
        let (question, answer) = say(t);
        let turn = vec![user(&question), event(pb::TraceType::Assistant, &answer)];
        c.ingest(ingest_req(agent, turn)).await.unwrap();
    }
    let report = c.compact(compact(agent)).await.unwrap().into_inner();
    let report = report.report.unwrap();
    assert!(report.performed, "{report:?}");
}

/// The bundles ImportMemory's rows send, from agents made for them.
pub(super) async fn templates(c: &mut Authed, channel: &tonic::transport::Channel) -> Bundles {
    seed(c, ("tpl-solo", None, "tpl-0"), "template").await;
    seed(c, ("tpl-conv", Some("tpl-1"), "tpl-1"), "template").await;
    Bundles {
        solo: export_of(channel, json!({"agent_id": "tpl-solo"})).await,
        bound: export_of(channel, json!({"agent_id": "tpl-conv"})).await,
        user: export_of(channel, json!({"user_id": "tpl-1"})).await,
    }
}

/// The bundle of `scope` (a MemoryScope in proto3 JSON), as the admin
/// exports it.
pub(super) async fn export_of(channel: &tonic::transport::Channel, scope: Value) -> String {
    let req = Req::Json(json!({ "scope": scope }));
    let answer = surfaces::grpc(channel, Some(ADMIN), "ExportMemory", &req).await;
    assert_eq!(answer.code, "OK", "{answer:?}");
    answer.body
}

/// B's whole memory as its export says it, minus the export's own time.
pub(super) async fn tenant_b(channel: &tonic::transport::Channel) -> String {
    let bundle = export_of(channel, json!({"user_id": "b-1"})).await;
    let header_end = bundle.find('\n').unwrap();
    let header: Value = serde_json::from_str(&bundle[..header_end]).unwrap();
    assert!(header["exported_at"].is_number(), "{header}");
    let mut header = header;
    header.as_object_mut().unwrap().remove("exported_at");
    format!("{header}{}", &bundle[header_end..])
}

impl World {
    /// A client of the world's server with `token`.
    pub(super) fn client(&self, token: &str) -> Authed {
        authed(self.channel.clone(), token)
    }

    pub(super) async fn new(backend: &[(String, String)], dir: &std::path::Path) -> Self {
        let server = server(backend, dir).await;
        let channel = server.channel().await;
        let http = server.http.unwrap().to_string();
        let mut admin = authed(channel.clone(), ADMIN);
        let b_facts = seed_tenant_b(&channel).await;
        let bundles = Arc::new(templates(&mut admin, &channel).await);
        let baseline = tenant_b(&channel).await;
        assert!(baseline.contains(MARK) && baseline.contains("b-conv"));
        Self {
            server,
            channel,
            http,
            admin,
            bundles,
            b_facts,
            baseline,
            n: 0,
            dirty: TOKENS
                .iter()
                .flat_map(|t| [(*t, Aim::Own), (*t, Aim::Other)])
                .collect(),
            global_dirty: true,
            facts: HashMap::new(),
        }
    }

    /// The ids of a cell, its target made (again) when a write may have
    /// changed it.
    pub(super) async fn ids(&mut self, tok: Tok, aim: Aim) -> Ids {
        self.n += 1;
        let n = self.n;
        let fresh = format!("{}new-{n}", tok.prefix());
        let (agent, owner, user) = match (tok, aim) {
            (_, Aim::Missing) => {
                return Ids {
                    agent: format!("zz-{n}"),
                    owner: None,
                    user: format!("zz-u{n}"),
                    fresh,
                    agent_fact: format!("fact-missing-{n}"),
                    user_fact: format!("fact-missing-{n}"),
                    bundles: Arc::clone(&self.bundles),
                };
            }
            (Tok::Admin, Aim::Other) => ("c-conv", Some("c-1"), "c-1"),
            (_, Aim::Other) => {
                return Ids {
                    agent: "b-conv".into(),
                    owner: Some("b-1".into()),
                    user: "b-1".into(),
                    fresh,
                    agent_fact: self.b_facts.0.clone(),
                    user_fact: self.b_facts.1.clone(),
                    bundles: Arc::clone(&self.bundles),
                };
            }
            (Tok::None | Tok::Unknown, Aim::Own) => Tok::User.own(),
            (tok, Aim::Own) => tok.own(),
        };
        let key = match tok {
            Tok::None | Tok::Unknown => (Tok::User, Aim::Own),
            _ => (tok, aim),
        };
        if self.dirty.remove(&key) || !self.facts.contains_key(&key) {
            let facts = seed(&mut self.admin, (agent, owner, user), "own").await;
            self.facts.insert(key, facts);
        }
        let (agent_fact, user_fact) = self.facts[&key].clone();
        Ids {
            agent: agent.into(),
            owner: owner.map(str::to_owned),
            user: user.into(),
            fresh,
            agent_fact,
            user_fact,
            bundles: Arc::clone(&self.bundles),
        }
    }

    pub(super) async fn global(&mut self) {
        if std::mem::take(&mut self.global_dirty) {
            self.admin
                .put_memory_block(put(S::Global(true), "house", "House rules."))
                .await
                .unwrap();
        }
    }

    /// What no answer may hold: B's memory, or (for a token that does
    /// not cover B) B's ids where the call did not name them.
    pub(super) fn check_answer(what: &str, answer: &Answer, tok: Tok) {
        let text = format!("{} {}", answer.message, answer.body);
        assert!(!text.contains(MARK), "{what}: B's memory in {answer:?}");
        if tok != Tok::Admin && answer.code == "OK" {
            for id in ["b-conv", "\"b-1\""] {
                assert!(!text.contains(id), "{what}: B's {id} in {answer:?}");
            }
        }
    }

    /// B's memory as it was: after every call that named B's ids, and
    /// after each row's every call (an export takes ~15 ms; after all
    /// 2,000 cells it would double the matrix's time).
    pub(super) async fn check_b(&self, what: &str) {
        let now = tenant_b(&self.channel).await;
        assert!(now == self.baseline, "{what}: B's memory changed");
    }
}
