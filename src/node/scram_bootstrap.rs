//! SCRAM credentials for a new cluster: `sluice server --add-scram
//! 'SCRAM-SHA-512=[name=admin,password=admin-secret]'`, Kafka's `kafka-storage.sh format
//! --add-scram`. A cluster whose every listener (inter-broker included) takes only SCRAM could
//! not otherwise be entered: nobody could log in to create the first user.
//!
//! Kafka writes them into the bootstrap snapshot at format time, so they apply only to a new
//! cluster. Sluice has no format step (a node formats its data directory on first start), so:
//! a node that formats its metadata directory on this start, with `--add-scram`, leaves a
//! marker there; while the marker is there (the first start, or a later one if the first
//! died before the credentials were committed) the node asks the active controller to create
//! each credential **that does not exist yet**, and removes the marker once committed. A
//! credential that exists is kept as it is: starting a new node with the same command line
//! against a running cluster never resets a password changed since.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sluice_raft::Quorum;
use sluice_raft::records::ScramMechanism;

use crate::client::{DEFAULT_SCRAM_ITERATIONS, SCRAM_SALT_BYTES};
use crate::controller::ScramUpsertion;
use crate::controller::sasl_mechanism;
use crate::controller::service::{ControllerRequest, ControllerResponse, call_controller};
use crate::protocol::errors;
use crate::security::sasl::{
    Mechanism, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN, random_bytes, salted_password,
};

/// The marker's file name in the metadata log directory.
const MARKER_FILE: &str = "scram-bootstrap.pending";

/// One `--add-scram` credential.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapCredential {
    pub user: String,
    pub mechanism: ScramMechanism,
    password: String,
    pub iterations: u32,
}

// The password stays out of logs.
impl std::fmt::Debug for BootstrapCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapCredential")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl BootstrapCredential {
    /// Parses Kafka's `--add-scram` form: `SCRAM-SHA-256=[name=alice,password=alice-secret]`,
    /// with an optional `iterations=N` (4096 to 16384); values may be in double quotes.
    /// Kafka's `salt=` and `saltedpassword=` are refused with the reason (the node draws the
    /// salt; give the password).
    pub fn parse(spec: &str) -> Result<BootstrapCredential, String> {
        let usage = "expected MECHANISM=[name=USER,password=PASSWORD], e.g. \
                     SCRAM-SHA-512=[name=admin,password=admin-secret]";
        let (mechanism, fields) = spec
            .split_once('=')
            .ok_or_else(|| format!("{spec:?}: {usage}"))?;
        let mechanism = match Mechanism::from_name(mechanism.trim()) {
            Some(Mechanism::ScramSha256) => ScramMechanism::ScramSha256,
            Some(Mechanism::ScramSha512) => ScramMechanism::ScramSha512,
            _ => {
                return Err(format!(
                    "{:?} is not a SCRAM mechanism: SCRAM-SHA-256 or SCRAM-SHA-512",
                    mechanism.trim()
                ));
            }
        };
        let fields = fields
            .trim()
            .strip_prefix('[')
            .and_then(|f| f.strip_suffix(']'))
            .ok_or_else(|| format!("the credential is not in [...]: {usage}"))?;
        let (mut user, mut password, mut iterations) = (None, None, None);
        for field in split_fields(fields) {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| format!("{field:?} is not key=value: {usage}"))?;
            let value = unquote(value.trim());
            match key.trim() {
                "name" => user = Some(value.to_owned()),
                "password" => password = Some(value.to_owned()),
                "iterations" => {
                    let parsed = value
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(n))
                        .ok_or_else(|| {
                            format!(
                                "iterations={value}: expected {SCRAM_ITERATIONS_MIN} to \
                                 {SCRAM_ITERATIONS_MAX}"
                            )
                        })?;
                    iterations = Some(parsed);
                }
                "salt" | "saltedpassword" => {
                    return Err(format!(
                        "{} is not taken: the node draws a fresh salt; give password=",
                        key.trim()
                    ));
                }
                other => return Err(format!("unknown field {other:?}: {usage}")),
            }
        }
        let user = user
            .filter(|u| !u.is_empty())
            .ok_or_else(|| format!("name= is missing: {usage}"))?;
        let password = password
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("password= is missing for {user}: {usage}"))?;
        Ok(BootstrapCredential {
            user,
            mechanism,
            password,
            iterations: iterations.unwrap_or(DEFAULT_SCRAM_ITERATIONS),
        })
    }

    /// What AlterUserScramCredentials would carry: a fresh salt and the salted password.
    fn upsertion(&self) -> Result<ScramUpsertion, String> {
        let mechanism = sasl_mechanism(self.mechanism);
        let salt = random_bytes(SCRAM_SALT_BYTES).map_err(|e| e.to_string())?;
        let salted = salted_password(mechanism, self.password.as_bytes(), &salt, self.iterations)
            .map_err(|e| e.to_string())?;
        Ok(ScramUpsertion {
            user: self.user.clone(),
            mechanism: self.mechanism.code(),
            iterations: self.iterations as i32,
            salt,
            salted_password: salted,
        })
    }
}

/// The fields of `[...]`, split on commas outside double quotes.
fn split_fields(text: &str) -> Vec<&str> {
    let mut fields = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                fields.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    fields.push(&text[start..]);
    fields
        .into_iter()
        .filter(|f| !f.trim().is_empty())
        .collect()
}

fn unquote(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
}

