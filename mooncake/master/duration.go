package master

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDuration reads a duration as mooncake_master's flags
// (--default_kv_lease_ttl, --default_kv_soft_pin_ttl,
// --max_kv_soft_pin_ttl) take it: a non-negative integer, optionally
// followed by a unit, ms (the default), s, m or h, in any case; white
// space around the number and the unit is allowed. "500" is 500 ms,
// "10s" ten seconds.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty duration: want a non-negative integer, optionally followed by ms, s, m or h")
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, errors.New("a duration starts with a non-negative integer (milliseconds, or with a unit: ms, s, m or h)")
	}
	var n uint64
	for _, c := range t[:i] {
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, errors.New("duration too large")
		}
		n = n*10 + d
	}
	var unit time.Duration
	switch u := strings.ToLower(strings.TrimSpace(t[i:])); u {
	case "", "ms":
		unit = time.Millisecond
	case "s":
		unit = time.Second
	case "m":
		unit = time.Minute
	case "h":
		unit = time.Hour
	default:
		return 0, errors.New("unknown duration unit " + quote(u) + ": want ms, s, m or h")
	}
	if n > uint64(math.MaxInt64/unit) {
		return 0, errors.New("duration too large")
	}
	return time.Duration(n) * unit, nil
}

// quote quotes s for an error, shortened to a readable length.
func quote(s string) string {
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return strconv.Quote(s)
}
