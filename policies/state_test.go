package policies_test

import (
	"testing"

	"github.com/retrace-go/retrace/policies/state"
	"github.com/retrace-go/retrace/policies/statetest"
)

// The MemoryState users get keeps the rules every store keeps.
func TestMemoryStateConformance(t *testing.T) {
	statetest.Run(t, func(*testing.T) state.State { return state.NewMemory() })
}
