"""The storefront on port 8090: the shop's page, with what is left of each product
asked from the inventory service by name (INVENTORY_URL), and a Buy button that asks
the inventory to take one off. Standard library only."""

import html
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

INVENTORY_URL = os.environ.get("INVENTORY_URL", "http://localhost:8081").rstrip("/")
PRODUCTS = [("mug", "Mug", "9.00"), ("t-shirt", "T-shirt", "19.00"), ("sticker", "Sticker", "1.50")]


def inventory(path, body=None):
    """Calls the inventory; (status, JSON answer)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(INVENTORY_URL + path, data=data, method="POST" if data else "GET")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def page(message=""):
    try:
        _, answer = inventory("/stock")
        stock, problem = answer["stock"], ""
    except OSError as e:
        stock, problem = {}, "The inventory at %s does not answer: %s" % (INVENTORY_URL, e)
    rows = "".join(
        "<li><span class='name'>%s</span> <span class='price'>$%s</span> "
        "<span class='left' id='left-%s'>%s left</span>"
        "<form method='post' action='/buy'><input type='hidden' name='sku' value='%s'>"
        "<button>Buy</button></form></li>"
        % (html.escape(name), price, sku, stock.get(sku, "?"), sku)
        for sku, name, price in PRODUCTS
    )
    notice = "<p id='message' role='status'>%s</p>" % html.escape(message or problem)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'><title>Shop</title>"
        "<style>body{font-family:system-ui,'DejaVu Sans',sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem}"
        "li{display:flex;gap:1rem;align-items:center;margin:.6rem 0}.name{flex:1}"
        "ul{list-style:none;padding:0}button{padding:.4rem 1rem}</style></head>"
        "<body><h1 id='title'>Shop</h1>%s<ul>%s</ul></body></html>" % (notice, rows)
    )


class Storefront(BaseHTTPRequestHandler):
    def send_page(self, status, text):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/":
            self.send_page(200, page())
        else:
            self.send_page(404, "<p>Not found</p>")

    def do_POST(self):
        if self.path != "/buy":
            return self.send_page(404, "<p>Not found</p>")
        length = int(self.headers.get("Content-Length", "0"))
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        sku = form.get("sku", [""])[0]
        try:
            status, answer = inventory("/reserve", {"sku": sku})
            message = "You bought a %s." % sku if status == 200 else answer.get("error", "Could not buy it.")
        except OSError as e:
            status, message = 502, "The inventory at %s does not answer: %s" % (INVENTORY_URL, e)
        self.send_page(status if status in (200, 400, 404, 409) else 502, page(message))


if __name__ == "__main__":
    print("storefront on :8090, inventory at %s" % INVENTORY_URL, flush=True)
    ThreadingHTTPServer(("0.0.0.0", 8090), Storefront).serve_forever()
