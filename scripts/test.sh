#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, lints, unit, scenario, queue and
# end-to-end HTTP tests. Needs only the Rust toolchain (rustfmt and clippy components).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test"
cargo test --workspace --locked