/// Whether this start must create the `--add-scram` credentials, leaving the marker when the
/// metadata directory was formatted now. Called before the quorum starts.
pub fn pending(
    metadata_dir: &Path,
    formatted_now: bool,
    credentials: &[BootstrapCredential],
) -> std::io::Result<bool> {
    let marker = marker_path(metadata_dir);
    if credentials.is_empty() {
        if marker.exists() {
            tracing::warn!(
                marker = %marker.display(),
                "the SCRAM credentials of the first start were never committed and this start has no --add-scram: create them with `sluice users create`, then remove the marker"
            );
        }
        return Ok(false);
    }
    if formatted_now {
        std::fs::write(&marker, b"")?;
        std::fs::File::open(metadata_dir)?.sync_all()?;
        return Ok(true);
    }
    if marker.exists() {
        return Ok(true);
    }
    tracing::info!(
        "--add-scram applies to a new node only (as Kafka's format --add-scram): this node's metadata directory was formatted before, nothing is created"
    );
    Ok(false)
}

fn marker_path(metadata_dir: &Path) -> PathBuf {
    metadata_dir.join(MARKER_FILE)
}

/// Asks the active controller, until it answers, to create the credentials that do not exist
/// yet; then removes the marker. Runs beside the node's start (the quorum may have no leader
/// yet).
pub async fn create(
    quorum: Arc<Quorum>,
    voters: Vec<String>,
    metadata_dir: PathBuf,
    credentials: Vec<BootstrapCredential>,
) {
    let mut upsertions = Vec::with_capacity(credentials.len());
    for credential in &credentials {
        match credential.upsertion() {
            Ok(upsertion) => upsertions.push(upsertion),
            Err(error) => {
                tracing::error!(user = credential.user, %error, "cannot derive the --add-scram credential");
                return;
            }
        }
    }
    let request = ControllerRequest::BootstrapScramCredentials(upsertions);
    let mut said_waiting = false;
    loop {
        match call_controller(&quorum, &voters, &request, Duration::from_secs(30)).await {
            Ok(ControllerResponse::Named(results)) => {
                for (user, code, message) in results {
                    if code == errors::NONE {
                        tracing::info!(user, outcome = %message, "--add-scram credential");
                    } else {
                        tracing::error!(user, code, message, "--add-scram credential refused");
                    }
                }
                break;
            }
            Ok(other) => {
                // The marker stays: the next start asks again.
                tracing::error!(
                    answer = other.summary(),
                    "--add-scram: the controller refused the credentials; they are asked for again at the next start"
                );
                return;
            }
            Err(error) => {
                if !said_waiting {
                    tracing::info!(%error, "--add-scram: waiting for an active controller");
                    said_waiting = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    let marker = marker_path(&metadata_dir);
    if let Err(error) = std::fs::remove_file(&marker) {
        tracing::warn!(marker = %marker.display(), %error, "cannot remove the --add-scram marker");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kafkas_add_scram_form() {
        let credential =
            BootstrapCredential::parse("SCRAM-SHA-512=[name=admin,password=admin-secret]").unwrap();
        assert_eq!(credential.user, "admin");
        assert_eq!(credential.mechanism, ScramMechanism::ScramSha512);
        assert_eq!(credential.password, "admin-secret");
        assert_eq!(credential.iterations, 4096);
        let quoted = BootstrapCredential::parse(
            "SCRAM-SHA-256=[name=\"alice\",password=\"a,b=c\",iterations=8192]",
        )
        .unwrap();
        assert_eq!(quoted.user, "alice");
        assert_eq!(quoted.password, "a,b=c");
        assert_eq!(quoted.mechanism, ScramMechanism::ScramSha256);
        assert_eq!(quoted.iterations, 8192);
        assert!(
            !format!("{quoted:?}").contains("a,b=c"),
            "the password is not logged"
        );
    }

    #[test]
    fn refuses_what_it_cannot_honour_with_the_reason() {
        for (spec, says) in [
            ("PLAIN=[name=a,password=b]", "not a SCRAM mechanism"),
            ("SCRAM-SHA-512", "expected MECHANISM="),
            ("SCRAM-SHA-512=name=a,password=b", "not in [...]"),
            ("SCRAM-SHA-512=[password=b]", "name= is missing"),
            ("SCRAM-SHA-512=[name=a]", "password= is missing"),
            (
                "SCRAM-SHA-512=[name=a,password=b,iterations=10]",
                "4096 to 16384",
            ),
            (
                "SCRAM-SHA-512=[name=a,salt=AAAA,saltedpassword=BB]",
                "fresh salt",
            ),
            (
                "SCRAM-SHA-512=[name=a,password=b,colour=red]",
                "unknown field",
            ),
        ] {
            let error = BootstrapCredential::parse(spec).unwrap_err();
            assert!(error.contains(says), "{spec}: {error}");
        }
    }

    #[test]
    fn the_marker_lives_until_the_credentials_are_committed() {
        let dir = tempfile::tempdir().unwrap();
        let credentials =
            vec![BootstrapCredential::parse("SCRAM-SHA-512=[name=a,password=b]").unwrap()];
        // A directory formatted before, without a marker: nothing to do.
        assert!(!pending(dir.path(), false, &credentials).unwrap());
        // Formatted now: the marker is left, and a restart before the commit still creates.
        assert!(pending(dir.path(), true, &credentials).unwrap());
        assert!(pending(dir.path(), false, &credentials).unwrap());
        // No credentials given: nothing, whatever the marker says.
        assert!(!pending(dir.path(), false, &[]).unwrap());
        std::fs::remove_file(marker_path(dir.path())).unwrap();
        assert!(!pending(dir.path(), false, &credentials).unwrap());
    }
}
