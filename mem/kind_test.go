package mem

import (
	"strings"
	"testing"
)

func TestParseLocation(t *testing.T) {
	for in, want := range map[string]string{"": "host", "host": "host", "CPU": "host", "cuda": "cuda:0", "gpu": "cuda:0",
		"cuda:0": "cuda:0", "cuda:07": "cuda:7", "gpu:3": "cuda:3", " cuda:255 ": "cuda:255"} {
		l, err := ParseLocation(in)
		if err != nil || l.String() != want {
			t.Errorf("ParseLocation(%q) = %v, %v; want %s", in, l, err, want)
		}
	}
	for in, msg := range map[string]string{"cuda:256": "from 0 to 255", "cuda:-1": "from 0 to 255", "cuda:": "from 0 to 255",
		"cuda:x": "from 0 to 255", "rocm:0": "host, cpu, cuda or cuda:N", "0": "host, cpu, cuda or cuda:N"} {
		_, err := ParseLocation(in)
		if err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), in) {
			t.Errorf("ParseLocation(%q): %v, want an error naming it and saying %q", in, err, msg)
		}
	}
	var l Location
	if err := l.UnmarshalText([]byte("cuda:2")); err != nil || l != CUDA(2) {
		t.Fatalf("UnmarshalText: %v %v", l, err)
	}
	if b, _ := l.MarshalText(); string(b) != "cuda:2" {
		t.Fatalf("MarshalText: %s", b)
	}
	if Kind(9).String() != "kind(9)" || !Host.IsHost() || CUDA(0).IsHost() {
		t.Fatal("Kind or Location misnamed")
	}
}

func FuzzParseLocation(f *testing.F) {
	for _, s := range []string{"", "host", "cuda", "cuda:0", "gpu:12", "cuda:", "cuda:-1", "cuda:256", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLocation(s)
		if err != nil {
			return
		}
		if l.Kind > KindCUDA || l.Device < 0 || l.Device > maxDevice {
			t.Fatalf("ParseLocation(%q) = %+v", s, l)
		}
		// The text form parses back to itself.
		if m, err := ParseLocation(l.String()); err != nil || m != l {
			t.Fatalf("ParseLocation(%q) = %v, which reads back as %v, %v", s, l, m, err)
		}
	})
}

func TestKinds(t *testing.T) {
	s := KindSet(KindHost, KindCUDA)
	if !s.Has(KindHost) || !s.Has(KindCUDA) || s.Has(Kind(5)) || s.Has(Kind(200)) {
		t.Fatalf("KindSet(host, cuda) = %08b", s)
	}
	if got := s.String(); got != "host,cuda" {
		t.Fatalf("String = %q", got)
	}
	if h := KindSet(KindHost); h.Has(KindCUDA) || h.String() != "host" {
		t.Fatalf("KindSet(host) = %08b %q", h, h)
	}
	if got := KindSet().String(); got != "" {
		t.Fatalf("empty set = %q", got)
	}
}

// FuzzKindsText: UnmarshalText accepts exactly what String can write back
// the same.
func FuzzKindsText(f *testing.F) {
	for _, s := range []string{"", "host", "cuda", "host,cuda", "cuda,host", "gpu", ",", "host,,cuda"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var k Kinds
		if err := k.UnmarshalText([]byte(s)); err != nil {
			return
		}
		var back Kinds
		if err := back.UnmarshalText([]byte(k.String())); err != nil || back != k {
			t.Fatalf("%q: %08b, its String %q reads back as %08b, %v", s, k, k.String(), back, err)
		}
	})
}

// TestKindTable checks the table of memory kinds: each row sits at its
// Kind, its names are its own, every kind but host has a driver, and the
// names it gives read back as the kind.
func TestKindTable(t *testing.T) {
	seen := map[string]Kind{}
	for i, info := range KindTable() {
		if info.Kind != Kind(i) || info.Kind.String() != info.Name {
			t.Errorf("row %d is %v, named %q", i, info.Kind, info.Name)
		}
		if (info.Driver == nil) != (info.Kind == KindHost) {
			t.Errorf("%s: driver %v: every kind but host needs one", info.Name, info.Driver)
		}
		for _, name := range append([]string{info.Name}, info.Aliases...) {
			if k, ok := seen[name]; ok {
				t.Errorf("%q names %s and %s", name, k, info.Kind)
			}
			seen[name] = info.Kind
			if l, err := ParseLocation(name); err != nil || l.Kind != info.Kind {
				t.Errorf("ParseLocation(%q) = %v, %v; want %s", name, l, err, info.Kind)
			}
		}
		var s Kinds
		if err := s.UnmarshalText([]byte(info.Name)); err != nil || s != KindSet(info.Kind) {
			t.Errorf("Kinds %q = %v, %v", info.Name, s, err)
		}
	}
	if _, ok := Kind(len(KindTable())).Info(); ok {
		t.Error("a kind past the table has a row")
	}
	var d DeviceSet
	if _, err := d.Get(Host); err == nil {
		t.Error("DeviceSet.Get(host): a device for host memory")
	}
	if err := d.Close(); err != nil || len(d.Opened()) != 0 {
		t.Errorf("empty DeviceSet: Close %v, Opened %v", err, d.Opened())
	}
}

// TestDeviceSetCopy: host to host, Copy is copy, and opens no device; the
// lengths must agree.
func TestDeviceSetCopy(t *testing.T) {
	var d DeviceSet
	src, dst := []byte("abc"), make([]byte, 3)
	if err := d.Copy(dst, src, LocateBytes); err != nil || string(dst) != "abc" {
		t.Fatalf("host to host: %q, %v", dst, err)
	}
	if err := d.Copy(dst[:2], src, LocateBytes); err == nil {
		t.Fatal("copied 3 bytes into 2")
	}
	if len(d.Opened()) != 0 {
		t.Fatalf("opened %v", d.Opened())
	}
	if l := LocateBytes(nil); !l.IsHost() {
		t.Fatalf("empty memory on %s", l)
	}
}
