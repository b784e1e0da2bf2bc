//! Handshakes between [`client_config`] and [`ServerTls`] in memory, with the fixtures in
//! `testdata/` (see its README for how they were made).

use std::io::{Read, Write};
use std::ops::DerefMut;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, ProtocolVersion, ServerConfig, ServerConnection};

use super::settings::{ClientAuth, KeyStore, PemSource, TlsSettings, TlsVersion};
use super::*;

const ALICE: &str = "CN=alice,OU=eng,O=acme,C=US";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/security/tls/testdata")
        .join(name)
}

fn settings(keystore: &str, truststore: Option<&str>, client_auth: ClientAuth) -> TlsSettings {
    TlsSettings {
        keystore: KeyStore::file(fixture(keystore)),
        truststore: truststore.map(|name| PemSource::File(fixture(name))),
        client_auth,
        protocols: vec![TlsVersion::Tls12, TlsVersion::Tls13],
        principal_mapping_rules: "DEFAULT".to_string(),
    }
}

fn server(keystore: &str, truststore: Option<&str>, client_auth: ClientAuth) -> ServerTls {
    ServerTls::load(&settings(keystore, truststore, client_auth)).unwrap()
}

/// A client trusting the test CA, presenting `keystore` if given, checking host names.
fn client(keystore: Option<&str>) -> Arc<ClientConfig> {
    let keystore = keystore.map(|name| KeyStore::file(fixture(name)));
    client_config(
        Some(&PemSource::File(fixture("ca.pem"))),
        keystore.as_ref(),
        true,
    )
    .unwrap()
}

/// Both ends of a handshake run in memory, and what each side concluded.
struct Handshake {
    client: ClientConnection,
    server: ServerConnection,
    client_result: Result<(), rustls::Error>,
    server_result: Result<(), rustls::Error>,
}

impl Handshake {
    fn start(client: Arc<ClientConfig>, server: Arc<ServerConfig>, server_name: &str) -> Self {
        let name = ServerName::try_from(server_name.to_string()).unwrap();
        Handshake {
            client: ClientConnection::new(client, name).unwrap(),
            server: ServerConnection::new(server).unwrap(),
            client_result: Ok(()),
            server_result: Ok(()),
        }
    }

    /// Moves bytes both ways until neither side has anything to send (alerts included).
    fn run(mut self) -> Self {
        for _ in 0..32 {
            let to_server = drain(&mut self.client);
            let to_client = drain(&mut self.server);
            if to_server.is_empty() && to_client.is_empty() {
                return self;
            }
            if self.server_result.is_ok() {
                self.server_result = feed(&mut self.server, &to_server);
            }
            if self.client_result.is_ok() {
                self.client_result = feed(&mut self.client, &to_client);
            }
        }
        panic!("the handshake did not settle");
    }

    fn succeeded(&self) -> bool {
        self.client_result.is_ok()
            && self.server_result.is_ok()
            && !self.client.is_handshaking()
            && !self.server.is_handshaking()
    }

    /// Sends a request from the client and reads it on the server: the connection serves.
    fn exchange(mut self) -> Self {
        self.client.writer().write_all(b"ping").unwrap();
        let to_server = drain(&mut self.client);
        feed(&mut self.server, &to_server).unwrap();
        let mut received = [0u8; 4];
        self.server.reader().read_exact(&mut received).unwrap();
        assert_eq!(&received, b"ping");
        self
    }

    fn server_certificate_subject(&self) -> String {
        let certificates = self.client.peer_certificates().unwrap();
        subject_dn(&certificates[0]).unwrap()
    }
}

fn drain<C, D>(connection: &mut C) -> Vec<u8>
where
    C: DerefMut<Target = rustls::ConnectionCommon<D>>,
{
    let mut bytes = Vec::new();
    while connection.wants_write() {
        connection.write_tls(&mut bytes).unwrap();
    }
    bytes
}

fn feed<C, D>(connection: &mut C, mut bytes: &[u8]) -> Result<(), rustls::Error>
where
    C: DerefMut<Target = rustls::ConnectionCommon<D>>,
{
    while !bytes.is_empty() {
        connection.read_tls(&mut bytes).unwrap();
        connection.process_new_packets()?;
    }
    Ok(())
}

fn handshake(client: Arc<ClientConfig>, server: &ServerTls, server_name: &str) -> Handshake {
    Handshake::start(client, server.server_config(), server_name).run()
}

