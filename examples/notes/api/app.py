"""The notes API: JSON over HTTP on port 8000, notes kept in Redis.

GET  /api/health  -> {"ok": true, "db": "ok"}
GET  /api/notes   -> {"notes": [{"id": 1, "text": "..."}, ...]}  (newest last)
POST /api/notes   {"text": "..."} -> 201 {"id": 2, "text": "..."}

Standard library only: a minimal Redis client (RESP) is below.
"""

import json
import os
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REDIS = (os.environ.get("REDIS_HOST", "localhost"), int(os.environ.get("REDIS_PORT", "6379")))
MAX_TEXT = 500


def redis(*args):
    """Sends one command to Redis and returns its answer (str, int or list)."""
    with socket.create_connection(REDIS, timeout=5) as conn:
        parts = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = str(arg).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        conn.sendall(b"".join(parts))
        reader = conn.makefile("rb")
        return read_reply(reader)


def read_reply(reader):
    line = reader.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = reader.read(size + 2)[:-2]
        return data.decode()
    if kind == b"*":
        return [read_reply(reader) for _ in range(int(rest))]
    raise RuntimeError("unexpected reply from Redis: %r" % line)


class Api(BaseHTTPRequestHandler):
    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/api/health":
            try:
                redis("PING")
                self.answer(200, {"ok": True, "db": "ok"})
            except OSError as e:
                self.answer(503, {"ok": False, "db": str(e)})
        elif self.path == "/api/notes":
            notes = [json.loads(n) for n in redis("LRANGE", "notes", 0, -1)]
            self.answer(200, {"notes": notes})
        else:
            self.answer(404, {"error": "no route for GET %s" % self.path})

    def do_POST(self):
        if self.path != "/api/notes":
            return self.answer(404, {"error": "no route for POST %s" % self.path})
        try:
            length = int(self.headers.get("Content-Length", "0"))
            text = json.loads(self.rfile.read(length) or b"{}").get("text", "").strip()
        except (ValueError, AttributeError):
            return self.answer(400, {"error": 'send JSON: {"text": "..."}'})
        if not text or len(text) > MAX_TEXT:
            return self.answer(400, {"error": "a note is 1 to %d characters" % MAX_TEXT})
        note = {"id": redis("INCR", "next_id"), "text": text}
        redis("RPUSH", "notes", json.dumps(note))
        self.answer(201, note)


if __name__ == "__main__":
    print("notes api on :8000, Redis at %s:%d" % REDIS, flush=True)
    ThreadingHTTPServer(("0.0.0.0", 8000), Api).serve_forever()
