"""A TCP relay for tests: accepts on LISTEN_ADDR:LISTEN_PORT and pipes each
connection both ways to TARGET_ADDR:TARGET_PORT, so that programs in a test's
network namespace reach a server on the host by a loopback URL (what OAuth
clients accept over plain http). Prints "ready" once it listens. Standard
library only."""
import socket, sys, threading

LISTEN, LPORT, TARGET, TPORT = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(client):
    try:
        upstream = socket.create_connection((TARGET, TPORT), timeout=10)
        upstream.settimeout(None)
    except OSError:
        client.close()
        return
    back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
    back.start()
    pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((LISTEN, LPORT))
s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
