package policies

import (
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/common"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies/state"
)

// BreakerConfig configures a circuit breaker. The zero value opens after 5
// consecutive Transient failures, stays open 60 s, then lets one probe
// through; a successful probe closes it, a failed one reopens it. With
// FailureRate set it opens on the share of failed calls over a window
// instead, which scales with the number of workers sharing it.
type BreakerConfig struct {
	// Name names what the breaker protects ("search_docs") in its errors.
	Name string
	// FailureThreshold is the number of consecutive Transient failures that
	// open the breaker; 0 → 5. A success resets the count. It is ignored
	// when FailureRate is set.
	FailureThreshold int
	// FailureRate, if above 0, opens the breaker when at least this share
	// of the calls recorded in the last Window failed (0.5: half of them),
	// once the window holds MinimumCalls; above 1 → 1. Calls are Transient
	// failures and successes, as for FailureThreshold; the rate is checked
	// as each failure is recorded, so a success never opens it. The window is cut
	// into 10 buckets of Window/10 on the breaker's clock: a call leaves it
	// between 9/10 of Window and Window after it ended. The window starts
	// empty at each transition; the half-open probes and closing are as
	// without it. 0 → off: FailureThreshold consecutive failures open it.
	//
	// A consecutive count does not scale with a fleet sharing the breaker
	// (State): 1,000 workers make FailureThreshold consecutive failures
	// somewhere in the fleet within moments at any error rate, and reopen it
	// for everyone; a rate over the fleet's calls does not.
	FailureRate float64
	// MinimumCalls is the number of calls the window must hold before the
	// rate can open the breaker; 0 → 20 when FailureRate is set.
	MinimumCalls int
	// Window is how far back the rate looks; 0 → 10 s when FailureRate is
	// set.
	Window time.Duration
	// Delay is the cool-down before a half-open probe; 0 → 60 s.
	Delay time.Duration
	// HalfOpenProbes is the number of calls let through at once while half
	// open; 0 → 1.
	HalfOpenProbes int
	// SuccessThreshold is the number of successful probes that close the
	// breaker; 0 → 1, at most HalfOpenProbes.
	SuccessThreshold int
	// ProbeLease is how long a half-open probe holds its slot: a probe whose
	// end is never recorded (its worker died, the shared State lost the
	// record of it, the call hangs) lets another probe through once its
	// lease has passed, so that a lost probe never holds the breaker, or a
	// fleet sharing it, half open for good; 0 → Delay.
	ProbeLease time.Duration
	// Classifier decides which failures count; nil → the layer's
	// (middleware.WithClassifier), else the default rules. Only Transient
	// failures count; Canceled, Programming and Unknown ones are ignored; the
	// rest (a provider that answered with a Permanent error) show that the
	// downstream is up, and count as successes.
	Classifier *Classifier
	// Clock times the cool-down; nil → the clock of the layer that runs the
	// breaker (middleware.WithClock), else the wall clock. A breaker shared
	// by layers on different clocks should have its own.
	Clock clock.Clock
	// OnStateChange, if set, is called after each transition, outside the
	// breaker's lock. A panic in it is recovered: it cannot leave the
	// breaker stuck. With a State it is called in the worker whose call
	// made the transition.
	OnStateChange func(from, to circuitbreaker.State)
	// State, if set, is shared by every breaker of the same Name on it (the
	// workers of a fleet): the failures of all of them count toward
	// FailureThreshold, one probe goes through per cool-down for all of
	// them, and a successful probe closes it for everyone; with FailureRate
	// the rate is over the calls of all of them. Name is its key
	// ("" → "default"); give every worker the same settings, and a Clock
	// that agrees across them (the wall clock, or one started together).
	//
	// When the State fails or does not answer in time, the breaker decides
	// on its local state, counting this worker's calls alone, until it
	// answers again: an outage then costs each worker its own
	// FailureThreshold failures (or its own window, with FailureRate), as
	// without a State, but no call is refused or held because the State is
	// down.
	State state.State
	// StateTTL is how long the shared record outlives its last use; 0 → ten
	// cool-downs, at least an hour (an expired record starts closed).
	StateTTL time.Duration
	// LeaseCalls, with a State, lets a worker that the State has just
	// granted a call while closed grant itself the next LeaseCalls calls,
	// for at most LeaseFor (0 → one cool-down's tenth, at most a second),
	// without asking: their successes are sent with the next ask, and any
	// failure at once, which ends the lease. Half open is never leased. The
	// cost: a worker whose calls succeed may admit up to LeaseCalls calls,
	// within LeaseFor, after the breaker opened elsewhere (a store that
	// publishes transitions, contrib/redis with Watch, cuts that short).
	// 0 → no lease: every call asks the State.
	LeaseCalls int
	LeaseFor   time.Duration
}

