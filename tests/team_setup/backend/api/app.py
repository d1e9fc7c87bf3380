"""The api, alice's refunds branch: GET / asks pricing (PRICING_URL) and answers with
both; GET /boom fails on purpose and reports the error to Sentry (SENTRY_DSN)."""

import json
import os
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "refunds branch"


def get(url):
    with urllib.request.urlopen(url, timeout=20) as answer:
        return json.load(answer)


def report(message):
    """Sends an error event to Sentry's store endpoint; its id."""
    dsn = urllib.parse.urlsplit(os.environ["SENTRY_DSN"])
    project = dsn.path.strip("/")
    port = f":{dsn.port}" if dsn.port else ""
    event = {"event_id": uuid.uuid4().hex, "message": message, "platform": "python", "level": "error"}
    request = urllib.request.Request(
        f"{dsn.scheme}://{dsn.hostname}{port}/api/{project}/store/",
        data=json.dumps(event).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-Sentry-Auth": f"Sentry sentry_version=7, sentry_client=api/1.0, sentry_key={dsn.username}",
        },
    )
    with urllib.request.urlopen(request, timeout=20) as answer:
        return json.load(answer)["id"]


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, payload):
        data = json.dumps(payload).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/":
            self.reply(200, {"api": VERSION, "pricing": get(os.environ["PRICING_URL"] + "/")})
        elif self.path == "/boom":
            event = report("refund failed: the amount is below zero")
            self.reply(500, {"error": "refund failed", "sentryEvent": event})
        else:
            self.reply(404, {"error": "not found"})


ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("PORT", "8080"))), Handler).serve_forever()