fn principal(handshake: &Handshake, rules: &str) -> Option<String> {
    client_principal(&handshake.server, &PrincipalMapper::parse(rules).unwrap()).unwrap()
}

#[test]
fn required_client_auth_serves_a_trusted_client_and_names_it_by_its_subject() {
    let server = server("server.pem", Some("ca.pem"), ClientAuth::Required);
    let handshake = handshake(client(Some("client.pem")), &server, "localhost").exchange();
    assert!(handshake.succeeded());
    assert_eq!(
        principal(&handshake, "DEFAULT"),
        Some(format!("User:{ALICE}"))
    );
    assert_eq!(
        principal(&handshake, "RULE:^CN=(.*?),OU=.*$/$1/L"),
        Some("User:alice".to_string())
    );
    let unmapped = client_principal(
        &handshake.server,
        &PrincipalMapper::parse("RULE:^UID=.*$/x/").unwrap(),
    );
    assert!(matches!(
        unmapped,
        Err(TlsError::NoMatchingPrincipalMappingRule { .. })
    ));
}

#[test]
fn required_client_auth_refuses_a_client_without_a_certificate() {
    let server = server("server.pem", Some("ca.pem"), ClientAuth::Required);
    let handshake = handshake(client(None), &server, "localhost");
    assert!(
        matches!(
            handshake.server_result,
            Err(rustls::Error::NoCertificatesPresented)
        ),
        "{:?}",
        handshake.server_result
    );
    assert!(
        handshake.client_result.is_err(),
        "the client is told by an alert"
    );
}

#[test]
fn requested_client_auth_serves_a_client_without_a_certificate_anonymously() {
    let server = server("server.pem", Some("ca.pem"), ClientAuth::Requested);
    let anonymous = handshake(client(None), &server, "localhost").exchange();
    assert!(anonymous.succeeded());
    assert_eq!(principal(&anonymous, "DEFAULT"), None);
    let alice = handshake(client(Some("client.pem")), &server, "localhost").exchange();
    assert_eq!(principal(&alice, "DEFAULT"), Some(format!("User:{ALICE}")));
}

#[test]
fn a_client_certificate_from_an_unrelated_ca_is_refused_whether_required_or_requested() {
    for client_auth in [ClientAuth::Required, ClientAuth::Requested] {
        let server = server("server.pem", Some("ca.pem"), client_auth);
        let handshake = handshake(client(Some("other-client.pem")), &server, "localhost");
        assert!(
            matches!(
                handshake.server_result,
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::UnknownIssuer
                ))
            ),
            "{client_auth:?}: {:?}",
            handshake.server_result
        );
    }
}

#[test]
fn no_client_auth_asks_for_no_certificate() {
    let server = server("server.pem", None, ClientAuth::None);
    let handshake = handshake(client(Some("client.pem")), &server, "localhost").exchange();
    assert!(handshake.succeeded());
    assert_eq!(principal(&handshake, "DEFAULT"), None);
}

#[test]
fn client_auth_without_a_truststore_is_refused() {
    for client_auth in [ClientAuth::Required, ClientAuth::Requested] {
        let error = ServerTls::load(&settings("server.pem", None, client_auth)).unwrap_err();
        assert!(
            matches!(error, TlsError::ClientAuthWithoutTruststore { .. }),
            "{error}"
        );
    }
}

#[test]
fn a_host_name_the_certificate_does_not_name_is_refused_only_when_verifying_host_names() {
    let server = server("server.pem", None, ClientAuth::None);
    let truststore = PemSource::File(fixture("ca.pem"));
    let verifying = client_config(Some(&truststore), None, true).unwrap();
    let refused = handshake(verifying.clone(), &server, "broker.example");
    assert!(
        matches!(
            refused.client_result,
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. }
            ))
        ),
        "{:?}",
        refused.client_result
    );
    assert!(handshake(verifying.clone(), &server, "localhost").succeeded());
    assert!(
        handshake(verifying, &server, "127.0.0.1").succeeded(),
        "the IP SAN"
    );
    let not_verifying = client_config(Some(&truststore), None, false).unwrap();
    assert!(
        handshake(not_verifying, &server, "broker.example")
            .exchange()
            .succeeded()
    );
}

#[test]
fn without_host_name_verification_the_chain_is_still_checked() {
    let server = server("other-server.pem", None, ClientAuth::None);
    let truststore = PemSource::File(fixture("ca.pem"));
    let not_verifying = client_config(Some(&truststore), None, false).unwrap();
    let handshake = handshake(not_verifying, &server, "localhost");
    assert!(
        matches!(
            handshake.client_result,
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        ),
        "{:?}",
        handshake.client_result
    );
}

