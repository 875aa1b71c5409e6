package rules

import (
	"errors"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/quote"
)

// Duration is a time.Duration written as text: "500ms", "1s", "1m", "24h",
// and also with a leading count of days, "7d" or "1d12h". It renders back in
// a clean single-unit form (see String). The zero value is 0s.
type Duration time.Duration

const day = 24 * time.Hour

var errDuration = errors.New(`want a duration such as "1m", "500ms", "24h" or "7d"`)

// parseDuration parses a duration as time.ParseDuration does, and also
// accepts a leading whole number of days: "7d", "1d12h".
func parseDuration(s string) (Duration, error) {
	rest, neg := s, false
	if rest != "" && (rest[0] == '-' || rest[0] == '+') {
		neg, rest = rest[0] == '-', rest[1:]
	}
	var total time.Duration
	days := false
	i := 0
	for i < len(rest) && '0' <= rest[i] && rest[i] <= '9' {
		i++
	}
	if i > 0 && i < len(rest) && rest[i] == 'd' {
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil || n > int64(1<<63-1)/int64(day) {
			return 0, errDuration
		}
		total, days, rest = time.Duration(n)*day, true, rest[i+1:]
	}
	if rest != "" || !days {
		// What follows the days is unsigned: "1d-5h" is not a duration.
		if rest == "" || !('0' <= rest[0] && rest[0] <= '9' || rest[0] == '.') {
			return 0, errDuration
		}
		d, err := time.ParseDuration(rest)
		if err != nil || d > 1<<63-1-total {
			return 0, errDuration
		}
		total += d
	}
	if neg {
		total = -total
	}
	return Duration(total), nil
}

// String renders d in the largest unit that holds it whole: "500ms", "90s",
// "1m", "24h"; whole multiples of two days or more as days, "7d". Other
// values use the smallest exact unit ("1500ms", "1500ns"), so every value
// parses back to itself.
func (d Duration) String() string {
	if d == 0 {
		return "0s"
	}
	v := time.Duration(d)
	sign := ""
	// Work in uint64 so that the most negative value has a magnitude.
	u := uint64(v)
	if v < 0 {
		sign, u = "-", -u
	}
	if u%uint64(day) == 0 && u/uint64(day) >= 2 {
		return sign + strconv.FormatUint(u/uint64(day), 10) + "d"
	}
	for _, unit := range [...]struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if u%uint64(unit.d) == 0 {
			return sign + strconv.FormatUint(u/uint64(unit.d), 10) + unit.name
		}
	}
	return sign + strconv.FormatUint(u, 10) + "ns"
}

// MarshalText implements encoding.TextMarshaler (and so JSON and YAML).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with parseDuration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	if err != nil {
		return errors.New(errDuration.Error() + ", got " + quote.Short(string(b)))
	}
	*d = v
	return nil
}
