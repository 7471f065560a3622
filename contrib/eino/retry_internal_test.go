package retraceeino

import (
	"runtime"
	"testing"

	"github.com/cloudwego/eino/adk"
	"github.com/stretchr/testify/assert"

	"github.com/retrace-go/retrace/policies"
)

// The governed configs are held weakly: a config collected with its agent
// is forgotten when the set is pruned, and one still in use is kept.
func TestGovernedConfigsAreForgotten(t *testing.T) {
	h := New(Config{})
	for range 3 * minPrune {
		h.governRetry(&adk.ModelRetryConfig{MaxRetries: 1})
	}
	kept := &adk.ModelRetryConfig{MaxRetries: 1}
	h.governRetry(kept)
	runtime.GC() // collects the configs no agent holds, and clears their weak pointers

	h.mu.Lock()
	h.pruneAt = 0
	h.pruneRetries()
	n := len(h.retries)
	h.mu.Unlock()
	assert.Equal(t, 1, n, "only the config in use is remembered")

	h.governRetry(kept)
	assert.Equal(t, 1, len(h.retries))
	assert.True(t, kept.IsRetryAble(t.Context(), &policies.Error{Class: policies.Transient}))
	runtime.KeepAlive(kept)
}

// What eino may call again after an error of each class: the identical
// call after a Transient one only; a changed call after any error a change
// may fix.
func TestMayRetry(t *testing.T) {
	for _, tc := range []struct {
		class         policies.Class
		same, changed bool
	}{
		{policies.Transient, true, true},
		{policies.Permanent, false, true},
		{policies.ContextOverflow, false, true},
		{policies.Unknown, false, true},
		{policies.Fatal, false, false},
		{policies.Programming, false, false},
		{policies.Canceled, false, false},
	} {
		assert.Equal(t, tc.same, mayRetry(tc.class, false), "%s, the identical call", tc.class)
		assert.Equal(t, tc.changed, mayRetry(tc.class, true), "%s, a changed call", tc.class)
	}
}
