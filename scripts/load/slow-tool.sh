#!/usr/bin/env bash
# Load run: N messages (default 2,000), each in its own conversation, P at a time (default 64),
# against `switchboard serve --visibility-timeout 2` (turn deadline 1.5 s) with the example
# tenant, whose order tool is here a slow, one-at-a-time receiver (50 ms a call, calls queue):
# turns that wait too long for it time out. Prints the executions by status, with how many
# replied and how many handed the conversation to a human, the messages left unanswered (none
# expected), and the events published. BIN is the binary (default target/release/switchboard:
# `cargo build --release -p switchboard-cli`). Needs curl and python3; uses ports 8088 and 18080.
# Not part of the test command: it measures a loaded machine, not a deterministic outcome.
set -euo pipefail
N=${N:-2000}; P=${P:-64}
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/switchboard}
D=$(mktemp -d); trap 'kill $SRV $RCV 2>/dev/null || true; rm -rf $D' EXIT
python3 scripts/load/slow_receiver.py 8088 & RCV=$!
"$BIN" serve --data-dir $D/data --listen 127.0.0.1:18080 --tenant examples/support/tenant.json \
  --scripted-model examples/support/script.json --allow-private-webhooks --secrets-file examples/support/secrets.json \
  --visibility-timeout 2 --rate-limit 1000000 > $D/serve.out 2> $D/serve.err & SRV=$!
for i in $(seq 50); do curl -sf http://127.0.0.1:18080/ready >/dev/null && break; sleep 0.2; done
KEY=$(cat $D/data/admin.key)
curl -sf -X PATCH http://127.0.0.1:18080/tenants/acme -H "authorization: Bearer $KEY" -H 'content-type: application/json' \
  -d '{"limits": {"invocationsPerMinute": 1000000, "concurrentSessions": 10000, "tokensPerDay": 1000000000000}}' >/dev/null
send() {
  curl -s -X POST 'http://127.0.0.1:18080/events?wait=30' -H "authorization: Bearer $KEY" -H 'content-type: application/json' -d "{
  \"version\": \"0\", \"id\": \"evt-$1\", \"source\": \"conversations-service\", \"detail-type\": \"message.new\",
  \"detail\": { \"tenantId\": \"acme\", \"conversationId\": \"c-$1\", \"messageId\": \"m-$1\",
              \"channel\": {\"platform\": \"webchat\"}, \"conversation\": {\"status\": \"open\"},
              \"message\": {\"direction\": \"inbound\", \"text\": \"Where is my order #1234?\"} } }" | python3 -c 'import json,sys; d=json.load(sys.stdin); e=d.get("execution") or {}; print(sys.argv[1], e.get("status"), len([a for a in e.get("actions",[]) if a.get("type")=="reply"]), len([a for a in e.get("actions",[]) if a.get("type")=="handoff_to_human"]))' $1
}
export -f send; export KEY
seq $N | xargs -P $P -I{} bash -c 'send {}' > $D/results.txt
echo "== executions by status, replies, handoffs"
awk '{s[$2]++; if ($3>0) r[$2]++; if ($4>0) h[$2]++} END {for (k in s) printf "%s: %d (with a reply %d, handed to a human %d)\n", k, s[k], r[k]+0, h[k]+0}' $D/results.txt
echo "== unanswered (no reply and no handoff):"; awk '$3==0 && $4==0' $D/results.txt | head; wc -l < $D/results.txt
# execution.failed events against non-success executions
python3 - "$KEY" <<'PY'
import json, sys, urllib.request
key = sys.argv[1]; after = 0; kinds = {}; failed = []
while True:
    req = urllib.request.Request(f"http://127.0.0.1:18080/tenants/acme/events?after={after}&limit=100", headers={"authorization": f"Bearer {key}"})
    page = json.load(urllib.request.urlopen(req))["events"]
    if not page: break
    for e in page:
        kinds[e["event"]["detailType"]] = kinds.get(e["event"]["detailType"], 0) + 1
        if e["event"]["detailType"] == "execution.failed": failed.append(e["event"]["detail"]["status"])
        after = e["seq"]
print("== events:", kinds, "execution.failed by status:", {s: failed.count(s) for s in set(failed)})
PY