// CircuitBreaker is the breaker [NewCircuitBreaker] builds. It implements
// failsafe-go's circuitbreaker.CircuitBreaker, so it works under
// failsafe.With and through failsafe-go's permit API, and it is safe for
// concurrent use.
type CircuitBreaker[R any] struct {
	cfg  BreakerConfig
	exec *breakerExecutor[R]
}

var _ circuitbreaker.CircuitBreaker[any] = (*CircuitBreaker[any])(nil)

// NewCircuitBreaker builds a circuit breaker that counts Transient failures
// only (see [BreakerConfig]). While open it rejects calls with a
// *[Error] of type circuit_open that matches circuitbreaker.ErrOpen and whose RetryAfter is
// the remaining cool-down.
func NewCircuitBreaker[R any](cfg BreakerConfig) *CircuitBreaker[R] {
	if cfg.FailureThreshold <= 0 {
		cfg.FailureThreshold = 5
	}
	if cfg.FailureRate > 0 {
		cfg.FailureRate = min(cfg.FailureRate, 1)
		if cfg.MinimumCalls <= 0 {
			cfg.MinimumCalls = 20
		}
		if cfg.Window <= 0 {
			cfg.Window = 10 * time.Second
		}
	} else {
		cfg.FailureRate = 0 // negative or NaN: off
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
	if cfg.ProbeLease <= 0 {
		cfg.ProbeLease = cfg.Delay
	}
	if cfg.LeaseCalls > 0 && cfg.LeaseFor <= 0 {
		cfg.LeaseFor = min(cfg.Delay/10, time.Second)
	}
	if cfg.State != nil && cfg.StateTTL <= 0 {
		cfg.StateTTL = max(time.Hour, 10*cfg.Delay)
	}
	key := cfg.Name
	if key == "" {
		key = "default"
	}
	b := engine.NewBreaker(engine.BreakerLimits{
		Name: cfg.Name, FailureThreshold: cfg.FailureThreshold,
		FailureRate: cfg.FailureRate, MinimumCalls: cfg.MinimumCalls, Window: cfg.Window, Delay: cfg.Delay, HalfOpenProbes: cfg.HalfOpenProbes, ProbeLease: cfg.ProbeLease,
		SuccessThreshold: cfg.SuccessThreshold, Clock: cfg.Clock, OnStateChange: cfg.OnStateChange,
		State: cfg.State, Key: "breaker:" + key, TTL: cfg.StateTTL, LeaseCalls: cfg.LeaseCalls, LeaseFor: cfg.LeaseFor,
	})
	return &CircuitBreaker[R]{cfg: cfg, exec: &breakerExecutor[R]{judge: judge{classifier: cfg.Classifier}, b: b}}
}

// Config returns the configuration with its defaults filled in.
func (cb *CircuitBreaker[R]) Config() BreakerConfig { return cb.cfg }

// ResultAgnostic implements failsafe.ResultAgnosticPolicy.
func (*CircuitBreaker[R]) ResultAgnostic() {}

// ToExecutor implements failsafe.Policy.
func (cb *CircuitBreaker[R]) ToExecutor(_ R) any { return cb.exec }

func (cb *CircuitBreaker[R]) engine() *engine.Breaker { return cb.exec.b }

// TryAcquirePermit implements circuitbreaker.CircuitBreaker. The permit is
// released by the next Record call.
func (cb *CircuitBreaker[R]) TryAcquirePermit() bool {
	_, ok := cb.engine().Acquire(nil)
	return ok
}

// RecordError implements circuitbreaker.CircuitBreaker: it classifies err and
// records it (nil is a success).
func (cb *CircuitBreaker[R]) RecordError(err error) {
	if err == nil {
		cb.record(state.Success)
		return
	}
	cb.record(engine.CountOf(string(cb.cfg.Classifier.Classify(err).Class)))
}

// RecordResult implements circuitbreaker.CircuitBreaker: a result is a success.
func (cb *CircuitBreaker[R]) RecordResult(R) { cb.record(state.Success) }

// RecordSuccess implements circuitbreaker.CircuitBreaker.
func (cb *CircuitBreaker[R]) RecordSuccess() { cb.record(state.Success) }

// RecordFailure implements circuitbreaker.CircuitBreaker: a Transient failure.
func (cb *CircuitBreaker[R]) RecordFailure() { cb.record(state.Fail) }

// record records a call made through failsafe-go's permit API, which hands
// out no permit: it counts toward the state the breaker is in now.
func (cb *CircuitBreaker[R]) record(c state.Count) { cb.engine().RecordCurrent(c, nil) }

// Open opens the breaker now.
func (cb *CircuitBreaker[R]) Open() { cb.engine().Set(circuitbreaker.OpenState, nil) }

// HalfOpen half-opens the breaker now.
func (cb *CircuitBreaker[R]) HalfOpen() { cb.engine().Set(circuitbreaker.HalfOpenState, nil) }

// Close closes the breaker now.
func (cb *CircuitBreaker[R]) Close() { cb.engine().Set(circuitbreaker.ClosedState, nil) }

// State returns the current state. An open breaker whose cool-down has ended
// reports OpenState until the next call asks for a permit.
func (cb *CircuitBreaker[R]) State() circuitbreaker.State { return cb.engine().State() }

func (cb *CircuitBreaker[R]) IsOpen() bool     { return cb.State() == circuitbreaker.OpenState }
func (cb *CircuitBreaker[R]) IsHalfOpen() bool { return cb.State() == circuitbreaker.HalfOpenState }
func (cb *CircuitBreaker[R]) IsClosed() bool   { return cb.State() == circuitbreaker.ClosedState }

// RemainingDelay returns the time left before an open breaker lets a probe
// through, 0 if it is not open.
func (cb *CircuitBreaker[R]) RemainingDelay() time.Duration { return cb.engine().Remaining(nil) }

// Metrics returns the counts since the last state transition.
func (cb *CircuitBreaker[R]) Metrics() circuitbreaker.Metrics { return breakerMetrics{cb.engine()} }

type breakerMetrics struct{ b *engine.Breaker }

func (m breakerMetrics) Executions() uint { e, _, _ := m.b.Counts(); return e }
func (m breakerMetrics) Failures() uint   { _, f, _ := m.b.Counts(); return f }
func (m breakerMetrics) Successes() uint  { _, _, s := m.b.Counts(); return s }

func (m breakerMetrics) FailureRate() float64 {
	e, f, _ := m.b.Counts()
	if e == 0 {
		return 0
	}
	return float64(f) / float64(e)
}

func (m breakerMetrics) SuccessRate() float64 {
	e, _, s := m.b.Counts()
	if e == 0 {
		return 0
	}
	return float64(s) / float64(e)
}

// breakerExecutor runs the breaker inside failsafe.With, and is how package
// middleware finds the breaker's engine and judge.
type breakerExecutor[R any] struct {
	judge
	b *engine.Breaker
}

// Engine returns the breaker's state machine.
func (e *breakerExecutor[R]) Engine() *engine.Breaker { return e.b }

// Rejection is the error of a call the breaker refuses now, on clk.
func (e *breakerExecutor[R]) Rejection(clk clock.Clock) *Error {
	return rejection(typeCircuitOpen, e.b.Limits().Name, e.b.Remaining(clk), circuitbreaker.ErrOpen)
}

func (e *breakerExecutor[R]) Apply(inner func(failsafe.Execution[R]) *common.PolicyResult[R]) func(failsafe.Execution[R]) *common.PolicyResult[R] {
	return func(exec failsafe.Execution[R]) *common.PolicyResult[R] {
		permit, ok := e.b.Acquire(nil)
		if !ok {
			return &common.PolicyResult[R]{Error: e.Rejection(nil), Done: true}
		}
		pr := inner(exec)
		if pr.Error == nil {
			e.b.Record(permit, state.Success, nil)
			return pr.WithDone(true, true)
		}
		cls, _ := e.Judge(exec.Context(), nil, pr.Error)
		e.b.Record(permit, engine.CountOf(string(cls.Class)), nil)
		return pr.WithFailure()
	}
}
