"""python -m xfer.cross_node: one side of a producer/consumer test of the
connector across hosts, with the flags and control channel of `xfer
transfer` (the Go tool): either side may be Python or Go.

Start ``--role producer`` on one host and ``--role consumer`` on the other,
in either order. The producer's engine listens on --local-host:--local-port
and its control channel on --local-host:--ctrl-port; the consumer dials the
control channel at --remote-host:--ctrl-port and gets each tensor from
--remote-host:--remote-port. Each transfer: the producer fills a tensor of
--tensor-size-mb MiB with random bytes (copy: a torch tensor put with a
copy; zerocopy: alloc_tensor, filled in place, put with none), sends its
metadata and MD5 as one JSON line; the consumer gets it, checks the MD5,
releases the buffer and answers. A mismatch makes both sides exit 1. The
control channel's messages are those of xfer._transferctl, which follows
the wire format defined in connector/transferctl/doc.go.

On one host, swap the ports and share --ctrl-port:
  python -m xfer.cross_node --role producer --local-host 127.0.0.1 --remote-host 127.0.0.1 --local-port 15500 --remote-port 15502
  python -m xfer.cross_node --role consumer --local-host 127.0.0.1 --remote-host 127.0.0.1 --local-port 15502 --remote-port 15500
"""

import argparse
import hashlib
import json
import os
import re
import statistics
import struct
import sys
import time

import xfer
from xfer._transferctl import DEFAULT_PORT, GOT, HELLO, PUT, READY, Fail, Msg, connect, serve

FROM, TO = "producer", "consumer"
MiB = 1 << 20


def parse_duration(s):
    """A Go duration ("60s", "1m30s", "500ms") or a number of seconds."""
    try:
        return float(s)
    except ValueError:
        pass
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", s)
    if not parts or "".join(a + b for a, b in parts) != s:
        raise argparse.ArgumentTypeError(f"--timeout {s!r}: want a duration such as 60s, 2m or 500ms")
    return sum(float(a) * units[b] for a, b in parts)