#[test]
fn a_client_needs_a_truststore() {
    let error = client_config(None, None, true).unwrap_err();
    assert!(matches!(error, TlsError::TruststoreRequired));
    assert!(error.to_string().contains("truststore"));
}

#[test]
fn pkcs8_sec1_and_pkcs1_keys_are_all_read() {
    for keystore in ["server.pem", "server-sec1.pem", "server-rsa.pem"] {
        let server = server(keystore, None, ClientAuth::None);
        assert!(
            handshake(client(None), &server, "localhost").succeeded(),
            "{keystore}"
        );
    }
}

#[test]
fn an_encrypted_key_is_served_with_its_password() {
    let mut settings = settings("server-encrypted.pem", None, ClientAuth::None);
    settings.keystore = settings
        .keystore
        .with_key_password(Some("secret".to_string()));
    let encrypted = ServerTls::load(&settings).unwrap();
    assert!(handshake(client(None), &encrypted, "localhost").succeeded());
    // The SDK's side: a client certificate whose key is encrypted.
    let directory = tempfile::tempdir().unwrap();
    let client_key = encrypt_key(directory.path(), "client.pem", "client-secret");
    let keystore = KeyStore::file(&client_key).with_key_password(Some("client-secret".into()));
    let client = client_config(
        Some(&PemSource::File(fixture("ca.pem"))),
        Some(&keystore),
        true,
    )
    .unwrap();
    let server = server("server.pem", Some("ca.pem"), ClientAuth::Required);
    let handshake = handshake(client, &server, "localhost");
    assert_eq!(
        principal(&handshake, "DEFAULT"),
        Some(format!("User:{ALICE}"))
    );
}

