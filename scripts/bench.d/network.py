"""scripts/bench network: TCP throughput (both ways) and round-trip time from a box (test
image, 1 vCPU, TCG, QEMU user networking filtered by psbx's host rules) to a
server in a stand-in "internet" (a network namespace holding a 198.51.100.x
address routed from the host), against the host itself to the same server in
the same run, with the same client (busybox nc).

usage: network.py PSBX_BINARY IMAGES_DIR BUSYBOX [RUNS]   (RUNS >= 5, default 5)

Upload: `dd if=/dev/zero bs=64k count=N | nc ADDR 5001`, timed by the
server from the first byte to the end. Download: `nc ADDR 5003 >/dev/null`,
the server sending N MB and timing until the client has read them all and
closed. Round trip: the client reflects what
it gets (`nc ADDR 5002 <fifo >fifo`) and the server times 200 one-byte round
trips over that one connection (median per run). Every address is checked
with `ip route get` before anything is sent; the server runs in the
allow-list mode limited to the test range.
"""

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from boxes import Server, report  # noqa: E402  (the same server wrapper)

PSBX, IMAGES, BUSYBOX = sys.argv[1], sys.argv[2], sys.argv[3]
RUNS = max(5, int(sys.argv[4]) if len(sys.argv) > 4 else 5)
MB = 64  # per throughput run
NS = f"psbxbench{os.getpid() % 10000}"
VETH = f"vpb{os.getpid() % 10000}"


def sh(*args, check=True, **kw):
    return subprocess.run(args, check=check, capture_output=True, text=True, **kw)


SERVER = r'''
import json, socket, statistics, sys, threading, time
addr = sys.argv[1]
def sink():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 5001)); s.listen(8)
    while True:
        c, _ = s.accept(); n = 0; first = None
        while True:
            d = c.recv(1 << 20)
            if not d: break
            if first is None: first = time.monotonic()
            n += len(d)
        took = time.monotonic() - (first or time.monotonic())
        c.close()
        print(json.dumps({"bytes": n, "seconds": took}), flush=True)
def source():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 5003)); s.listen(8)
    chunk = b"x" * (1 << 20)
    while True:
        c, _ = s.accept(); t = time.monotonic()
        for _ in range(int(sys.argv[2])): c.sendall(chunk)
        c.shutdown(socket.SHUT_WR)
        while c.recv(65536): pass
        took = time.monotonic() - t
        c.close()
        print(json.dumps({"bytes": int(sys.argv[2]) << 20, "seconds": took}), flush=True)
def rtt():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 5002)); s.listen(8)
    while True:
        c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        try:
            for _ in range(20):  # warm-up
                c.sendall(b"x"); c.recv(1)
            for _ in range(200):
                t = time.monotonic(); c.sendall(b"x")
                if not c.recv(1): break
                times.append(time.monotonic() - t)
        except OSError:
            pass
        c.close()
        print(json.dumps({"rtt_ms": statistics.median(times) * 1000 if times else None}), flush=True)
threading.Thread(target=sink, daemon=True).start()
threading.Thread(target=source, daemon=True).start()
print("ready", flush=True)
rtt()
'''


class Internet:
    """A namespace holding 198.51.100.X, routed from the host through a veth."""

    def __init__(self):
        a = random.randrange(4, 250, 4)
        self.host_ip, self.ns_ip = f"10.233.251.{a + 1}", f"10.233.251.{a + 2}"
        self.addr = f"198.51.100.{random.randrange(2, 254)}"
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", VETH + "n")
        sh("ip", "link", "set", VETH + "n", "netns", NS)
        sh("ip", "addr", "add", f"{self.host_ip}/30", "dev", VETH)
        sh("ip", "link", "set", VETH, "up")
        sh("ip", "-n", NS, "addr", "add", f"{self.ns_ip}/30", "dev", VETH + "n")
        sh("ip", "-n", NS, "link", "set", VETH + "n", "up")
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        sh("ip", "-n", NS, "addr", "add", f"{self.addr}/32", "dev", "lo")
        sh("ip", "route", "add", f"{self.addr}/32", "via", self.ns_ip, "dev", VETH)
        route = sh("ip", "route", "get", self.addr).stdout.split()
        if f"dev {VETH}" not in " ".join(route):
            raise SystemExit(f"{self.addr} does not leave through {VETH}: {route}; not sending")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", NS, sys.executable, "-c", SERVER, self.addr, str(MB)],
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def result(self):
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.kill()
        sh("ip", "link", "del", VETH, check=False)
        sh("ip", "netns", "del", NS, check=False)


def host_run(cmd):
    return sh("sh", "-c", cmd.replace("nc ", f"{BUSYBOX} nc ").replace("dd ", f"{BUSYBOX} dd "))


def main():
    print(f"# scripts/bench network {RUNS}: TCG box (1 vCPU / 256 MiB, test image) vs the host, "
          f"{MB} MB per throughput run, 200 round trips per run", flush=True)
    net = Internet()
    server = Server('pool_size = 0\nidle_freeze = "1h"\nnetwork = true\n'
                    '[boxes.egress]\nresolvers = ["127.0.0.1:9"]\nonly = ["198.51.100.0/24"]')
    samples = {k: [] for k in ("box upload MB/s", "host upload MB/s", "box download MB/s",
                                "host download MB/s", "box rtt ms", "host rtt ms")}
    try:
        _, box = server.call("POST", "/v1/boxes", {"name": "bench-network"})
        box_id = box["id"]

        def box_run(cmd):
            _, out = server.call("POST", f"/v1/boxes/{box_id}/exec", {"cmd": cmd, "timeout": "300s"})
            return out

        send = f"dd if=/dev/zero bs=65536 count={MB * 16} 2>/dev/null | nc -w 10 {net.addr} 5001"
        fetch = f"nc -w 30 {net.addr} 5003 >/dev/null"
        # Read-write on the fifo: opening it never blocks.
        fifo = "/tmp/psbx-bench-reflect"
        reflect = f"rm -f {fifo}; mkfifo {fifo}; nc -w 10 {net.addr} 5002 <>{fifo} >{fifo}; rm -f {fifo}"
        for _ in range(RUNS):
            for who, run in (("box", box_run), ("host", host_run)):
                run(send)
                r = net.result()
                samples[f"{who} upload MB/s"].append(r["bytes"] / r["seconds"] / 1e6)
                run(fetch)
                r = net.result()
                samples[f"{who} download MB/s"].append(r["bytes"] / r["seconds"] / 1e6)
                run(reflect)
                samples[f"{who} rtt ms"].append(net.result()["rtt_ms"])
        server.call("DELETE", f"/v1/boxes/{box_id}")
    finally:
        server.stop()
        net.close()
    for name, values in samples.items():
        report(name, values, unit="")
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"ratio box/host: upload {med['box upload MB/s'] / med['host upload MB/s']:.3f}, "
          f"download {med['box download MB/s'] / med['host download MB/s']:.3f}, "
          f"round trip {med['box rtt ms'] / med['host rtt ms']:.1f}x", flush=True)


signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
main()
