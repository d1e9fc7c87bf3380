"""scripts/bench tunnel: the path from a box to the user's network, on loopback,
against a direct connection and against rathole 0.5 (tcp and websocket
transports), all on this machine.

usage: tunnel.py TUNNEL_ENTRY PSBX_CONNECTOR RATHOLE [RUNS]   (default 5)

Setups, all on 127.0.0.1, each client → entry → tunnel → target:
  direct       iperf3/sockperf client → server
  psbx         → tunnel_entry's hub entry (server/examples/tunnel_entry.rs: the
                 server's app and connector hub) → WebSocket wire session →
                 the real psbx-connector (2 sessions, its default) → server
  psbx+link    the same, entered as a box's stream: a wire session over a
                 Unix socket pair standing for the box link → the server's
                 router (environment lookup, egress) → hub → connector
  rathole tcp  → rathole server's service port → rathole client → server
  rathole ws   the same over rathole's websocket transport (tls = false)

Figures: iperf3 throughput (1 and 16 streams, forward and -R), sockperf
64-byte TCP ping-pong round trip (p50, p99), CPU seconds of the tunnel's own
processes per GB moved in the bulk runs, and the RSS of the connector (and of
the rathole client) idle and holding 1,000 open streams. Each figure is
measured RUNS times, the setups interleaved within each run; the median, min
and max are printed. PSBX_BENCH_SECONDS sets the length of each iperf3 and
sockperf run (default 5). PSBX_BENCH_SETUPS (comma-separated setup names,
e.g. "psbx+link") runs the throughput and latency part for those setups only
and skips the memory part: for chasing one setup's failures. A failed iperf3
run prints the last lines of the tunnel's logs.
"""

import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ENTRY, CONNECTOR, RATHOLE = sys.argv[1], sys.argv[2], sys.argv[3]
RUNS = max(1, int(sys.argv[4]) if len(sys.argv) > 4 else 5)
SECONDS = int(os.environ.get("PSBX_BENCH_SECONDS", "5"))
ONLY = [n for n in os.environ.get("PSBX_BENCH_SETUPS", "").split(",") if n]
HOLD = 1000
LOCAL = "127.0.0.1"
CLK = os.sysconf("SC_CLK_TCK")

procs = []          # everything started here, stopped in reverse order
work = tempfile.mkdtemp(prefix="psbx-bench-tunnel-")
os.chmod(work, 0o755)   # the embedded cluster's user passes through it


def free_port():
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return s.getsockname()[1]


def start(argv, log, **kw):
    out = open(os.path.join(work, log), "w")
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, **kw)
    procs.append(p)
    return p


