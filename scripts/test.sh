#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, lints, unit, scenario, queue,
# end-to-end HTTP tests, the AWS adapters and Lambda handlers against a local AWS emulator,
# cfn-lint of template.yaml, the console in a headless browser, the cargo-lambda build of the
# seven functions and the Conversations Service stand-in (each zip at most 5 MB, four with budgets of their own), and the
# container image's smoke test when Docker or Podman works here. Needs the Rust toolchain (with
# rustfmt and clippy) and python3 with venv; it installs the emulator (moto, from PyPI) and the
# official Standard Webhooks library and MCP Python SDK into .venv-emulator on first run, and Debian's chromium and
# chromium-driver with apt-get when they are missing.
#
# `scripts/test.sh --quick` is the inner loop: formatting, lints and `cargo test --workspace`
# only (no build tools, cfn-lint, CLI-without-aws build or Lambda release build). CI and the
# README's test command run the full script.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=false
case "${1:-}" in
    --quick) quick=true ;;
    "") ;;
    *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

# On CI (a clean clone, built once) incremental compilation only costs disk: about 2 GB of
# target/debug/incremental that nothing reuses.
if [ -n "${CI:-}" ]; then
    export CARGO_INCREMENTAL=0
fi

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== AWS emulator (moto server, for crates/aws tests), the Standard Webhooks library, the MCP SDK, DuckDB"
# Installed once into a git-ignored venv; the tests start and stop their processes. The official
# standardwebhooks package verifies the Standard Webhooks tools' requests in tests/webhooks.rs;
# the official MCP Python SDK serves the MCP tools of tests/receivers/mcp_orders.py; DuckDB reads
# the archive's Parquet files and runs docs/athena.md's queries (tests/readers/archive_duckdb.py).
# A venv made before one was added gets it on its own.
if [ ! -x .venv-emulator/bin/moto_server ]; then
    python3 -m venv .venv-emulator
    .venv-emulator/bin/pip install --quiet 'moto[server]==5.2.5' 'standardwebhooks==1.1.0' 'mcp==2.3.0' 'duckdb==2.0.1'
else
    .venv-emulator/bin/python -c 'import standardwebhooks' 2>/dev/null \
        || .venv-emulator/bin/pip install --quiet 'standardwebhooks==1.1.0'
    .venv-emulator/bin/python -c 'import mcp.server.mcpserver' 2>/dev/null \
        || .venv-emulator/bin/pip install --quiet 'mcp==2.3.0'
    .venv-emulator/bin/python -c 'import duckdb' 2>/dev/null \
        || .venv-emulator/bin/pip install --quiet 'duckdb==2.0.1'
fi
export SWITCHBOARD_MOTO_SERVER="$PWD/.venv-emulator/bin/moto_server"
export SWITCHBOARD_PYTHON="$PWD/.venv-emulator/bin/python"

echo "== browser (Debian's chromium and chromium-driver, for the console's browser test)"
# Installed with apt-get when missing and this user may; otherwise the browser suite is skipped,
# and says so loudly, only because this variable tells it to.
if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
    installer=()
    [ "$(id -u)" -eq 0 ] || installer=(sudo -n)
    if command -v apt-get >/dev/null \
        && { "${installer[@]}" apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 \
            || { "${installer[@]}" apt-get update -qq >/dev/null 2>&1 \
                && "${installer[@]}" apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1; }; }; then
        echo "installed: $(chromium --version 2>/dev/null | head -1)"
    else
        echo "!! chromium/chromedriver missing and cannot be installed here: THE CONSOLE'S BROWSER TEST IS SKIPPED" >&2
        export SWITCHBOARD_SKIP_BROWSER=1
    fi
fi

echo "== curl and mkfifo (the docs test runs the README's commands, which use them)"
if ! command -v curl >/dev/null || ! command -v mkfifo >/dev/null; then
    installer=()
    [ "$(id -u)" -eq 0 ] || installer=(sudo -n)
    { "${installer[@]}" apt-get install -y -qq curl coreutils >/dev/null 2>&1 \
        || { "${installer[@]}" apt-get update -qq >/dev/null 2>&1 \
            && "${installer[@]}" apt-get install -y -qq curl coreutils >/dev/null 2>&1; }; } \
        || { echo "error: curl is missing and cannot be installed with apt-get; install it" >&2; exit 1; }
