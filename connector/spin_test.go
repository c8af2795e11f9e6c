package connector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// A consumer with WaitSpin, called from a goroutine locked to its thread
// (as the C ABI's callers are): a Get answered during the spin, one whose
// value is put only after the spin ended, and one whose ctx ends first all
// end as without the spin.
func TestWaitSpin(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("the spin needs two Ps")
	}
	eachTransport(t, func(t *testing.T, tp tport) {
		p, c := pair(t, tp, PullAuto, func(_, c *Config) { c.WaitSpin = ThreadWaitSpin })
		if c.spin != ThreadWaitSpin {
			t.Fatalf("the consumer's spin is %v, want %v", c.spin, ThreadWaitSpin)
		}
		ctx := ctxT(t)
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			done <- func() error {
				for i, size := range []int{8, 4096, 1 << 20} {
					want := random(size)
					key := string(rune('a' + i))
					if _, _, err := p.Put(ctx, "a", "b", key, want); err != nil {
						return err
					}
					if err := spinGet(ctx, c, key, want); err != nil {
						return err
					}
				}
				// Put 50 ms after the Get began: long after its spin.
				want := random(4096)
				go func() {
					time.Sleep(50 * time.Millisecond)
					p.Put(ctx, "a", "b", "late", want)
				}()
				if err := spinGet(ctx, c, "late", want); err != nil {
					return err
				}
				// With another Get of the process waiting, a Get waits at
				// once, and still gets its value.
				if _, _, err := p.Put(ctx, "a", "b", "busy", want); err != nil {
					return err
				}
				getWaiters.Store(1)
				err := spinGet(ctx, c, "busy", want)
				busy := getWaiters.Load()
				getWaiters.Store(0)
				if err == nil && busy != 1 {
					err = fmt.Errorf("a Get beside another waiting one left %d waiters counted, want 1", busy)
				}
				if err != nil {
					return err
				}
				short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				defer cancel()
				if _, _, err := c.Get(short, "a", "b", "never", nil); !errors.Is(err, ErrNotFound) && !errors.Is(err, context.DeadlineExceeded) {
					return errors.New("a Get of a key never put ended with " + errString(err) + ", want not found or the deadline")
				}
				return nil
			}()
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := getWaiters.Load(); n != 0 {
			t.Errorf("%d Gets still counted as waiting after they ended", n)
		}
	})
}

func spinGet(ctx context.Context, c *Connector, key string, want []byte) error {
	b, _, err := c.Get(ctx, "a", "b", key, nil)
	if err != nil {
		return err
	}
	defer b.Release()
	if want != nil && !bytes.Equal(b.Bytes(), want) {
		return errors.New("Get of " + key + " returned other bytes than were put")
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// The spin is skipped where it would hold the only P, and when not asked for.
func TestWaitSpinOneP(t *testing.T) {
	if waitSpin(0) != 0 || waitSpin(-time.Nanosecond) != 0 {
		t.Error("a spin without WaitSpin")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if d := waitSpin(ThreadWaitSpin); d != 0 {
		t.Errorf("with GOMAXPROCS 1 the spin is %v, want none", d)
	}
}
