//! `FileSecrets`: tenant secrets for the embedded profile, from a JSON file
//! `{ "<tenantId>": { "<secret name>": "<value>" } }`. The file is read again when it changes, so
//! a rotated secret takes effect without a restart. Values never reach logs or errors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use async_trait::async_trait;
use switchboard_domain::TenantId;
use switchboard_engine::{SecretError, Secrets};

type Table = HashMap<String, HashMap<String, String>>;

#[derive(Debug)]
pub struct FileSecrets {
    path: PathBuf,
    loaded: Mutex<Option<(SystemTime, Table)>>,
}

impl FileSecrets {
    /// Reads `path` once now, so that a missing or malformed file is reported at start.
    pub fn open(path: &Path) -> Result<Self, SecretError> {
        let secrets = Self { path: path.to_owned(), loaded: Mutex::new(None) };
        secrets.current()?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
                tracing::warn!(path = %path.display(), "the secrets file is readable by other users; chmod 600 it");
            }
        }
        Ok(secrets)
    }

    fn current(&self) -> Result<Table, SecretError> {
        let err = |message: String| SecretError { message, retryable: false };
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .map_err(|e| err(format!("cannot read {}: {e}", self.path.display())))?;
        let mut loaded = self.loaded.lock().map_err(|_| err("secrets lock poisoned".into()))?;
        if let Some((at, table)) = loaded.as_ref()
            && *at == modified
        {
            return Ok(table.clone());
        }
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| err(format!("cannot read {}: {e}", self.path.display())))?;
        // The parse error says where, never what the value was.
        let table: Table = serde_json::from_str(&text).map_err(|e| {
            err(format!(
                "{} must be {{\"<tenant>\": {{\"<name>\": \"<value>\"}}}} (line {}, column {})",
                self.path.display(),
                e.line(),
                e.column()
            ))
        })?;
        *loaded = Some((modified, table.clone()));
        Ok(table)
    }
}

#[async_trait]
impl Secrets for FileSecrets {
    async fn get_secret(&self, tenant: &TenantId, name: &str) -> Result<Option<String>, SecretError> {
        Ok(self.current()?.get(tenant.as_str()).and_then(|t| t.get(name)).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn secrets_are_per_tenant_and_a_bad_file_never_echoes_a_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.json");
        std::fs::write(&path, r#"{"acme": {"hook": "s3cr3t"}}"#).unwrap();
        let s = FileSecrets::open(&path).unwrap();
        let acme: TenantId = "acme".parse().unwrap();
        let other: TenantId = "other".parse().unwrap();
        assert_eq!(s.get_secret(&acme, "hook").await.unwrap().as_deref(), Some("s3cr3t"));
        assert_eq!(s.get_secret(&other, "hook").await.unwrap(), None);
        std::fs::write(&path, r#"{"acme": {"hook": "s3cr3t-but-broken""#).unwrap();
        // a different size (and usually mtime) makes it reload; force mtime change to be sure
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(later).unwrap();
        let e = s.get_secret(&acme, "hook").await.unwrap_err();
        assert!(!e.message.contains("s3cr3t"), "{}", e.message);
        assert!(FileSecrets::open(&dir.path().join("missing.json")).is_err());
    }
}
