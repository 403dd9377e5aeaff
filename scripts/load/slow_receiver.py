# A deliberately slow, one-at-a-time order system: every call takes 50 ms and calls wait their
# turn (a single-threaded server), as a busy backend would make them.
import json, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

class H(BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        self.rfile.read(n)
        time.sleep(0.05)
        body = json.dumps({"orderId": "1234", "status": "shipped", "eta": "tomorrow"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
