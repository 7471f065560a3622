package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// Every tracer provider a benchmark starts is shut down with it: no
// goroutine outlives the run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
