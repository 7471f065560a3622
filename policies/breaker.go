package policies

import (
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/common"

	"github.com/retrace-go/retrace/clock"
)

// BreakerConfig configures a circuit breaker. The zero value is the seed's:
// it opens after 5 consecutive Transient failures, stays open 60 s, then lets
// one probe through; a successful probe closes it, a failed one reopens it.
type BreakerConfig struct {
	// Name names what the breaker protects ("search_docs") in its errors.
	Name string
	// FailureThreshold is the number of consecutive Transient failures that
	// open the breaker; 0 → 5. A success resets the count.
	FailureThreshold int
	// Delay is the cool-down before a half-open probe; 0 → 60 s.
	Delay time.Duration
	// HalfOpenProbes is the number of calls let through at once while half
	// open; 0 → 1.
	HalfOpenProbes int
	// SuccessThreshold is the number of successful probes that close the
	// breaker; 0 → 1, at most HalfOpenProbes.
	SuccessThreshold int
	// Classifier decides which failures count; nil → the default rules. Only
	// Transient failures count; Canceled, Programming and Unknown ones are
	// ignored; the rest (a provider that answered with a Permanent error) show
	// that the downstream is up, and count as successes.
	Classifier *Classifier
	// Clock times the cool-down; nil → the wall clock.
	Clock clock.Clock
	// OnStateChange, if set, is called after each transition, outside the
	// breaker's lock.
	OnStateChange func(from, to circuitbreaker.State)
}

// CircuitBreaker is the breaker [NewCircuitBreaker] builds. It implements
// failsafe-go's circuitbreaker.CircuitBreaker, so it works under failsafe.With
// and through its permit API, and it is safe for concurrent use.
type CircuitBreaker[R any] struct {
	cfg BreakerConfig
	clk clock.Clock

	mu          sync.Mutex
	state       circuitbreaker.State
	consecutive int       // consecutive Transient failures while closed
	openedAt    time.Time // when it last opened
	probes      int       // probes in flight while half open
	probeOK     int       // successful probes while half open
	executions  uint      // metrics since the last transition
	failures    uint
	successes   uint
}

var _ circuitbreaker.CircuitBreaker[any] = (*CircuitBreaker[any])(nil)

// NewCircuitBreaker builds a circuit breaker that counts Transient failures
// only (see [BreakerConfig]). While open it rejects calls with a
// *[RejectedError] that matches circuitbreaker.ErrOpen and whose RetryAfter is
// the remaining cool-down.
func NewCircuitBreaker[R any](cfg BreakerConfig) failsafe.Policy[R] {
	return newCircuitBreaker[R](cfg)
}

func newCircuitBreaker[R any](cfg BreakerConfig) *CircuitBreaker[R] {
	if cfg.FailureThreshold <= 0 {
		cfg.FailureThreshold = 5
	}
	if cfg.Delay <= 0 {
		cfg.Delay = 60 * time.Second
	}
	if cfg.HalfOpenProbes <= 0 {
		cfg.HalfOpenProbes = 1
	}
	if cfg.SuccessThreshold <= 0 {
		cfg.SuccessThreshold = 1
	}
	cfg.SuccessThreshold = min(cfg.SuccessThreshold, cfg.HalfOpenProbes)
	return &CircuitBreaker[R]{cfg: cfg, clk: clockOr(cfg.Clock)}
}

// Config returns the configuration with its defaults filled in.
func (cb *CircuitBreaker[R]) Config() BreakerConfig { return cb.cfg }

// ResultAgnostic implements failsafe.ResultAgnosticPolicy.
func (*CircuitBreaker[R]) ResultAgnostic() {}

