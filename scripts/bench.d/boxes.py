"""scripts/bench boxes: how long boxes take to start (from the pool and cold),
to freeze and to thaw, measured through the REST API of a real `psbx serve`
(embedded PostgreSQL, TCG domains from the test image).

usage: boxes.py PSBX_BINARY IMAGES_DIR [RUNS]   (RUNS >= 5, default 5)
       PSBX_BENCH_ONLY=exec boxes.py ...        (only the exec round trip)
       PSBX_BENCH_ONLY=encryption boxes.py ...  (only encrypted against clear disks)
       PSBX_BENCH_ONLY=pool-pause boxes.py ...  (only pool starts 30 s after the box was paused)

Each figure is measured RUNS times; the median, min and max are printed.
Freeze times are the server's own measure of the managed save (log lines
`frozen ... ms=`); the others are wall-clock times of the API calls.

Cold start, disk write, freeze and thaw are measured twice, with each box's
disk LUKS-encrypted (the default, `boxes.encrypt_disks = true`) and in clear,
on servers whose disk writes are not throttled (`unit_write_*` = 0), so the
difference is what encryption costs (PSBX_BENCH_ONLY=encryption: those alone).
The disk write is `dd` of 64 MiB to /work with an fsync, in MiB/s of the exec.
"""

import json
import os
import signal
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

PSBX, IMAGES = sys.argv[1], sys.argv[2]
RUNS = max(5, int(sys.argv[3]) if len(sys.argv) > 3 and __name__ == "__main__" else 5)
UNIT = 'unit_vcpus = 1\nunit_memory_mib = 256\nunit_disk_gb = 2\n'


