"""Transfers for the link tests: ``serve PORT N`` drains N connections; ``send HOST PORT BYTES K`` sends
BYTES on each of K connections at once and prints each one's seconds (to the server's receipt) as JSON."""

import json
import socket
import sys
import threading
import time


def serve(port: int, n: int) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(n)
    print("ready", flush=True)

    def drain(conn: socket.socket) -> None:
        while conn.recv(1 << 20):
            pass
        conn.sendall(b"k")  # receipt: everything arrived
        conn.close()

    threads = []
    for _ in range(n):
        conn, _ = s.accept()
        threads.append(threading.Thread(target=drain, args=(conn,)))
        threads[-1].start()
    for t in threads:
        t.join()


def send(host: str, port: int, nbytes: int, k: int) -> None:
    seconds = [0.0] * k
    chunk = b"x" * (1 << 16)

    def one(i: int) -> None:
        conn = socket.create_connection((host, port))
        start, left = time.perf_counter(), nbytes
        while left > 0:
            conn.sendall(chunk[:min(left, len(chunk))])
            left -= len(chunk)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)
        seconds[i] = time.perf_counter() - start
        conn.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(seconds))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), int(sys.argv[3]))
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
