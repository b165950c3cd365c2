#!/usr/bin/env python3
"""A tiny downstream for trying hookwall by hand: answers every POST 200 and prints the
Idempotency-Key and attempt of each forward. Usage: python3 tools/dev_sink.py [PORT=3000]."""
import http.server
import sys


class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        key = self.headers.get("Idempotency-Key")
        attempt = self.headers.get("Hookwall-Attempt")
        print(f"{key} attempt={attempt} bytes={len(body)}", flush=True)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    # The default backlog of 5 overflows when hookwall opens its destination connections
    # (`concurrency_max`, 64 by default) at once: refused and timed-out attempts, retried,
    # then delivered twice. A real downstream listens with a deep backlog too.
    request_queue_size = 1024


port = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
Server(("127.0.0.1", port), Sink).serve_forever()
