"""scripts/bench nodes: a request for a box through the node that holds it
against the same request through another node, which forwards it over the
peer link (issue 33), in one run.

usage: nodes.py PSBX_BINARY IMAGES_DIR BIN_DIR [RUNS]   (RUNS >= 1, default 5)

Two release `psbx serve` on this machine, as tests/tests/nodes.rs runs them:
* the host node: `[cluster] host = "host-a"`, boxes on (TCG, the test
  image, 1 vCPU / 256 MiB, no NIC), the embedded PostgreSQL of its own
  temporary data directory (the throwaway database);
* an API-only node: `PSBX_BOXES__ENABLED=false`, the host node's database
  (`DATABASE_URL` read from its `pg/password` and `postmaster.pid`) and its
  master key (`master_key_file`).
Both link by mutual TLS on loopback (`[cluster] listen`). One box is started
on the host node, with psbx-box-web on port 4000. Each run measures, the two
sides interleaved so that the machine's load falls on both alike:
* the exec round trip: `POST /v1/boxes/{id}/exec` of `true`, CALLS sequential
  calls to each node (one keep-alive connection each, alternating call by
  call): p50 and p99 per node;
* box-URL small GETs (`/status/200`, 2,000 requests over 4 keep-alive
  connections, psbx-box-load) sent to each node's listener with the box URL's
  Host: requests/s, p50 and p99;
and the ratio of each figure, forwarded over owning, within the run (and
for latencies the difference, what the hop adds).
Everything is cleaned up also when the run fails or is killed (SIGTERM,
SIGINT, SIGHUP unwind through `finally`): the box, both processes, the
embedded PostgreSQL, the box's domain and the temporary directories.
"""

import glob
import http.client
import io
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from boxes import UNIT, report  # noqa: E402

PSBX, IMAGES, BIN = sys.argv[1], sys.argv[2], sys.argv[3]
RUNS = max(1, int(sys.argv[4]) if len(sys.argv) > 4 else 5)
CALLS = int(os.environ.get("PSBX_BENCH_CALLS", "100"))
PORT = 4000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(samples, q):
    """The nearest-rank percentile (as psbx-box-load computes its own)."""
    ordered = sorted(samples)
    return ordered[max(1, min(len(ordered), math.ceil(len(ordered) * q))) - 1]


class Node:
    """One `psbx serve` on loopback, with a temporary directory of its own
    (config, data, its stderr in `log`)."""

    def __init__(self, name):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix=f"psbx-bench-nodes-{name}-")
        os.chmod(self.dir, 0o755)
        self.data_dir = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "stderr.log")
        self.log = open(self.log_path, "w")
        self.proc, self.conn = None, None

    def start(self, config, env=None):
        config_file = os.path.join(self.dir, "psbx.toml")
        with open(config_file, "w") as f:
            f.write(config)
        full_env = dict(os.environ)
        full_env.pop("DATABASE_URL", None)
        full_env.setdefault("RUST_LOG", "info")
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [PSBX, "--config", config_file, "--data-dir", self.data_dir,
             "serve", "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=full_env)
        self.url = None
        self.banner = ""
        for line in self.proc.stdout:
            self.banner += line
            if line.startswith("psbx is listening on "):
                self.url = line.split()[-1]
                break
        if self.url is None:
            raise SystemExit(f"node {name} did not start:\n{self.banner}\n{self.tail()}")
        # The rest of stdout is not read: nothing more is printed there.
        self.port = int(self.url.rsplit(":", 1)[1].strip("/"))
        return self

    def tail(self, lines=20):
        """Its log's warnings and errors, and its last lines."""
        try:
            with open(self.log_path) as f:
                log = f.readlines()
        except OSError:
            return ""
        bad = [line for line in log[:-lines] if " WARN " in line or " ERROR " in line]
        return "".join(bad[-lines:] + ["...\n"] + log[-lines:])

    def fresh(self):
        """Drops its kept-alive connection (the next call opens one)."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def call(self, method, path, key, body=None, timeout=600):
        """One API call on this node's keep-alive connection: (seconds,
        status, answer)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
        for attempt in (1, 2):
            reused = self.conn is not None
            if not reused:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            started = time.monotonic()
            try:
                self.conn.request(method, path, body=data, headers=headers)
                res = self.conn.getresponse()
                raw = res.read()
                break
            except (OSError, http.client.HTTPException) as e:
                self.conn.close()
                self.conn = None
                # A kept-alive connection the server closed while it sat idle
                # (its keep-alive time): once more on a new one.
                closed = isinstance(e, (BrokenPipeError, ConnectionResetError,
                                        http.client.RemoteDisconnected))
                if not (reused and closed and attempt == 1):
                    raise
        took = time.monotonic() - started
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = raw.decode(errors="replace")
        return took, res.status, answer

    def ok(self, method, path, key, body=None):
        took, status, answer = self.call(method, path, key, body)
        if status >= 300:
            raise SystemExit(f"{self.name}: {method} {path} answered {status}: {answer}")
        return took, answer

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.conn is not None:
            self.conn.close()
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def database_url(data_dir):
    """The URL of the embedded PostgreSQL a node runs under `data_dir`."""
    pg = os.path.join(data_dir, "pg")
    with open(os.path.join(pg, "password")) as f:
        password = f.read().strip()
    with open(os.path.join(pg, "data", "postmaster.pid")) as f:
        port = f.read().splitlines()[3].strip()
    return f"postgres://psbx:{password}@127.0.0.1:{port}/psbx"


