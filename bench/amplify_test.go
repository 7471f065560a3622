package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAmplification(t *testing.T) {
	rows := Amplification()
	require.Len(t, rows, 5)
	want := []struct {
		requests, traceCalls, worst int64
		outcome                     string
	}{
		{4, 4, 4, "failed_exhausted"},
		{12, 12, 12, "failed_exhausted"},
		{4, 4, 4, "failed_exhausted"},
		{7, 7, 12, "budget_exhausted"},   // 1 + 6 retries, wherever they happen
		{36, 12, 36, "failed_exhausted"}, // the trace sees 12 model calls; the declared SDK layer makes the worst case 36
	}
	for i, w := range want {
		r := rows[i]
		t.Logf("%-55s requests %2d, retrace.calls %2d, worst case %2d, %s", r.Setup, r.Requests, r.TraceCalls, r.WorstCase, r.Outcome)
		assert.Equal(t, w.requests, r.Requests, r.Setup)
		assert.Equal(t, w.traceCalls, r.TraceCalls, r.Setup)
		assert.Equal(t, w.worst, r.WorstCase, r.Setup)
		assert.Equal(t, w.outcome, r.Outcome, r.Setup)
	}
}