#[test]
fn an_encrypted_key_without_its_password_or_a_password_without_one_is_refused() {
    let load = |keystore: &str, password: Option<&str>| {
        let mut settings = settings(keystore, None, ClientAuth::None);
        settings.keystore = settings
            .keystore
            .with_key_password(password.map(str::to_string));
        ServerTls::load(&settings).unwrap_err()
    };
    let error = load("server-encrypted.pem", None);
    assert!(matches!(error, TlsError::EncryptedKey { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("server-encrypted.pem"), "{message}");
    assert!(message.contains("set ssl.key.password"), "{message}");

    let error = load("server-encrypted.pem", Some("wrong"));
    assert!(matches!(error, TlsError::KeyDecryption { .. }), "{error}");
    assert!(error.to_string().contains("wrong password"), "{error}");

    let error = load("server.pem", Some("secret"));
    assert!(
        matches!(error, TlsError::KeyPasswordUnused { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("remove ssl.key.password"),
        "{error}"
    );
}

#[test]
fn a_legacy_encrypted_key_is_refused_with_how_to_convert_it() {
    let directory = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("server.pem")).unwrap();
    let split = text.find("-----BEGIN CERTIFICATE-----").unwrap();
    let legacy = format!(
        "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n\
         DEK-Info: AES-256-CBC,00000000000000000000000000000000\n\nAAAA\n\
         -----END EC PRIVATE KEY-----\n{}",
        &text[split..]
    );
    let path = directory.path().join("legacy.pem");
    std::fs::write(&path, legacy).unwrap();
    let mut settings = settings("server.pem", None, ClientAuth::None);
    settings.keystore = KeyStore::file(&path).with_key_password(Some("secret".into()));
    let error = ServerTls::load(&settings).unwrap_err();
    assert!(
        matches!(error, TlsError::LegacyEncryptedKey { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("openssl pkcs8 -topk8"),
        "{error}"
    );
}

#[test]
fn key_derivation_past_its_bounds_is_refused_before_decrypting() {
    use pkcs8::der::Encode;
    use pkcs8::pkcs5::pbes2::Parameters;
    use pkcs8::pkcs5::{EncryptionScheme, scrypt};
    let (salt, iv) = ([7u8; 16], [9u8; 16]);
    // scrypt with N = 2^20, r = 8: 1 GiB asked for; PBKDF2 with 20 million iterations.
    let hostile = [
        Parameters::scrypt_aes256cbc(scrypt::Params::new(20, 8, 1, 32).unwrap(), &salt, &iv)
            .unwrap(),
        Parameters::pbkdf2_sha256_aes256cbc(20_000_000, &salt, &iv).unwrap(),
    ];
    let text = std::fs::read_to_string(fixture("server.pem")).unwrap();
    let certificate = &text[text.find("-----BEGIN CERTIFICATE-----").unwrap()..];
    let directory = tempfile::tempdir().unwrap();
    for (parameters, says) in hostile.into_iter().zip(["scrypt parameters", "iterations"]) {
        let info = pkcs8::EncryptedPrivateKeyInfo {
            encryption_algorithm: EncryptionScheme::Pbes2(parameters),
            encrypted_data: &[0u8; 48],
        };
        let der = info.to_der().unwrap();
        let pem =
            pkcs8::der::pem::encode_string("ENCRYPTED PRIVATE KEY", pkcs8::LineEnding::LF, &der)
                .unwrap();
        let path = directory.path().join("hostile.pem");
        std::fs::write(&path, format!("{pem}{certificate}")).unwrap();
        let mut settings = settings("server.pem", None, ClientAuth::None);
        settings.keystore = KeyStore::file(&path).with_key_password(Some("secret".into()));
        let started = std::time::Instant::now();
        let error = ServerTls::load(&settings).unwrap_err();
        assert!(error.to_string().contains(says), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused before deriving"
        );
    }
}

/// Runs openssl (the test command installs it).
fn openssl(args: &[&str]) {
    let status = std::process::Command::new("openssl")
        .args(args)
        .status()
        .expect("openssl (scripts/test installs it)");
    assert!(status.success(), "openssl {args:?}");
}

/// The fixture keystore `name` with its key encrypted as PKCS#8 (PBKDF2, AES-256-CBC, as
/// `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it), in `directory`.
fn encrypt_key(directory: &Path, name: &str, password: &str) -> std::path::PathBuf {
    let key = directory.join(format!("{name}.key"));
    openssl(&[
        "pkcs8",
        "-topk8",
        "-v2",
        "aes-256-cbc",
        "-in",
        fixture(name).to_str().unwrap(),
        "-out",
        key.to_str().unwrap(),
        "-passout",
        &format!("pass:{password}"),
    ]);
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    let split = text.find("-----BEGIN CERTIFICATE-----").unwrap();
    let mut keystore = std::fs::read_to_string(&key).unwrap();
    keystore.push_str(&text[split..]);
    std::fs::write(&key, keystore).unwrap();
    key
}

#[test]
fn the_enabled_protocols_are_the_only_ones_served() {
    for (protocols, expected) in [
        (vec![TlsVersion::Tls12], ProtocolVersion::TLSv1_2),
        (vec![TlsVersion::Tls13], ProtocolVersion::TLSv1_3),
        (
            vec![TlsVersion::Tls12, TlsVersion::Tls13],
            ProtocolVersion::TLSv1_3,
        ),
    ] {
        let mut settings = settings("server.pem", None, ClientAuth::None);
        settings.protocols = protocols;
        let server = ServerTls::load(&settings).unwrap();
        let handshake = handshake(client(None), &server, "localhost");
        assert_eq!(handshake.server.protocol_version(), Some(expected));
    }
    let mut settings = settings("server.pem", None, ClientAuth::None);
    settings.protocols = Vec::new();
    assert!(matches!(
        ServerTls::load(&settings),
        Err(TlsError::NoProtocols)
    ));
}

#[test]
fn no_alpn_protocol_is_offered() {
    let server = server("server.pem", None, ClientAuth::None);
    assert!(server.server_config().alpn_protocols.is_empty());
}

#[test]
fn pem_in_config_works_like_files() {
    let text = std::fs::read_to_string(fixture("client.pem")).unwrap();
    let split = text.find("-----BEGIN CERTIFICATE-----").unwrap();
    let (key, certificate_chain) = text.split_at(split);
    let keystore = KeyStore::inline(certificate_chain.to_string(), key.to_string());
    let truststore = PemSource::Inline(std::fs::read_to_string(fixture("ca.pem")).unwrap());
    let client = client_config(Some(&truststore), Some(&keystore), true).unwrap();
    let mut settings = settings("server.pem", None, ClientAuth::Required);
    let server_text = std::fs::read_to_string(fixture("server.pem")).unwrap();
    settings.keystore = KeyStore::inline(server_text.clone(), server_text);
    settings.truststore = Some(truststore);
    let server = ServerTls::load(&settings).unwrap();
    let handshake = handshake(client, &server, "localhost");
    assert_eq!(
        principal(&handshake, "DEFAULT"),
        Some(format!("User:{ALICE}"))
    );
    assert!(
        !server.reload_if_changed().unwrap(),
        "inline PEM never changes"
    );
}

#[test]
fn malformed_keystores_and_truststores_name_the_file_and_the_problem() {
    let directory = tempfile::tempdir().unwrap();
    let write = |name: &str, contents: &[u8]| {
        let path = directory.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path
    };
    let server_text = std::fs::read_to_string(fixture("server.pem")).unwrap();
    let split = server_text.find("-----BEGIN CERTIFICATE-----").unwrap();
    let (key, certificate) = server_text.split_at(split);
    let load = |keystore: &Path, truststore: Option<&Path>| {
        ServerTls::load(&TlsSettings {
            keystore: KeyStore::file(keystore),
            truststore: truststore.map(|path| PemSource::File(path.to_path_buf())),
            client_auth: ClientAuth::None,
            protocols: vec![TlsVersion::Tls13],
            principal_mapping_rules: "DEFAULT".to_string(),
        })
        .unwrap_err()
    };
    let only_certificate = write("only-certificate.pem", certificate.as_bytes());
    let error = load(&only_certificate, None);
    assert!(matches!(error, TlsError::NoPrivateKey { .. }), "{error}");
    assert!(
        error.to_string().contains("only-certificate.pem"),
        "{error}"
    );
    let only_key = write("only-key.pem", key.as_bytes());
    assert!(matches!(
        load(&only_key, None),
        TlsError::NoCertificate { .. }
    ));
    let two_keys = write("two-keys.pem", format!("{key}{server_text}").as_bytes());
    assert!(matches!(
        load(&two_keys, None),
        TlsError::SeveralPrivateKeys { count: 2, .. }
    ));
    let other_key = std::fs::read_to_string(fixture("server2.pem")).unwrap();
    let other_key = &other_key[..other_key.find("-----BEGIN CERTIFICATE-----").unwrap()];
    let mismatched = write(
        "mismatched.pem",
        format!("{other_key}{certificate}").as_bytes(),
    );
    assert!(
        matches!(load(&mismatched, None), TlsError::Rustls { .. }),
        "a key not the certificate's"
    );
    let truncated = write(
        "truncated.pem",
        &server_text.as_bytes()[..server_text.len() - 40],
    );
    assert!(matches!(load(&truncated, None), TlsError::Pem { .. }));
    let missing = directory.path().join("missing.pem");
    let error = load(&missing, None);
    assert!(
        matches!(error, TlsError::Read { .. }) && error.to_string().contains("missing.pem"),
        "{error}"
    );
    let too_large = directory.path().join("too-large.pem");
    std::fs::File::create(&too_large)
        .unwrap()
        .set_len(PEM_BYTES_MAX + 1)
        .unwrap();
    assert!(matches!(
        load(&too_large, None),
        TlsError::FileTooLarge { .. }
    ));
    let keystore = fixture("server.pem");
    let empty_truststore = write("empty-truststore.pem", b"no certificates here\n");
    let error = load(&keystore, Some(&empty_truststore));
    assert!(matches!(error, TlsError::NoCertificate { .. }), "{error}");
    assert!(error.to_string().contains("truststore"), "{error}");
}

/// Sets a file's modification time well away from now, so a rewrite is seen even on file
/// systems with coarse timestamps and when the new file has the old one's length.
fn touch(path: &Path, seconds_ahead: u64) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() + Duration::from_secs(seconds_ahead))
        .unwrap();
}

#[test]
fn a_replaced_keystore_serves_new_connections_while_open_ones_keep_the_old() {
    let directory = tempfile::tempdir().unwrap();
    let keystore = directory.path().join("keystore.pem");
    std::fs::copy(fixture("server.pem"), &keystore).unwrap();
    let mut settings = settings("server.pem", None, ClientAuth::None);
    settings.keystore = KeyStore::file(keystore.clone());
    let server = ServerTls::load(&settings).unwrap();
    assert!(!server.reload_if_changed().unwrap(), "nothing changed");

    let open = Handshake::start(client(None), server.server_config(), "localhost");
    std::fs::copy(fixture("server2.pem"), &keystore).unwrap();
    touch(&keystore, 100);
    assert!(server.reload_if_changed().unwrap());
    assert!(
        !server.reload_if_changed().unwrap(),
        "a change is loaded once"
    );
    assert_eq!(
        handshake(client(None), &server, "localhost").server_certificate_subject(),
        "CN=server2"
    );
    let open = open.run();
    assert!(open.succeeded());
    assert_eq!(open.server_certificate_subject(), "CN=localhost");

    // A garbage file: the error is reported once and the last good config keeps serving.
    std::fs::write(&keystore, b"-----BEGIN PRIVATE KEY-----\nnot base64!\n").unwrap();
    touch(&keystore, 200);
    assert!(server.reload_if_changed().is_err());
    assert!(
        !server.reload_if_changed().unwrap(),
        "the failure is reported once"
    );
    assert_eq!(
        handshake(client(None), &server, "localhost").server_certificate_subject(),
        "CN=server2"
    );

    // Fixed again: picked up.
    std::fs::copy(fixture("server.pem"), &keystore).unwrap();
    touch(&keystore, 300);
    assert!(server.reload_if_changed().unwrap());
    assert_eq!(
        handshake(client(None), &server, "localhost").server_certificate_subject(),
        "CN=localhost"
    );

    // A keystore that disappears is a change that fails.
    std::fs::remove_file(&keystore).unwrap();
    assert!(matches!(
        server.reload_if_changed(),
        Err(TlsError::Read { .. })
    ));
    assert!(handshake(client(None), &server, "localhost").succeeded());
}

#[test]
fn a_replaced_truststore_changes_which_clients_are_trusted() {
    let directory = tempfile::tempdir().unwrap();
    let truststore = directory.path().join("truststore.pem");
    std::fs::copy(fixture("other-ca.pem"), &truststore).unwrap();
    let mut settings = settings("server.pem", None, ClientAuth::Required);
    settings.truststore = Some(PemSource::File(truststore.clone()));
    let server = ServerTls::load(&settings).unwrap();
    assert!(!handshake(client(Some("client.pem")), &server, "localhost").succeeded());
    std::fs::copy(fixture("ca.pem"), &truststore).unwrap();
    touch(&truststore, 100);
    assert!(server.reload_if_changed().unwrap());
    assert!(handshake(client(Some("client.pem")), &server, "localhost").succeeded());
}

#[test]
fn subject_dn_reads_the_fixtures_as_java_prints_them() {
    let subject = |name: &str| {
        let pem = std::fs::read(fixture(name)).unwrap();
        let contents = parse_pem(name, &pem).unwrap();
        subject_dn(&contents.certificates[0]).unwrap()
    };
    assert_eq!(subject("client.pem"), ALICE);
    assert_eq!(subject("ca.pem"), "CN=Sluice Test CA");
    assert_eq!(subject("server.pem"), "CN=localhost");
    assert_eq!(subject("other-client.pem"), "CN=mallory");
    assert_eq!(subject("server-rsa.pem"), "CN=localhost");
}

#[tokio::test]
async fn the_acceptor_serves_a_tokio_connection_and_names_its_client() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = server("server.pem", Some("ca.pem"), ClientAuth::Required);
    let (client_stream, server_stream) = tokio::io::duplex(64 * 1024);
    let connector = tokio_rustls::TlsConnector::from(client(Some("client.pem")));
    let name = ServerName::try_from("localhost").unwrap();
    let acceptor = server.acceptor();
    let (client_side, server_side) = tokio::join!(
        async move {
            let mut stream = connector.connect(name, client_stream).await?;
            stream.write_all(b"ping").await?;
            stream.flush().await?;
            Ok::<_, std::io::Error>(stream)
        },
        async move {
            let mut stream = acceptor.accept(server_stream).await?;
            let mut received = [0u8; 4];
            stream.read_exact(&mut received).await?;
            Ok::<_, std::io::Error>((stream, received))
        }
    );
    let _client_side = client_side.unwrap();
    let (stream, received) = server_side.unwrap();
    assert_eq!(&received, b"ping");
    let mapper = PrincipalMapper::parse("RULE:^CN=(.*?),OU=.*$/$1/L,DEFAULT").unwrap();
    assert_eq!(
        client_principal(stream.get_ref().1, &mapper).unwrap(),
        Some("User:alice".to_string())
    );
}

#[test]
fn debug_output_holds_no_key_material() {
    let server = server("server.pem", None, ClientAuth::None);
    let debug = format!("{server:?}");
    assert!(debug.contains("server.pem"), "{debug}");
    assert!(!debug.contains("PRIVATE"), "{debug}");
}
