//! Certificates for TLS tests, made by the `openssl` CLI (scripts/test installs it) in a
//! directory of the test's: a CA, certificates it signs, PEM keystores.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (scripts/test installs it)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA named `name`: `<name>.pem` and `<name>.key`.
pub fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "3650",
            "-subj",
            &format!("/CN=Sluice test {name}"),
        ],
    );
}

/// A certificate `<name>.pem` (key `<name>.key`) for `subject`, signed by `ca`, with the
/// extensions in `extensions`.
pub fn make_certificate(dir: &Path, ca: &str, name: &str, subject: &str, extensions: &str) {
    std::fs::write(dir.join(format!("{name}.ext")), extensions).expect("extensions");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            subject,
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "3650",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

/// A keystore: `name`'s key and certificate in one PEM file.
pub fn keystore(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}-keystore.pem"));
    std::fs::write(&path, keystore_contents(dir, name)).expect("keystore");
    path
}

/// `name`'s key and certificate, as one PEM text.
pub fn keystore_contents(dir: &Path, name: &str) -> String {
    let key = std::fs::read_to_string(dir.join(format!("{name}.key"))).expect("key");
    let certificate = std::fs::read_to_string(dir.join(format!("{name}.pem"))).expect("cert");
    format!("{key}{certificate}")
}
