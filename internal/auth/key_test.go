package auth

import (
	"encoding/binary"
	"encoding/hex"
	"testing"
)

// TestVectors pins the MACs of each plane as its wire carries them (the
// labels and layouts of the handshake, KV and the transfer control
// channel), computed before these primitives were shared: a change here
// breaks every peer of another version.
func TestVectors(t *testing.T) {
	secret := NewKey([]byte("0123456789abcdef0123"))
	th := Transcript([]byte("hello body"), []byte("challenge body"))
	be := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	lineKey := secret.Sum(nil, "xfer-transfer-v1 producer key", []byte("np"), []byte("nc"))
	for _, v := range []struct {
		name, want string
		got        []byte
	}{
		{"transcript", "051a00bb2e30c2948831cb30b8722d6cddfa0174370b58f09379901cffd35b41", th[:]},
		{"handshake dialer proof", "ae97bcd77859f70f8bc39d1632dea52965d061b364dd4944c548ceaf69a77bf3",
			secret.Sum(nil, "xfer-v2 dialer proof", th[:])},
		{"kv call proof", "b531362a9c8c6e8be80bbf9414be5349fe838ca877a60560555a537ebada8fd0",
			secret.Sum(nil, "xfer-kv-v1 call", []byte("/xfer.kv.v1.KV/Get"), []byte{0}, []byte("12345678"), []byte("nonce-nonce-1234"))},
		{"kv connection proof", "b9102bee3ac18e55b522259721a749c15f0298d497abea3a2286b4f7fe1822ba",
			secret.Sum(nil, "xfer-kv-conn-v1 client", []byte("nc"), []byte("ns"), []byte("bind"))},
		{"transfer producer key", "913bd3050456d934077d165cdbe04cca1f3af55725bcec9ecdae68de959902a2", lineKey},
		{"transfer line", "143797ddf3d84a551d0853f80f597abb0da0d51ccae139cf86b226c3f2136b46",
			NewKey(lineKey).Sum(nil, "", be(7), []byte(`{"type":"got"}`))},
	} {
		if got := hex.EncodeToString(v.got); got != v.want {
			t.Errorf("%s: %s, want %s", v.name, got, v.want)
		}
	}
}

func TestVerify(t *testing.T) {
	k := NewKey([]byte("secret"))
	mac := k.Sum([]byte("prefix"), "label", []byte("a"), []byte("b"))[len("prefix"):]
	if !k.Verify(mac, "label", []byte("ab")) {
		t.Error("the MAC of the same bytes, split otherwise, does not verify")
	}
	for name, got := range map[string][]byte{
		"short": mac[:Size-1], "long": append(mac[:Size:Size], 0), "empty": nil,
		"flipped": append([]byte{mac[0] ^ 1}, mac[1:]...),
	} {
		if k.Verify(got, "label", []byte("ab")) {
			t.Errorf("%s MAC verifies", name)
		}
	}
	if k.Verify(mac, "other label", []byte("ab")) || NewKey([]byte("other")).Verify(mac, "label", []byte("ab")) {
		t.Error("a MAC verifies under another label or key")
	}
}

// TestSumAllocs: a warm Key's Sum and Verify allocate nothing (KV checks
// a call's proof with them). The race detector allocates on its own, and
// makes sync.Pool drop what it holds, so the count is taken without it
// (make test's integrity step).
func TestSumAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are counted without the race detector")
	}
	k := NewKey([]byte("secret"))
	ts, nonce, dst := make([]byte, 8), make([]byte, 16), make([]byte, 0, Size)
	method := "/xfer.kv.v1.KV/Get"
	mac := k.Sum(nil, "label", []byte(method), []byte{0}, ts, nonce)
	if n := testing.AllocsPerRun(100, func() {
		k.Sum(dst, "label", []byte(method), []byte{0}, ts, nonce)
		k.Verify(mac, "label", []byte(method), []byte{0}, ts, nonce)
	}); n != 0 {
		t.Errorf("%v allocs", n)
	}
}
