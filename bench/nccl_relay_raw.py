#!/usr/bin/env python3
"""The raw TCP peer of bench/nccl_relay.sh: the relay's traffic for a two-rank AllReduce of SIZE
bytes per rank, with no gpool code. Two peer processes (the two servers) on loopback; per
operation the client asks each for SIZE bytes and receives them (the reads), then sends each
SIZE bytes and waits for a one-byte answer (the writes and the streams' synchronize). Prints the
median microseconds of REPS operations after one warm-up. Usage: nccl_relay_raw.py SIZE REPS"""
import os
import socket
import statistics
import sys
import time


def recv_exact(sock, view):
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise SystemExit("nccl_relay_raw: peer closed")
        got += n


def peer(listener, size):
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = bytearray(size)
    view = memoryview(data)
    cmd = bytearray(1)
    while True:
        if conn.recv_into(cmd) == 0:
            os._exit(0)
        if cmd[0] == ord("D"):
            conn.sendall(view)
        else:
            recv_exact(conn, view)
            conn.sendall(b"k")


def main():
    size, reps = int(sys.argv[1]), int(sys.argv[2])
    socks, kids = [], []
    for _ in range(2):
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        pid = os.fork()
        if pid == 0:
            peer(ls, size)
        kids.append(pid)
        s = socket.create_connection(ls.getsockname())
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ls.close()
        socks.append(s)
    bufs = [memoryview(bytearray(size)) for _ in socks]
    out = memoryview(bytearray(size))
    ack = bytearray(1)
    times = []
    for i in range(reps + 1):
        t0 = time.perf_counter()
        for s, b in zip(socks, bufs):
            s.sendall(b"D")
            recv_exact(s, b)
        for s in socks:
            s.sendall(b"U")
            s.sendall(out)
        for s in socks:
            recv_exact(s, memoryview(ack))
        if i:
            times.append((time.perf_counter() - t0) * 1e6)
    for s in socks:
        s.close()
    for k in kids:
        os.waitpid(k, 0)
    print(f"{statistics.median(times):.1f}")


if __name__ == "__main__":
    main()
