"""Views of the pool never outlive its memory: a tensor, array or buffer
handed out keeps its connector (and the pool mapped) alive, and a
connector closed while views live unmaps the pool only once the last is
gone. Each case runs in a child interpreter, so that a crash fails the
test instead of killing the run."""

import subprocess
import sys
import textwrap



def run_child(code):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, timeout=120)
    assert r.returncode == 0, f"child exited {r.returncode} (-11: SIGSEGV)\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}"
    return r.stdout.decode()


def test_view_keeps_connector():
    # The connector is garbage before its tensor is used.
    run_child("""
        import gc, torch, xfer
        def f():
            c = xfer.Connector({"protocol": "tcp", "host": "127.0.0.1", "zmq_port": 0})
            return c.alloc_tensor(torch.float32, (1000,))
        t = f(); gc.collect(); t.fill_(1)
        assert float(t.sum()) == 1000.0
    """)


def test_get_view_keeps_connector():
    run_child("""
        import gc, numpy as np, torch, xfer
        def f():
            s = xfer.Connector({"role": "sender", "protocol": "tcp", "host": "127.0.0.1", "zmq_port": 0})
            port = int(s.address.rsplit(":", 1)[1])
            r = xfer.Connector({"role": "receiver", "protocol": "tcp", "sender_host": "127.0.0.1", "sender_zmq_port": port})
            _, _, meta = s.put("a", "b", "k", torch.arange(256, dtype=torch.float32))
            t, _ = r.get("a", "b", "k", meta)
            buf = r.get_buffer("a", "b", "k2", s.put("a", "b", "k2", np.arange(64, dtype=np.int64))[2])
            return t, buf.numpy(), buf.memoryview(), s
        t, arr, mv, s = f(); gc.collect()
        assert float(t.sum()) == sum(range(256)) and int(arr.sum()) == sum(range(64)) and len(mv) == 512
    """)


def test_close_with_live_views():
    out = run_child("""
        import gc, torch, xfer
        c = xfer.Connector({"protocol": "tcp", "host": "127.0.0.1", "zmq_port": 0})
        v = c.alloc_tensor(torch.float32, (1000,))
        c.close()
        assert c.closed
        v.fill_(2)
        assert float(v.sum()) == 2000.0
        try:
            c.alloc_tensor(torch.float32, (4,))
            raise SystemExit("a closed connector handed out memory")
        except xfer.ClosedError:
            pass
        assert c._deferred, "the pool was unmapped under a live view"
        del v; gc.collect()
        assert not c._deferred and c._live == 0, "the last view's end did not finish the close"
        print("deferred close done")
    """)
    assert "deferred close done" in out


def test_close_under_use_from_threads():
    # Threads put, get and touch views while the main thread closes the
    # connectors: calls fail cleanly, views stay readable, nothing crashes.
    run_child("""
        import threading, torch, xfer
        s = xfer.Connector({"role": "sender", "protocol": "tcp", "host": "127.0.0.1", "zmq_port": 0})
        port = int(s.address.rsplit(":", 1)[1])
        r = xfer.Connector({"role": "receiver", "protocol": "tcp", "sender_host": "127.0.0.1", "sender_zmq_port": port,
                            "get_timeout": 2})
        held, stop = [], threading.Event()
        def work(w):
            i = 0
            while not stop.is_set():
                try:
                    _, _, meta = s.put("a", "b", f"{w}-{i}", torch.full((4096,), float(w)))
                    t, _ = r.get("a", "b", f"{w}-{i}", meta)
                    held.append(t)
                    float(t.sum())
                except xfer.XferError:
                    pass
                i += 1
        ths = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for th in ths:
            th.start()
        import time; time.sleep(1.0)
        r.close(); s.close()
        time.sleep(0.3)
        stop.set()
        for th in ths:
            th.join(30)
        assert held, "no value went through before the close"
        for w, t in enumerate(held):
            float(t.sum())  # every view still readable after the close
    """)



