//! The real `engramd` as a child process on port 0, killed with SIGKILL
//! (no shutdown path runs) or stopped with SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use engram_proto::pb::memory_service_client::MemoryServiceClient;
use tonic::transport::Channel;

pub type Client = MemoryServiceClient<Channel>;

#[derive(Debug)]
pub struct Daemon {
    child: Child,
    pub addr: String,
    pub metrics: Option<String>,
}

/// How to start the binary.
#[derive(Debug, Clone)]
pub struct Launch {
    pub binary: PathBuf,
    pub data_dir: PathBuf,
    /// Extra `ENGRAM__…` settings.
    pub env: Vec<(String, String)>,
    /// Also serve metrics (on port 0).
    pub metrics: bool,
}

impl Daemon {
    pub fn spawn(launch: &Launch) -> anyhow::Result<Self> {
        let mut cmd = Command::new(&launch.binary);
        cmd.env("ENGRAM__SERVER__LISTEN", "127.0.0.1:0")
            .env("ENGRAM__STORE__DATA_DIR", &launch.data_dir)
            .env("ENGRAM__LOG__LEVEL", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if launch.metrics {
            cmd.env("ENGRAM__SERVER__METRICS_LISTEN", "127.0.0.1:0");
        }
        for (k, v) in &launch.env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", launch.binary.display()))?;
        let mut stdout = BufReader::new(child.stdout.take().context("piped stdout")?);
        let mut read = |prefix: &str| -> anyhow::Result<String> {
            let mut line = String::new();
            stdout.read_line(&mut line)?;
            line.trim()
                .strip_prefix(prefix)
                .map(str::to_owned)
                .with_context(|| format!("unexpected line {line:?} from engramd"))
        };
        let addr = read("engramd listening on ")?;
        let metrics = launch
            .metrics
            .then(|| read("engramd metrics on "))
            .transpose()?;
        Ok(Self {
            child,
            addr,
            metrics,
        })
    }

    pub async fn channel(&self) -> anyhow::Result<Channel> {
        Ok(Channel::from_shared(format!("http://{}", self.addr))?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await?)
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(MemoryServiceClient::new(self.channel().await?)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20))
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for the clean shutdown (checkpointed files).
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()?;
        anyhow::ensure!(status.success(), "kill -TERM failed");
        let exit = self.child.wait()?;
        anyhow::ensure!(exit.success(), "engramd exited with {exit}");
        Ok(())
    }

    /// `Some(status)` once the process has exited on its own.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The debug or release `engramd` next to this executable's target dir.
pub fn default_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    exe.parent()
        .map(|dir| dir.join("engramd"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| Path::new("target/release/engramd").to_owned())
}
