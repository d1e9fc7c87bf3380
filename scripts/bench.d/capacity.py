"""scripts/bench capacity: room for many boxes on one host. Boxes of the
production image (Debian) at the default unit (2 vCPU / 8 GiB / 40 GB), no
network card, through the REST API of a real `psbx serve` (embedded
PostgreSQL, TCG):

1. how many size-1 boxes run idle at once before a start is refused (no pool;
   each start waits until the box was measured), with the host's memory
   (MemAvailable), the boxes' QEMU resident memory and the disk used after
   each start;
2. the same server restarted with idle_freeze = "10s": every box freezes
   (freeze times are the server's own measure, log lines `frozen ... ms=`),
   then starts continue, each box freezing once idle, until a start is
   refused or PSBX_BENCH_MAX_BOXES boxes exist: how many are held frozen;
3. thaw (GET of a frozen box) of RUNS boxes; cold start (the first RUNS
   starts of step 1); start from the pool (a server with pool_size = 1).

usage: capacity.py PSBX_BINARY IMAGES_DIR [RUNS]   (RUNS >= 3, default 3)
PSBX_BENCH_MAX_BOXES (default 24) bounds the counts: the machine is shared.
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import boxes  # noqa: E402  (its Server and report; it reads the same argv)

RUNS = max(3, int(sys.argv[3]) if len(sys.argv) > 3 else 3)
MAX = int(os.environ.get("PSBX_BENCH_MAX_BOXES", "24"))
SETTLE = 20  # seconds after a start: boxd idles, the sampler measures (every 5 s)


def meminfo():
    with open("/proc/meminfo") as f:
        kib = {l.split(":")[0]: int(l.split()[1]) for l in f}
    return kib["MemTotal"] // 1024, kib["MemAvailable"] // 1024


def rss_mib(box_id):
    out = subprocess.run(["virsh", "-c", "qemu:///system", "dommemstat", f"psbx-{box_id}"],
                         capture_output=True, text=True).stdout
    m = re.search(r"^rss (\d+)", out, re.M)
    return int(m.group(1)) // 1024 if m else 0


def disk_mib(server):
    """Blocks the box directories and the managed saves take."""
    total = 0
    paths = glob.glob(os.path.join(server.data_dir, "boxes", "box_*", "*"))
    paths += glob.glob("/var/lib/libvirt/qemu/save/psbx-box_*.save")
    for p in paths:
        try:
            total += os.stat(p).st_blocks * 512
        except FileNotFoundError:
            pass
    return total // (1024 * 1024)


def start(server, name):
    """(seconds, box) of a start, or (None, error body) when refused."""
    try:
        return server.call("POST", "/v1/boxes", {"name": name})
    except urllib.error.HTTPError as e:
        return None, json.load(e)


def start_until_refused(server, ids, started):
    """Starts boxes until `ids` holds MAX of them or a start is refused;
    `started(took, box)` follows each start, its id in `ids` already. The
    refusal's body, or None at the bound."""
    while len(ids) < MAX:
        took, box = start(server, f"cap-{len(ids)}")
        if took is None:
            return box
        ids.append(box["id"])
        started(took, box)
    return None


def line(server, ids, what, took=None):
    total, avail = meminfo()
    rss = sum(rss_mib(i) for i in ids)
    print(f"{what:<34} boxes {len(ids):>3}  start {'' if took is None else f'{took:6.1f} s':>8}  "
          f"host available {avail:>6} of {total} MiB  boxes' RSS {rss:>6} MiB  "
          f"disk {disk_mib(server):>6} MiB", flush=True)


