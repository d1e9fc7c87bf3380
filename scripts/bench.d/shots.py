"""scripts/bench shots: how long screenshots, recordings and the review app
take, measured through the REST API and the app of a real `psbx serve`
(embedded PostgreSQL, one TCG box of the production image `debian`).

usage: shots.py PSBX_BINARY IMAGES_DIR [RUNS]   (RUNS >= 5, default 5)

The box (2 vCPU, 2 GiB, 8 GB, no network card) serves two small pages with
`python3 -m http.server 3000`: `index.html` (one viewport) and `tall.html`
(about 3000 px). Printed once: the box's boot (the wall time of its
`POST /v1/boxes`) and the first screenshot of a page after the start (the
browser's start included). Then, per run, the wall time of
`POST /v1/boxes/{id}/shots` and the file's bytes for:
* a screenshot of `index.html` at 1280x800, and of `tall.html` with `fullPage`;
* a screenshot of the virtual display;
* 3-s recordings of the display (webm), of the page (webm) and of the page
  (mp4), with the `durationMs` the shot reports;
* the app, signed in with a password (`psbx account set-password`, the
  sign-in form, the `psbx_session` cookie): `GET /app` and
  `GET /app/reviews/{id}` (a review made through REST), 200 requests each on
  one keep-alive connection, median and p99; and the bytes of each page's
  HTML + app.js + app.css (a phone's first visit; no compression is served);
* `GET /v1/reviews/{id}?wait_s=30` in one thread answered by
  `POST /v1/reviews/{id}/answer` from another: from the answer's 200 to the
  wait's return (negative when the wait returned first).
Median, min and max over the runs are printed per figure. Only loopback is
used; the box and the server are stopped however the run ends.
"""

import http.client
import io
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from boxes import Server, report  # noqa: E402

PSBX, IMAGES = sys.argv[1], sys.argv[2]
RUNS = max(5, int(sys.argv[3]) if len(sys.argv) > 3 else 5)
UNIT = 'unit_vcpus = 2\nunit_memory_mib = 2048\nunit_disk_gb = 8\nboot_timeout = "300s"\n'
PORT = 3000
APP_REQUESTS = 200
ACCOUNT = "default"

INDEX = """<!doctype html><html><head><meta charset="utf-8"><title>bench</title><style>
body { margin: 0; font-family: 'DejaVu Sans', sans-serif; }
h1 { margin: 80px 100px; font-size: 48px; }
#block { position: absolute; left: 800px; top: 600px; width: 200px; height: 100px; background: #f00; }
</style></head><body><h1>PSBX BENCH</h1><p>A small page.</p><div id="block"></div></body></html>
"""
TALL = """<!doctype html><html><head><meta charset="utf-8"><title>tall</title><style>
body { margin: 0; font-family: 'DejaVu Sans', sans-serif; }
section { height: 600px; border-bottom: 4px solid #00f; font-size: 40px; padding: 20px; box-sizing: border-box; }
</style></head><body>
<section>one</section><section>two</section><section>three</section><section>four</section><section>five</section>
</body></html>
"""


