//! Bearer tokens and TLS against the real server: who may call, on which
//! agents, over which transport.

use crate::common;

use common::{TestServer, ingest_req, user};
use engram_proto::pb;
use engram_proto::pb::memory_service_client::MemoryServiceClient;
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const TEAM_A: &str = "team-a-token-0123456789";
const OPS: &str = "ops-admin-token-0123456789";
const ACME: &str = "acme-users-token-0123456789";

pub(crate) type Authed = MemoryServiceClient<
    InterceptedService<
        Channel,
        Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send>,
    >,
>;

pub(crate) fn authed(channel: Channel, token: &str) -> Authed {
    let header: tonic::metadata::MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
    MemoryServiceClient::with_interceptor(
        channel,
        Box::new(move |mut req: tonic::Request<()>| {
            req.metadata_mut().insert("authorization", header.clone());
            Ok(req)
        }),
    )
}

/// A server with a tokens file: team-a (plaintext, `team-a-*`), acme (the
/// users `acme-*`) and ops (by digest, admin).
async fn locked_server(dir: &std::path::Path) -> TestServer {
    let digest = hex_sha256(OPS);
    let file = dir.join("tokens.toml");
    std::fs::write(
        &file,
        format!(
            "[[tokens]]\nname = \"team-a\"\ntoken = \"{TEAM_A}\"\nagents = [\"team-a-*\"]\n\n\
             [[tokens]]\nname = \"acme\"\ntoken = \"{ACME}\"\nusers = [\"acme-*\"]\n\n\
             [[tokens]]\nname = \"ops\"\ntoken_sha256 = \"{digest}\"\nadmin = true\n"
        ),
    )
    .unwrap();
    TestServer::start_with(&[("ENGRAM__AUTH__TOKENS_FILE", file.to_str().unwrap())]).await
}

fn hex_sha256(s: &str) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, s.as_bytes()))
}

