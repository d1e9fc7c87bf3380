"""A tiny authoritative DNS server for tests: UDP and TCP on ADDR:53, A records
from a JSON map {name: address} given as argv[2]; NXDOMAIN for every other
name, NOERROR with no answer for other types of a known name. Standard
library only. Each query it gets is appended to argv[3] (one name a line), so
a test can tell which names reached it."""
import json, socket, struct, sys, threading

ADDR, RECORDS, LOG = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
RECORDS = {k.lower().rstrip("."): v for k, v in RECORDS.items()}
lock = threading.Lock()


def answer(query):
    ident, flags, qd = struct.unpack(">HHH", query[:6])
    pos, labels = 12, []
    while query[pos]:
        n = query[pos]
        labels.append(query[pos + 1 : pos + 1 + n].decode("ascii", "replace"))
        pos += 1 + n
    qtype, qclass = struct.unpack(">HH", query[pos + 1 : pos + 5])
    question = query[12 : pos + 5]
    name = ".".join(labels).lower()
    with lock, open(LOG, "a") as f:
        f.write(name + "\n")
    rd = flags & 0x0100
    if name not in RECORDS:
        return struct.pack(">HHHHHH", ident, 0x8403 | rd, 1, 0, 0, 0) + question
    if qtype != 1:
        return struct.pack(">HHHHHH", ident, 0x8400 | rd, 1, 0, 0, 0) + question
    rr = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 30, 4) + socket.inet_aton(RECORDS[name])
    return struct.pack(">HHHHHH", ident, 0x8400 | rd, 1, 1, 0, 0) + question + rr


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ADDR, 53))
    while True:
        data, peer = s.recvfrom(4096)
        try:
            s.sendto(answer(data), peer)
        except Exception as e:  # a malformed query: no answer
            print("dns_server:", e, file=sys.stderr)


def tcp():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ADDR, 53))
    s.listen(16)
    while True:
        c, _ = s.accept()
        try:
            (n,) = struct.unpack(">H", c.recv(2))
            a = answer(c.recv(n))
            c.sendall(struct.pack(">H", len(a)) + a)
        except Exception as e:
            print("dns_server:", e, file=sys.stderr)
        c.close()


threading.Thread(target=tcp, daemon=True).start()
print("ready", flush=True)
udp()
