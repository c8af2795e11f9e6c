package bytesize

import (
	"fmt"
	"math/big"
	"strings"
)

// sizeUnits are the binary multipliers Parse accepts, matched without
// regard to case. "KB", "MB" and so on are refused rather than guessed: they
// mean 1000 to some readers and 1024 to others.
var sizeUnits = map[string]int64{
	"":    1,
	"b":   1,
	"k":   1 << 10,
	"kib": 1 << 10,
	"m":   1 << 20,
	"mib": 1 << 20,
	"g":   1 << 30,
	"gib": 1 << 30,
	"t":   1 << 40,
	"tib": 1 << 40,
}

// maxSizeText bounds the input Parse looks at, so that a hostile string
// cannot make it build enormous integers.
const maxSizeText = 64

// Parse parses a byte count: a decimal number with an optional binary
// unit, e.g. "64", "4K", "4KiB", "1.5MiB", "1GiB". K, M, G and T are powers of
// 1024. A fraction is accepted only when the result is a whole number of
// bytes ("1.5KiB" is 1536, "1.3" is an error).
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("size %q: empty", s)
	}
	if len(t) > maxSizeText {
		return 0, fmt.Errorf("size %q: too long", s)
	}
	// Split into digits[.digits] and the unit.
	end := 0
	for end < len(t) && (t[end] >= '0' && t[end] <= '9' || t[end] == '.') {
		end++
	}
	num, unit := t[:end], strings.TrimSpace(t[end:])
	if num == "" {
		return 0, fmt.Errorf("size %q: not a number", s)
	}
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, K or KiB, M or MiB, G or GiB, T or TiB)", s, unit)
	}
	whole, frac, hasDot := strings.Cut(num, ".")
	if whole == "" || strings.Contains(frac, ".") || hasDot && frac == "" {
		return 0, fmt.Errorf("size %q: not a number", s)
	}
	// value = whole.frac * mult, computed exactly.
	n, _ := new(big.Int).SetString(whole+frac, 10)
	n.Mul(n, big.NewInt(mult))
	den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil)
	q, r := new(big.Int).QuoRem(n, den, new(big.Int))
	if r.Sign() != 0 {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
	}
	if !q.IsInt64() {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return q.Int64(), nil
}

// ParseList parses a comma-separated list of sizes, e.g.
// "64,4KiB,1MiB,16MiB". Errors name the offending element.
func ParseList(s string) ([]int64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("size list %q: empty", s)
	}
	var out []int64
	for i, elem := range strings.Split(s, ",") {
		n, err := Parse(elem)
		if err != nil {
			return nil, fmt.Errorf("size list element %d: %w", i+1, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// Format formats n with the largest binary unit that divides it exactly:
// 4096 is "4KiB", 1536 is "1536B". Parse(Format(n)) == n for n >= 0.
func Format(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return fmt.Sprintf("%d%s", n/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// Human formats n bytes for people: exact multiples as Format does
// ("64MiB"), other sizes of 1 KiB or more with two decimals in the largest
// unit that fits ("166.73 GiB"), and small ones in bytes ("512 B").
func Human(n int64) string {
	if n < 1<<10 && n > -(1<<10) {
		return fmt.Sprintf("%d B", n)
	}
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult || n <= -u.mult {
			if n%u.mult == 0 {
				return fmt.Sprintf("%d %s", n/u.mult, u.name)
			}
			return fmt.Sprintf("%.2f %s", float64(n)/float64(u.mult), u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}