#[tokio::test]
async fn tokens_are_required_and_scoped() {
    let dir = tempfile::tempdir().unwrap();
    let server = locked_server(dir.path()).await;
    let channel = server.channel().await;

    // No token, a wrong token: refused before anything is stored.
    let err = MemoryServiceClient::new(channel.clone())
        .ingest(ingest_req("team-a-bot", vec![user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("Bearer"), "{err:?}");
    let err = authed(channel.clone(), "not-a-token-at-all-xx")
        .ingest(ingest_req("team-a-bot", vec![user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(!server.agents_dir().join("team-a-bot").exists());

    // Health stays open for probes.
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest::default())
        .await
        .unwrap();
    assert_eq!(health.into_inner().status, 1, "SERVING");

    // In scope: allowed. Out of scope: PERMISSION_DENIED, nothing created.
    let mut team_a = authed(channel.clone(), TEAM_A);
    team_a
        .ingest(ingest_req("team-a-bot", vec![user("hi")]))
        .await
        .unwrap();
    let err = team_a
        .ingest(ingest_req("team-b-bot", vec![user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(err.message().contains("team-a-*"), "{err:?}");
    assert!(!server.agents_dir().join("team-b-bot").exists());
    let err = team_a
        .fork_agent(pb::ForkAgentRequest {
            source_agent_id: "team-a-bot".into(),
            target_agent_id: "team-b-copy".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);

    // The admin reaches every agent, lists all of them and deletes.
    let mut ops = authed(channel.clone(), OPS);
    ops.ingest(ingest_req("team-b-bot", vec![user("hi")]))
        .await
        .unwrap();
    let all = ops
        .list_agents(pb::ListAgentsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .agent_ids;
    assert_eq!(all, ["team-a-bot", "team-b-bot"]);
    let visible = team_a
        .list_agents(pb::ListAgentsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .agent_ids;
    assert_eq!(visible, ["team-a-bot"], "ListAgents is filtered by scope");
    let err = team_a
        .get_context_stats(pb::GetContextStatsRequest {
            agent_id: "team-b-bot".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    let err = team_a
        .list_compactions(pb::ListCompactionsRequest {
            agent_id: "team-b-bot".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    let err = team_a
        .delete_agent(pb::DeleteAgentRequest {
            agent_id: "team-a-bot".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::PermissionDenied,
        "DeleteAgent is admin-only"
    );
    ops.delete_agent(pb::DeleteAgentRequest {
        agent_id: "team-b-bot".into(),
    })
    .await
    .unwrap();
    assert!(!server.agents_dir().join("team-b-bot").exists());
}

fn scope(s: pb::memory_scope::Scope) -> Option<pb::MemoryScope> {
    Some(pb::MemoryScope { scope: Some(s) })
}

fn put_block(s: pb::memory_scope::Scope, value: &str) -> pb::PutMemoryBlockRequest {
    pb::PutMemoryBlockRequest {
        scope: scope(s),
        label: "notes".into(),
        value: value.into(),
        ..Default::default()
    }
}

fn ingest_as(agent: &str, user_id: &str) -> pb::IngestRequest {
    pb::IngestRequest {
        user_id: user_id.into(),
        ..ingest_req(agent, vec![user("hi")])
    }
}

/// PERMISSION_DENIED naming what the acme token covers.
fn denied<T: std::fmt::Debug>(r: Result<T, tonic::Status>, what: &str) {
    let err = r.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{what}: {err:?}");
    assert!(err.message().contains("acme-*"), "{what}: {err:?}");
}

/// A token scoped by user patterns covers those users' agents (by the
/// agent's stored user, else the one the request binds it to) and blocks,
/// and nobody else's: PERMISSION_DENIED across users, nothing written.
#[tokio::test]
async fn tokens_scoped_by_users_cover_their_agents_only() {
    use pb::memory_scope::Scope as S;
    let dir = tempfile::tempdir().unwrap();
    let server = locked_server(dir.path()).await;
    let channel = server.channel().await;
    let mut acme = authed(channel.clone(), ACME);
    let mut ops = authed(channel.clone(), OPS);

    // A new agent bound to a covered user; then used without naming it.
    acme.ingest(ingest_as("chat-1", "acme-ana")).await.unwrap();
    acme.prepare_request(pb::PrepareRequestRequest {
        agent_id: "chat-1".into(),
        user_input: Some(user("and now?")),
        ..Default::default()
    })
    .await
    .unwrap();
    acme.put_memory_block(put_block(S::AgentId("chat-1".into()), "mine"))
        .await
        .unwrap();
    // No user named, none stored: not covered.
    denied(
        acme.ingest(ingest_as("chat-2", "")).await,
        "an agent with no user",
    );
    assert!(!server.agents_dir().join("chat-2").exists());

    // Another user's agent: not by naming a covered user either.
    ops.ingest(ingest_as("chat-3", "other-bo")).await.unwrap();
    denied(
        acme.ingest(ingest_as("chat-3", "acme-ana")).await,
        "another user's agent",
    );
    denied(
        acme.get_context_stats(pb::GetContextStatsRequest {
            agent_id: "chat-3".into(),
            ..Default::default()
        })
        .await,
        "another user's stats",
    );
    denied(
        acme.put_memory_block(put_block(S::AgentId("chat-3".into()), "x"))
            .await,
        "another user's agent's blocks",
    );

    // The user scope: its own users' blocks only; the global one read-only.
    acme.put_memory_block(put_block(S::UserId("acme-ana".into()), "Ana"))
        .await
        .unwrap();
    denied(
        acme.put_memory_block(put_block(S::UserId("other-bo".into()), "x"))
            .await,
        "another user's blocks",
    );
    let err = acme
        .put_memory_block(put_block(S::Global(true), "x"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    acme.list_memory_blocks(pb::ListMemoryBlocksRequest {
        scope: scope(S::Global(true)),
    })
    .await
    .unwrap();

    // Searching a user's conversations: a covered user's only.
    let search = |user_id: &str| pb::SearchHistoryRequest {
        user_id: user_id.into(),
        query: "hi".into(),
        ..Default::default()
    };
    acme.search_history(search("acme-ana")).await.unwrap();
    denied(
        acme.search_history(search("other-bo")).await,
        "another user's conversations",
    );

    // Listing: a covered user's agents; another user's are refused.
    let list = |user_id: &str| pb::ListAgentsRequest {
        user_id: user_id.into(),
        ..Default::default()
    };
    let mine = acme.list_agents(list("acme-ana")).await.unwrap();
    assert_eq!(mine.into_inner().agent_ids, ["chat-1"]);
    denied(
        acme.list_agents(list("other-bo")).await,
        "another user's agents",
    );
    // The users: a scoped token lists those it covers; an admin all.
    let users = pb::ListUsersRequest::default();
    let covered = acme.list_users(users.clone()).await.unwrap().into_inner();
    assert_eq!(covered.user_ids, ["acme-ana"]);
    let all = ops.list_users(users).await.unwrap().into_inner();
    assert_eq!(all.user_ids, ["acme-ana", "other-bo"]);

    // Erasing a user is for admins.
    let erase = pb::DeleteUserRequest {
        user_id: "acme-ana".into(),
    };
    let err = acme.delete_user(erase.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let erased = ops.delete_user(erase).await.unwrap().into_inner();
    assert_eq!(erased.agents_deleted, 1);
    assert!(!server.agents_dir().join("chat-1").exists());
    assert!(server.agents_dir().join("chat-3").exists());
}

#[test]
fn an_empty_tokens_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.toml");
    std::fs::write(&file, "# nothing yet\n").unwrap();
    let err = engram_server::Config::load_from(
        None,
        [(
            "ENGRAM__AUTH__TOKENS_FILE".to_string(),
            file.display().to_string(),
        )],
    )
    .unwrap_err();
    assert!(err.to_string().contains("auth.tokens_file"), "{err}");
}

/// A CA, a server certificate for localhost and a client certificate, as
/// PEM files in `dir`.
struct Pki {
    ca: String,
    client_cert: String,
    client_key: String,
}

fn pki(dir: &std::path::Path) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf("localhost");
    let (client_cert, client_key) = leaf("agent");
    for (name, pem) in [
        ("ca.pem", ca.pem()),
        ("server.pem", server_cert),
        ("server.key", server_key),
    ] {
        std::fs::write(dir.join(name), pem).unwrap();
    }
    Pki {
        ca: ca.pem(),
        client_cert,
        client_key,
    }
}

async fn tls_channel(
    port: u16,
    ca: &str,
    identity: Option<(&str, &str)>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Channel::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await
}

async fn ingest_over(channel: Channel) -> Result<(), tonic::Status> {
    MemoryServiceClient::new(channel)
        .ingest(ingest_req("tls-bot", vec![user("over TLS")]))
        .await
        .map(drop)
}

#[tokio::test]
async fn tls_serves_verified_clients_and_mtls_requires_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let path = |n: &str| dir.path().join(n).display().to_string();
    let tls_env = [
        ("ENGRAM__SERVER__TLS_CERT", path("server.pem")),
        ("ENGRAM__SERVER__TLS_KEY", path("server.key")),
    ];
    let env: Vec<(&str, &str)> = tls_env.iter().map(|(k, v)| (*k, v.as_str())).collect();

    let server = TestServer::start_with(&env).await;
    let port = server.addr.port();
    ingest_over(tls_channel(port, &pki.ca, None).await.unwrap())
        .await
        .unwrap();
    // A plaintext client gets nowhere.
    let plain = MemoryServiceClient::new(server.channel().await)
        .ingest(ingest_req("tls-bot", vec![user("plaintext")]))
        .await;
    assert!(plain.is_err(), "plaintext call on a TLS port succeeded");

    let ca_path = path("ca.pem");
    let mut mtls_env = env.clone();
    mtls_env.push(("ENGRAM__SERVER__TLS_CLIENT_CA", &ca_path));
    let mtls = TestServer::start_with(&mtls_env).await;
    let port = mtls.addr.port();
    let anonymous = match tls_channel(port, &pki.ca, None).await {
        Ok(channel) => ingest_over(channel).await.is_err(),
        Err(_) => true,
    };
    assert!(anonymous, "a client without a certificate was served");
    let with_cert = tls_channel(port, &pki.ca, Some((&pki.client_cert, &pki.client_key)))
        .await
        .unwrap();
    ingest_over(with_cert).await.unwrap();
}

#[test]
fn the_health_subcommand_speaks_plaintext_and_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki_dir = tempfile::tempdir().unwrap();
    pki(pki_dir.path());
    let path = |n: &str| pki_dir.path().join(n).display().to_string();
    let health = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_engramd"))
            .arg("health")
            .args(args)
            .output()
            .unwrap()
    };

    let plain = common::Daemon::spawn(&dir.path().join("plain"), &[]);
    let addr = plain.addr.to_string();
    let out = health(&["--addr", &addr]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "SERVING");
    drop(plain);
    let out = health(&["--addr", &addr, "--timeout-secs", "2"]);
    assert!(!out.status.success(), "a stopped server is not healthy");

    let (cert, key, ca) = (path("server.pem"), path("server.key"), path("ca.pem"));
    let tls = common::Daemon::spawn(
        &dir.path().join("tls"),
        &[
            ("ENGRAM__SERVER__TLS_CERT", &cert),
            ("ENGRAM__SERVER__TLS_KEY", &key),
        ],
    );
    let addr = format!("localhost:{}", tls.addr.port());
    let out = health(&["--addr", &addr, "--tls-ca", &ca]);
    assert!(out.status.success(), "{out:?}");
    let out = health(&["--addr", &addr, "--timeout-secs", "2"]);
    assert!(
        !out.status.success(),
        "plaintext health against TLS succeeded"
    );
}
