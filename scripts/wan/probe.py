#!/usr/bin/env python3
"""Measures an emulated WAN from inside its namespaces (scripts/wan/emulate.sh runs it).

  probe.py serve PORT                       answers pings, swallows streams (until killed)
  probe.py rtt HOST PORT [--count N]        median/p10/p90 round trip of 1-byte pings, in ms
  probe.py stream HOST PORT MB CONNECTIONS  sends MB megabytes split over CONNECTIONS TCP
                                            connections at once; prints the rate in Mbit/s
Each prints one JSON object on stdout.
"""
import json
import socket
import statistics
import sys
import threading
import time

PING, STREAM = b"p", b"s"


def serve(port):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(64)

    def handle(conn):
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            kind = conn.recv(1)
            if kind == PING:
                while conn.recv(1):
                    conn.sendall(b"x")
            elif kind == STREAM:
                while True:
                    chunk = conn.recv(1 << 20)
                    if not chunk:
                        break
                    if chunk.endswith(b"\x01"):  # the sender's last byte: acknowledge the whole stream
                        conn.sendall(b"k")

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def connect(host, port, kind):
    for _ in range(100):
        try:
            s = socket.create_connection((host, port), timeout=30)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(kind)
            return s
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"probe.py: cannot connect to {host}:{port}")


def rtt(host, port, count):
    s = connect(host, port, PING)
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        s.sendall(b"x")
        if not s.recv(1):
            raise SystemExit("probe.py: the server closed the connection")
        samples.append((time.perf_counter() - t0) * 1e3)
    s.close()
    samples = samples[1:] or samples  # the first includes the connection's own start
    q = statistics.quantiles(samples, n=10) if len(samples) > 1 else samples * 9
    print(json.dumps({"rtt_ms_median": statistics.median(samples), "rtt_ms_p10": q[0], "rtt_ms_p90": q[-1],
                      "samples": len(samples)}))


def stream(host, port, megabytes, connections):
    total = int(megabytes * 1e6)
    share = total // connections
    socks = [connect(host, port, STREAM) for _ in range(connections)]
    payload = b"\x00" * share

    def send(s):
        s.sendall(payload[:-1] + b"\x01")
        s.recv(1)  # the server has it all

    threads = [threading.Thread(target=send, args=(s,)) for s in socks]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    for s in socks:
        s.close()
    print(json.dumps({"mbit_per_s": share * connections * 8 / seconds / 1e6, "seconds": seconds,
                      "connections": connections, "megabytes": share * connections / 1e6}))


def main(argv):
    if len(argv) >= 2 and argv[1] == "serve":
        serve(int(argv[2]))
    elif len(argv) >= 4 and argv[1] == "rtt":
        count = int(argv[5]) if len(argv) > 5 and argv[4] == "--count" else 50
        rtt(argv[2], int(argv[3]), count)
    elif len(argv) == 6 and argv[1] == "stream":
        stream(argv[2], int(argv[3]), float(argv[4]), int(argv[5]))
    else:
        sys.stderr.write(__doc__)
        raise SystemExit(2)


if __name__ == "__main__":
    main(sys.argv)