fi

if $quick; then
    echo "== cargo test (--quick: the full script also lints the template and builds the Lambdas)"
    cargo test --workspace --locked
    exit 0
fi

echo "== build tools (cfn-lint, cargo-lambda, zig; from PyPI, for the AWS deployables)"
# A second git-ignored venv, installed only when something is missing.
# aws-sam-translator lets cfn-lint expand the SAM resources and lint what CloudFormation gets.
if [ ! -x .venv-tools/bin/cfn-lint ] || [ ! -x .venv-tools/bin/cargo-lambda ] || [ ! -x .venv-tools/bin/python-zig ] \
    || ! .venv-tools/bin/python -c 'import samtranslator' 2>/dev/null; then
    python3 -m venv .venv-tools
    .venv-tools/bin/pip install --quiet 'cfn-lint==1.58.0' 'aws-sam-translator==1.115.0' 'cargo-lambda==1.9.2' 'ziglang==0.17.1'
fi

echo "== cfn-lint template.yaml"
.venv-tools/bin/cfn-lint template.yaml

echo "== cargo test"
cargo test --workspace --locked

echo "== cargo test: the CLI built without the aws feature"
cargo test -p switchboard-tests --no-default-features --locked --test cli

echo "== cargo test: the model settings without the yaml feature (as the Lambda functions build them)"
cargo test -p switchboard-models --lib --locked

if [ -n "${CI:-}" ]; then
    # The tests are done; on CI their debug build (about 3 GB) is only in the release build's way
    # on a small disk. A local run keeps it for the next run.
    rm -rf target/debug
fi
echo "== disk before the release build: $(df -h . | awk 'NR==2 {print $4 " free of " $2}')"

echo "== cargo lambda build --release --x86-64 (the seven Lambda functions and the stand-in, zipped)"
# x86_64 only: arm64 needs `rustup target add aarch64-unknown-linux-gnu` (see infra/README.md).
# The release profile in Cargo.toml is explicit, so cargo-lambda does not force its own settings.
functions=(event-router agent-executor internal-api operations-api webhook-intake archiver console-push conversations-standin)
PATH="$PWD/.venv-tools/bin:$PATH" cargo lambda build --release --x86-64 --locked --output-format zip \
    "${functions[@]/#/--package=switchboard-fn-}"

echo "== Lambda zip sizes (each at most 5 MB, but for the four budgets below; docs/benchmarks.md, \"Lambda deployables\")"
too_big=()
for function in "${functions[@]}"; do
    zip="target/lambda/$function/bootstrap.zip"
    size=$(stat -c %s "$zip")
    printf '  %-22s %9d bytes\n' "$function" "$size"
    # The twenty-seventh pass (tools of MCP servers through rmcp, tool schemas through the
    # jsonschema crate) grew the functions that check or call tools past 5 MB: their budgets are
    # set from what it measured (docs/benchmarks.md, "Lambda deployables, twenty-seventh pass",
    # which says what each crate costs and what cutting back would take). The twenty-eighth put
    # recorded content too large for an item in S3: the S3 client grew the two functions that
    # write and read it ("twenty-eighth pass"). Every other function keeps 5 MB.
    limit=5000000
    case "$function" in
        agent-executor) limit=7300000 ;;
        internal-api) limit=5800000 ;;
        operations-api) limit=6600000 ;;
        event-router) limit=5100000 ;;
    esac
    [ "$size" -le "$limit" ] || too_big+=("$function")
done
if [ "${#too_big[@]}" -gt 0 ]; then
    echo "!! over its budget zipped: ${too_big[*]} (what grew it: docs/benchmarks.md, \"Lambda deployables\")" >&2
    exit 1
fi

echo "== container image (Dockerfile), when a container engine works here"
# Docker with a daemon, or Podman; otherwise it says loudly that it skipped.
scripts/container.sh --if-available