def call(server, method, path, body=None, timeout=900):
    """A REST call: (seconds, answer). A failure of the product is reported
    with its body, not hidden behind `HTTP Error 500`."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.url + path, data=data, method=method, headers={
        "Authorization": "Bearer " + server.key, "Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            answer = json.load(res)
    except urllib.error.HTTPError as e:
        raise SystemExit(f"{method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')}")
    return time.monotonic() - started, answer


def upload_site(server, box_id):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in (("index.html", INDEX), ("tall.html", TALL)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    req = urllib.request.Request(f"{server.url}/v1/boxes/{box_id}/sync?dest=site",
                                 data=buf.getvalue(), method="POST",
                                 headers={"Authorization": "Bearer " + server.key})
    try:
        with urllib.request.urlopen(req, timeout=600) as res:
            json.load(res)
    except urllib.error.HTTPError as e:
        raise SystemExit(f"uploading the pages: HTTP {e.code}: {e.read().decode(errors='replace')}")


def exec_ok(server, box_id, cmd, **extra):
    _, done = call(server, "POST", f"/v1/boxes/{box_id}/exec", {"cmd": cmd, **extra})
    if not extra.get("background") and done.get("exitCode") != 0:
        raise SystemExit(f"in the box, {cmd!r} failed: {done}")
    return done


def shot(server, box_id, **body):
    took, taken = call(server, "POST", f"/v1/boxes/{box_id}/shots", body)
    return took, taken


class App:
    """A browser of the app: its cookies, one keep-alive connection."""

    def __init__(self, base):
        parsed = urllib.parse.urlsplit(base)
        self.conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
        self.cookies = {}

    def request(self, method, path, body=None, headers=None):
        headers = dict(headers or {})
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        self.conn.request(method, path, body=body, headers=headers)
        res = self.conn.getresponse()
        data = res.read()
        for set_cookie in res.headers.get_all("Set-Cookie") or []:
            name, _, value = set_cookie.split(";")[0].partition("=")
            if value and "Max-Age=0" not in set_cookie:
                self.cookies[name] = value
            else:
                self.cookies.pop(name, None)
        return res.status, res.headers, data

    def sign_in(self, password):
        status, _, body = self.request("GET", "/app/sign-in")
        if status != 200 or "psbx_app_csrf" not in self.cookies:
            raise SystemExit(f"GET /app/sign-in: {status}, cookies {sorted(self.cookies)}: {body[:300]!r}")
        form = urllib.parse.urlencode({"csrf": self.cookies["psbx_app_csrf"], "account": ACCOUNT,
                                       "password": password, "next": "/app"})
        status, headers, body = self.request(
            "POST", "/app/sign-in", form, {"Content-Type": "application/x-www-form-urlencoded"})
        if status != 303 or "psbx_session" not in self.cookies:
            raise SystemExit(f"signing in to the app: {status} {headers.get('Location')}: {body[:500]!r}")

    def page(self, path):
        status, _, body = self.request("GET", path)
        if status != 200:
            raise SystemExit(f"GET {path}: {status}: {body[:500]!r}")
        return body

    def timed(self, path, n):
        samples = []
        for _ in range(n):
            started = time.monotonic()
            self.page(path)
            samples.append((time.monotonic() - started) * 1000)
        samples.sort()
        return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def set_password(server):
    password = secrets.token_urlsafe(24)
    done = subprocess.run([PSBX, "--config", server.config, "--data-dir", server.data_dir,
                           "account", "set-password", "--account", ACCOUNT],
                          input=password + "\n", capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"psbx account set-password failed: {done.stderr}")
    return password


def wait_answered(server, review_id):
    """One wait answered from another thread: seconds from the answer's 200
    to the wait's return."""
    got = {}

    def waiter():
        try:
            _, review = call(server, "GET", f"/v1/reviews/{review_id}?wait_s=30", timeout=60)
            got["review"] = review
        except BaseException as e:  # reported by the main thread
            got["error"] = e
        got["returned"] = time.monotonic()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    time.sleep(1.0)  # the wait is in place before the answer
    if "returned" in got:
        raise SystemExit(f"the wait returned before any answer: {got}")
    _, answered = call(server, "POST", f"/v1/reviews/{review_id}/answer",
                       {"items": [{"text": "the button is cut off"}]})
    answer_done = time.monotonic()
    thread.join(60)
    if "returned" not in got:
        raise SystemExit("GET ?wait_s=30 did not return within 60 s of the answer")
    if "error" in got:
        raise SystemExit(f"the wait failed: {got['error']}")
    if got["review"]["state"] != "answered" or answered["state"] != "answered":
        raise SystemExit(f"the wait returned {got['review']['state']!r}, the answer {answered['state']!r}")
    return got["returned"] - answer_done


