"""web, bob's refunds page: shows what the api (API_URL) answers."""

import html
import json
import os
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        with urllib.request.urlopen(os.environ["API_URL"] + "/", timeout=30) as answer:
            api = json.load(answer)
        page = (
            "<!doctype html><title>Refunds</title><h1>Refunds</h1>\n"
            f"<p>api: {html.escape(api['api'])}, pricing: {html.escape(api['pricing']['pricing'])}</p>\n"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
