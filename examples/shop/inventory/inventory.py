"""The inventory service on port 8081: how many of each product are left.

GET  /health   -> {"ok": true}
GET  /stock    -> {"stock": {"mug": 12, ...}}
POST /reserve  {"sku": "mug"} -> 200 {"sku": "mug", "left": 11}, 409 when none is left,
               404 for an unknown product

In memory: it starts full again on every start. Standard library only.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STOCK = {"mug": 12, "t-shirt": 5, "sticker": 40}
LOCK = threading.Lock()


class Inventory(BaseHTTPRequestHandler):
    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.answer(200, {"ok": True})
        elif self.path == "/stock":
            with LOCK:
                self.answer(200, {"stock": dict(STOCK)})
        else:
            self.answer(404, {"error": "no route for GET %s" % self.path})

    def do_POST(self):
        if self.path != "/reserve":
            return self.answer(404, {"error": "no route for POST %s" % self.path})
        try:
            length = int(self.headers.get("Content-Length", "0"))
            sku = json.loads(self.rfile.read(length) or b"{}").get("sku")
        except (ValueError, AttributeError):
            return self.answer(400, {"error": 'send JSON: {"sku": "..."}'})
        with LOCK:
            if sku not in STOCK:
                return self.answer(404, {"error": "no product %r" % sku})
            if STOCK[sku] == 0:
                return self.answer(409, {"error": "%s is sold out" % sku})
            STOCK[sku] -= 1
            self.answer(200, {"sku": sku, "left": STOCK[sku]})


if __name__ == "__main__":
    print("inventory on :8081", flush=True)
    ThreadingHTTPServer(("0.0.0.0", 8081), Inventory).serve_forever()