def main():
    print(f"# scripts/bench shots {RUNS}: TCG, box = 2 vCPU / 2 GiB / 8 GB, image debian, "
          f"pages on port {PORT}", flush=True)
    server = Server('pool_size = 0\nidle_freeze = "1h"', image="debian", unit=UNIT)
    try:
        boot, box = call(server, "POST", "/v1/boxes", {"name": "bench-shots"})
        if box["state"] != "running":
            raise SystemExit(f"the box is not running: {box}")
        box_id = box["id"]
        upload_site(server, box_id)
        exec_ok(server, box_id, f"cd /work/site && exec python3 -m http.server {PORT} --bind 127.0.0.1",
                background=True)
        exec_ok(server, box_id, f"for i in $(seq 60); do curl -sf http://127.0.0.1:{PORT}/ >/dev/null "
                                "&& exit 0; sleep 1; done; exit 1")
        page = f"http://localhost:{PORT}/index.html"
        tall = f"http://localhost:{PORT}/tall.html"

        first, taken = shot(server, box_id, url=page, width=1280, height=800)
        report("box boot (POST /v1/boxes)", [boot])
        report("first page shot (browser)", [first])

        figures = {}

        def add(name, value):
            figures.setdefault(name, []).append(value)

        for _ in range(RUNS):
            took, s = shot(server, box_id, url=page, width=1280, height=800)
            assert (s["width"], s["height"]) == (1280, 800), s
            add("page shot 1280x800", took)
            add("page shot bytes", s["bytes"] / 1024)
            took, s = shot(server, box_id, url=tall, width=1280, height=800, fullPage=True)
            assert s["height"] >= 2900, f"the full page is {s['height']} px tall: {s}"
            add("full-page shot (~3000 px)", took)
            add("full-page shot bytes", s["bytes"] / 1024)
            took, s = shot(server, box_id)
            add("display shot 1920x1080", took)
            add("display shot bytes", s["bytes"] / 1024)
            for name, body in (("display rec 3 s webm", {}),
                               ("page rec 3 s webm", {"url": page, "width": 1280, "height": 800}),
                               ("page rec 3 s mp4", {"url": page, "width": 1280, "height": 800,
                                                     "format": "mp4"})):
                took, s = shot(server, box_id, kind="recording", seconds=3, **body)
                add(name, took)
                add(name + " durationMs", s.get("durationMs") or 0)
                add(name + " bytes", s["bytes"] / 1024)
            # Nothing piles up in the box's shots between runs.
            call(server, "DELETE", f"/v1/boxes/{box_id}/shots")

        # The app, signed in, with a review made through REST.
        password = set_password(server)
        _, review = call(server, "POST", f"/v1/boxes/{box_id}/reviews",
                         {"title": "The home page", "summary": "Served on port 3000.\nCheck the title.",
                          "urls": [box["url"]]})
        app = App(server.url)
        app.sign_in(password)
        assets = sum(len(app.page(f"/app/assets/{f}")) for f in ("app.js", "app.css"))
        home = app.page("/app")
        if b"The home page" not in home:
            raise SystemExit("GET /app does not list the review under Ready for you")
        review_path = f"/app/reviews/{review['id']}"
        review_page = app.page(review_path)
        for _ in range(RUNS):
            p50, p99 = app.timed("/app", APP_REQUESTS)
            add("GET /app p50", p50)
            add("GET /app p99", p99)
            p50, p99 = app.timed(review_path, APP_REQUESTS)
            add("GET /app/reviews/{id} p50", p50)
            add("GET /app/reviews/{id} p99", p99)

        # A wait answered from another thread: a new review each run.
        for n in range(RUNS):
            _, review = call(server, "POST", f"/v1/boxes/{box_id}/reviews",
                             {"title": f"Round {n}", "summary": "again"})
            if review["state"] != "waiting":
                raise SystemExit(f"a new review is not waiting: {review}")
            add("answer to wait return", wait_answered(server, review["id"]) * 1000)

        for name in ("page shot 1280x800", "full-page shot (~3000 px)", "display shot 1920x1080",
                     "display rec 3 s webm", "page rec 3 s webm", "page rec 3 s mp4"):
            report(name, figures[name])
        for name in ("page shot bytes", "full-page shot bytes", "display shot bytes",
                     "display rec 3 s webm bytes", "page rec 3 s webm bytes", "page rec 3 s mp4 bytes"):
            report(name, figures[name], "KiB")
        for name in ("display rec 3 s webm", "page rec 3 s webm", "page rec 3 s mp4"):
            report(name.replace("rec 3 s", "rec") + " durationMs", figures[name + " durationMs"], "ms")
        for name in ("GET /app p50", "GET /app p99", "GET /app/reviews/{id} p50",
                     "GET /app/reviews/{id} p99", "answer to wait return"):
            report(name, figures[name], "ms")
        print(f"first visit: /app {len(home) + assets} B, /app/reviews/{{id}} {len(review_page) + assets} B "
              f"(HTML {len(home)} / {len(review_page)} B, app.js + app.css {assets} B, uncompressed)",
              flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    # SIGTERM (a killed benchmark) unwinds through the `finally` clause too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
