package policies

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/telemetry"
)

// A retry policy words each stop as a policy that remembers nothing would,
// whatever stops it worded before: stops that differ from the one before
// in one thing only (the outcome, the attempts, the why, the class, the
// rule, the error's text, a stop beneath, a secret the context names) each
// read as their own.
func TestDiagnosisOfEachStop(t *testing.T) {
	plain := errors.New("503 service unavailable")
	answer := &Error{StatusCode: 429, Code: "rate_limit_exceeded", Message: "slow down"}
	inner := &Error{Layer: "session", Outcome: telemetry.OutcomeFailedPermanent, Attempts: 1, Class: Permanent, Reason: "http 401", Err: errors.New("401 unauthorized")}
	transient := Classification{Class: Transient, Type: "_OTHER", Reason: "pattern: 503"}
	permanent := Classification{Class: Permanent, Type: "_OTHER", Reason: "pattern: 503"}
	type stop struct {
		ctx context.Context
		rep engine.Report
		cls Classification
	}
	bg := context.Background()
	stops := []stop{
		{bg, engine.Report{Attempts: 3, Outcome: telemetry.OutcomeFailedExhausted, Err: plain}, transient},
		{bg, engine.Report{Attempts: 3, Outcome: telemetry.OutcomeFailedExhausted, Err: plain}, transient},
		{bg, engine.Report{Attempts: 2, Outcome: telemetry.OutcomeFailedExhausted, Err: plain}, transient},
		{bg, engine.Report{Attempts: 2, Outcome: telemetry.OutcomeBudgetExhausted, Err: plain}, transient},
		{bg, engine.Report{Attempts: 2, Outcome: telemetry.OutcomeBudgetExhausted, Err: plain, Why: "the task budget is spent"}, transient},
		{bg, engine.Report{Attempts: 2, Outcome: telemetry.OutcomeFailedExhausted, Err: errors.New("503 service unavailable ")}, transient},
		{bg, engine.Report{Attempts: 2, Outcome: telemetry.OutcomeFailedExhausted, Err: errors.New("502 bad gateway")}, transient},
		{bg, engine.Report{Attempts: 1, Outcome: telemetry.OutcomeFailedPermanent, Err: plain}, permanent},
		{bg, engine.Report{Attempts: 1, Outcome: telemetry.OutcomeFailedPermanent, Err: plain}, Classification{Class: Permanent, Type: "_OTHER", Reason: "pattern: 5xx"}},
		{bg, engine.Report{Attempts: 1, Outcome: telemetry.OutcomeFailedPermanent, Err: plain}, Classification{Class: Fatal, Type: "_OTHER", Reason: "pattern: 5xx"}},
		{bg, engine.Report{Attempts: 1, Outcome: telemetry.OutcomeFailedPermanent, Err: fmt.Errorf("runtime: %w", inner)}, permanent},
		{bg, engine.Report{Attempts: 1, Outcome: telemetry.OutcomeFailedPermanent, Err: errors.New(fmt.Errorf("runtime: %w", inner).Error())}, permanent}, // the same text, no stop beneath
		{bg, engine.Report{Attempts: 3, Outcome: telemetry.OutcomeFailedExhausted, Err: answer}, transient},
		{bg, engine.Report{Attempts: 3, Outcome: telemetry.OutcomeFailedExhausted, Err: errors.New(answer.text())}, transient},
		{WithSecrets(bg, "service"), engine.Report{Attempts: 3, Outcome: telemetry.OutcomeFailedExhausted, Err: plain}, transient},
		{bg, engine.Report{Attempts: 3, Outcome: telemetry.OutcomeFailedExhausted, Err: plain}, transient},
		{bg, engine.Report{Attempts: 0, Outcome: telemetry.OutcomeCanceled, Err: nil, Cause: context.Canceled}, transient},
		{bg, engine.Report{Attempts: 0, Outcome: telemetry.OutcomeCanceled, Err: nil, Cause: context.DeadlineExceeded}, transient},
	}
	remembering := judge{diags: new(diagnoses)}
	for round := range 2 {
		for i, s := range stops {
			got := remembering.Fail(s.ctx, "tool", s.rep, s.cls, trace.SpanContext{}).(*Error)
			want := judge{}.Fail(s.ctx, "tool", s.rep, s.cls, trace.SpanContext{}).(*Error)
			assert.Equal(t, want.Diagnosis(), got.Diagnosis(), "round %d, stop %d", round, i)
		}
	}
	// A stop like the one before is worded by taking that one's words: the
	// same string, not a copy.
	a := remembering.Fail(bg, "tool", stops[0].rep, stops[0].cls, trace.SpanContext{}).(*Error).Diagnosis()
	b := remembering.Fail(bg, "tool", stops[1].rep, stops[1].cls, trace.SpanContext{}).(*Error).Diagnosis()
	assert.Equal(t, a, b)
	assert.True(t, unsafe.StringData(a) == unsafe.StringData(b), "the second stop's diagnosis worded again")
}
