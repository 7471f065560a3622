package middleware

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retrace-go/retrace/policies"
)

// The worst case of leaf calls, frame by frame: a layer's max attempts times
// its costliest attempt, each attempt the sum of the worst cases of the
// layers it called, one leaf when it called none.
func TestFrameWorstCase(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func() *frame // returns the root, its children reported
		want  int64
	}{
		{"a leaf layer alone", func() *frame {
			var r root
			f := &frame{}
			f.init(nil, "session", 4, true, &r)
			return f
		}, 4},
		{"runtime(3) × session(4)", func() *frame {
			var r root
			rt := &frame{}
			rt.init(nil, "runtime", 3, true, &r)
			for n := 1; n <= 3; n++ {
				rt.startAttempt(n, 0)
				s := &frame{}
				s.init(rt, "session", 4, true, nil)
				s.reportWorst()
			}
			return rt
		}, 12},
		{"two layers called in one attempt add up", func() *frame {
			var r root
			loop := &frame{}
			loop.init(nil, "agent", 1, false, &r)
			for _, max := range []int{4, 3} {
				c := &frame{}
				c.init(loop, "x", max, true, nil)
				c.reportWorst()
			}
			return loop
		}, 7},
		{"the costliest attempt counts, not the last", func() *frame {
			var r root
			rt := &frame{}
			rt.init(nil, "runtime", 2, true, &r)
			rt.startAttempt(1, 0)
			for range 2 {
				c := &frame{}
				c.init(rt, "tool", 3, true, nil)
				c.reportWorst()
			}
			rt.startAttempt(2, 0)
			c := &frame{}
			c.init(rt, "tool", 3, true, nil)
			c.reportWorst()
			return rt
		}, 12},
		{"steps: the costliest step times the steps", func() *frame {
			var r root
			loop := &frame{}
			loop.init(nil, "agent", 5, false, &r)
			for _, calls := range []int{1, 4, 2} {
				nextStepOf(loop)
				for range calls {
					c := &frame{}
					c.init(loop, "tool", 1, false, nil)
					c.reportWorst()
				}
			}
			return loop
		}, 20},
		{"a handler's own attempts: the costliest of them, not their sum", func() *frame {
			var r root
			m := &frame{}
			m.init(nil, "model", 3, true, &r) // WithInnerAttempts(3): 3 calls beneath, each one attempt of the SDK's
			m.perAttempt = true
			for range 3 {
				c := &frame{}
				c.init(m, "http", 1, false, nil)
				c.reportWorst()
			}
			return m
		}, 3},
		{"an unknown limit beneath makes the worst case unknown", func() *frame {
			var r root
			s := &frame{}
			s.init(nil, "session", 4, true, &r)
			c := &frame{}
			c.init(s, "foreign", 0, true, nil)
			c.reportWorst()
			return s
		}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.build().worst())
		})
	}
}

// nextStepOf is NextStep for a frame, outside a context.
func nextStepOf(f *frame) { f.fold() }

// Depth counts only the retrying layers above, and the failure a layer
// beneath reports is the enclosing attempt's until the next attempt starts.
func TestFrameDepthAndTheFailureBeneath(t *testing.T) {
	var r root
	rt := &frame{}
	rt.init(nil, "runtime", 3, true, &r)
	loop := &frame{}
	loop.init(rt, "agent", 1, false, nil)
	s := &frame{}
	s.init(loop, "session", 4, true, nil)
	assert.Equal(t, 0, rt.depth)
	assert.Equal(t, 1, loop.depth)
	assert.Equal(t, 1, s.depth, "a layer that does not retry adds no depth")
	assert.True(t, rt.nested.Load())

	b := &beneath{cls: policiesFatal()}
	s.endedBeneath(b)
	assert.Equal(t, b, loop.failedBeneath.Load())
	s.endedBeneath(nil)
	assert.Nil(t, loop.failedBeneath.Load(), "a success beneath clears it")
	loop.endedBeneath(b)
	rt.startAttempt(2, 0)
	assert.Nil(t, rt.failedBeneath.Load(), "a new attempt starts clean")
}

// The failure beneath is taken for an error that is it, or wraps it, when
// the same classifier classified it; a struct error (not comparable) is
// never compared.
func TestClassifiedBeneath(t *testing.T) {
	var r root
	parent, child := &frame{}, &frame{}
	parent.init(nil, "session", 4, true, &r)
	child.init(parent, "model", 1, false, nil)
	raw := policiesFatal()
	cause := errors.New("quota")
	rules := policies.NewClassifier()
	child.endedBeneath(&beneath{cls: raw, err: cause, raw: raw, by: rules})

	got, ok := parent.classifiedBeneath(fmt.Errorf("turn: %w", cause), rules)
	assert.True(t, ok, "an error wrapping the failure beneath")
	assert.Equal(t, raw, got)
	_, ok = parent.classifiedBeneath(cause, nil)
	assert.False(t, ok, "another classifier classifies again")
	_, ok = parent.classifiedBeneath(errors.New("quota"), rules)
	assert.False(t, ok, "an equal text is not the same failure")
	child.endedBeneath(&beneath{cls: raw, err: mapError{m: map[string]int{}}, raw: raw, by: rules})
	_, ok = parent.classifiedBeneath(mapError{m: map[string]int{}}, rules)
	assert.False(t, ok, "a value that == would panic on is never the same")
}

// mapError is an error value of a type that is not comparable.
type mapError struct{ m map[string]int }

func (mapError) Error() string { return "map" }

func policiesFatal() policies.Classification {
	return policies.Classification{Class: policies.Fatal, Type: "insufficient_quota"}
}
