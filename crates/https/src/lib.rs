//! Outbound HTTPS clients that share one trust store per process.
//!
//! Built by itself, every reqwest client reads the platform's CA certificates again (on Linux
//! `/etc/ssl/certs`, or `SSL_CERT_FILE` / `SSL_CERT_DIR`: about 150 certificates read and
//! decoded, ~0.5 ms from one bundle as on Lambda, ~2.5 ms from a directory of files), where a
//! client built from roots already read costs ~0.1 ms. A Lambda container builds several
//! clients before its first invocation (the agent-executor's model providers and Conversations
//! Service client; docs/benchmarks.md, "Lambda deployables"). [`client_builder`]
//! reads the store once and gives every client the same roots; each client still verifies
//! certificates and host names as before (webpki, the same roots and rules). The AWS SDK's
//! client keeps its own copy, read once per process too (handing it these roots costs more
//! than it saves: docs/benchmarks.md, "Lambda deployables").
//!
//! The same clients retry alike: [`retry::RetryPolicy`] and its one loop.

pub mod retry;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// No usable CA certificate was found: no HTTPS client can be built in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoTrustStore(String);

impl std::fmt::Display for NoTrustStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoTrustStore {}

static ROOTS: OnceLock<Result<Vec<reqwest::Certificate>, NoTrustStore>> = OnceLock::new();
static LOADS: AtomicUsize = AtomicUsize::new(0);

/// A reqwest client builder that trusts the platform's CA certificates, read once per process
/// (the first call reads them; a store that yields no usable certificate is an error for every
/// call, as it was for every client before). Configure the rest (timeouts, redirects, agent)
/// as usual.
pub fn client_builder() -> Result<reqwest::ClientBuilder, NoTrustStore> {
    let roots = ROOTS.get_or_init(|| {
        LOADS.fetch_add(1, Ordering::Relaxed);
        usable(rustls_native_certs::load_native_certs())
    });
    let roots = roots.as_ref().map_err(Clone::clone)?;
    Ok(reqwest::Client::builder().tls_certs_only(roots.iter().cloned()))
}

/// How many times this process has read the platform's trust store (at most once).
pub fn trust_store_reads() -> usize {
    LOADS.load(Ordering::Relaxed)
}

/// The certificates rustls can use as roots. As the platform verifier reqwest uses by default,
/// unusable ones are skipped, and none at all is an error that says where they were looked for.
fn usable(found: rustls_native_certs::CertificateResult) -> Result<Vec<reqwest::Certificate>, NoTrustStore> {
    let roots: Vec<reqwest::Certificate> = found
        .certs
        .into_iter()
        .filter(|der| rustls::RootCertStore::empty().add(der.clone()).is_ok())
        .filter_map(|der| reqwest::Certificate::from_der(&der).ok())
        .collect();
    if roots.is_empty() {
        let why = found.errors.first().map(|e| format!(" ({e})")).unwrap_or_default();
        return Err(NoTrustStore(format!(
            "no usable CA certificate in the platform's trust store{why}: install the CA bundle \
             (ca-certificates), or point SSL_CERT_FILE or SSL_CERT_DIR at one"
        )));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_native_certs::CertificateResult;

    /// Set in the child process [`in_a_process_without_a_trust_store`] starts.
    const NO_TRUST_STORE_CHILD: &str = "SWITCHBOARD_TEST_NO_TRUST_STORE";

    /// Runs the test `name` (its path, as `cargo test` prints it) of this test binary again, in a
    /// child process whose `SSL_CERT_FILE` and `SSL_CERT_DIR` point at nothing, so that the platform
    /// has no trust store; panics unless exactly that test ran there and passed. Returns `true` in
    /// the child, where the test then checks what it must; `false` in the parent, once the child
    /// passed. A child process because the store is read once per process and the variables are
    /// process-wide.
    fn in_a_process_without_a_trust_store(name: &str) -> bool {
        if std::env::var_os(NO_TRUST_STORE_CHILD).is_some() {
            return true;
        }
        let empty = std::env::temp_dir().join(format!("switchboard-https-test-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name])
            .env(NO_TRUST_STORE_CHILD, "1")
            .env("SSL_CERT_FILE", empty.join("no-such-bundle.pem"))
            .env("SSL_CERT_DIR", &empty)
            .output()
            .unwrap();
        std::fs::remove_dir_all(&empty).unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
        assert!(stdout.contains("1 passed"), "the child process ran no test named {name}: {stdout}");
        false
    }

    fn result(certs: Vec<Vec<u8>>) -> CertificateResult {
        let mut found = CertificateResult::default();
        found.certs = certs.into_iter().map(Into::into).collect();
        found
    }

    #[test]
    fn an_empty_store_is_an_error_that_says_where_to_put_certificates() {
        let err = usable(result(vec![])).unwrap_err().to_string();
        assert!(err.contains("no usable CA certificate"), "{err}");
        assert!(err.contains("SSL_CERT_FILE"), "{err}");
    }

    #[test]
    fn usable_roots_are_kept_and_unparsable_ones_skipped() {
        let real: Vec<Vec<u8>> = webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().take(3).map(|c| c.to_vec()).collect();
        let mut certs = real.clone();
        certs.insert(1, b"not a certificate".to_vec());
        let roots = usable(result(certs)).unwrap();
        assert_eq!(roots.len(), real.len());
    }

    #[test]
    fn every_client_of_the_process_shares_one_read_of_the_trust_store() {
        // The test binary's only reader: the first builder reads, the others reuse.
        for _ in 0..3 {
            client_builder().unwrap().build().unwrap();
        }
        assert_eq!(trust_store_reads(), 1);
    }

    #[test]
    fn without_a_trust_store_no_client_is_built_and_the_error_says_why() {
        let name = "tests::without_a_trust_store_no_client_is_built_and_the_error_says_why";
        if in_a_process_without_a_trust_store(name) {
            let err = client_builder().unwrap_err().to_string();
            assert!(err.contains("no usable CA certificate"), "{err}");
            assert_eq!(client_builder().unwrap_err().to_string(), err, "the same answer every time");
            assert_eq!(trust_store_reads(), 1, "a missing store is looked for once too");
        }
    }

    #[test]
    fn a_store_of_unparsable_certificates_is_as_good_as_empty() {
        let err = usable(result(vec![b"not a certificate".to_vec(), vec![0x30, 0x03, 0x02, 0x01, 0x00]])).unwrap_err();
        assert!(err.to_string().contains("no usable CA certificate"), "{err}");
    }
}
