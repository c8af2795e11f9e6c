#!/usr/bin/env python3
"""One Python measurement for tools/bench/python.py: what
BenchmarkPutGetTensor64M (connector/bench_test.go) does in Go, through the
Python binding: a 64 MiB F32 torch tensor, every page written, put by a
sender (a copy into the pool), got by a receiver with the metadata put
returned (a tensor on the receiver's pool, no copy) and released, ITERS
times after one warm-up.
Prints one JSON object: bytes_per_sec; python_peak_alloc_bytes,
tracemalloc's peak over one put+get (what the Python allocator saw); and
get_copied_bytes, the bytes the get copied in Python: 0 when the tensor it
returns is a view of the receiver's pool buffer (its data pointer is the
buffer's address), the size otherwise. With --latency-iters N it then
times N put+gets of a 4 KiB tensor one by one, as BenchmarkPutGet4K does
in Go, and adds their p50, p99 and p99.9 in µs (latency_4k)."""

import argparse
import json
import os
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402

import xfer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--size-mb", type=int, default=64)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--latency-iters", type=int, default=0, help="4 KiB put+gets to time one by one (0: none)")
    ap.add_argument("--wait-spin", help="the receiver's wait_spin (a duration; default: the library's)")
    a = ap.parse_args()
    size = a.size_mb << 20
    pool = 2 * size + (16 << 20)
    s = xfer.Connector({"role": "sender", "protocol": a.transport, "memory_pool_size": pool, "wait_for_memory": True})
    port = int(s.address.rsplit(":", 1)[1])
    r = xfer.Connector({"role": "receiver", "protocol": a.transport, "memory_pool_size": pool, "wait_for_memory": True,
                        "sender_host": "127.0.0.1", "sender_zmq_port": port,
                        "engine": {"wait_spin": a.wait_spin} if a.wait_spin else None})
    t = torch.zeros((16, size // 16 // 4), dtype=torch.float32)
    t.view(-1).view(torch.uint8).copy_(torch.arange(size, dtype=torch.int64).to(torch.uint8))  # every page written, as in Go

    def once(i):
        ok, _, meta = s.put("a", "b", f"t{i}", t)
        assert ok
        got, n = r.get("a", "b", f"t{i}", meta)
        assert n == size
        del got  # the receiver's buffer goes back to its pool

    once(-1)
    # What get does (get_buffer, then value_of), with the buffer in hand:
    # is the tensor the pool's memory, or a copy of it?
    _, _, meta = s.put("a", "b", "view", t)
    buf = r.get_buffer("a", "b", "view", meta)
    got = r.value_of(buf)
    copied = 0 if got.data_ptr() == buf.address and got.numel() * got.element_size() == size else size
    del got, buf
    tracemalloc.start()
    once(-2)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    t0 = time.perf_counter()
    for i in range(a.iters):
        once(i)
    secs = time.perf_counter() - t0
    out = {"bytes_per_sec": size * a.iters / secs, "python_peak_alloc_bytes": peak,
           "get_copied_bytes": copied, "bytes": size}
    if a.latency_iters > 0:
        out["latency_4k"] = latency_4k(s, r, a.latency_iters)
    s.close()
    r.close()
    print(json.dumps(out))


def latency_4k(s, r, iters):
    """The p50, p99 and p99.9 in µs of iters put+gets of one 4 KiB key, each
    timed from the put's call to the get's tensor being dropped (the Go
    benchmark's span: Put, Get, Release), after a warm-up."""
    t = torch.arange(1024, dtype=torch.float32)
    lat = []
    for i in range(-100, iters):
        t0 = time.perf_counter()
        ok, _, meta = s.put("a", "b", "k4", t)
        assert ok
        got, n = r.get("a", "b", "k4", meta)
        assert n == 4096
        del got
        if i >= 0:
            lat.append((time.perf_counter() - t0) * 1e6)
    lat.sort()

    def q(f):
        return lat[min(len(lat) - 1, int(f * len(lat)))]
    return {"p50_us": q(0.50), "p99_us": q(0.99), "p999_us": q(0.999)}


if __name__ == "__main__":
    main()
