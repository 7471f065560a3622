package middleware

import (
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	"github.com/stretchr/testify/assert"

	"github.com/retrace-go/retrace/policies"
)

// A layer gives its calls' failure records back only when it drives every
// policy itself: a policy failsafe-go runs (a hedge) may leave attempts
// running on goroutines of its own after the call returns, and they may
// still write the record.
func TestLayerRecyclesOnlyWhatItDrives(t *testing.T) {
	named := func(ps ...failsafe.Policy[string]) *layer[string, string] {
		cfg := newConfig(nil)
		return newLayer[string, string]("tool", cfg, Spec[string]{Policies: ps}, newNamed[string, string]("tool", cfg))
	}
	assert.True(t, named(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3}),
		policies.NewCircuitBreaker[string](policies.BreakerConfig{}), policies.NewBulkhead[string](4, 0)).reuse.recycles)
	assert.True(t, named().reuse.recycles, "no policy")
	assert.False(t, named(policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 3}),
		hedgepolicy.NewWithDelay[string](time.Millisecond)).reuse.recycles, "a hedge beside a retry")
}
