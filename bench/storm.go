package bench

import (
	"container/heap"
	"context"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/policies/state"
)

// Strategy is how the clients of a storm retry.
type Strategy string

const (
	NoJitter      Strategy = "no jitter"       // ToolRetry's backoff without its jitter: everyone retries in step
	Jitter        Strategy = "jitter"          // ToolRetry: each delay × a random factor in [0.5, 1]
	JitterBudget  Strategy = "jitter + budget" // and a task budget of 6 retries per client
	JitterBreaker Strategy = "jitter + breaker"
)

// Strategies are the four, in the order the results list them.
var Strategies = []Strategy{NoJitter, Jitter, JitterBudget, JitterBreaker}

// The fleet strategies: every client is a worker with ToolRetry's jitter, a
// circuit breaker and a retry budget (10% of calls over 10 s, 3 at least),
// either each its own (LocalFleet) or all shared through one State
// (SharedFleet), as workers sharing Redis share them; SharedRateFleet's
// shared breaker opens on the fleet's failure rate ([RateBreaker]) rather
// than on 5 consecutive failures anywhere in the fleet.
const (
	LocalFleet      Strategy = "local breakers + budgets"
	SharedFleet     Strategy = "shared breakers + budgets"
	SharedRateFleet Strategy = "shared breakers (failure rate 50%, 20 calls, 10 s) + budgets"
)

// FleetStrategies are the three, in the order the results list them.
var FleetStrategies = []Strategy{LocalFleet, SharedFleet, SharedRateFleet}

// Window is the width of the load series.
const Window = 100 * time.Millisecond

// StormConfig describes a retry storm: Clients, each running a task of
// CallsPerClient logical calls to a downstream that refuses everything
// during Outage and, after it, everything above Capacity requests per 100 ms
// window. At t = 0 every client's call in flight fails at the same moment
// (the downstream dropped them all); the storm is what the clients do next.
type StormConfig struct {
	Clients        int
	CallsPerClient int
	Capacity       int           // requests per Window the downstream serves once it is back
	Outage         time.Duration // from t = 0 it refuses everything this long
	Think          time.Duration // a client's pause between its logical calls
	// ThinkJitter, if above 0, makes each pause Think × a random factor in
	// [1-ThinkJitter, 1+ThinkJitter], from its own source seeded with Seed;
	// 0 → every pause is Think exactly.
	ThinkJitter float64
	Seed        uint64
	Strategy    Strategy
}

// FleetStorm is the storm of a fleet of n workers behind one provider: each
// makes 300 logical calls 1 s apart, the provider refuses everything for
// 2 minutes (two cool-downs of the breakers' 60 s) and then serves a tenth
// of the workers per 100 ms window.
func FleetStorm(n int, s Strategy) StormConfig {
	return StormConfig{Clients: n, CallsPerClient: 300, Capacity: max(1, n/10), Outage: 2 * time.Minute,
		Think: time.Second, Seed: 1, Strategy: s}
}

// FleetStormSpread is FleetStorm with each worker's pause between calls
// jittered by ±10%: workers whose calls ended together do not stay in step.
func FleetStormSpread(n int, s Strategy) StormConfig {
	cfg := FleetStorm(n, s)
	cfg.ThinkJitter = 0.1
	return cfg
}

// DefaultStorm is the storm the results page reports, for n clients: 5
// logical calls each, a 5 s outage, then room for a tenth of the clients
// per 100 ms window.
func DefaultStorm(n int, s Strategy) StormConfig {
	return StormConfig{Clients: n, CallsPerClient: 5, Capacity: max(1, n/10), Outage: 5 * time.Second,
		Think: 200 * time.Millisecond, Seed: 1, Strategy: s}
}

// StormResult is what the downstream saw and how the clients fared.
type StormResult struct {
	Config          StormConfig
	Series          []int         // downstream requests per Window from t = 0
	Peak            int           // the largest window
	DownstreamCalls int           // requests the downstream received
	LogicalCalls    int           // logical calls the clients made
	Succeeded       int           // logical calls that succeeded
	Finish          time.Duration // when the last client finished
}

// CallsPerLogical is the amplification: downstream requests per logical call.
func (r StormResult) CallsPerLogical() float64 {
	if r.LogicalCalls == 0 {
		return 0
	}
	return float64(r.DownstreamCalls) / float64(r.LogicalCalls)
}

// Simulate runs a storm in virtual time. The clients retry with retrace's
// own policies (the retry policy's engine deciding, its jitter drawn from a
// source seeded with cfg.Seed; a shared circuit breaker on a fake clock), so
// the result is deterministic for a seed and measures the code users run.
func Simulate(cfg StormConfig) StormResult {
	s := newSim(cfg)
	// At t = 0 every client's first attempt fails together.
	for id := range s.clients {
		s.failed(id, false)
	}
	for s.queue.Len() > 0 {
		e := heap.Pop(&s.queue).(event)
		s.now = e.at
		s.clk.Advance(s.start.Add(e.at).Sub(s.clk.Now()))
		s.attempt(e.client)
	}
	return s.result()
}

// sim is one storm in progress.
type sim struct {
	cfg       StormConfig
	clk       *clock.Fake
	start     time.Time
	now       time.Duration
	retry     *engine.Retry
	breaker   *engine.Breaker
	clients   []*stormClient
	queue     events
	load      map[int]int
	res       StormResult
	transient engine.Failure
	think     func() float64 // draws the pauses' jitter, with ThinkJitter
}

