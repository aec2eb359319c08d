#!/usr/bin/env python3
"""A tiny upstream for proxy.sh: `upstream.py PORT` listens on 127.0.0.1:PORT.

POST (any path): counts it and answers 201 with a JSON body holding the counter.
GET /count: {"count": N}, the number of POSTs received so far.
Anything else: 404. Prints "listening PORT" on stdout once it accepts connections.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
count = 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status, obj):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        global count
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        with lock:
            count += 1
            c = count
        try:
            received = json.loads(raw) if raw else None
        except ValueError:
            received = raw.decode("utf-8", "replace")
        self._send(201, {"id": "rec-%d" % c, "count": c, "path": self.path,
                         "received": received})

    def do_GET(self):
        if self.path == "/count":
            with lock:
                self._send(200, {"count": count})
        else:
            self._send(404, {"error": "not found"})

    def log_message(self, fmt, *args):
        sys.stderr.write("upstream.py: " + (fmt % args) + "\n")


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("listening %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
