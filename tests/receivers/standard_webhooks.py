"""A tenant's endpoint for Standard Webhooks tools, verifying with the official Python library.

Usage: python standard_webhooks.py SECRET [--unavailable-first]

Listens on 127.0.0.1, on a port the system picks, and prints that port as stdout's first line.
Every POST is verified with `standardwebhooks.webhooks.Webhook(SECRET).verify(body, headers)`:
verified, it is answered 200 with an order status; refused, 401 with the library's error. Each
outcome is printed as one JSON line on stdout before the answer is sent, so that whoever reads
the answer can read the outcome. With --unavailable-first, the first verified delivery of each
`webhook-id` is answered 503, so that a retry is delivered too. Runs until it is killed.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from standardwebhooks.webhooks import Webhook


def main() -> None:
    secret = sys.argv[1]
    unavailable_first = "--unavailable-first" in sys.argv[2:]
    webhook = Webhook(secret)
    seen_ids = set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                webhook.verify(body, headers)
            except Exception as error:  # the library's refusals, reported as they are
                self.outcome({"verified": False, "error": str(error)}, 401, {"error": str(error)})
                return
            message_id = headers["webhook-id"]
            outcome = {"verified": True, "id": message_id, "body": json.loads(body)}
            if unavailable_first and message_id not in seen_ids:
                seen_ids.add(message_id)
                self.outcome(outcome, 503, {"error": "try again"})
                return
            self.outcome(outcome, 200, {"status": "shipped", "eta": "Thursday"})

        def outcome(self, outcome: dict, status: int, answer: dict) -> None:
            outcome["status"] = status
            print(json.dumps(outcome), flush=True)
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
