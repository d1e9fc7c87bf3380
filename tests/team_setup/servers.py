"""The test's servers in the networks of docs/team-setup.md (tests/tests/team_setup.rs).

  servers.py http ADDR PORT LOG BODY          dev's own copy of a service: answers every
                                              GET with BODY (JSON)
  servers.py https ADDR PORT LOG BODY CERT KEY   the same over TLS (the office's ledger)
  servers.py sentry ADDR PORT LOG             the dev gateway with Sentry behind it:
                                              answers a POST with {"id": <event_id>}

Each appends one JSON line per request to LOG ({method, path, host,
xForwardedHost, sentryAuth, body}) and, once it listens, creates LOG.ready.
"""

import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE, ADDR, PORT, LOG = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def record(self, body):
        with open(LOG, "a") as f:
            f.write(json.dumps({
                "method": self.command,
                "path": self.path,
                "host": self.headers.get("Host"),
                "xForwardedHost": self.headers.get("X-Forwarded-Host"),
                "sentryAuth": self.headers.get("X-Sentry-Auth"),
                "body": body,
            }) + "\n")

    def reply(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.record(None)
        if MODE == "sentry":
            self.reply(404, {"detail": "not found"})
        else:
            self.reply(200, json.loads(sys.argv[5]))

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace")
        self.record(body)
        if MODE == "sentry":
            try:
                event = json.loads(body).get("event_id")
            except ValueError:
                event = None
            if event:
                self.reply(200, {"id": event})
            else:
                self.reply(400, {"detail": "bad event"})
        else:
            self.reply(405, {"error": "GET only"})

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer((ADDR, PORT), Handler)
if MODE == "https":
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[6], sys.argv[7])
    server.socket = context.wrap_socket(server.socket, server_side=True)
open(LOG + ".ready", "w").close()
server.serve_forever()