def stop_embedded_pg(data_dir):
    """Stops the embedded PostgreSQL under `data_dir` if its node left it
    running (a node that died)."""
    data = os.path.join(data_dir, "pg", "data")
    if not os.path.exists(os.path.join(data, "postmaster.pid")):
        return
    pg_ctl = shutil.which("pg_ctl") or next(iter(sorted(glob.glob(
        "/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)), None)
    if pg_ctl is None:
        print(f"cleanup: no pg_ctl to stop {data}", file=sys.stderr)
        return
    cmd = [pg_ctl, "stop", "-m", "immediate", "-w", "-D", data]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    subprocess.run(cmd, capture_output=True)


def destroy_domain(box_id):
    """Removes the box's domain if its node could not (a node that died)."""
    name = f"psbx-{box_id}"
    virsh = ["virsh", "-q", "-c", "qemu:///system"]
    if subprocess.run([*virsh, "domstate", name], capture_output=True).returncode != 0:
        return
    print(f"cleanup: removing the domain {name} left behind", file=sys.stderr)
    subprocess.run([*virsh, "destroy", name], capture_output=True)
    subprocess.run([*virsh, "undefine", "--managed-save", "--nvram", name], capture_output=True)
    subprocess.run([*virsh, "undefine", name], capture_output=True)


def upload_tools(node, key, box_id):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("psbx-box-web", "psbx-box-load"):
            tar.add(os.path.join(BIN, name), arcname=name)
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=600)
    conn.request("POST", f"/v1/boxes/{box_id}/sync?dest=tools", body=buf.getvalue(),
                 headers={"Authorization": "Bearer " + key})
    res = conn.getresponse()
    body = res.read()
    conn.close()
    if res.status != 200:
        raise SystemExit(f"sync answered {res.status}: {body!r}")


def load(node, host):
    out = subprocess.run([os.path.join(BIN, "psbx-box-load"), "get",
                          f"http://127.0.0.1:{node.port}/status/200", "--host", host],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"psbx-box-load through {node.name} failed: {out.stderr.strip()}")
    r = json.loads(out.stdout)
    if r["errors"]:
        raise SystemExit(f"box-URL GETs through {node.name}: {r}")
    return r


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    print(f"# scripts/bench nodes {RUNS}: TCG, box = 1 vCPU / 256 MiB, test image, "
          f"{CALLS} exec calls per node per run, psbx-box-web on port {PORT}; "
          f"{os.cpu_count()} CPUs, load average {loadavg()}", flush=True)
    nodes, box_id, key, failed = [], None, None, True
    try:
        cluster = '[cluster]\nhost = "{host}"\nlisten = "127.0.0.1:{port}"\n'
        a = Node("host")
        nodes.append(a)
        a.start(f'[boxes]\naccel = "tcg"\nimages_dir = "{IMAGES}"\nimage = "test"\n'
                f'network = false\n{UNIT}pool_size = 0\nidle_freeze = "1h"\n'
                + cluster.format(host="host-a", port=free_port()))
        key = re.search(r"psbx_[a-z0-9]+", a.banner).group(0)
        b = Node("api")
        nodes.append(b)
        b.start(f'master_key_file = "{os.path.join(a.data_dir, "master.key")}"\n'
                + cluster.format(host="api", port=free_port()),
                {"DATABASE_URL": database_url(a.data_dir), "PSBX_BOXES__ENABLED": "false"})

        _, box = a.ok("POST", "/v1/boxes", key, {"name": "bench-nodes"})
        box_id = box["id"]
        assert box["state"] == "running", box
        upload_tools(a, key, box_id)
        a.ok("POST", f"/v1/boxes/{box_id}/exec", key,
             {"cmd": f"/work/tools/psbx-box-web --port {PORT}", "background": True})
        time.sleep(2)
        # The box URL's host (`box-<id>-<key>.<box domain>[:port]`) for the
        # port, sent to each node's own listener.
        label, domain = box["url"].split("://")[1].split("/")[0].split(":")[0].split(".", 1)
        hosts = {n.name: f"{label}-{PORT}.{domain}:{n.port}" for n in nodes}

        exec_path = f"/v1/boxes/{box_id}/exec"
        for n in nodes:  # warm: the shell's caches, the peer link, the box's URL slot
            for _ in range(3):
                _, done = n.ok("POST", exec_path, key, {"cmd": "true"})
                assert done["exitCode"] == 0, done
            load(n, hosts[n.name])

        names = ("exec_p50", "exec_p99", "url_rps", "url_p50", "url_p99")
        figures = {(f, n.name): [] for f in names for n in nodes}
        for run in range(RUNS):
            times = {n.name: [] for n in nodes}
            for n in nodes:
                n.fresh()
            for i in range(CALLS):
                for n in (nodes if (i + run) % 2 == 0 else nodes[::-1]):
                    took, done = n.ok("POST", exec_path, key, {"cmd": "true"})
                    assert done["exitCode"] == 0, done
                    times[n.name].append(took * 1000)
            for n in nodes:
                figures[("exec_p50", n.name)].append(percentile(times[n.name], 0.50))
                figures[("exec_p99", n.name)].append(percentile(times[n.name], 0.99))
            for n in (nodes if run % 2 == 0 else nodes[::-1]):
                r = load(n, hosts[n.name])
                figures[("url_rps", n.name)].append(r["rps"])
                figures[("url_p50", n.name)].append(r["p50Ms"])
                figures[("url_p99", n.name)].append(r["p99Ms"])
            print(f"  run {run + 1} of {RUNS} done, load average {loadavg()}", flush=True)

        labels = {"exec_p50": ("exec p50", "ms"), "exec_p99": ("exec p99", "ms"),
                  "url_rps": ("box URL GETs/s", "/s"),
                  "url_p50": ("box URL GET p50", "ms"), "url_p99": ("box URL GET p99", "ms")}
        for f in names:
            label, unit = labels[f]
            own, fwd = figures[(f, "host")], figures[(f, "api")]
            report(f"{label}, owning", own, unit)
            report(f"{label}, forwarded", fwd, unit)
            report("  ratio forwarded/owning", [y / x for x, y in zip(own, fwd)], "x")
            if unit == "ms":
                report("  forwarded - owning", [y - x for x, y in zip(own, fwd)], "ms")
        failed = False
    finally:
        if failed:
            for n in nodes:
                print(f"--- last lines of the {n.name} node's log ---\n{n.tail()}",
                      file=sys.stderr)
        # Every box of the host node (a node stopped cleanly leaves its boxes
        # running), then the nodes, then what a node that died left behind.
        ids = {box_id} - {None}
        if key is not None and nodes[0].alive():
            try:
                nodes[0].fresh()  # a call cut short may have left its connection mid-request
                _, status, listed = nodes[0].call("GET", "/v1/boxes?limit=200", key, timeout=60)
                for listed_box in listed["boxes"] if status == 200 else []:
                    ids.add(listed_box["id"])
                    if listed_box["state"] not in ("stopped", "failed"):
                        nodes[0].call("DELETE", f"/v1/boxes/{listed_box['id']}", key, timeout=120)
            except Exception as e:  # the node may be gone already
                print(f"cleanup: {e}", file=sys.stderr)
        for n in reversed(nodes):  # the API-only node first: it uses the other's database
            n.stop()
        if nodes:
            stop_embedded_pg(nodes[0].data_dir)
        for each in ids:
            destroy_domain(each)
        for n in nodes:
            shutil.rmtree(n.dir, ignore_errors=True)


if __name__ == "__main__":
    # A killed benchmark unwinds through the `finally` clause too.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(1))
    main()
