#!/usr/bin/env bash
# Builds the container image (Dockerfile) and smoke-tests it: the server starts as a non-root
# user, answers /ready, answers a message with the example tenant, exposes /metrics, logs JSON
# lines, drains and exits 0 on `stop`, and a new container on the same volume finds the data.
#
#   scripts/container.sh                 # docker, or podman when docker has no daemon
#   CONTAINER_ENGINE=podman scripts/container.sh
#   scripts/container.sh --if-available  # what scripts/test.sh runs: skips (loudly) when no
#                                        # engine works here, the base images can be neither
#                                        # found nor pulled, or SWITCHBOARD_SKIP_CONTAINER is set
#
# RUST_IMAGE / RUNTIME_IMAGE, when set, are passed as build arguments (a mirror or local images).
# Needs curl and python3. Removes the containers and volume it made; keeps the image
# (switchboard:smoke) unless KEEP_IMAGE=0.
set -euo pipefail
cd "$(dirname "$0")/.."

if_available=false
case "${1:-}" in
    --if-available) if_available=true ;;
    "") ;;
    *) echo "usage: scripts/container.sh [--if-available]" >&2; exit 2 ;;
esac

if $if_available && [ -n "${SWITCHBOARD_SKIP_CONTAINER:-}" ]; then
    echo "!! SWITCHBOARD_SKIP_CONTAINER is set: THE CONTAINER IMAGE IS NOT BUILT OR SMOKE-TESTED" >&2
    exit 0
fi
engine="${CONTAINER_ENGINE:-}"
if [ -z "$engine" ]; then
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
        engine=docker
    elif command -v podman >/dev/null && podman info >/dev/null 2>&1; then
        engine=podman
    fi
fi
if [ -z "$engine" ]; then
    if $if_available; then
        echo "!! no container engine with a daemon here (docker info / podman info failed): THE CONTAINER IMAGE IS NOT BUILT OR SMOKE-TESTED" >&2
        exit 0
    fi
    echo "error: neither docker (with a running daemon) nor podman works here; set CONTAINER_ENGINE" >&2
    exit 1
fi

image=switchboard:smoke
name="switchboard-smoke-$$"
volume="switchboard-smoke-$$"
build_args=()
[ -z "${RUST_IMAGE:-}" ] || build_args+=(--build-arg "RUST_IMAGE=$RUST_IMAGE")
[ -z "${RUNTIME_IMAGE:-}" ] || build_args+=(--build-arg "RUNTIME_IMAGE=$RUNTIME_IMAGE")
# Podman writes OCI images by default, which have no HEALTHCHECK; the Docker format keeps it.
format=()
[ "$engine" != podman ] || format=(--format docker)

cleanup() {
    "$engine" rm -f "$name" "$name-2" >/dev/null 2>&1 || true
    "$engine" volume rm -f "$volume" >/dev/null 2>&1 || true
    [ "${KEEP_IMAGE:-1}" = 1 ] || "$engine" rmi -f "$image" >/dev/null 2>&1 || true
}
trap cleanup EXIT

fail() { echo "FAILED: $*" >&2; "$engine" logs "$name" 2>&1 | tail -20 >&2 || true; exit 1; }

# The base images must be here or reachable. An engine that works but cannot reach a registry
# (an offline CI machine) is, for --if-available, the same as no engine: skip loudly.
dockerfile_default() { sed -n "s/^ARG $1=//p" Dockerfile; }
for base in "${RUST_IMAGE:-$(dockerfile_default RUST_IMAGE)}" \
    "${RUNTIME_IMAGE:-$(dockerfile_default RUNTIME_IMAGE)}"; do
    "$engine" image inspect "$base" >/dev/null 2>&1 && continue
    echo "== $engine pull $base"
    if ! "$engine" pull "$base"; then
        if $if_available; then
            echo "!! $engine cannot pull the base image $base (no registry access?): THE CONTAINER IMAGE IS NOT BUILT OR SMOKE-TESTED" >&2
            exit 0
        fi
        echo "error: $engine cannot pull the base image $base; set RUST_IMAGE / RUNTIME_IMAGE to images it has" >&2
        exit 1
    fi