class Server:
    """A `psbx serve` of its own (embedded PostgreSQL, a temporary data dir) on
    loopback, booting boxes of `image` with `unit` (the [boxes] size lines)."""

    def __init__(self, extra, image="test", unit=UNIT):
        self.dir = tempfile.mkdtemp(prefix="psbx-bench-")
        os.chmod(self.dir, 0o755)
        self.config = config = os.path.join(self.dir, "psbx.toml")
        self.data_dir = os.path.join(self.dir, "data")
        with open(config, "w") as f:
            f.write(f'[boxes]\naccel = "tcg"\nimages_dir = "{IMAGES}"\nimage = "{image}"\n'
                    f'{"" if "network" in extra else "network = false"}\n{unit}{extra}\n')
        env = dict(os.environ)
        env.pop("DATABASE_URL", None)
        self.proc = subprocess.Popen(
            [PSBX, "--config", config, "--data-dir", self.data_dir,
             "serve", "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.log = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()
        banner = ""
        for line in self.proc.stdout:
            banner += line
            if line.startswith("psbx is listening on "):
                self.url = line.split()[-1]
                break
        self.key = re.search(r"psbx_[a-z0-9]+", banner).group(0)

    def _drain(self):
        for line in self.proc.stderr:
            self.log.put(line)

    def wait_log(self, needle, timeout=600):
        end = time.time() + timeout
        while time.time() < end:
            try:
                line = self.log.get(timeout=1)
            except queue.Empty:
                continue
            if needle in line:
                return line
        raise SystemExit(f"no log line with {needle!r} within {timeout}s")

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": "Bearer " + self.key, "Content-Type": "application/json"})
        started = time.monotonic()
        with urllib.request.urlopen(req, timeout=600) as res:
            answer = json.load(res)
        return time.monotonic() - started, answer

    def stop(self):
        # Leave nothing behind, also after an interrupted run.
        try:
            _, listed = self.call("GET", "/v1/boxes?limit=200")
            for box in listed["boxes"]:
                if box["state"] not in ("stopped", "failed"):
                    self.call("DELETE", f"/v1/boxes/{box['id']}")
        except Exception as e:  # the server may be gone already
            print(f"cleanup: {e}", file=sys.stderr)
        self.proc.terminate()
        self.proc.wait(timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)


def pool_starts(server, name, runs, timeout=600):
    """`runs` starts from the pool of `server` (each waits for a pooled box,
    then stops the box started): their times. Stops the server."""
    pool = []
    try:
        for _ in range(runs):
            server.wait_log("pool box ready", timeout=timeout)
            took, box = server.call("POST", "/v1/boxes", {"name": name})
            assert box["state"] == "running", box
            pool.append(took)
            server.call("DELETE", f"/v1/boxes/{box['id']}")
    finally:
        server.stop()
    return pool


def paused_pool_starts(pause, runs):
    """`runs` starts from the pool, each `pause` seconds after its box was
    paused (longer than boxd's 15 s liveness timeout: a pool box waits
    longer than that for its claim): their times, and how many claims fell
    back to a cold start (log lines). Also the server's own measure of each
    claim (`box started from the pool ... ms=`)."""
    server = Server("pool_size = 1\nidle_freeze = \"1h\"")
    took_all, claimed, fallbacks = [], [], 0
    try:
        for _ in range(runs):
            ready = server.wait_log("pool box ready")
            pooled = re.search(r"box_id=(box_\w+)", ready).group(1)
            time.sleep(pause)
            took, box = server.call("POST", "/v1/boxes", {"name": "bench-paused"})
            assert box["state"] == "running", box
            took_all.append(took)
            if box["id"] != pooled:  # the claim failed and a cold start stood in
                fallbacks += 1
            else:
                line = server.wait_log(f"box started from the pool box_id={pooled}")
                claimed.append(int(re.search(r"ms=(\d+)", line).group(1)) / 1000)
            server.call("DELETE", f"/v1/boxes/{box['id']}")
    finally:
        server.stop()
    return took_all, claimed, fallbacks


def report(name, samples, unit="s"):
    med = statistics.median(samples)
    print(f"{name:<28} median {med:8.3f} {unit}   min {min(samples):8.3f}   "
          f"max {max(samples):8.3f}   (n={len(samples)})", flush=True)


def exec_round_trip():
    """`POST /v1/boxes/{id}/exec` of `true` on a running box, RUNS x 10 times:
    the server's path to boxd and back (auth, the box's actor, the exec stream)
    around a command that does nothing."""
    server = Server("pool_size = 0\nidle_freeze = \"1h\"")
    samples = []
    try:
        _, box = server.call("POST", "/v1/boxes", {"name": "bench-exec"})
        assert box["state"] == "running", box
        for _ in range(3):  # warm: the first commands start the shell's caches
            server.call("POST", f"/v1/boxes/{box['id']}/exec", {"cmd": "true"})
        for _ in range(RUNS * 10):
            took, done = server.call("POST", f"/v1/boxes/{box['id']}/exec", {"cmd": "true"})
            assert done["exitCode"] == 0, done
            samples.append(took * 1000)
    finally:
        server.stop()
    report("exec of `true`", samples, "ms")


WRITE_MIB = 64


def cold_freeze_thaw(encrypt):
    """RUNS cold starts on a server with `encrypt_disks = encrypt`, a disk
    write in each box, then its freeze and thaw: the four series."""
    server = Server(f"pool_size = 0\nidle_freeze = \"5s\"\nencrypt_disks = {str(encrypt).lower()}\n"
                    "unit_write_mib_per_sec = 0\nunit_write_iops = 0")
    cold, write, freeze, thaw, ids = [], [], [], [], []
    try:
        for _ in range(RUNS):
            took, box = server.call("POST", "/v1/boxes", {"name": "bench-cold"})
            assert box["state"] == "running", box
            cold.append(took)
            ids.append(box["id"])
            took, done = server.call("POST", f"/v1/boxes/{box['id']}/exec", {
                "cmd": f"dd if=/dev/zero of=/work/bench bs=1M count={WRITE_MIB} conv=fsync"})
            assert done["exitCode"] == 0, done
            write.append(WRITE_MIB / took)
            line = server.wait_log(f"frozen box_id={box['id']}")
            freeze.append(int(re.search(r"ms=(\d+)", line).group(1)) / 1000)
        for box_id in ids:
            took, box = server.call("GET", f"/v1/boxes/{box_id}")
            assert box["state"] == "running", box
            thaw.append(took)
            server.call("DELETE", f"/v1/boxes/{box_id}")
    finally:
        server.stop()
    return cold, write, freeze, thaw


def encryption():
    """The cold start, disk write, freeze and thaw with encrypted and clear
    disks, clear first (an image cache warmed by either serves both)."""
    series = {False: cold_freeze_thaw(False), True: cold_freeze_thaw(True)}
    for encrypt, label in ((True, "encrypted"), (False, "clear")):
        cold, write, freeze, thaw = series[encrypt]
        report(f"start cold, {label}", cold)
        report(f"disk write, {label}", write, "MiB/s")
        report(f"freeze, {label}", freeze)
        report(f"thaw, {label}", thaw)


def main():
    print(f"# scripts/bench boxes {RUNS}: TCG, box = 1 vCPU / 256 MiB / 2 GB, test image", flush=True)
    only = os.environ.get("PSBX_BENCH_ONLY")
    if only == "exec":
        return exec_round_trip()
    if only == "encryption":
        return encryption()
    if only == "pool-pause":
        took, claimed, fallbacks = paused_pool_starts(30, RUNS)
        report("start from the pool, 30 s paused", took)
        if claimed:
            report("  its claim (server's measure)", claimed)
        print(f"  claims that fell back to a cold start: {fallbacks} of {RUNS}", flush=True)
        return None
    exec_round_trip()
    # Pool: wait for a pooled box each time, then start one.
    report("start from the pool", pool_starts(Server("pool_size = 1\nidle_freeze = \"1h\""), "bench-pool", RUNS))
    encryption()


if __name__ == "__main__":
    # SIGTERM (a killed benchmark) unwinds through the `finally` clauses too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
