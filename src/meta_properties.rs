//! `meta.properties`: which cluster and node a data directory belongs to, in Kafka's format.
//!
//! ```text
//! #Written by sluice
//! cluster.id=6b0f3c52a9e1d7f41c3c2d8e9a0b7f15
//! node.id=2
//! version=1
//! ```
//!
//! Every log dir and the metadata dir carry one. A directory without it is formatted on first
//! start; one that belongs to another cluster or node makes the node refuse to start, so data
//! is never mixed between clusters or served under another node's identity.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::config::parse_properties;

pub const META_PROPERTIES: &str = "meta.properties";
const VERSION: &str = "1";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub cluster_id: String,
    pub node_id: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum MetaPropertiesError {
    #[error(
        "{dir} belongs to cluster {found_cluster} node {found_node}, but this node is configured as cluster {expected_cluster} node {expected_node}: refusing to start (use the right config, or an empty data directory)"
    )]
    Mismatch {
        dir: String,
        found_cluster: String,
        found_node: u64,
        expected_cluster: String,
        expected_node: u64,
    },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error(
        "{operation} {path}: {}",
        crate::protocol::topic_partition::io_reason(source)
    )]
    Io {
        /// What was being done: "creating", "reading", "writing", "syncing".
        operation: &'static str,
        path: String,
        source: std::io::Error,
    },
}

/// Checks `dir`'s meta.properties against `expected`, writing it if the directory has none.
/// Returns true when it formatted the directory.
pub fn ensure(dir: &Path, expected: &MetaProperties) -> Result<bool, MetaPropertiesError> {
    let io = |operation: &'static str, path: &Path| {
        let path = path.display().to_string();
        move |source| MetaPropertiesError::Io {
            operation,
            path: path.clone(),
            source,
        }
    };
    fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let path = dir.join(META_PROPERTIES);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let found = parse(&text).map_err(|reason| MetaPropertiesError::Invalid {
                path: path.display().to_string(),
                reason,
            })?;
            if &found != expected {
                return Err(MetaPropertiesError::Mismatch {
                    dir: dir.display().to_string(),
                    found_cluster: found.cluster_id,
                    found_node: found.node_id,
                    expected_cluster: expected.cluster_id.clone(),
                    expected_node: expected.node_id,
                });
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = format!(
                "#Written by sluice\ncluster.id={}\nnode.id={}\nversion={VERSION}\n",
                expected.cluster_id, expected.node_id
            );
            let tmp = dir.join(format!("{META_PROPERTIES}.tmp"));
            let mut file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(&tmp)
                .map_err(io("writing", &tmp))?;
            file.write_all(text.as_bytes())
                .map_err(io("writing", &tmp))?;
            file.sync_all().map_err(io("syncing", &tmp))?;
            fs::rename(&tmp, &path).map_err(io("writing", &path))?;
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io("syncing", dir))?;
            Ok(true)
        }
        Err(e) => Err(io("reading", &path)(e)),
    }
}

fn parse(text: &str) -> Result<MetaProperties, String> {
    let properties = parse_properties(text)?;
    match properties.get("version").map(String::as_str) {
        Some(VERSION) => {}
        other => return Err(format!("unsupported version {other:?}")),
    }
    let cluster_id = properties.get("cluster.id").ok_or("no cluster.id")?.clone();
    let node_id = properties
        .get("node.id")
        .ok_or("no node.id")?
        .parse()
        .map_err(|_| "node.id is not a number".to_owned())?;
    Ok(MetaProperties {
        cluster_id,
        node_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_once_then_refuses_foreign_identities() {
        let dir = tempfile::tempdir().unwrap();
        let me = MetaProperties {
            cluster_id: "abc".into(),
            node_id: 2,
        };
        assert!(ensure(dir.path(), &me).unwrap(), "formatted on first start");
        assert!(!ensure(dir.path(), &me).unwrap(), "accepted afterwards");
        let other_node = MetaProperties {
            node_id: 3,
            ..me.clone()
        };
        let message = ensure(dir.path(), &other_node).unwrap_err().to_string();
        assert!(
            message.contains("cluster abc node 2") && message.contains("refusing to start"),
            "{message}"
        );
        let other_cluster = MetaProperties {
            cluster_id: "xyz".into(),
            ..me
        };
        assert!(matches!(
            ensure(dir.path(), &other_cluster),
            Err(MetaPropertiesError::Mismatch { .. })
        ));
        fs::write(dir.path().join(META_PROPERTIES), "version=7\n").unwrap();
        assert!(matches!(
            ensure(dir.path(), &other_node),
            Err(MetaPropertiesError::Invalid { .. })
        ));
    }
}