done

echo "== $engine build -t $image ."
"$engine" build "${format[@]}" "${build_args[@]}" -t "$image" .

ex=/usr/share/switchboard/examples/support
start() { # name: runs the server on the volume, port published on loopback only
    "$engine" run -d --name "$1" -v "$volume:/data" -p 127.0.0.1::8080 "$image" \
        serve --tenant "$ex/tenant.json" --scripted-model "$ex/script.json" >/dev/null
    # the first line on stdout says the server is listening (no polling); the log follower is
    # stopped once it has been read
    local fd follower
    exec {fd}< <(exec timeout 60 "$engine" logs -f "$1" 2>/dev/null)
    follower=$!
    grep -q -m1 '^listening on ' <&"$fd" || fail "$1 did not start listening within 60 s"
    kill "$follower" 2>/dev/null || true
    exec {fd}<&-
    port=$("$engine" port "$1" 8080/tcp | head -1 | sed 's/.*://')
    base="http://127.0.0.1:$port"
}

echo "== run, ready, as a non-root user"
start "$name"
"$engine" exec "$name" switchboard ready | grep -qx ready || fail "switchboard ready inside the container"
[ "$("$engine" exec "$name" id -u)" = 10001 ] || fail "the server does not run as uid 10001"
curl -fsS "$base/ready" | grep -q '"ready"' || fail "GET /ready from the host"
# the image's health check: run now (podman), or at least present in the image (docker runs it
# on its own schedule)
if [ "$engine" = podman ]; then
    podman healthcheck run "$name" 2>/dev/null || fail "the health check does not pass"
else
    docker image inspect --format '{{json .Config.Healthcheck}}' "$image" | grep -q 'switchboard","ready' \
        || fail "the image has no health check"
fi
key=$("$engine" exec "$name" cat /data/admin.key)

echo "== a message answered by the example tenant"
answer=$(curl -fsS -X POST "$base/events?wait=30" -H "authorization: Bearer $key" \
    -H 'content-type: application/json' -d '{
  "version": "0", "id": "evt-smoke-1", "source": "conversations-service", "detail-type": "message.new",
  "detail": { "tenantId": "acme", "conversationId": "c-smoke", "messageId": "m-smoke-1",
              "channel": {"platform": "webchat"}, "conversation": {"status": "open"},
              "message": {"direction": "inbound", "text": "Where is my order #1234?"} } }')
echo "$answer" | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["execution"]["status"]=="success", r' \
    || fail "the message was not answered: $answer"

echo "== metrics and JSON logs"
curl -fsS "$base/metrics" -H "authorization: Bearer $key" | grep -q '^switchboard_executions_total{' \
    || fail "GET /metrics has no executions counter"
"$engine" logs "$name" 2>&1 >/dev/null | python3 -c '
import json, sys
lines = [l for l in sys.stdin if l.strip()]
assert lines, "no log lines"
for l in lines:
    json.loads(l)
print(f"{len(lines)} log lines, each a JSON object")' || fail "a log line is not JSON"

echo "== stop drains and exits 0; a new container on the volume keeps the data"
"$engine" stop -t 100 "$name" >/dev/null
[ "$("$engine" inspect --format '{{.State.ExitCode}}' "$name")" = 0 ] || fail "exit code after stop"
start "$name-2"
[ "$("$engine" exec "$name-2" cat /data/admin.key)" = "$key" ] || fail "the admin key changed"
curl -fsS "$base/tenants/acme/conversations/c-smoke/messages" -H "authorization: Bearer $key" \
    | grep -q 'm-smoke-1' || fail "the conversation is gone after a restart"
"$engine" stop -t 100 "$name-2" >/dev/null

echo "container smoke test passed ($engine, $image)"