def parser():
    p = argparse.ArgumentParser(prog="python -m xfer.cross_node", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--role", required=True, choices=["producer", "consumer"], help="producer or consumer")
    p.add_argument("--local-host", default=os.environ.get("RDMA_TEST_HOST"),
                   help="this host's address for the data plane and, on the producer, the control channel "
                        "(default $RDMA_TEST_HOST)")
    p.add_argument("--remote-host", help="the other side's address (required on the consumer)")
    p.add_argument("--local-port", type=int, default=15500, help="port this side's engine listens on")
    p.add_argument("--remote-port", type=int, default=15500, help="port of the producer's engine")
    p.add_argument("--ctrl-port", type=int, default=DEFAULT_PORT, help="port of the control channel, on the producer's host")
    p.add_argument("--tensor-size-mb", type=int, default=100, help="size of each tensor in MiB")
    p.add_argument("--num-transfers", type=int, default=3, help="number of transfers")
    p.add_argument("--mode", default="copy", choices=["copy", "zerocopy", "gpu"],
                   help="how the producer makes tensors: copy, zerocopy or gpu")
    p.add_argument("--gpu-id", type=int, default=0, help="GPU index for --mode gpu")
    p.add_argument("--benchmark", action="store_true", help="skip the MD5s: a pure performance run")
    p.add_argument("--dtype", default="f32", choices=["f32", "float32", "u8", "uint8"],
                   help="element type of the producer's tensors")
    p.add_argument("--json", action="store_true", help="print one JSON object per transfer and a summary")
    p.add_argument("--timeout", type=parse_duration, default=60.0,
                   help="how long to wait for the other side, each of its messages, and each get (e.g. 60s)")
    p.add_argument("--out", help="consumer: write the last tensor received to FILE in the safetensors format")
    p.add_argument("--pull", default="auto", choices=["auto", "read", "write"], help="consumer: how a get moves the tensor")
    p.add_argument("--transport", default="auto", choices=["auto", "tcp", "shm", "rdma"], help="transport policy")
    p.add_argument("--memory-mb", type=int, default=0,
                   help="registered pool of this side in MiB (default: twice the tensor plus 16 on the producer, "
                        "the tensor plus 16 on the consumer)")
    p.add_argument("--secret", default=None,
                   help="shared secret of the data plane and the control channel (prefer --secret-file: flags show in ps)")
    p.add_argument("--secret-file", default=None, help="file that holds the shared secret (make one with: xfer secret > FILE)")
    return p


def rate(n, secs):
    return n / secs if secs > 0 else 0.0


def run(args, out=sys.stdout, err=sys.stderr):
    if args.mode == "gpu":
        try:
            import torch
            cuda = torch.cuda.is_available()
        except ImportError:
            cuda = False
        if not cuda:
            raise Fail("--mode gpu: CUDA is not available (torch sees no GPU); "
                       "--mode copy or --mode zerocopy move the same tensors through host memory")
        if not 0 <= args.gpu_id < torch.cuda.device_count():
            raise Fail(f"--gpu-id {args.gpu_id}: this host has {torch.cuda.device_count()} GPU(s)")
    if not 1 <= args.tensor_size_mb <= 256 << 10:
        raise Fail(f"--tensor-size-mb {args.tensor_size_mb}: must be between 1 and {256 << 10}")
    if args.num_transfers < 1:
        raise Fail(f"--num-transfers {args.num_transfers}: must be at least 1")
    if not args.local_host:
        raise Fail("--local-host is required: this host's address for the data plane (or set $RDMA_TEST_HOST)")
    if args.role == "consumer" and not args.remote_host:
        raise Fail("--remote-host is required on the consumer: the producer's address")
    for name in ("local_port", "remote_port", "ctrl_port"):
        if not 1 <= getattr(args, name) <= 65535:
            raise Fail(f"--{name.replace('_', '-')} {getattr(args, name)}: must be between 1 and 65535")
    if args.role == "producer" and args.local_port == args.ctrl_port:
        raise Fail(f"--local-port and --ctrl-port are both {args.ctrl_port}: the producer listens on both, they must differ")
    dtype = "F32" if args.dtype in ("f32", "float32") else "U8"
    esize = 4 if dtype == "F32" else 1
    size = args.tensor_size_mb * MiB
    shape = (args.tensor_size_mb, MiB // esize)
    mb = args.memory_mb or (args.tensor_size_mb + 16 + (args.tensor_size_mb if args.role == "producer" else 0))
    if mb <= args.tensor_size_mb:
        raise Fail(f"--memory-mb {mb}: the pool must hold a tensor of {args.tensor_size_mb} MiB: give at least "
                   f"{args.tensor_size_mb + 1}")
    secret = args.secret or ""
    if args.secret:
        print("xfer cross_node: warning: --secret shows in ps and in the shell's history: use --secret-file or "
              "$XFER_SECRET", file=err, flush=True)
    if args.secret_file:
        try:
            with open(args.secret_file) as f:
                from_file = f.read().strip()
        except OSError as e:
            raise Fail(f"--secret-file: {e}")
        if secret and secret != from_file:
            raise Fail("--secret and --secret-file both given, and differ: use one of them")
        secret = from_file
    secret = secret or os.environ.get("XFER_SECRET", "")
    args.secret = secret
    cfg = {"role": "sender" if args.role == "producer" else "receiver", "host": args.local_host,
           "zmq_port": args.local_port, "protocol": args.transport, "memory_pool_size": mb * MiB,
           "pull": args.pull, "wait_for_memory": True, "get_timeout": args.timeout, "put_timeout": args.timeout,
           "secret": secret or None}
    if args.mode == "gpu":
        cfg["memory_pool_device"] = f"cuda:{args.gpu_id}"

    def say(s):
        print(f"xfer cross_node: {s}", file=err, flush=True)

    results = []
    start = time.monotonic()
    with xfer.Connector(cfg) as c:
        if args.role == "producer":
            summary = produce(args, c, dtype, shape, size, results, say, out)
        else:
            summary = consume(args, c, size, results, say, out)
    summary["wall_seconds"] = time.monotonic() - start
    summary.update(memory_mb=mb, tensor_bytes=size, role=args.role)
    return report(args, summary, results, out)


def produce(args, c, dtype, shape, size, results, say, out):
    import torch
    cc, ready = serve(args.local_host, args.ctrl_port, args.timeout, args.secret, say,
                      Msg(type=HELLO, transfers=args.num_transfers, bytes=size, dtype=dtype, mode=args.mode,
                          benchmark=args.benchmark))
    try:
        tdt = torch.float32 if dtype == "F32" else torch.uint8
        summary = {"mode": args.mode, "dtype": dtype, "pull": ready.pull, "transport": ""}
        heap = torch.empty(shape, dtype=tdt) if args.mode == "copy" else None
        for i in range(1, args.num_transfers + 1):
            key = f"tensor-{i}"
            digest = None
            if heap is not None:
                heap.view(torch.uint8).random_(0, 256)
                if not args.benchmark:
                    digest = hashlib.md5(heap.numpy().view("u1")).hexdigest()
                t0 = time.perf_counter()
                ok, _, meta = c.put(FROM, TO, key, heap)
                put = time.perf_counter() - t0
            else:
                t0 = time.perf_counter()
                t = c.alloc_tensor(tdt, shape)
                put = time.perf_counter() - t0
                t.view(torch.uint8).random_(0, 256)
                if not args.benchmark:
                    digest = hashlib.md5(t.cpu().numpy().view("u1")).hexdigest()
                t1 = time.perf_counter()
                ok, _, meta = c.put(FROM, TO, key, t)
                put += time.perf_counter() - t1
                del t
            if not ok:
                raise cc.fail(f"transfer {i}: put: no room in the pool (--memory-mb)")
            cc.send(Msg(type=PUT, seq=i, meta=meta, md5=digest or "", put_seconds=put))
            got = cc.recv(GOT)
            if got.seq != i:
                raise cc.fail(f"transfer {i}: the consumer answered for transfer {got.seq}")
            if not args.benchmark and got.md5_ok is None:
                raise cc.fail(f"transfer {i}: the consumer sent no MD5 verdict")
            summary["transport"] = got.transport
            secs = float(got.seconds)
            add(args, results, out, {"role": "producer", "transfer": i, "bytes": size, "seconds": secs,
                                     "bytes_per_sec": rate(size, secs), "gbps": rate(size, secs) / 1e9,
                                     "put_seconds": put, "put_bytes_per_sec": rate(size, put),
                                     "md5": digest, "md5_ok": got.md5_ok})
        return summary
    except Fail as e:
        raise cc.fail(e) from None
    finally:
        cc.close()


def consume(args, c, size, results, say, out):
    cc, hello = connect(args.remote_host, args.ctrl_port, args.timeout, args.secret, say)
    try:
        if hello.transfers != args.num_transfers:
            raise cc.fail(f"the producer makes {hello.transfers} transfers and the consumer expects "
                          f"{args.num_transfers}: give both the same --num-transfers")
        if hello.bytes != size:
            raise cc.fail(f"the producer sends tensors of {hello.bytes} bytes and the consumer expects {size}: "
                          "give both the same --tensor-size-mb")
        if hello.benchmark != args.benchmark:
            raise cc.fail("--benchmark is on one side only: give it to both or neither")
        pull = "write" if args.pull == "auto" else args.pull
        cc.send(Msg(type=READY, pull=pull))
        summary = {"mode": hello.mode, "dtype": hello.dtype, "pull": pull,
                   "transport": "" if args.transport == "auto" else args.transport}
        producer = f"{args.remote_host}:{args.remote_port}"
        last = None
        for i in range(1, args.num_transfers + 1):
            m = cc.recv(PUT)
            meta = m.meta
            if m.seq != i:
                raise cc.fail(f"transfer {i}: the producer sent transfer {m.seq}")
            if not isinstance(meta, dict):
                raise cc.fail(f"transfer {i}: the producer sent no metadata")
            if not args.benchmark and len(m.md5) != 32:
                raise cc.fail(f"transfer {i}: the producer sent no MD5 ({m.md5!r})")
            meta = dict(meta, producer=producer)  # the data plane is where the flags say
            parts = str(meta.get("key", "")).split("/", 2)
            if len(parts) != 3:
                raise cc.fail(f"transfer {i}: the producer sent the key {meta.get('key')!r}, not from/to/key")
            t0 = time.perf_counter()
            try:
                buf = c.get_buffer(parts[0], parts[1], parts[2], meta, timeout=args.timeout)
            except xfer.XferError as e:
                raise cc.fail(f"transfer {i}: get from {producer}: {e}") from None
            secs = time.perf_counter() - t0
            with buf:
                if buf.size != size:
                    raise cc.fail(f"transfer {i}: got {buf.size} bytes, want {size}")
                digest, ok = None, None
                if not args.benchmark:
                    digest = hashlib.md5(buf.memoryview()).hexdigest()
                    ok = digest == m.md5
                if i == args.num_transfers and args.out:
                    write_safetensors(args.out, buf, meta, digest)
                last = buf.meta
            cc.send(Msg(type=GOT, seq=i, md5_ok=ok, seconds=secs, transport=summary["transport"]))
            put = float(m.put_seconds)
            add(args, results, out, {"role": "consumer", "transfer": i, "bytes": size, "seconds": secs,
                                     "bytes_per_sec": rate(size, secs), "gbps": rate(size, secs) / 1e9,
                                     "put_seconds": put, "put_bytes_per_sec": rate(size, put),
                                     "md5": digest, "md5_ok": ok})
        del last
        return summary
    except Fail as e:
        raise cc.fail(e) from None
    finally:
        cc.close()


def write_safetensors(path, buf, meta, digest):
    """The tensor as a safetensors file: one tensor, "tensor", with the
    key, the producer and the MD5 as metadata."""
    md = {"key": meta.get("key", ""), "producer": meta.get("producer", "")}
    if digest:
        md["md5"] = digest
    head = {"__metadata__": md, "tensor": {"dtype": buf.dtype, "shape": list(buf.shape),
                                           "data_offsets": [0, buf.size]}}
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(buf.memoryview())


def add(args, results, out, r):
    results.append(r)
    if args.json:
        print(json.dumps(r), file=out, flush=True)
    else:
        verdict = "" if r["md5_ok"] is None else ("  MD5 ok" if r["md5_ok"] else "  MD5 MISMATCH")
        print(f"{r['role']} transfer {r['transfer']}/{args.num_transfers}: {r['bytes'] / MiB:.0f} MiB  "
              f"get {r['seconds'] * 1e3:.1f} ms ({r['gbps']:.2f} GB/s)  put {r['put_seconds'] * 1e3:.1f} ms{verdict}",
              file=out, flush=True)


def report(args, summary, results, out):
    n = len(results)
    total = sum(r["bytes"] for r in results)
    secs = sum(r["seconds"] for r in results)
    put = sum(r["put_seconds"] for r in results)
    gbps = [r["gbps"] for r in results]
    mism = sum(1 for r in results if r["md5_ok"] is False)
    s = {"summary": True, "transfers": n, "bytes": total, "seconds": secs, "bytes_per_sec": rate(total, secs),
         "gbps_median": statistics.median(gbps), "gbps_min": min(gbps), "gbps_max": max(gbps),
         "put_seconds": put, "put_bytes_per_sec": rate(total, put), "e2e_bytes_per_sec": rate(total, secs + put),
         "md5_ok": None if args.benchmark else mism == 0, "md5_mismatches": mism, **summary}
    if args.json:
        print(json.dumps(s), file=out, flush=True)
    else:
        verdict = "" if args.benchmark else (", all MD5s ok" if mism == 0 else f", {mism} MD5 MISMATCHES")
        print(f"{args.role}: {n} transfers of {summary['tensor_bytes'] / MiB:.0f} MiB, get median "
              f"{s['gbps_median']:.2f} GB/s, put+get {s['e2e_bytes_per_sec'] / 1e9:.2f} GB/s{verdict}",
              file=out, flush=True)
    return 1 if mism else 0


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        code = run(args)
    except (Fail, xfer.XferError, OSError) as e:
        print(f"xfer cross_node: {e}", file=sys.stderr, flush=True)
        return 1
    if code:
        print(f"xfer cross_node: the MD5 of some transfers did not match", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
