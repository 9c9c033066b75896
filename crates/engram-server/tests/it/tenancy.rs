//! The tenancy matrix (DESIGN §9, "Tenancy"): every method of the service
//! (from its descriptor) and every MCP tool (from `tools/list`), in every
//! form, over every surface that exposes it (gRPC, the JSON API the
//! console uses, MCP), for every kind of token (admin, agent patterns,
//! user patterns, both, none, unknown) and every target (its own, another
//! tenant's, a missing one). Each cell asserts the status a model of the
//! rule expects; that tenant B's memory, exported after every cell, is
//! byte for byte what it was; that no answer holds B's marker; and that
//! B's existing ids and missing ids are refused with the same message. A
//! method or tool the matrix has no row for fails it, so it cannot fall
//! behind the API. Both backends.

mod findings;
mod rows;
mod surfaces;
mod world;

use std::collections::{BTreeSet, HashMap};

use rows::{Aimed, Ids, Part};
use surfaces::Answer;
use world::{ADMIN, Aim, TOKENS, Tok, World};

/// A refusal's message with the cell's ids taken out: what must read the
/// same for B's ids and for missing ones.
fn shape(message: &str, ids: &Ids) -> String {
    let mut out = message.to_owned();
    for (id, name) in [
        (&ids.fresh, "<fresh>"),
        (&ids.agent_fact, "<fact>"),
        (&ids.user_fact, "<fact>"),
        (&ids.agent, "<agent>"),
        (&ids.user, "<user>"),
    ] {
        out = out.replace(id.as_str(), name);
    }
    out
}

fn expected(tok: Tok, aim: Aim, parts: &[Part], present: &str, missing: &str) -> String {
    match tok {
        Tok::None | Tok::Unknown => "UNAUTHENTICATED",
        _ if !tok.allows(parts) => "PERMISSION_DENIED",
        _ if aim == Aim::Missing => missing,
        _ => present,
    }
    .to_owned()
}

/// One cell of the matrix: a row's call by one token on one target over
/// one surface.
struct Cell {
    name: String,
    tok: Tok,
    aim: Aim,
    surface: Surface,
    ids: Ids,
    parts: Vec<Part>,
    /// Allowed: the code on a target that exists, on a missing one.
    codes: (&'static str, &'static str),
    /// Whether the call may change its target (`Some(true)`: the global
    /// blocks), which is then made again before its next use.
    writes: Option<bool>,
}

#[derive(Default)]
struct Tally {
    cells: usize,
    /// Refusals of B's ids and of missing ones, shaped, by (row, token,
    /// surface).
    refusals: HashMap<(String, Tok, Surface), HashMap<Aim, String>>,
}

impl World {
    /// Asserts what `cell` answered: the code the rule's model expects,
    /// nothing of B's in it, B as it was if the call named B's ids; and
    /// notes a write that changed its target.
    async fn judge(&mut self, cell: &Cell, answer: &Answer, tally: &mut Tally) {
        let Cell { tok, aim, .. } = *cell;
        let what = format!("{} {tok:?} {aim:?} {:?}", cell.name, cell.surface);
        let want = expected(tok, aim, &cell.parts, cell.codes.0, cell.codes.1);
        assert_eq!(answer.code, want, "{what}: {answer:?}");
        Self::check_answer(&what, answer, tok);
        if aim == Aim::Other {
            self.check_b(&what).await;
        }
        if answer.code == "PERMISSION_DENIED" && aim != Aim::Own {
            let key = (cell.name.clone(), tok, cell.surface);
            let shaped = shape(&answer.message, &cell.ids);
            tally.refusals.entry(key).or_default().insert(aim, shaped);
        }
        if let (Some(global), "OK") = (cell.writes, answer.code.as_str()) {
            self.dirty.insert((tok, aim));
            self.global_dirty |= global;
        }
        tally.cells += 1;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Surface {
    Grpc,
    Json,
    Mcp,
}

async fn matrix(backend: &[(String, String)]) {
    let dir = tempfile::tempdir().unwrap();
    let mut world = World::new(backend, dir.path()).await;

    // The rows cover the API, and nothing else.
    let rpc_rows = rows::rpc_rows();
    let methods: BTreeSet<String> = surfaces::methods()
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    let covered: BTreeSet<String> = rpc_rows.iter().map(|r| r.method.to_owned()).collect();
    assert_eq!(methods, covered, "a method without rows in the matrix");
    let tool_rows = rows::mcp_rows();
    let tools: BTreeSet<String> = surfaces::mcp_tools(&world.http, ADMIN)
        .await
        .into_iter()
        .collect();
    let covered: BTreeSet<String> = tool_rows.iter().map(|r| r.tool.to_owned()).collect();
    assert_eq!(tools, covered, "an MCP tool without rows in the matrix");

    let mut tally = Tally::default();
    for row in &rpc_rows {
        let aims: &[Aim] = match row.aimed {
            Aimed::Yes => &[Aim::Own, Aim::Other, Aim::Missing],
            Aimed::No => &[Aim::Own],
        };
        for tok in TOKENS {
            for &aim in aims {
                for surface in [Surface::Grpc, Surface::Json] {
                    if row.form == "global" {
                        world.global().await;
                    }
                    let ids = world.ids(tok, aim).await;
                    let req = (row.req)(&ids);
                    let secret = tok.secret();
                    let answer = match surface {
                        Surface::Grpc => {
                            surfaces::grpc(&world.channel, secret, row.method, &req).await
                        }
                        _ => surfaces::json_api(&world.http, secret, row.method, &req).await,
                    };
                    let cell = Cell {
                        name: format!("{} ({})", row.method, row.form),
                        tok,
                        aim,
                        surface,
                        parts: (row.touches)(&ids),
                        codes: (row.present, row.missing),
                        writes: row.write.then_some(row.form == "global"),
                        ids,
                    };
                    world.judge(&cell, &answer, &mut tally).await;
                }
            }
        }
        world.check_b(row.method).await;
    }
    for tool in &tool_rows {
        for tok in TOKENS {
            for aim in [Aim::Own, Aim::Other, Aim::Missing] {
                let ids = world.ids(tok, aim).await;
                let arguments = (tool.args)(&ids);
                let answer = surfaces::mcp(&world.http, tok.secret(), tool.tool, arguments).await;
                let cell = Cell {
                    name: format!("MCP {} ({})", tool.tool, tool.form),
                    tok,
                    aim,
                    surface: Surface::Mcp,
                    parts: (tool.touches)(&ids),
                    codes: (tool.present, tool.missing),
                    writes: tool.write.then_some(false),
                    ids,
                };
                world.judge(&cell, &answer, &mut tally).await;
            }
        }
        world.check_b(tool.tool).await;
    }
    let (cells, refusals) = (tally.cells, tally.refusals);
    // Outside a token's reach, B's ids and missing ones read the same.
    let mut compared = 0;
    for (key, by_aim) in &refusals {
        if let (Some(other), Some(missing)) = (by_aim.get(&Aim::Other), by_aim.get(&Aim::Missing)) {
            assert_eq!(
                other, missing,
                "{key:?}: B's ids and missing ones refused differently"
            );
            compared += 1;
        }
    }
    assert!(
        cells > 1500 && compared > 200,
        "{cells} cells, {compared} compared"
    );
    drop(world.server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_on_every_surface_reaches_only_what_its_token_covers_on_files() {
    matrix(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_on_every_surface_reaches_only_what_its_token_covers_on_postgres() {
    let env = crate::replicas::replica_env(&[]).await;
    matrix(&env).await;
}
