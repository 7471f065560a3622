package engine_test

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	. "github.com/retrace-go/retrace/internal/engine"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond},
		{http.Header{"Retry-After-Ms": {"250"}}, 250 * time.Millisecond},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond},
		{http.Header{"Retry-After": {now.Add(7 * time.Second).Format(http.TimeFormat)}}, 7 * time.Second},
		{http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{"Retry-After": {"-1"}}, 0},
		{http.Header{}, 0},
		// Values too large, infinite or not a number saturate; never negative.
		{http.Header{"Retry-After": {"10000000000"}}, math.MaxInt64},
		{http.Header{"Retry-After": {"1e300"}}, math.MaxInt64},
		{http.Header{"Retry-After": {"Inf"}}, math.MaxInt64},
		{http.Header{"Retry-After": {"NaN"}}, math.MaxInt64},
		{http.Header{"Retry-After-Ms": {"1e300"}}, math.MaxInt64},
		// An invalid retry-after-ms does not hide a valid Retry-After.
		{http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"3"}}, 3 * time.Second},
		{http.Header{"Retry-After-Ms": {"-5"}, "Retry-After": {"3"}}, 3 * time.Second},
	} {
		assert.Equal(t, tt.want, ParseRetryAfter(tt.h, now), "%v", tt.h)
	}
}

// A saturated hint is capped by the retry policy, never a negative wait.
func TestSaturatedHintIsCapped(t *testing.T) {
	r := &Retry{MaxAttempts: 2, MaxRetryAfter: 30 * time.Second}
	d := r.Decide(context.Background(), nil, 1, Failure{Class: Transient, RetryAfter: ParseRetryAfter(http.Header{"Retry-After": {"1e300"}}, time.Now())}, nil)
	assert.True(t, d.Retry)
	assert.Equal(t, 30*time.Second, d.Delay)
}
