//! The client's configuration file: named contexts, each an endpoint, a tenant and how to sign
//! in (an API key, or SigV4 with a region), and the current one. `switchboard config` writes it;
//! every client command reads it for what its flags and the environment leave out.
//!
//! The file is YAML at `$SWITCHBOARD_CONFIG`, else `$XDG_CONFIG_HOME/switchboard/config.yaml`,
//! else `~/.config/switchboard/config.yaml`. It holds API keys, so it is written with mode 0600
//! (its directory 0700), replaced whole through a temporary file, and a file that others may read
//! is refused while it holds a key, as ssh refuses such a private key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

/// One place to call and how.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Context {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub aws_sigv4: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Contexts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    #[serde(default)]
    pub contexts: BTreeMap<String, Context>,
}

impl Contexts {
    /// The context `name` names, else the current one; `None` when neither is set.
    pub fn chosen(&self, name: Option<&str>) -> anyhow::Result<Option<(&str, &Context)>> {
        let Some(name) = name.or(self.current_context.as_deref()) else {
            return Ok(None);
        };
        match self.contexts.get_key_value(name) {
            Some((name, context)) => Ok(Some((name.as_str(), context))),
            None => {
                bail!("no context '{name}' in the configuration file (`switchboard config get-contexts` lists them)")
            }
        }
    }
}

/// Where the configuration file is, from the environment; `None` with no home directory.
pub fn path() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("SWITCHBOARD_CONFIG")
        .or_else(|| var("XDG_CONFIG_HOME").map(|d| d.join("switchboard/config.yaml")))
        .or_else(|| var("HOME").map(|d| d.join(".config/switchboard/config.yaml")))
}

/// The file at `path`; an empty set when there is none.
pub fn load(path: &Path) -> anyhow::Result<Contexts> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Contexts::default()),
        Err(e) => return Err(e).with_context(|| format!("read the configuration file {}", path.display())),
    };
    let contexts: Contexts = serde_saphyr::from_str(&text)
        .with_context(|| format!("the configuration file {} is not a valid configuration", path.display()))?;
    if contexts.contexts.values().any(|c| c.api_key.is_some()) {
        refuse_if_shared(path)?;
    }
    Ok(contexts)
}

/// Writes `contexts` to `path` (mode 0600, its directory 0700 when it makes it), replacing the
/// file whole so that a reader never sees half of it.
pub fn save(path: &Path, contexts: &Contexts) -> anyhow::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.exists() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let text = serde_saphyr::to_string(contexts)?;
    // tempfile creates its file with mode 0600.
    let mut file = tempfile::NamedTempFile::new_in(dir).with_context(|| format!("write in {}", dir.display()))?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    file.as_file().sync_all()?;
    file.persist(path).with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

#[cfg(unix)]
fn refuse_if_shared(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "the configuration file {} holds API keys and others may read it (mode {mode:o}): chmod 600 {}",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

#[cfg(not(unix))]
fn refuse_if_shared(_path: &Path) -> anyhow::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn acme() -> Context {
        Context {
            endpoint: Some("http://127.0.0.1:9".into()),
            tenant: Some("acme".into()),
            api_key: Some("sb_secret".into()),
            ..Context::default()
        }
    }

    #[test]
    fn a_saved_file_reads_back_and_only_its_owner_may_read_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/config.yaml");
        let mut contexts = Contexts::default();
        contexts.contexts.insert("local".into(), acme());
        contexts.current_context = Some("local".into());
        save(&path, &contexts).unwrap();
        assert_eq!(load(&path).unwrap(), contexts);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
            assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_may_read_is_refused_while_it_holds_a_key() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        let mut contexts = Contexts::default();
        contexts.contexts.insert("local".into(), acme());
        save(&path, &contexts).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("chmod 600") && e.contains("644"), "{e}");
        // Without a key there is nothing to protect.
        contexts.contexts.get_mut("local").unwrap().api_key = None;
        std::fs::write(&path, serde_saphyr::to_string(&contexts).unwrap()).unwrap();
        assert_eq!(load(&path).unwrap(), contexts);
    }

    #[test]
    fn no_file_is_no_context_and_an_unknown_name_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let contexts = load(&dir.path().join("absent.yaml")).unwrap();
        assert_eq!(contexts.chosen(None).unwrap(), None);
        let e = contexts.chosen(Some("prod")).unwrap_err().to_string();
        assert!(e.contains("no context 'prod'"), "{e}");
    }

    #[test]
    fn a_misspelt_field_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "contexts:\n  local:\n    endpiont: http://x\n").unwrap();
        let e = format!("{:#}", load(&path).unwrap_err());
        assert!(e.contains("endpiont"), "{e}");
    }
}
