//! `engramd health`: asks a running server's gRPC health service, so a
//! container image needs no separate probe binary.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Where and how to ask.
#[derive(Debug, Clone)]
pub struct Probe {
    /// `host:port`.
    pub addr: String,
    /// The service to ask about; empty: the server as a whole.
    pub service: String,
    /// With a CA, the call uses TLS and verifies the server against it.
    pub tls_ca: Option<PathBuf>,
    pub tls_domain: Option<String>,
    /// A client certificate and key, for servers that require mTLS.
    pub tls_identity: Option<(PathBuf, PathBuf)>,
    pub timeout: Duration,
}

/// The listen address as a local client reaches it: an unspecified IP
/// (`0.0.0.0`, `[::]`) becomes loopback.
pub fn local_addr(listen: std::net::SocketAddr) -> String {
    let ip = match listen.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    std::net::SocketAddr::new(ip, listen.port()).to_string()
}

/// The serving status the server reports.
pub async fn check(probe: &Probe) -> anyhow::Result<ServingStatus> {
    let channel = connect(probe).await?;
    let mut client = HealthClient::new(channel);
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: probe.service.clone(),
    });
    request.set_timeout(probe.timeout);
    let answer = client
        .check(request)
        .await
        .with_context(|| format!("health check of {}", probe.addr))?;
    Ok(answer.into_inner().status())
}

async fn connect(probe: &Probe) -> anyhow::Result<Channel> {
    let scheme = if probe.tls_ca.is_some() {
        "https"
    } else {
        "http"
    };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", probe.addr))
        .with_context(|| format!("{:?} is not host:port", probe.addr))?
        .connect_timeout(probe.timeout)
        .timeout(probe.timeout);
    if let Some(ca) = &probe.tls_ca {
        let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
        if let Some(domain) = &probe.tls_domain {
            tls = tls.domain_name(domain.clone());
        }
        if let Some((cert, key)) = &probe.tls_identity {
            let cert =
                std::fs::read(cert).with_context(|| format!("reading {}", cert.display()))?;
            let key = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        endpoint = endpoint.tls_config(tls)?;
    }
    endpoint
        .connect()
        .await
        .with_context(|| format!("connecting to {}", probe.addr))
}
