package policies

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retrace-go/retrace/internal/engine"
)

// The engine decides by the names of the classes and outcomes that this
// package publishes: they must be the same strings.
func TestNamesAreTheEngines(t *testing.T) {
	for c, e := range map[Class]string{
		Transient: engine.Transient, Permanent: engine.Permanent, Fatal: engine.Fatal, ContextOverflow: engine.ContextOverflow,
		Programming: engine.Programming, Canceled: engine.Canceled, Unknown: engine.Unknown,
	} {
		assert.Equal(t, e, string(c))
	}
	for o, e := range map[Outcome]string{
		OutcomeSuccess: engine.OutcomeSuccess, OutcomeSuccessAfterRetry: engine.OutcomeSuccessAfterRetry,
		OutcomeFailedPermanent: engine.OutcomeFailedPermanent, OutcomeFailedFatal: engine.OutcomeFailedFatal,
		OutcomeFailedUnknown: engine.OutcomeFailedUnknown, OutcomeFailedExhausted: engine.OutcomeFailedExhausted,
		OutcomeBudgetExhausted: engine.OutcomeBudgetExhausted, OutcomeRejected: engine.OutcomeRejected,
		OutcomeCanceled: engine.OutcomeCanceled, OutcomeStepLimit: engine.OutcomeStepLimit,
	} {
		assert.Equal(t, e, string(o))
	}
}
