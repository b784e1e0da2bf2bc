//! `sluice users`: SCRAM credentials through any broker's Kafka port, with the APIs Kafka's
//! `kafka-configs.sh --entity-type users` uses (so it works against Kafka too): `create` (or
//! replace) a user's credential, `list` users and their mechanisms, `delete` credentials.
//!
//! The password is salted here and never sent (see `sluice::client::Admin::
//! alter_user_scram_credentials`). So that it need not sit in the shell's history, it may come
//! from a file (`--password-file`) or from standard input's first line (`--password -`).
//!
//! The connection flags may come before the subcommand (`sluice users --bootstrap-server H:P
//! list`).

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use sluice::client::{
    Admin, DEFAULT_SCRAM_ITERATIONS, UserScramCredentialAlteration, UserScramCredentialsDescription,
};
use sluice::security::sasl::{
    Mechanism, PASSWORD_BYTES_MAX, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN,
};

use super::common::{Common, Format, block_on, print_table};

#[derive(Args)]
pub struct UsersArgs {
    #[command(subcommand)]
    command: UsersCommand,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand)]
pub enum UsersCommand {
    /// Creates a user's SCRAM credential, or replaces the one it has for that mechanism. The
    /// user then authenticates with SASL SCRAM as `User:<user>`.
    #[command(after_help = "Examples:
  sluice users create alice --password-file alice.pw
  printf '%s\\n' \"$PW\" | sluice users create alice --password - --mechanism SCRAM-SHA-256")]
    Create {
        /// The user name.
        user: String,
        #[command(flatten)]
        password: PasswordArgs,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable: a credential for each).
        #[arg(
            long = "mechanism",
            value_name = "MECHANISM",
            value_parser = parse_mechanism,
            default_value = "SCRAM-SHA-512"
        )]
        mechanisms: Vec<Mechanism>,
        /// PBKDF2 iterations (4096 to 16384): more cost every login more CPU, and a stolen
        /// credential more to guess.
        #[arg(
            long,
            default_value_t = DEFAULT_SCRAM_ITERATIONS,
            value_parser = clap::value_parser!(u32)
                .range(i64::from(SCRAM_ITERATIONS_MIN)..=i64::from(SCRAM_ITERATIONS_MAX))
        )]
        iterations: u32,
    },
    /// Users with SCRAM credentials: each mechanism and its iterations. Every user, or those
    /// named (a named user without a credential fails with RESOURCE_NOT_FOUND).
    List {
        /// Only these users.
        users: Vec<String>,
    },
    /// Deletes a user's SCRAM credentials: those of --mechanism, or every one it has.
    Delete {
        /// The user name.
        user: String,
        /// Only the credential of this mechanism (repeatable); without it, every mechanism
        /// the user has a credential for.
        #[arg(long = "mechanism", value_name = "MECHANISM", value_parser = parse_mechanism)]
        mechanisms: Vec<Mechanism>,
    },
}

/// Where the password comes from: exactly one of the two.
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct PasswordArgs {
    /// The password; `-` reads it from standard input's first line (so it stays out of the
    /// shell's history and the process list).
    #[arg(long, value_name = "PASSWORD")]
    password: Option<String>,
    /// A file whose first line is the password.
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
}

/// A SCRAM mechanism by Kafka's name, in any case (`scram-sha-256` too).
fn parse_mechanism(name: &str) -> Result<Mechanism, String> {
    [Mechanism::ScramSha256, Mechanism::ScramSha512]
        .into_iter()
        .find(|mechanism| mechanism.name().eq_ignore_ascii_case(name.trim()))
        .ok_or_else(|| {
            format!("{name:?} is not a SCRAM mechanism: give SCRAM-SHA-256 or SCRAM-SHA-512")
        })
}

pub fn run(args: UsersArgs) -> anyhow::Result<()> {
    let UsersArgs { command, common } = args;
    // The password is read before any connection is made: a bad file fails at once.
    let password = match &command {
        UsersCommand::Create { password, .. } => {
            Some(read_password(password, &mut std::io::stdin().lock())?)
        }
        _ => None,
    };
    block_on(async move {
        let admin = common.connect().admin().await?;
        let outcome = match command {
            UsersCommand::Create {
                user,
                mechanisms,
                iterations,
                ..
            } => {
                let password = password.unwrap_or_default();
                create(&admin, &user, &mechanisms, iterations, password).await
            }
            UsersCommand::List { users } => list(&admin, &users, common.output).await,
            UsersCommand::Delete { user, mechanisms } => delete(&admin, &user, mechanisms).await,
        };
        admin.close();
        outcome
    })
}

