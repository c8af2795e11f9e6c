"""The Python side of transferctl's cross-language tests: python/xfer/_transferctl.py,
loaded from its file (no libxfer.so needed), talking to the Go package.

  peer.py MODULE reencode            each line of stdin decoded and encoded again
  peer.py MODULE consumer HOST PORT [SECRET]  one transfer, as the consumer, then expects the producer's error
  peer.py MODULE producer HOST PORT [SECRET]  one transfer, as the producer, then sends a message out of turn

With SECRET, the two sides authenticate, and every message carries a MAC.
"""

import importlib.util
import sys

spec = importlib.util.spec_from_file_location("transferctl", sys.argv[1])
tc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tc)
MD5 = "0f" * 16
META = {"producer": "127.0.0.1:15500", "key": "producer/consumer/tensor-1", "size": 16, "kind": 2, "dtype": "F32",
        "shape": [4]}


def check(cond, what):
    if not cond:
        sys.exit(f"python: {what}")


def main():
    role = sys.argv[2]
    if role == "reencode":
        for line in sys.stdin.buffer:
            sys.stdout.buffer.write(tc.Msg.decode(line).encode())
        return
    host, port = sys.argv[3], int(sys.argv[4])
    secret = sys.argv[5] if len(sys.argv) > 5 else ""
    if role == "consumer":
        cc, h = tc.connect(host, port, 10, secret, lambda s: None)
        check((h.transfers, h.bytes, h.dtype, h.mode, h.benchmark) == (1, 16, "F32", "copy", False), f"hello {h}")
        cc.send(tc.Msg(type=tc.READY, pull="read"))
        p = cc.recv(tc.PUT)
        check((p.seq, p.meta, p.md5, p.put_seconds) == (1, META, MD5, 0.5), f"put {p}")
        cc.send(tc.Msg(type=tc.GOT, seq=1, md5_ok=True, seconds=0.25, transport="tcp"))
        try:
            cc.recv(tc.PUT)
            check(False, "no error from the producer")
        except tc.PeerError as e:
            check(str(e) == "the producer failed: enough", f"the producer's error: {e}")
        cc.close()
    elif role == "producer":
        print("listening", flush=True)
        cc, r = tc.serve(host, port, 10, secret, lambda s: None,
                         tc.Msg(type=tc.HELLO, transfers=1, bytes=16, dtype="F32", mode="zerocopy", benchmark=True))
        check(r.pull == "write", f"ready {r}")
        cc.send(tc.Msg(type=tc.PUT, seq=1, meta=META, put_seconds=0.5))
        g = cc.recv(tc.GOT)
        check((g.seq, g.md5_ok, g.seconds, g.transport) == (1, None, 0.25, "shm"), f"got {g}")
        cc.send(tc.Msg(type=tc.GOT, seq=9))
        try:
            cc.recv(tc.GOT)
            check(False, "no error from the consumer")
        except tc.PeerError as e:
            check("where a \"put\" was due" in str(e), f"the consumer's error: {e}")
        cc.close()


main()
