//! What the client subcommands share: the connection flags (`--bootstrap-server` as Kafka's
//! tools take it, `--command-config` for client settings), the output format, and exit codes.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use sluice::client::{Admin, ClientConfig};

/// How to reach the cluster.
#[derive(Args, Debug, Clone)]
pub struct Connect {
    /// Brokers to start from: host:port, comma-separated; each is tried in turn.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// A properties file of client settings (Kafka's names: client.id, request.timeout.ms, ...).
    #[arg(long)]
    pub command_config: Option<PathBuf>,
}

impl Connect {
    /// The client configuration these flags give.
    pub fn config(&self) -> anyhow::Result<ClientConfig> {
        let mut config = match &self.command_config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading --command-config {}", path.display()))?;
                ClientConfig::from_properties(&text)?
            }
            None => ClientConfig::default(),
        };
        config.insert("bootstrap.servers", self.bootstrap_server.clone());
        if config.get("client.id").is_none() {
            config.insert("client.id", "sluice-cli");
        }
        Ok(config)
    }

    pub fn admin(&self) -> anyhow::Result<Admin> {
        Ok(Admin::new(self.config()?)?)
    }
}

/// Tables for people, JSON for scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// A current-thread runtime for a command.
pub fn block_on<F: std::future::Future<Output = anyhow::Result<()>>>(
    future: F,
) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(future)
}

/// The exit code for a failed command: 3 when no broker could be reached, 4 for a Kafka error
/// the cluster answered with, 1 otherwise (2 is a usage error, from the argument parser).
pub fn exit_code(error: &anyhow::Error) -> u8 {
    use sluice::client::Error;
    for cause in error.chain() {
        match cause.downcast_ref::<Error>() {
            Some(Error::Connect { .. } | Error::NoBrokerReachable { .. }) => return 3,
            Some(Error::Kafka { .. }) => return 4,
            _ => {}
        }
    }
    1
}

/// Prints rows as columns, each as wide as its widest cell.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.len());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// `key=value` from the command line.
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not key=value"))?;
    Ok((key.trim().to_owned(), value.trim().to_owned()))
}

/// `count` distinct loopback ports nothing listens on, for the nodes a command starts.
///
/// All are held until every one is picked, so the kernel cannot hand the same port out twice.
pub fn free_ports(count: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}
