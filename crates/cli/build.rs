//! Link options for the `switchboard` binary.

use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    // Relative relocations packed (DT_RELR): the position-independent binary's ~40,000 of them
    // take ~10 KB instead of ~960 KB that the loader reads, and keeps resident, at every start
    // (docs/benchmarks.md, "Resident memory"). Only where the glibc the binary is linked against,
    // and will run on, reads the format (2.36 and later, e.g. Debian 12): a binary that needs it
    // does not start on an older one. A cross build, or a glibc this cannot tell, links as before.
    if packs_relocations() {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

fn packs_relocations() -> bool {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let native = var("HOST") == var("TARGET");
    native && var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" && glibc_reads_relr()
}

/// `getconf GNU_LIBC_VERSION` answers e.g. "glibc 2.36".
fn glibc_reads_relr() -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    matches!((parts.next(), parts.next()), (Some(Some(major)), Some(Some(minor))) if (major, minor) >= (2, 36))
}