// TryAcquire asks to make a call. It returns the state the call was let
// through in (closed or half-open) and true, or OpenState and false.
func (cb *CircuitBreaker[R]) TryAcquire() (circuitbreaker.State, bool) {
	cb.mu.Lock()
	var change []stateChange
	if cb.state == circuitbreaker.OpenState && !cb.clk.Now().Before(cb.openedAt.Add(cb.cfg.Delay)) {
		change = cb.transition(circuitbreaker.HalfOpenState, change)
	}
	state, ok := cb.state, true
	switch cb.state {
	case circuitbreaker.OpenState:
		ok = false
	case circuitbreaker.HalfOpenState:
		if cb.probes >= cb.cfg.HalfOpenProbes {
			state, ok = circuitbreaker.OpenState, false // the probe slots are taken: reject as if open
		} else {
			cb.probes++
		}
	}
	cb.mu.Unlock()
	cb.notify(change)
	return state, ok
}

// TryAcquirePermit implements circuitbreaker.CircuitBreaker.
func (cb *CircuitBreaker[R]) TryAcquirePermit() bool {
	_, ok := cb.TryAcquire()
	return ok
}

// Rejection returns the error for a call refused now.
func (cb *CircuitBreaker[R]) Rejection() *RejectedError {
	return &RejectedError{Policy: "circuit_breaker", Name: cb.cfg.Name, RetryAfter: cb.RemainingDelay(), Err: circuitbreaker.ErrOpen}
}

// RecordClass records the end of a permitted call by its class ("" for a
// success).
func (cb *CircuitBreaker[R]) RecordClass(c Class) {
	cb.mu.Lock()
	var change []stateChange
	half := cb.state == circuitbreaker.HalfOpenState
	if half && cb.probes > 0 {
		cb.probes--
	}
	switch c {
	case Canceled, Programming, Unknown:
		// Says nothing about the downstream.
	case Transient:
		cb.executions++
		cb.failures++
		switch cb.state {
		case circuitbreaker.ClosedState:
			cb.consecutive++
			if cb.consecutive >= cb.cfg.FailureThreshold {
				change = cb.transition(circuitbreaker.OpenState, change)
			}
		case circuitbreaker.HalfOpenState:
			change = cb.transition(circuitbreaker.OpenState, change)
		}
	default:
		cb.executions++
		cb.successes++
		switch cb.state {
		case circuitbreaker.ClosedState:
			cb.consecutive = 0
		case circuitbreaker.HalfOpenState:
			cb.probeOK++
			if cb.probeOK >= cb.cfg.SuccessThreshold {
				change = cb.transition(circuitbreaker.ClosedState, change)
			}
		}
	}
	cb.mu.Unlock()
	cb.notify(change)
}

// RecordError implements circuitbreaker.CircuitBreaker: it classifies err and
// records it (nil is a success).
func (cb *CircuitBreaker[R]) RecordError(err error) {
	if err == nil {
		cb.RecordClass("")
		return
	}
	cb.RecordClass(cb.cfg.Classifier.Classify(err).Class)
}

// RecordResult implements circuitbreaker.CircuitBreaker: a result is a success.
func (cb *CircuitBreaker[R]) RecordResult(R) { cb.RecordClass("") }

// RecordSuccess implements circuitbreaker.CircuitBreaker.
func (cb *CircuitBreaker[R]) RecordSuccess() { cb.RecordClass("") }

// RecordFailure implements circuitbreaker.CircuitBreaker: a Transient failure.
func (cb *CircuitBreaker[R]) RecordFailure() { cb.RecordClass(Transient) }

type stateChange struct{ from, to circuitbreaker.State }

// transition moves to state; the caller holds mu and notifies after unlocking.
func (cb *CircuitBreaker[R]) transition(to circuitbreaker.State, changes []stateChange) []stateChange {
	from := cb.state
	if from == to {
		return changes
	}
	cb.state = to
	cb.consecutive, cb.probes, cb.probeOK = 0, 0, 0
	cb.executions, cb.failures, cb.successes = 0, 0, 0
	if to == circuitbreaker.OpenState {
		cb.openedAt = cb.clk.Now()
	}
	return append(changes, stateChange{from, to})
}