/// The password of `args`: given, from standard input's first line (`-`), or from a file's
/// first line. Never empty, at most [`PASSWORD_BYTES_MAX`] bytes, UTF-8.
fn read_password(args: &PasswordArgs, stdin: &mut dyn BufRead) -> anyhow::Result<Vec<u8>> {
    let password = match (&args.password, &args.password_file) {
        (Some(password), _) if password == "-" => {
            first_line(stdin).context("reading the password from standard input")?
        }
        (Some(password), _) => password.clone().into_bytes(),
        (None, Some(path)) => read_password_file(path)?,
        (None, None) => bail!("give the password: --password, --password - or --password-file"),
    };
    check_password(&password)?;
    Ok(password)
}

fn read_password_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("reading --password-file {}", path.display()))?;
    let mut reader = std::io::BufReader::new(file);
    let line = first_line(&mut reader)
        .with_context(|| format!("reading --password-file {}", path.display()))?;
    // Whatever follows the first line is refused, not ignored: a file with two lines is
    // more likely a mistake than a password with a line break.
    let mut rest = Vec::new();
    reader
        .take(PASSWORD_BYTES_MAX as u64)
        .read_to_end(&mut rest)?;
    if rest.iter().any(|b| !b.is_ascii_whitespace()) {
        bail!(
            "--password-file {} has more than one line; put the password alone on the first",
            path.display()
        );
    }
    Ok(line)
}

