#!/usr/bin/env python3
"""Bytes the embedded store keeps per message: the execution records' JSON and the recorded model
content (docs/benchmarks.md, "What the model saw: the cost of recording every call").

    python3 scripts/recording-bytes.py BINARY [new|one] [MESSAGES]

Starts BINARY (`switchboard`) with `serve` on a loopback port and a scratch data directory, one
agent answered by the scripted test double (not an AI), sends MESSAGES messages (each in a new
conversation with `new`, all in one with `one`), stops the server by its PID and prints the sums
of `length(body)` per message as JSON."""
import json, os, sqlite3, subprocess, sys, tempfile, urllib.request

binary = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else "new"
n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
work = tempfile.mkdtemp()
tenant = {"tenantId": "acme", "name": "Bytes",
          "limits": {"invocationsPerMinute": 1000000, "concurrentSessions": 10000, "tokensPerDay": 1000000000000},
          "agents": [{"agentId": "01JD0000SVPP0RT0AGENT00001", "name": "Front", "model": "scripted:test-double",
                      "systemPrompt": "You are Acme Outdoor's front-line support agent. Be brief and friendly. Remember order "
                                      "numbers and look them up; hand billing questions to billing and anyone who asks for a "
                                      "person to a human.",
                      "tools": ["send_message", "set_context", "get_context", "handoff_to_human", "end_conversation"],
                      "maxTurns": 1000}],
          "triggers": [{"triggerId": "01JD0000TR1GGER0CHAT000001", "name": "all", "agentId": "01JD0000SVPP0RT0AGENT00001",
                        "eventType": "message.new", "priority": 10, "conditions": {}}]}
script = {"rules": [{"then": {"text": "Thanks for your message. You said: {{userText}}. Anything else I can help with today?"}}]}
json.dump(tenant, open(f"{work}/tenant.json", "w"))
json.dump(script, open(f"{work}/script.json", "w"))
data = f"{work}/data"
server = subprocess.Popen([binary, "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--tenant", f"{work}/tenant.json",
                           "--scripted-model", f"{work}/script.json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
try:
    base = server.stdout.readline().strip().split("listening on ")[1]
    key = open(f"{data}/admin.key").read().strip()
    for i in range(n):
        conversation = f"c-{i}" if mode == "new" else "c-one"
        event = {"id": f"e-{i}", "source": "conversations-service", "detail-type": "message.new",
                 "detail": {"tenantId": "acme", "conversationId": conversation, "messageId": f"m-{i}",
                            "channel": {"platform": "webchat"}, "conversation": {"status": "open"},
                            "message": {"direction": "inbound", "text": f"Hi there, message {i}"}}}
        request = urllib.request.Request(f"{base}/events?wait=30", data=json.dumps(event).encode(),
                                         headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
        urllib.request.urlopen(request).read()
finally:
    server.terminate()
    server.wait()
db = sqlite3.connect(f"{data}/switchboard.db")
one = lambda sql: db.execute(sql).fetchone()[0] or 0
has_content = one("SELECT count(*) FROM sqlite_master WHERE name = 'content'")
print(json.dumps({
    "mode": mode, "messages": n,
    "execution_bytes_per_message": one("SELECT sum(length(body)) FROM executions") / n,
    "content_bytes_per_message": (one("SELECT sum(length(body)) FROM content") / n) if has_content else 0,
    "content_pieces_per_message": (one("SELECT count(*) FROM content") / n) if has_content else 0,
    "largest_session_body": one("SELECT max(length(body)) FROM sessions"),
}))