func (cb *CircuitBreaker[R]) notify(changes []stateChange) {
	if cb.cfg.OnStateChange == nil {
		return
	}
	for _, c := range changes {
		cb.cfg.OnStateChange(c.from, c.to)
	}
}

func (cb *CircuitBreaker[R]) set(to circuitbreaker.State) {
	cb.mu.Lock()
	change := cb.transition(to, nil)
	cb.mu.Unlock()
	cb.notify(change)
}

// Open opens the breaker now.
func (cb *CircuitBreaker[R]) Open() { cb.set(circuitbreaker.OpenState) }

// HalfOpen half-opens the breaker now.
func (cb *CircuitBreaker[R]) HalfOpen() { cb.set(circuitbreaker.HalfOpenState) }

// Close closes the breaker now.
func (cb *CircuitBreaker[R]) Close() { cb.set(circuitbreaker.ClosedState) }

// State returns the current state. An open breaker whose cool-down has ended
// reports OpenState until the next call asks for a permit.
func (cb *CircuitBreaker[R]) State() circuitbreaker.State {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.state
}

func (cb *CircuitBreaker[R]) IsOpen() bool     { return cb.State() == circuitbreaker.OpenState }
func (cb *CircuitBreaker[R]) IsHalfOpen() bool { return cb.State() == circuitbreaker.HalfOpenState }
func (cb *CircuitBreaker[R]) IsClosed() bool   { return cb.State() == circuitbreaker.ClosedState }

// RemainingDelay returns the time left before an open breaker lets a probe
// through, 0 if it is not open.
func (cb *CircuitBreaker[R]) RemainingDelay() time.Duration {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if cb.state != circuitbreaker.OpenState {
		return 0
	}
	return max(0, cb.openedAt.Add(cb.cfg.Delay).Sub(cb.clk.Now()))
}

// Metrics returns the counts since the last state transition.
func (cb *CircuitBreaker[R]) Metrics() circuitbreaker.Metrics { return breakerMetrics[R]{cb} }

type breakerMetrics[R any] struct{ cb *CircuitBreaker[R] }

func (m breakerMetrics[R]) counts() (e, f, s uint) {
	m.cb.mu.Lock()
	defer m.cb.mu.Unlock()
	return m.cb.executions, m.cb.failures, m.cb.successes
}

func (m breakerMetrics[R]) Executions() uint { e, _, _ := m.counts(); return e }
func (m breakerMetrics[R]) Failures() uint   { _, f, _ := m.counts(); return f }
func (m breakerMetrics[R]) Successes() uint  { _, _, s := m.counts(); return s }

func (m breakerMetrics[R]) FailureRate() float64 {
	e, f, _ := m.counts()
	if e == 0 {
		return 0
	}
	return float64(f) / float64(e)
}

func (m breakerMetrics[R]) SuccessRate() float64 {
	e, _, s := m.counts()
	if e == 0 {
		return 0
	}
	return float64(s) / float64(e)
}

// ToExecutor implements failsafe.Policy.
func (cb *CircuitBreaker[R]) ToExecutor(_ R) any { return breakerExecutor[R]{cb} }

type breakerExecutor[R any] struct{ cb *CircuitBreaker[R] }

func (e breakerExecutor[R]) Apply(inner func(failsafe.Execution[R]) *common.PolicyResult[R]) func(failsafe.Execution[R]) *common.PolicyResult[R] {
	return func(exec failsafe.Execution[R]) *common.PolicyResult[R] {
		if _, ok := e.cb.TryAcquire(); !ok {
			return &common.PolicyResult[R]{Error: e.cb.Rejection(), Done: true}
		}
		pr := inner(exec)
		if pr.Error == nil {
			e.cb.RecordClass("")
			return pr.WithDone(true, true)
		}
		e.cb.RecordClass(ClassifyContext(exec.Context(), e.cb.cfg.Classifier, pr.Error).Class)
		return pr.WithFailure()
	}
}
