"""Sends one webhook delivery signed by the official Standard Webhooks library.

Usage: standard_webhooks.py SECRET URL MESSAGE_ID BODY [--age SECONDS]

Signs BODY as message MESSAGE_ID with `standardwebhooks.Webhook(SECRET).sign`, timestamped now
(or SECONDS ago), POSTs it to URL with the scheme's three headers, and prints one JSON line:
{"status": <HTTP status>, "body": <the answer, parsed when it is JSON>}. Used by
tests/webhooks.rs to prove that a sender built on the library is verified by Switchboard's
webhook triggers.
"""

import json
import sys
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

from standardwebhooks import Webhook


def main() -> None:
    secret, url, msg_id, body = sys.argv[1:5]
    age = 0
    if len(sys.argv) > 5:
        if sys.argv[5] != "--age" or len(sys.argv) != 7:
            raise SystemExit("usage: standard_webhooks.py SECRET URL MESSAGE_ID BODY [--age SECONDS]")
        age = int(sys.argv[6])
    at = datetime.now(tz=timezone.utc) - timedelta(seconds=age)
    signature = Webhook(secret).sign(msg_id, at, body)
    request = urllib.request.Request(
        url,
        data=body.encode(),
        method="POST",
        headers={
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signature,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    try:
        answer = json.loads(text)
    except ValueError:
        answer = text
    print(json.dumps({"status": status, "body": answer}), flush=True)


if __name__ == "__main__":
    main()
