package policies

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retrace-go/retrace/telemetry"
)

// A cyclic chain is classified, not read forever.
type cycle struct{ next *cycle }

func (c *cycle) Error() string { return "cycle" }
func (c *cycle) Unwrap() error { return c.next }

func TestClassifyOfACycleEnds(t *testing.T) {
	a := &cycle{}
	a.next = a
	assert.Equal(t, Unknown, Classify(a).Class)
}

// The error.type of an error of no known type is the conventions', as
// package telemetry names it.
func TestErrorTypeOtherIsTheConventions(t *testing.T) {
	assert.Equal(t, telemetry.ErrorTypeOther, errorTypeOther)
	assert.Equal(t, telemetry.ErrorTypeOther, errorType(errors.New("no rule knows this")))
}
