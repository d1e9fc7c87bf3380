"""scripts/bench box-urls: a box URL against the same server reached from
inside the box, in one run, with one client (psbx-box-load) on both sides.

usage: box_urls.py PSBX_BINARY IMAGES_DIR BIN_DIR [RUNS]   (RUNS >= 5, default 5)

A real `psbx serve` (embedded PostgreSQL, a TCG box from the test image,
1 vCPU) runs psbx-box-web in the box on port 4000. Each run measures:
* small GETs (`/status/200`, 2,000 requests over 4 keep-alive connections):
  requests/s, p50 and p99 latency, from the host through the box URL (the
  server's loopback listener, Host naming the box) and from inside the box to
  127.0.0.1:4000;
* a 256 MiB download (`/bytes`), both ways: MiB/s;
* the 404 of a wrong key and of an unknown box (200 requests each): the
  median latency of each, which should not tell them apart.
Only loopback is used: the box has no network card.
"""

import json
import os
import statistics
import subprocess
import sys
import tarfile
import io
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from boxes import Server, report  # noqa: E402

PSBX, IMAGES, BIN = sys.argv[1], sys.argv[2], sys.argv[3]
RUNS = max(5, int(sys.argv[4]) if len(sys.argv) > 4 else 5)
PORT = 4000
DOWNLOAD = 256 << 20


def upload_tools(server, box_id):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("psbx-box-web", "psbx-box-load"):
            tar.add(os.path.join(BIN, name), arcname=name)
    req = urllib.request.Request(f"{server.url}/v1/boxes/{box_id}/sync?dest=tools",
                                 data=buf.getvalue(), method="POST",
                                 headers={"Authorization": "Bearer " + server.key})
    with urllib.request.urlopen(req, timeout=600) as res:
        json.load(res)


def in_box(server, box_id, cmd):
    _, done = server.call("POST", f"/v1/boxes/{box_id}/exec", {"cmd": cmd, "timeout": 600})
    assert done.get("exitCode") == 0, done
    return json.loads(done["stdout"]["text"])


def on_host(*args):
    out = subprocess.run([os.path.join(BIN, "psbx-box-load"), *args],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    print(f"# scripts/bench box-urls {RUNS}: TCG, box = 1 vCPU / 256 MiB, test image, "
          f"psbx-box-web on port {PORT}", flush=True)
    server = Server('pool_size = 0\nidle_freeze = "1h"')
    try:
        _, box = server.call("POST", "/v1/boxes", {"name": "bench-urls"})
        box_id, url = box["id"], box["url"]
        host = url.split("://")[1].split("/")[0].replace(".box.localhost", f"-{PORT}.box.localhost")
        base = server.url
        upload_tools(server, box_id)
        server.call("POST", f"/v1/boxes/{box_id}/exec",
                    {"cmd": f"/work/tools/psbx-box-web --port {PORT}", "background": True})
        time.sleep(2)
        key = host.split(".")[0].split("-")[2]
        wrong = host.replace(key, "0" * len(key))
        unknown = host.replace(host.split(".")[0].split("-")[1], "z" * 20)
        figures = {k: [] for k in ("url_rps", "url_p50", "url_p99", "box_rps", "box_p50",
                                   "box_p99", "url_mib", "box_mib", "wrong_key", "unknown")}
        load = "/work/tools/psbx-box-load"
        for _ in range(RUNS):
            r = on_host("get", f"{base}/status/200", "--host", host)
            assert r["errors"] == 0, r
            figures["url_rps"].append(r["rps"])
            figures["url_p50"].append(r["p50Ms"])
            figures["url_p99"].append(r["p99Ms"])
            r = in_box(server, box_id, f"{load} get http://127.0.0.1:{PORT}/status/200")
            figures["box_rps"].append(r["rps"])
            figures["box_p50"].append(r["p50Ms"])
            figures["box_p99"].append(r["p99Ms"])
            r = on_host("download", f"{base}/bytes?n={DOWNLOAD}", "--host", host)
            assert r["bytes"] == DOWNLOAD, r
            figures["url_mib"].append(r["mibPerS"])
            r = in_box(server, box_id, f"{load} download 'http://127.0.0.1:{PORT}/bytes?n={DOWNLOAD}'")
            figures["box_mib"].append(r["mibPerS"])
            for name, h in (("wrong_key", wrong), ("unknown", unknown)):
                r = on_host("get", f"{base}/", "--host", h, "--requests", "200",
                            "--connections", "1")
                assert r["errors"] == 200, r  # every answer is the 404
                figures[name].append(r["p50Ms"])
        report("box URL GET requests/s", figures["url_rps"], "/s")
        report("in-box GET requests/s", figures["box_rps"], "/s")
        report("box URL GET p50", figures["url_p50"], "ms")
        report("in-box GET p50", figures["box_p50"], "ms")
        report("box URL GET p99", figures["url_p99"], "ms")
        report("in-box GET p99", figures["box_p99"], "ms")
        report("box URL download", figures["url_mib"], "MiB/s")
        report("in-box download", figures["box_mib"], "MiB/s")
        report("404 wrong key p50", figures["wrong_key"], "ms")
        report("404 unknown box p50", figures["unknown"], "ms")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
