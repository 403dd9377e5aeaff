//! One `switchboard serve` per data directory: an exclusive lock on a file in it, held for the
//! life of the process. It does not guard the commands that work beside a running server.

use anyhow::{Context, bail};

/// The file in a data directory that one `serve` at a time holds locked.
const LOCK_FILE: &str = "serve.lock";

/// Takes the data directory for this process: a second `serve` on it would run a second set of
/// workers on the same queue whose completions the first one's waiting requests never hear of.
/// An exclusive lock on [`LOCK_FILE`], holding the owner's pid for the message; the system drops
/// it when the process ends, however it ends. `tenants create` and `tenants key` do not take it:
/// they work beside a running server.
pub fn claim(dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--data-dir: cannot create data directory {}", dir.display()))?;
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("--data-dir: cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut owner = String::new();
            file.read_to_string(&mut owner).ok();
            let owner = match owner.trim() {
                "" => String::new(),
                pid => format!(" (pid {pid})"),
            };
            bail!(
                "--data-dir: {} is in use by another `switchboard serve`{owner}; stop that one first, or give this \
                 one its own --data-dir",
                dir.display()
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("--data-dir: cannot lock {}", path.display()));
        }
    }
    file.set_len(0).and_then(|()| file.rewind()).and_then(|()| writeln!(file, "{}", std::process::id())).ok();
    Ok(file)
}
