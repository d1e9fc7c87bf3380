"""A TCP listener for network tests: on ADDR:PORT it greets every connection
with GREETING and a newline, then closes it, and appends one line per
accepted connection (the peer) to LOG, so a test can tell whether anything
reached it. Standard library only."""
import socket, sys

ADDR, PORT, LOG, GREETING = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ADDR, PORT))
s.listen(64)
print("ready", flush=True)
while True:
    c, peer = s.accept()
    with open(LOG, "a") as f:
        f.write("%s:%d\n" % peer)
    try:
        c.sendall(GREETING.encode() + b"\n")
    except OSError:
        pass
    c.close()