def test_close_under_use_every_api():
    # As above, on tcp and shm, through xfer.Connector and xfer.mooncake,
    # with allocations written in place: several threads close both ends
    # while others put, get, allocate and write into the pool. Every call
    # works or raises a clean error (XferError, or RuntimeError and
    # MemoryError where Mooncake's API says so), and nothing crashes.
    out = run_child("""
        import threading, time
        import numpy as np, xfer
        from xfer import mooncake

        def hammer(put, get, alloc, stop, errs):
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    meta = put(f"k{i}", np.full(4096, i % 251, np.uint8))
                    if meta:
                        got = get(f"k{i}", meta)
                        if got is not None:
                            v = got[0]
                            arr = np.asarray(v.as_tensor(np.uint8, (4096,)) if hasattr(v, "as_tensor") else v)
                            arr[:] = 1  # a write into the pool while it closes
                            if hasattr(v, "release"):
                                v.release()
                    np.asarray(alloc())[:] = 7
                except (xfer.XferError, RuntimeError, MemoryError):
                    pass  # a clean refusal: the connector is closing
                except Exception as e:  # noqa: BLE001
                    errs.append(repr(e))

        for transport in ("tcp", "shm"):
            for api in ("native", "mooncake"):
                for _ in range(2):
                    if api == "native":
                        p = xfer.Connector({"role": "sender", "protocol": transport, "host": "127.0.0.1", "zmq_port": 0})
                        port = int(p.address.rsplit(":", 1)[1])
                        c = xfer.Connector({"role": "receiver", "protocol": transport, "sender_host": "127.0.0.1",
                                            "sender_zmq_port": port})
                        alloc = lambda: p.alloc_tensor(np.uint8, (4096,))
                    else:
                        cfg = {"host": "127.0.0.1", "zmq_port": 0, "protocol": transport, "memory_pool_size": 8 << 20}
                        p, c = mooncake.MooncakeTransferEngineConnector(cfg), mooncake.MooncakeTransferEngineConnector(cfg)
                        pool = p.pool  # held past close: the pool stays mapped while it lives
                        alloc = lambda: mooncake.ManagedBuffer(p.allocator, p.allocator.alloc(4096), 4096, pool).tensor
                    put = lambda k, v: p.put("a", "b", k, v)[2]
                    get = lambda k, m: c.get("a", "b", k, m)
                    stop, errs = threading.Event(), []
                    ts = [threading.Thread(target=hammer, args=(put, get, alloc, stop, errs)) for _ in range(4)]
                    for t in ts:
                        t.start()
                    time.sleep(0.05)
                    closers = [threading.Thread(target=x.close) for x in (p, c, p, c)]
                    for t in closers:
                        t.start()
                    for t in closers:
                        t.join()
                    time.sleep(0.02)
                    stop.set()
                    for t in ts:
                        t.join()
                    assert not errs, (transport, api, errs)
        print("ok")
    """)
    assert out.strip() == "ok"


def test_close_racing_a_buffer_handout():
    # A close in another thread at the worst moment of handing out a
    # buffer: after its address was read from the library, before the view
    # was counted. The close must wait, see the view and leave the pool
    # mapped, or come first and refuse the buffer; it must never unmap the
    # memory of a view it hands out (a write there would crash the process).
    out = run_child("""
        import threading, numpy as np, xfer
        from xfer import _lib
        p = xfer.Connector({"role": "sender", "protocol": "tcp", "host": "127.0.0.1", "zmq_port": 0})
        lib = _lib.lib()
        orig = lib.xfer_buffer_data
        closers = []
        def racing(*args):
            rc = orig(*args)
            lib.xfer_buffer_data = orig
            t = threading.Thread(target=p.close)
            t.start()
            closers.append(t)
            t.join(0.3)  # a close that does not wait for the view is done here
            return rc
        lib.xfer_buffer_data = racing
        try:
            arr = p.alloc_tensor(np.uint8, (4096,))
            arr[:] = 7  # the pool must still be mapped
            assert int(arr.sum()) == 7 * 4096
            print("view")
        except xfer.XferError as e:
            print("refused", e)
        for t in closers:
            t.join()
        assert p.closed
    """)
    assert out.strip() == "view"