type stormClient struct {
	ctx     context.Context // carries the task budget
	call    int             // the logical call in progress, from 1
	attempt int             // its attempt, from 1
	retry   *engine.Retry   // the client's retry policy (its own with a retry budget)
	breaker *engine.Breaker // the client's breaker, nil for none
	budget  *policies.RetryBudget
}

func newSim(cfg StormConfig) *sim {
	clk := clock.NewFake(time.Unix(0, 0))
	retry := policies.ToolRetry
	retry.Clock, retry.Rand = clk, policies.SeededRand(cfg.Seed)
	if cfg.Strategy == NoJitter {
		retry.Backoff.Jitter = 0
	}
	s := &sim{
		cfg: cfg, clk: clk, start: clk.Now(), load: map[int]int{},
		retry:     executor[interface{ Engine() *engine.Retry }](policies.NewRetry[struct{}](retry)).Engine(),
		res:       StormResult{Config: cfg, LogicalCalls: cfg.Clients},
		transient: engine.Failure{Class: engine.Transient},
		think:     policies.SeededRand(^cfg.Seed), // a stream of its own: the retries' jitter is unchanged
	}
	if cfg.Strategy == JitterBreaker {
		s.breaker = executor[interface{ Engine() *engine.Breaker }](policies.NewCircuitBreaker[struct{}](policies.BreakerConfig{Clock: clk})).Engine()
	}
	var st state.State
	if cfg.Strategy == SharedFleet || cfg.Strategy == SharedRateFleet {
		st = state.NewMemory()
	}
	for range cfg.Clients {
		ctx := context.Background()
		if cfg.Strategy == JitterBudget {
			ctx = policies.WithTaskBudget(ctx, 6)
		}
		c := &stormClient{ctx: ctx, call: 1, attempt: 1, retry: s.retry, breaker: s.breaker}
		if cfg.Strategy == LocalFleet || cfg.Strategy == SharedFleet || cfg.Strategy == SharedRateFleet {
			c.budget = policies.NewRetryBudget(policies.RetryBudgetConfig{Name: "storm", State: st, Clock: clk})
			r := retry
			r.Budget = c.budget
			c.retry = executor[interface{ Engine() *engine.Retry }](policies.NewRetry[struct{}](r)).Engine()
			bc := policies.BreakerConfig{Name: "storm", Clock: clk, State: st}
			if cfg.Strategy == SharedRateFleet {
				bc = RateBreaker(bc)
			}
			c.breaker = executor[interface{ Engine() *engine.Breaker }](policies.NewCircuitBreaker[struct{}](bc)).Engine()
			c.budget.RecordExecution() // the call in flight at t = 0
		}
		s.clients = append(s.clients, c)
	}
	return s
}

// attempt sends client id's next request, or lets the breaker refuse it.
func (s *sim) attempt(id int) {
	c := s.clients[id]
	var permit engine.Permit
	if c.breaker != nil {
		var ok bool
		if permit, ok = c.breaker.Acquire(s.clk); !ok {
			s.failed(id, true)
			return
		}
	}
	w := int(s.now / Window)
	s.load[w]++
	s.res.DownstreamCalls++
	served := s.now >= s.cfg.Outage && s.load[w] <= s.cfg.Capacity
	if c.breaker != nil {
		if served {
			_ = c.breaker.Record(permit, state.Success, s.clk)
		} else {
			_ = c.breaker.Record(permit, state.Fail, s.clk)
		}
	}
	if !served {
		s.failed(id, false)
		return
	}
	s.res.Succeeded++
	s.done(id)
}

// failed decides what follows client id's failed attempt: a retry after the
// backoff, or the end of its logical call.
func (s *sim) failed(id int, rejected bool) {
	c := s.clients[id]
	if !rejected && c.breaker != nil && c.breaker.State() == circuitbreaker.OpenState {
		rejected = true // the failure opened the breaker: a retry would be refused at once
	}
	f := s.transient
	f.Rejected = rejected
	d := c.retry.Decide(c.ctx, s.clk, c.attempt, f, nil)
	if d.Retry {
		c.attempt++
		heap.Push(&s.queue, event{at: s.now + d.Delay, client: id})
		return
	}
	s.done(id)
}

// done ends client id's logical call and starts its next one after a pause.
func (s *sim) done(id int) {
	c := s.clients[id]
	s.res.Finish = max(s.res.Finish, s.now)
	if c.call >= s.cfg.CallsPerClient {
		return
	}
	c.call++
	c.attempt = 1
	s.res.LogicalCalls++
	if c.budget != nil {
		c.budget.RecordExecution()
	}
	think := s.cfg.Think
	if s.cfg.ThinkJitter > 0 {
		think = time.Duration(float64(think) * (1 - s.cfg.ThinkJitter + 2*s.cfg.ThinkJitter*s.think()))
	}
	heap.Push(&s.queue, event{at: s.now + think, client: id})
}

func (s *sim) result() StormResult {
	last := 0
	for w := range s.load {
		last = max(last, w)
	}
	s.res.Series = make([]int, last+1)
	for w, n := range s.load {
		s.res.Series[w] = n
		s.res.Peak = max(s.res.Peak, n)
	}
	return s.res
}

type event struct {
	at     time.Duration
	client int
}

// events is a min-heap by time, then by client, so that ties are ordered.
type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].client < h[j].client
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// executor returns what p's executor offers of H: the engine behind one of
// retrace's policies.
func executor[H any, R any](p failsafe.Policy[R]) H {
	var zero R
	return p.ToExecutor(zero).(H)
}