def wait_port(port, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection((LOCAL, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on {LOCAL}:{port} after {timeout}s")


def wait_for(what, check, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if check():
            return
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])   # utime, stime
    return total / CLK


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for {pid}")


# --- targets -----------------------------------------------------------------

class Hold:
    """Accepts connections and keeps them open, counting them."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind((LOCAL, 0))
        self.sock.listen(2048)
        self.port = self.sock.getsockname()[1]
        self.held, self.lock = [], threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.held.append(conn)

    def count(self):
        with self.lock:
            return len(self.held)

    def drop(self):
        with self.lock:
            for c in self.held:
                c.close()
            self.held.clear()


# --- tunnels -----------------------------------------------------------------

class Psbx:
    def __init__(self, targets):
        self.entry = subprocess.Popen(
            [ENTRY, os.path.join(work, "psbx-data")], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=open(os.path.join(work, "entry.log"), "w"),
            text=True)
        procs.append(self.entry)
        said = {}
        while len(said) < 3:
            line = self.entry.stdout.readline()
            if not line:
                raise SystemExit("tunnel_entry ended early; see entry.log:\n"
                                 + open(os.path.join(work, "entry.log")).read())
            word, _, value = line.strip().partition(" ")
            said[word] = value
        self.url, self.key, account = said["url"], said["key"], said["account"]
        self.call("POST", "/v1/environments", {"name": "bench"})
        conn = self.call("POST", "/v1/environments/bench/connections", {"name": "loopback"})
        self.call("PUT", f"/v1/environments/bench/connections/{conn['id']}/endpoints",
                  {"endpoints": [{"host": LOCAL, "port": p} for p in targets.values()]})
        self.token = conn["token"]
        self.connector = None
        self.start_connector(2)
        self.hub = {name: self.command(f"hub {conn['id']} loopback {LOCAL}:{port}")
                    for name, port in targets.items()}
        self.link = {name: self.command(f"box {account} bench {LOCAL}:{port}")
                     for name, port in targets.items()}

    @property
    def pids(self):
        return [self.entry.pid, self.connector.pid]

    def start_connector(self, sessions):
        """(Re)starts the connector with that many sessions (PSBX_SESSIONS)."""
        if self.connector is not None:
            self.connector.terminate()
            self.connector.wait(timeout=30)
            wait_for("the old connector's sessions to end", lambda: self.sessions() == 0)
        env = dict(os.environ, PSBX_CONNECTOR_TOKEN=self.token, PSBX_URL=self.url,
                   PSBX_SESSIONS=str(sessions), RUST_LOG="warn")
        self.connector = start([CONNECTOR], f"connector-{sessions}.log", env=env)
        self.logs = ["entry.log", f"connector-{sessions}.log"]
        wait_for(f"the connector's {sessions} sessions", lambda: self.sessions() == sessions)

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": "Bearer " + self.key, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as res:
            return json.load(res)

    def sessions(self):
        return self.call("GET", "/v1/environments/bench")["connections"][0]["sessions"]

    def command(self, line):
        self.entry.stdin.write(line + "\n")
        self.entry.stdin.flush()
        answer = self.entry.stdout.readline().split()
        if answer[:1] != ["entry"]:
            raise SystemExit(f"tunnel_entry: {line!r}: {' '.join(answer)}")
        return int(answer[1])

    def stop(self):
        self.connector.terminate()
        self.connector.wait(timeout=30)
        self.entry.stdin.close()   # stops the app and the embedded cluster
        self.entry.wait(timeout=120)


class Rathole:
    def __init__(self, transport, targets):
        control = free_port()
        self.ports = {name: free_port() for name in targets}
        ws = "[{side}.transport.websocket]\ntls = false\n" if transport == "websocket" else ""
        server = (f'[server]\nbind_addr = "{LOCAL}:{control}"\n'
                  f'[server.transport]\ntype = "{transport}"\n' + ws.format(side="server"))
        client = (f'[client]\nremote_addr = "{LOCAL}:{control}"\n'
                  f'[client.transport]\ntype = "{transport}"\n' + ws.format(side="client"))
        for name, port in targets.items():
            server += (f'[server.services.{name}]\ntoken = "bench"\n'
                       f'bind_addr = "{LOCAL}:{self.ports[name]}"\n')
            client += (f'[client.services.{name}]\ntoken = "bench"\n'
                       f'local_addr = "{LOCAL}:{port}"\n')
        for side, text in (("server", server), ("client", client)):
            with open(os.path.join(work, f"rathole-{transport}-{side}.toml"), "w") as f:
                f.write(text)
        env = dict(os.environ, RUST_LOG="info")
        self.server = start([RATHOLE, "--server", os.path.join(work, f"rathole-{transport}-server.toml")],
                            f"rathole-{transport}-server.log", env=env)
        wait_port(control)
        self.client = start([RATHOLE, "--client", os.path.join(work, f"rathole-{transport}-client.toml")],
                            f"rathole-{transport}-client.log", env=env)
        log = os.path.join(work, f"rathole-{transport}-client.log")
        wait_for(f"rathole {transport} control channels",
                 lambda: open(log).read().count("Control channel established") >= len(targets))
        for port in self.ports.values():   # the server binds a service once its client is up
            wait_port_bound(port)
        self.pids = [self.server.pid, self.client.pid]
        self.logs = [f"rathole-{transport}-server.log", f"rathole-{transport}-client.log"]

    def stop(self):
        for p in (self.client, self.server):
            p.terminate()
            p.wait(timeout=30)


def wait_port_bound(port, timeout=30):
    """Waits until something listens on the port, without connecting to it."""
    end = time.time() + timeout
    hexport = f"{port:04X}"
    while time.time() < end:
        with open("/proc/net/tcp") as f:
            if any(l.split()[1].endswith(":" + hexport) and l.split()[3] == "0A" for l in f.readlines()[1:]):
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on {LOCAL}:{port} after {timeout}s")


# --- measurements ------------------------------------------------------------

def iperf(port, streams, reverse, pids, server_port):
    argv = ["iperf3", "-c", LOCAL, "-p", str(port), "-t", str(SECONDS), "-P", str(streams), "-J"]
    if reverse:
        argv.append("-R")
    for _ in range(20):
        # iperf3's server closes its listening socket after each test and
        # opens a new one: a tunnel dialing it in between gets refused or
        # reset, and the client (whose connection the entry accepted) sees
        # its control connection reset. Start only once it listens again.
        wait_port_bound(server_port)
        before = cpu_seconds(pids) if pids else 0
        out = subprocess.run(argv, capture_output=True, text=True, timeout=SECONDS + 60)
        cpu = cpu_seconds(pids) - before if pids else None
        result = json.loads(out.stdout)
        # Through a tunnel the server may still be closing the previous test.
        if "busy" not in result.get("error", ""):
            break
        time.sleep(0.5)
    if "error" in result:
        return result["error"], None
    received = result["end"]["sum_received"]
    gbits = received["bits_per_second"] / 1e9
    gb = received["bytes"] / 1e9
    return gbits, (cpu / gb if cpu is not None else None)


def sockperf(port):
    out = subprocess.run(["sockperf", "ping-pong", "--tcp", "-i", LOCAL, "-p", str(port),
                          "-m", "64", "-t", str(SECONDS), "--full-rtt"],
                         capture_output=True, text=True, timeout=SECONDS + 60)
    found = dict(re.findall(r"percentile (50|99)\.000 =\s*([\d.]+)", out.stdout))
    if set(found) != {"50", "99"}:
        raise SystemExit(f"sockperf on port {port}: no percentiles\n{out.stdout}{out.stderr}")
    return float(found["50"]), float(found["99"])


def open_streams(port, hold):
    """Opens HOLD connections through port; returns them and how many of them
    reached the hold server once that number stopped growing."""
    clients = [socket.create_connection((LOCAL, port), timeout=10) for _ in range(HOLD)]
    seen, still = -1, 0
    while still < 25 and hold.count() < HOLD:   # 5 s without a new one
        time.sleep(0.2)
        still = still + 1 if hold.count() == seen else 0
        seen = hold.count()
    return clients, hold.count()


def close_streams(clients, hold):
    for c in clients:
        c.close()
    hold.drop()
    time.sleep(5)   # let the streams close before the next measure


def hold_rss(name, port, pid, hold):
    """RSS of pid idle, then with HOLD streams open through port to hold."""
    idle = rss_mib(pid)
    clients, held = open_streams(port, hold)
    try:
        if held < HOLD:
            print(f"# {name}: only {held} of {HOLD} streams reached the target", flush=True)
        time.sleep(1)
        busy = rss_mib(pid)
    finally:
        close_streams(clients, hold)
    return idle, busy, held


# --- report ------------------------------------------------------------------

def cell(samples, fmt):
    if not samples:
        return "—"
    med = statistics.median(samples)
    return f"{fmt.format(med)} ({fmt.format(min(samples))}–{fmt.format(max(samples))})"


def machine():
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cores, Linux {platform.release()}"


def versions():
    out = subprocess.run([RATHOLE, "--version"], capture_output=True, text=True).stdout
    rathole = "rathole " + re.search(r"Build Version:\s*(\S+)", out).group(1)
    iperf3 = subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    sp = subprocess.run(["sockperf", "--version"], capture_output=True, text=True)
    sp = (sp.stdout + sp.stderr).split("\n")[0]
    return f"{rathole}; {iperf3}; {sp}"


def show_logs(tunnel, lines=15):
    """The last lines of the logs of the tunnel's processes."""
    for log in getattr(tunnel, "logs", []):
        with open(os.path.join(work, log), errors="replace") as f:
            tail = f.readlines()[-lines:]
        print(f"#   {log}:", flush=True)
        for line in tail:
            print(f"#     {line.rstrip()}", flush=True)


def measure_memory(psbx, setups, hold, add):
    """RSS of the tunnels' clients idle and holding HOLD streams, and how many
    of them reached the target; the connector with its defaults (2 sessions
    of 1,024 streams each), on a fresh process."""
    psbx.start_connector(2)
    for run in range(RUNS):
        for name in ("psbx", "rathole tcp", "rathole ws"):
            ports, tunnel = setups[name]
            pid = tunnel.connector.pid if tunnel is psbx else tunnel.client.pid
            idle, busy, held = hold_rss(name, ports["hold"], pid, hold)
            add(f"streams held of {HOLD}", name, held)
            add("RSS idle (MiB)", name, idle)
            add(f"RSS {HOLD} streams (MiB)", name, busy)
        print(f"run {run + 1}/{RUNS}: memory", flush=True)


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))   # children inherit it
    if hard < 4 * HOLD:
        raise SystemExit(f"the open-files limit ({hard}) is too low for {HOLD} streams")
    print(f"# scripts/bench tunnel {RUNS}: {SECONDS} s per iperf3/sockperf run", flush=True)
    print(f"# machine: {machine()}", flush=True)
    print(f"# {versions()}", flush=True)
    with open("/proc/loadavg") as f:
        print(f"# load average at start: {' '.join(f.read().split()[:3])}", flush=True)

    iperf_port, sockperf_port = free_port(), free_port()
    start(["iperf3", "-s", "-B", LOCAL, "-p", str(iperf_port)], "iperf3.log")
    start(["sockperf", "server", "--tcp", "-i", LOCAL, "-p", str(sockperf_port)], "sockperf.log")
    hold = Hold()
    wait_port_bound(iperf_port)
    wait_port_bound(sockperf_port)
    targets = {"iperf": iperf_port, "sockperf": sockperf_port, "hold": hold.port}

    psbx = Psbx(targets)
    rt = Rathole("tcp", targets)
    rw = Rathole("websocket", targets)
    setups = {   # name → (ports, the tunnel, whose processes are counted)
        "direct": (targets, None),
        "psbx": (psbx.hub, psbx),
        "psbx+link": (psbx.link, psbx),
        "rathole tcp": (rt.ports, rt),
        "rathole ws": (rw.ports, rw),
    }
    unknown = set(ONLY) - set(setups)
    if unknown:
        raise SystemExit(f"PSBX_BENCH_SETUPS: no setup {', '.join(sorted(unknown))}; "
                         f"the setups are {', '.join(setups)}")
    if ONLY:
        setups = {name: setups[name] for name in ONLY}
    results = {}   # (figure, setup) → samples

    def add(figure, setup, value):
        if value is not None:
            results.setdefault((figure, setup), []).append(value)

    try:
        if ONLY:
            print(f"# PSBX_BENCH_SETUPS={','.join(ONLY)}: memory not measured", flush=True)
        else:
            measure_memory(psbx, setups, hold, add)
        psbx.start_connector(2)
        for run in range(RUNS):
            for name, (ports, tunnel) in setups.items():
                pids = tunnel.pids if tunnel else []
                for streams in (1, 16):
                    for reverse in (False, True):
                        way = "reverse" if reverse else "forward"
                        gbits, per_gb = iperf(ports["iperf"], streams, reverse, pids,
                                              iperf_port)
                        if isinstance(gbits, str):   # counted, shown, not fatal
                            print(f"# {name}: iperf3 -P {streams}{' -R' if reverse else ''}: {gbits}",
                                  flush=True)
                            add("iperf3 runs failed", name, 1)
                            show_logs(tunnel)
                            continue
                        add(f"iperf3 {streams:>2} stream{'s' if streams > 1 else ' '} {way} (Gbit/s)", name, gbits)
                        add(f"CPU s/GB {streams:>2} stream{'s' if streams > 1 else ' '} {way}", name, per_gb)
                p50, p99 = sockperf(ports["sockperf"])
                add("64 B round trip p50 (µs)", name, p50)
                add("64 B round trip p99 (µs)", name, p99)
            print(f"run {run + 1}/{RUNS}: throughput and latency", flush=True)
    finally:
        for tunnel in (rw, rt, psbx):
            try:
                tunnel.stop()
            except Exception as e:
                print(f"cleanup: {e}", file=sys.stderr)

    figures = ["iperf3 runs failed"]   # shown when none failed too
    for figure, _ in results:
        if figure not in figures:
            figures.append(figure)
    names = list(setups)
    print()
    print("| figure | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for figure in sorted(figures, key=order):
        fmt = ("{:.2f}" if "Gbit" in figure or "CPU" in figure
               else "{:.0f}" if "held" in figure else "{:.1f}")
        if figure == "iperf3 runs failed":
            row = [str(len(results.get((figure, n), []))) for n in names]
            print(f"| {figure} | " + " | ".join(row) + " |")
            continue
        row = [cell(results.get((figure, n), []), fmt) for n in names]
        print(f"| {figure} | " + " | ".join(row) + " |")
    print(f"\nmedian (min–max) of {RUNS} runs; {machine()}", flush=True)


def order(figure):
    keys = ["iperf3 ", "CPU", "64 B", "RSS", "streams", "iperf3 runs"]
    return (next(i for i, k in enumerate(keys) if figure.startswith(k)), figure)


def cleanup():
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    # tunnel_entry stops its embedded cluster itself; should it have died
    # without doing so, stop the cluster here (SIGINT: fast shutdown).
    pid_file = os.path.join(work, "psbx-data", "pg", "data", "postmaster.pid")
    if os.path.exists(pid_file):
        try:
            pid = int(open(pid_file).readline())
            os.kill(pid, signal.SIGINT)
            for _ in range(300):
                os.kill(pid, 0)
                time.sleep(0.1)
        except (OSError, ValueError):
            pass
    shutil.rmtree(work, ignore_errors=True)


# SIGTERM (a killed benchmark) unwinds through the `finally` clauses too.
def terminated(signum, _frame):
    raise SystemExit(f"stopped by signal {signum}; cleaning up")


signal.signal(signal.SIGTERM, terminated)
try:
    main()
finally:
    cleanup()