/// The first line of `reader` without its line ending, read through a bound so that a
/// stream without a line break cannot make us buffer it all.
fn first_line(reader: &mut dyn BufRead) -> anyhow::Result<Vec<u8>> {
    let mut line = Vec::new();
    // The password, "\r\n", and one byte more to tell a password over the bound.
    reader
        .take(PASSWORD_BYTES_MAX as u64 + 3)
        .read_until(b'\n', &mut line)?;
    let ended = line.last() == Some(&b'\n');
    if ended {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    if line.len() > PASSWORD_BYTES_MAX {
        bail!("the password is longer than {PASSWORD_BYTES_MAX} bytes");
    }
    Ok(line)
}

fn check_password(password: &[u8]) -> anyhow::Result<()> {
    if password.is_empty() {
        bail!("the password is empty");
    }
    if password.len() > PASSWORD_BYTES_MAX {
        bail!("the password is longer than {PASSWORD_BYTES_MAX} bytes");
    }
    if std::str::from_utf8(password).is_err() {
        bail!("the password is not UTF-8 (SCRAM clients send it as UTF-8)");
    }
    Ok(())
}

/// One upsert per mechanism (each named once).
fn create_alterations(
    user: &str,
    mechanisms: &[Mechanism],
    iterations: u32,
    password: &[u8],
) -> Vec<UserScramCredentialAlteration> {
    let mut mechanisms = mechanisms.to_vec();
    mechanisms.sort();
    mechanisms.dedup();
    mechanisms
        .into_iter()
        .map(|mechanism| UserScramCredentialAlteration::Upsert {
            user: user.to_owned(),
            mechanism,
            iterations,
            password: password.to_vec(),
        })
        .collect()
}

async fn create(
    admin: &Admin,
    user: &str,
    mechanisms: &[Mechanism],
    iterations: u32,
    password: Vec<u8>,
) -> anyhow::Result<()> {
    let alterations = create_alterations(user, mechanisms, iterations, &password);
    drop(password);
    for alteration in &alterations {
        let mechanism = alteration.mechanism();
        alter(admin, alteration)
            .await
            .with_context(|| format!("setting the {mechanism} credential of user {user}"))?;
        println!("Set the {mechanism} credential of user {user} ({iterations} iterations).");
    }
    Ok(())
}

/// Deletions of `mechanisms` (each once), or when none is named, of every mechanism
/// `described` gives the user.
fn delete_alterations(
    user: &str,
    mechanisms: &[Mechanism],
    described: &[UserScramCredentialsDescription],
) -> Vec<UserScramCredentialAlteration> {
    let mut mechanisms: Vec<Mechanism> = if mechanisms.is_empty() {
        described
            .iter()
            .filter(|d| d.user == user)
            .flat_map(|d| d.credentials.iter().map(|c| c.mechanism))
            .collect()
    } else {
        mechanisms.to_vec()
    };
    mechanisms.sort();
    mechanisms.dedup();
    mechanisms
        .into_iter()
        .map(|mechanism| UserScramCredentialAlteration::delete(user, mechanism))
        .collect()
}

async fn delete(admin: &Admin, user: &str, mechanisms: Vec<Mechanism>) -> anyhow::Result<()> {
    let described = if mechanisms.is_empty() {
        admin
            .describe_user_scram_credentials(Some(&[user.to_owned()]))
            .await
            .with_context(|| format!("finding the credentials of user {user}"))?
    } else {
        Vec::new()
    };
    let alterations = delete_alterations(user, &mechanisms, &described);
    if alterations.is_empty() {
        bail!("user {user} has no SCRAM credential");
    }
    for alteration in &alterations {
        let mechanism = alteration.mechanism();
        alter(admin, alteration)
            .await
            .with_context(|| format!("deleting the {mechanism} credential of user {user}"))?;
        println!("Deleted the {mechanism} credential of user {user}.");
    }
    Ok(())
}

/// Applies one alteration, alone in its request: Kafka's controller refuses a request that
/// names a user twice (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the
/// same request"), even for two mechanisms.
async fn alter(admin: &Admin, alteration: &UserScramCredentialAlteration) -> anyhow::Result<()> {
    let user = alteration.user();
    let results = admin
        .alter_user_scram_credentials(std::slice::from_ref(alteration))
        .await?;
    match results.into_iter().find(|(name, _)| name == user) {
        Some((_, outcome)) => Ok(outcome?),
        None => bail!("no answer for user {user}"),
    }
}

#[derive(Serialize, Debug, PartialEq, Eq)]
struct Credential {
    user: String,
    mechanism: &'static str,
    iterations: u32,
}

/// One row per user and mechanism, users in name order.
fn credential_rows(described: &[UserScramCredentialsDescription]) -> Vec<Credential> {
    described
        .iter()
        .flat_map(|d| {
            d.credentials.iter().map(|c| Credential {
                user: d.user.clone(),
                mechanism: c.mechanism.name(),
                iterations: c.iterations,
            })
        })
        .collect()
}

async fn list(admin: &Admin, users: &[String], output: Format) -> anyhow::Result<()> {
    let described = admin
        .describe_user_scram_credentials((!users.is_empty()).then_some(users))
        .await
        .context("describing SCRAM credentials")?;
    let rows = credential_rows(&described);
    if output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    print_table(
        &["USER", "MECHANISM", "ITERATIONS"],
        &rows
            .iter()
            .map(|r| {
                vec![
                    r.user.clone(),
                    r.mechanism.to_owned(),
                    r.iterations.to_string(),
                ]
            })
            .collect::<Vec<_>>(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use sluice::client::ScramCredentialInfo;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        users: UsersArgs,
    }

    fn parse(args: &[&str]) -> Result<UsersArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("users").chain(args.iter().copied()))
            .map(|cli| cli.users)
    }

    #[test]
    fn create_defaults_to_scram_sha_512_and_4096_iterations() {
        let args = parse(&["create", "alice", "--password", "pw"]).unwrap();
        let UsersCommand::Create {
            user,
            mechanisms,
            iterations,
            password,
        } = args.command
        else {
            panic!("create");
        };
        assert_eq!(user, "alice");
        assert_eq!(mechanisms, [Mechanism::ScramSha512]);
        assert_eq!(iterations, 4096);
        assert_eq!(password.password.as_deref(), Some("pw"));
    }

    #[test]
    fn create_takes_mechanisms_in_any_case_and_bounds_iterations() {
        let args = parse(&[
            "--bootstrap-server",
            "b:1",
            "create",
            "alice",
            "--password-file",
            "f",
            "--mechanism",
            "scram-sha-256",
            "--mechanism",
            "SCRAM-SHA-512",
            "--iterations",
            "16384",
        ])
        .unwrap();
        assert_eq!(args.common.bootstrap_server, "b:1");
        let UsersCommand::Create {
            mechanisms,
            iterations,
            ..
        } = args.command
        else {
            panic!("create");
        };
        assert_eq!(mechanisms, [Mechanism::ScramSha256, Mechanism::ScramSha512]);
        assert_eq!(iterations, 16384);
        for bad in [
            &["create", "a", "--password", "p", "--iterations", "4095"][..],
            &["create", "a", "--password", "p", "--iterations", "16385"],
            &["create", "a", "--password", "p", "--mechanism", "PLAIN"],
            &["create", "a"],
            &["create", "a", "--password", "p", "--password-file", "f"],
            &["delete", "a", "--mechanism", "SCRAM-SHA-1"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn list_and_delete_parse_with_the_flags_after_the_subcommand() {
        let args = parse(&["list", "alice", "bob", "--output", "json"]).unwrap();
        assert_eq!(args.common.output, Format::Json);
        let UsersCommand::List { users } = args.command else {
            panic!("list");
        };
        assert_eq!(users, ["alice", "bob"]);
        let args = parse(&["delete", "alice"]).unwrap();
        let UsersCommand::Delete { mechanisms, .. } = args.command else {
            panic!("delete");
        };
        assert!(mechanisms.is_empty());
    }

    fn password_of(
        password: Option<&str>,
        file: Option<PathBuf>,
        stdin: &[u8],
    ) -> anyhow::Result<Vec<u8>> {
        let args = PasswordArgs {
            password: password.map(str::to_owned),
            password_file: file,
        };
        read_password(&args, &mut &stdin[..])
    }

    #[test]
    fn the_password_comes_from_the_flag_stdin_or_a_file() {
        assert_eq!(password_of(Some("pw"), None, b"").unwrap(), b"pw");
        assert_eq!(
            password_of(Some("-"), None, b"from stdin\r\nignored").unwrap(),
            b"from stdin"
        );
        assert_eq!(
            password_of(Some("-"), None, b"no newline").unwrap(),
            b"no newline"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "in a file\n").unwrap();
        assert_eq!(
            password_of(None, Some(file.clone()), b"").unwrap(),
            b"in a file"
        );
        std::fs::write(&file, "first\nsecond\n").unwrap();
        let error = password_of(None, Some(file.clone()), b"").unwrap_err();
        assert!(error.to_string().contains("more than one line"), "{error}");
        let missing = password_of(None, Some(dir.path().join("none")), b"").unwrap_err();
        assert!(
            format!("{missing:#}").contains("--password-file"),
            "{missing:#}"
        );
    }

    #[test]
    fn empty_long_and_binary_passwords_are_refused() {
        assert!(password_of(Some("-"), None, b"\n").is_err());
        assert!(password_of(Some(""), None, b"").is_err());
        let long = vec![b'x'; PASSWORD_BYTES_MAX + 1];
        assert!(password_of(Some("-"), None, &long).is_err());
        let longest = vec![b'x'; PASSWORD_BYTES_MAX];
        assert_eq!(password_of(Some("-"), None, &longest).unwrap(), longest);
        assert!(password_of(Some("-"), None, b"\xff\xfe\n").is_err());
    }

    #[test]
    fn create_upserts_each_mechanism_once_with_the_iterations_given() {
        let alterations = create_alterations(
            "alice",
            &[
                Mechanism::ScramSha512,
                Mechanism::ScramSha256,
                Mechanism::ScramSha512,
            ],
            8192,
            b"pw",
        );
        assert_eq!(
            alterations,
            [
                UserScramCredentialAlteration::Upsert {
                    user: "alice".into(),
                    mechanism: Mechanism::ScramSha256,
                    iterations: 8192,
                    password: b"pw".to_vec(),
                },
                UserScramCredentialAlteration::Upsert {
                    user: "alice".into(),
                    mechanism: Mechanism::ScramSha512,
                    iterations: 8192,
                    password: b"pw".to_vec(),
                },
            ]
        );
    }

    fn alice_has(mechanisms: &[Mechanism]) -> Vec<UserScramCredentialsDescription> {
        vec![UserScramCredentialsDescription {
            user: "alice".into(),
            credentials: mechanisms
                .iter()
                .map(|&mechanism| ScramCredentialInfo {
                    mechanism,
                    iterations: 4096,
                })
                .collect(),
        }]
    }

    #[test]
    fn delete_without_a_mechanism_deletes_every_one_the_user_has() {
        let described = alice_has(&[Mechanism::ScramSha256, Mechanism::ScramSha512]);
        assert_eq!(
            delete_alterations("alice", &[], &described),
            [
                UserScramCredentialAlteration::delete("alice", Mechanism::ScramSha256),
                UserScramCredentialAlteration::delete("alice", Mechanism::ScramSha512),
            ]
        );
        assert_eq!(
            delete_alterations("alice", &[Mechanism::ScramSha512], &[]),
            [UserScramCredentialAlteration::delete(
                "alice",
                Mechanism::ScramSha512
            )]
        );
        assert!(delete_alterations("alice", &[], &alice_has(&[])).is_empty());
    }

    #[test]
    fn list_rows_are_one_per_user_and_mechanism() {
        let mut described = alice_has(&[Mechanism::ScramSha256, Mechanism::ScramSha512]);
        described.push(UserScramCredentialsDescription {
            user: "bob".into(),
            credentials: vec![ScramCredentialInfo {
                mechanism: Mechanism::ScramSha512,
                iterations: 8192,
            }],
        });
        let rows = credential_rows(&described);
        let shown: Vec<(&str, &str, u32)> = rows
            .iter()
            .map(|r| (r.user.as_str(), r.mechanism, r.iterations))
            .collect();
        assert_eq!(
            shown,
            [
                ("alice", "SCRAM-SHA-256", 4096),
                ("alice", "SCRAM-SHA-512", 4096),
                ("bob", "SCRAM-SHA-512", 8192),
            ]
        );
    }
}
