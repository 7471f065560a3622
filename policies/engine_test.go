package policies

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retrace-go/retrace/internal/engine"
)

// The engine decides by the names of the classes that this package
// publishes: they must be the same strings. (The outcomes are telemetry's,
// which the engine uses as they are.)
func TestNamesAreTheEngines(t *testing.T) {
	for c, e := range map[Class]string{
		Transient: engine.Transient, Permanent: engine.Permanent, Fatal: engine.Fatal, ContextOverflow: engine.ContextOverflow,
		Programming: engine.Programming, Canceled: engine.Canceled, Unknown: engine.Unknown,
	} {
		assert.Equal(t, e, string(c))
	}
}
