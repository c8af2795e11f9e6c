"""The peer of the GPU benchmarks: torch's device-to-device copy.

Prints one JSON line: the bandwidth of dst.copy_(src) for tensors of
--size-mb MiB on cuda:--device, timed with CUDA events over --iters copies
after a warm-up (bytes copied per second, each byte counted once, as
xfer bench counts an operation's bytes).
"""
import argparse
import json

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size-mb", type=int, default=256)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--device", type=int, default=0)
    a = p.parse_args()
    dev = torch.device("cuda", a.device)
    n = a.size_mb << 20
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    for _ in range(5):
        dst.copy_(src)
    torch.cuda.synchronize(dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.iters):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize(dev)
    sec = start.elapsed_time(end) / 1000
    assert torch.equal(src, dst)
    print(json.dumps({"peer": "torch copy_ cuda->cuda", "size_bytes": n, "ops": a.iters,
                      "seconds": sec, "bytes_per_sec": n * a.iters / sec}))


if __name__ == "__main__":
    main()
