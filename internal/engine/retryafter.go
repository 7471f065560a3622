package engine

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseRetryAfter reads a server's hint from retry-after-ms (milliseconds,
// OpenAI's) or Retry-After (seconds or an HTTP date, RFC 9110), relative to
// now. It returns 0 when there is no valid hint. A hint too large to
// represent, infinite or not a number saturates to the largest duration,
// never a negative one: the retry policy then caps it at its MaxRetryAfter.
// An invalid retry-after-ms does not hide a valid Retry-After.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if d, ok := seconds(h.Get("retry-after-ms"), float64(time.Millisecond)); ok {
		return d
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if d, ok := seconds(v, float64(time.Second)); ok {
		return d
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now))
	}
	return 0
}

// seconds parses v as a number of units, saturating; ok is false when v is
// not a number at all, or not positive.
func seconds(v string, unit float64) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	switch {
	case err != nil && !isRange(err):
		if strings.EqualFold(v, "nan") {
			return math.MaxInt64, true
		}
		return 0, false
	case math.IsNaN(f):
		return math.MaxInt64, true
	case f <= 0:
		return 0, false
	case f*unit >= math.MaxInt64 || math.IsInf(f, 1):
		return math.MaxInt64, true
	}
	return time.Duration(f * unit), true
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
