#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, lints, unit, scenario, queue,
# end-to-end HTTP tests, and the AWS adapters against a local AWS emulator. Needs the Rust
# toolchain (with rustfmt and clippy) and python3 with venv; it installs the emulator (moto,
# from PyPI) into .venv-emulator on first run.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== AWS emulator (moto server, for crates/aws tests)"
# Installed once into a git-ignored venv; the tests start and stop it themselves.
if [ ! -x .venv-emulator/bin/moto_server ]; then
    python3 -m venv .venv-emulator
    .venv-emulator/bin/pip install --quiet 'moto[server]==5.2.5'
fi
export SWITCHBOARD_MOTO_SERVER="$PWD/.venv-emulator/bin/moto_server"

echo "== cargo test"
cargo test --workspace --locked
