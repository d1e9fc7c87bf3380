"""The notes web front end on port 8080: the page in static/, and /api/* passed on
to the API (API_URL, by its service name). Standard library only."""

import os
import urllib.error
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

API_URL = os.environ.get("API_URL", "http://localhost:8000").rstrip("/")
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


class Web(SimpleHTTPRequestHandler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=STATIC, **kwargs)

    def proxy(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length) if length else None
        request = urllib.request.Request(API_URL + self.path, data=body, method=self.command)
        request.add_header("Content-Type", self.headers.get("Content-Type", "application/json"))
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status, data = answer.status, answer.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        except OSError as e:
            status, data = 502, ('{"error": "the API at %s does not answer: %s"}' % (API_URL, e)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/api/"):
            return self.proxy()
        return super().do_GET()

    def do_POST(self):
        if self.path.startswith("/api/"):
            return self.proxy()
        self.send_error(404)


if __name__ == "__main__":
    print("notes web on :8080, API at %s" % API_URL, flush=True)
    ThreadingHTTPServer(("0.0.0.0", 8080), Web).serve_forever()