def main():
    total, avail = meminfo()
    print(f"# scripts/bench capacity {RUNS}: TCG, Debian image, default unit (2 vCPU / 8 GiB / 40 GB), "
          f"host {os.cpu_count()} CPUs, {total} MiB (MemAvailable {avail} at the start), "
          f"at most {MAX} boxes", flush=True)
    # What is measured is memory: disk is promised as before issue 29 (32x the
    # free space; the server's default is now 1.0, which on a machine with tens
    # of GB free admits no default box at all).
    server = boxes.Server("pool_size = 0\nidle_freeze = \"1h\"\ndisk_overcommit = 32.0",
                          image="debian", unit="")
    ids, cold, freeze, thaw = [], [], [], []
    try:
        line(server, ids, "before")

        def running_idle(took, box):
            assert box["state"] == "running", box
            cold.append(took)
            if len(ids) == 1:
                _, done = server.call("POST", f"/v1/boxes/{box['id']}/exec",
                                      {"cmd": "grep -c '^virtio_balloon ' /proc/modules"})
                print(f"virtio_balloon loaded in the box: {done.get('stdout', done)!r}".strip(),
                      flush=True)
            time.sleep(SETTLE)
            line(server, ids, "running idle", took)

        refused = start_until_refused(server, ids, running_idle)
        running = len(ids)
        if refused is None and ids:
            # What the ledger would still admit (defaults: margin 2048 MiB,
            # 16 × 2 CPUs = 32 vCPUs), from the boxes' mean use.
            _, avail = meminfo()
            mean = max(1, sum(rss_mib(i) for i in ids) // len(ids))
            by_memory = len(ids) + max(0, (avail - 2048 - 8192) // mean + 1)
            by_cpu = (os.cpu_count() * 16) // 2
            print(f"bound reached; by the ledger's rules about {min(by_memory, by_cpu)} would run "
                  f"(memory: {by_memory} at {mean} MiB each, vCPUs: {by_cpu})", flush=True)
        print(f"running idle at once: {running}; "
              f"{'refused: ' + refused['error']['message'] if refused else 'stopped at the bound'}",
              flush=True)

        # Freeze them all (a restart with a short idle timer), then keep starting.
        server.proc.terminate()
        server.proc.wait(timeout=120)
        with open(server.config) as f:
            text = f.read().replace('idle_freeze = "1h"', 'idle_freeze = "10s"')
        with open(server.config, "w") as f:
            f.write(text)
        restarted = boxes.Server.__new__(boxes.Server)
        restarted.__dict__.update(server.__dict__)
        relaunch(restarted)
        server = restarted
        waiting = set(ids)
        while waiting:  # in whatever order the boxes freeze
            got = server.wait_log("frozen box_id=")
            box_id = re.search(r"box_id=(\S+)", got).group(1)
            if box_id in waiting:
                waiting.remove(box_id)
                freeze.append(int(re.search(r"ms=(\d+)", got).group(1)) / 1000)
        line(server, [], "all frozen")
        def then_frozen(took, box):
            got = server.wait_log(f"frozen box_id={box['id']}")
            freeze.append(int(re.search(r"ms=(\d+)", got).group(1)) / 1000)
            line(server, [], "started, then frozen", took)

        refused = start_until_refused(server, ids, then_frozen)
        print(f"held frozen: {len(ids)} ({running} of them ran at once); "
              f"{'refused: ' + refused['error']['message'] if refused else 'stopped at the bound'}",
              flush=True)
        for box_id in ids[:RUNS]:
            took, box = server.call("GET", f"/v1/boxes/{box_id}")
            assert box["state"] == "running", box
            thaw.append(took)
    finally:
        server.stop()

    pool = boxes.pool_starts(
        boxes.Server("pool_size = 1\nidle_freeze = \"1h\"\ndisk_overcommit = 32.0",
                     image="debian", unit=""),
        "cap-pool", RUNS, timeout=900)
    boxes.report("start cold", cold[:RUNS])
    boxes.report("start from the pool", pool)
    boxes.report("freeze (managed save)", freeze)
    boxes.report("thaw (GET of a frozen box)", thaw)


def relaunch(server):
    """Starts `psbx serve` again on the server's config and data dir."""
    import queue
    import threading
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    server.proc = subprocess.Popen(
        [boxes.PSBX, "--config", server.config, "--data-dir", server.data_dir,
         "serve", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    server.log = queue.Queue()
    threading.Thread(target=server._drain, daemon=True).start()
    for out in server.proc.stdout:
        if out.startswith("psbx is listening on "):
            server.url = out.split()[-1]
            break


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
