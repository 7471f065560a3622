package policies

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies/state"
)

// TaskBudget is one retry count shared by every retrying layer and tool of a
// task. Each retry, at any depth, draws one; when none are left, retries stop
// with outcome budget_exhausted. It is safe for concurrent use.
type TaskBudget struct {
	limit int64
	used  atomic.Int64 // with a State: the shared count as last seen, and the local draws after it
	deny  atomic.Int64
	state state.State
	key   string
	ttl   time.Duration
}

// WithTaskBudget returns a context whose retrying layers share a budget of
// retries (calls after the first; first calls are never refused). A budget set
// further down replaces this one for the calls beneath it.
func WithTaskBudget(ctx context.Context, retries int) context.Context {
	return engine.WithBudget(ctx, &TaskBudget{limit: int64(max(retries, 0))})
}

// WithSharedTaskBudget returns a context whose retrying layers draw from the
// budget of task taskID on st: every worker of the task, in any process,
// draws from one count of retries. The count expires a day after its last
// draw.
//
// When st fails or does not answer in time, the draw is decided locally, on
// this worker's last sight of the shared count plus its own draws since: a
// worker cut off from st can then spend what it last saw left, so the task
// may overspend by what each cut-off worker spends, but no retry is refused
// for st's sake and no call waits on it.
func WithSharedTaskBudget(ctx context.Context, st state.State, taskID string, retries int) context.Context {
	if st == nil {
		return WithTaskBudget(ctx, retries)
	}
	return engine.WithBudget(ctx, batchTask{&TaskBudget{limit: int64(max(retries, 0)), state: st, key: "task:" + taskID, ttl: 24 * time.Hour}})
}

// TaskBudgetFrom returns the context's task budget, or nil.
func TaskBudgetFrom(ctx context.Context) *TaskBudget {
	switch b := engine.BudgetFrom(ctx).(type) {
	case *TaskBudget:
		return b
	case batchTask:
		return b.TaskBudget
	}
	return nil
}

// TryDraw takes one retry from the budget and reports whether there was one.
func (b *TaskBudget) TryDraw() bool {
	ok, _ := b.Draw(context.Background())
	return ok
}

// Draw takes one retry, from the shared State if the budget has one, and
// says which state decided.
func (b *TaskBudget) Draw(ctx context.Context) (bool, state.Use) {
	if b.state == nil {
		return b.drawLocal(), state.Use{}
	}
	v, err := b.state.Draw(ctx, b.key, b.limit, b.ttl)
	if err != nil {
		return b.drawLocal(), state.Use{Policy: state.PolicyBudget, Degraded: err}
	}
	return b.seen(v), state.Use{Policy: state.PolicyBudget, Shared: true}
}

// batchTask is a shared task budget as the retry loop sees it
// (engine.Batchable): its draw may travel in one batch with the retry's
// other steps on the State.
type batchTask struct{ *TaskBudget }

func (b batchTask) Deferred(ctx context.Context, call bool) (engine.Deferred, func() (bool, state.Use), bool) {
	return b.deferred(ctx, call)
}

// deferred is the draw as a step that waits for a batch, and its decision.
func (b *TaskBudget) deferred(_ context.Context, call bool) (engine.Deferred, func() (bool, state.Use), bool) {
	if b.state == nil || call {
		return engine.Deferred{}, nil, false
	}
	var ok bool
	var use state.Use
	d := engine.Deferred{State: b.state, Step: state.Step{Key: b.key, Draw: &state.DrawOp{Limit: b.limit, TTL: b.ttl}, Gate: true},
		Done: func(r state.StepResult, err error) {
			switch {
			case err != nil:
				ok, use = b.drawLocal(), state.Use{Policy: state.PolicyBudget, Degraded: err}
			case r.Skipped:
				// A gate before it (the failure opened the breaker) stopped
				// the retry: nothing was drawn.
				ok, use = false, state.Use{Policy: state.PolicyBudget, Shared: true}
			default:
				ok, use = b.seen(r.Draw), state.Use{Policy: state.PolicyBudget, Shared: true}
			}
		}}
	return d, func() (bool, state.Use) { return ok, use }, true
}

// seen follows the shared count up and returns the draw's answer.
func (b *TaskBudget) seen(v state.DrawView) bool {
	for {
		// The local count follows the shared one up, never down.
		used := b.used.Load()
		if used >= v.Used || b.used.CompareAndSwap(used, v.Used) {
			break
		}
	}
	if !v.OK {
		b.deny.Add(1)
	}
	return v.OK
}

func (b *TaskBudget) drawLocal() bool {
	for {
		used := b.used.Load()
		if used >= b.limit {
			b.deny.Add(1)
			return false
		}
		if b.used.CompareAndSwap(used, used+1) {
			return true
		}
	}
}

// Limit is the number of retries the task may make.
func (b *TaskBudget) Limit() int { return int(b.limit) }

// Used is the number of retries drawn so far: with a State, as this worker
// last saw the shared count.
func (b *TaskBudget) Used() int { return int(b.used.Load()) }

// Remaining is the number of retries left.
func (b *TaskBudget) Remaining() int { return int(b.limit - b.used.Load()) }

// Denied is the number of retries the budget has refused.
func (b *TaskBudget) Denied() int { return int(b.deny.Load()) }

// RetryBudgetConfig configures a [RetryBudget]. The zero value allows
// retries of at most 10% of the calls over the last 10 s, and 3 in any
// window however few the calls.
type RetryBudgetConfig struct {
	// Name keys the budget in its State; "" → "default".
	Name string
	// Ratio is the most retries per call over the window; 0 → 0.1.
	Ratio float64
	// Window is how far back calls and retries count (a sliding window);
	// 0 → 10 s.
	Window time.Duration
	// MinRetries are allowed in any window, however few the calls, so that
	// a quiet service can still retry; 0 → 3, negative → none.
	MinRetries int
	// State, if set, is shared by every budget of the same Name on it: the
	// calls and retries of the whole fleet count in one window.
	//
	// When the State fails or does not answer in time, the budget counts in
	// this worker's own window, which sees only this worker's calls: the
	// fleet may then retry its ratio of the calls of each worker, the same
	// bound, only no longer pooled. No call is refused or held for the
	// State's sake.
	State state.State
	// Clock times the window; nil → the wall clock. Workers sharing a State
	// need clocks that agree.
	Clock clock.Clock
}

// RetryBudget bounds retries to a fraction of calls over a sliding window,
// for a worker or, with a State, for a fleet: a retry storm is then bounded
// for the fleet, not per process. Give it to a retry policy as
// [RetryConfig.Budget]; each call that policy makes counts, and each retry
// asks the budget first (a refused retry ends the call budget_exhausted).
// It is safe for concurrent use.
type RetryBudget struct {
	cfg   RetryBudgetConfig
	key   string
	local *state.Memory // this worker's window: without a State, or when it fails
	last  atomic.Uint64 // math.Float64bits of the last retries/calls ratio seen
	// held counts the calls whose records this worker holds back (with a
	// state.Stepper), the first since heldSince (Unix ns): they travel
	// with its next retry's ask, which records them before it asks, or
	// with a call's record once holdCalls are held or a tenth of the window
	// has passed. The fleet's count of calls then lags this worker's by no
	// more, and a retry of this worker's never goes unseen by its own calls.
	held      atomic.Int64
	heldSince atomic.Int64
}

// holdCalls is how many call records a retry budget holds back at most.
const holdCalls = 16

// NewRetryBudget builds a retry budget (see [RetryBudgetConfig]).
func NewRetryBudget(cfg RetryBudgetConfig) *RetryBudget {
	if cfg.Ratio <= 0 {
		cfg.Ratio = 0.1
	}
	if cfg.Window <= 0 {
		cfg.Window = 10 * time.Second
	}
	switch {
	case cfg.MinRetries == 0:
		cfg.MinRetries = 3
	case cfg.MinRetries < 0:
		cfg.MinRetries = 0
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	key := cfg.Name
	if key == "" {
		key = "default"
	}
	return &RetryBudget{cfg: cfg, key: "retry:" + key, local: state.NewMemory()}
}

// Config returns the configuration with its defaults filled in.
func (b *RetryBudget) Config() RetryBudgetConfig { return b.cfg }

// step records a call or asks for a retry, on the State if there is one,
// else, or when it fails, on the local window.
func (b *RetryBudget) step(ctx context.Context, retry bool) (bool, state.Use) {
	op := state.RatioOp{Retry: retry, Now: b.cfg.Clock.Now(), Window: b.cfg.Window, Ratio: b.cfg.Ratio, MinRetries: b.cfg.MinRetries}
	var use state.Use
	if b.cfg.State != nil {
		v, err := b.cfg.State.Ratio(ctx, b.key, op)
		if err == nil {
			b.seen(v)
			return v.OK, state.Use{Policy: state.PolicyBudget, Shared: true}
		}
		use = state.Use{Policy: state.PolicyBudget, Degraded: err}
	}
	v, _ := b.local.Ratio(ctx, b.key, op) // memory never fails
	b.seen(v)
	return v.OK, use
}

// batchRate is a shared retry budget as the retry loop sees it
// (engine.Batchable): the record of a call (call) or the ask for a retry
// may travel in one batch with the call's other steps on the State.
type batchRate struct{ *RetryBudget }

func (b batchRate) Deferred(ctx context.Context, call bool) (engine.Deferred, func() (bool, state.Use), bool) {
	return b.deferred(ctx, call)
}

// deferred is the step that waits for a batch, and its decision. A record
// is no gate; a retry is.
func (b *RetryBudget) deferred(ctx context.Context, call bool) (engine.Deferred, func() (bool, state.Use), bool) {
	if b.cfg.State == nil {
		return engine.Deferred{}, nil, false
	}
	now := b.cfg.Clock.Now()
	_, stepper := b.cfg.State.(state.Stepper)
	if call && stepper && b.holds(now) {
		// Held back: counted once the call passed the breaker (a refused
		// one is dropped, never made), sent with a later step.
		d := engine.Deferred{State: b.cfg.State, Call: true, Done: func(r state.StepResult, err error) {
			if !r.Skipped && b.held.Add(1) == 1 {
				b.heldSince.Store(now.UnixNano())
			}
		}}
		return d, func() (bool, state.Use) { return true, state.Use{Policy: state.PolicyBudget, Shared: true} }, true
	}
	op := state.RatioOp{Retry: !call, Now: now, Window: b.cfg.Window, Ratio: b.cfg.Ratio, MinRetries: b.cfg.MinRetries}
	var carried int64
	if stepper {
		carried = b.held.Swap(0)
	}
	op.Calls = int(carried)
	if call {
		op.Calls++
	}
	var ok bool
	var use state.Use
	d := engine.Deferred{State: b.cfg.State, Step: state.Step{Key: b.key, Ratio: &op, Gate: !call}, Call: call,
		Done: func(r state.StepResult, err error) {
			switch {
			case err != nil:
				v, _ := b.local.Ratio(ctx, b.key, op) // memory never fails
				b.seen(v)
				ok, use = v.OK, state.Use{Policy: state.PolicyBudget, Degraded: err}
			case r.Skipped:
				// Not made: a gate before it stopped the retry, or the
				// call was refused before it reached anything. The calls
				// it carried are held again.
				b.held.Add(carried)
				ok, use = false, state.Use{Policy: state.PolicyBudget, Shared: true}
			default:
				b.seen(r.Ratio)
				ok, use = r.Ratio.OK, state.Use{Policy: state.PolicyBudget, Shared: true}
			}
		}}
	return d, func() (bool, state.Use) { return ok, use }, true
}

// holds reports whether a call's record at now may be held back: fewer
// than holdCalls are, and the first of them is less than a tenth of the
// window old.
func (b *RetryBudget) holds(now time.Time) bool {
	n := b.held.Load()
	return n+1 < holdCalls && (n == 0 || now.Sub(time.Unix(0, b.heldSince.Load())) < b.cfg.Window/10)
}

func (b *RetryBudget) seen(v state.RatioView) {
	r := 0.0
	if v.Calls > 0 {
		r = v.Retries / v.Calls
	}
	b.last.Store(math.Float64bits(r))
}

// Rate is the ratio of retries to calls over the window, as last seen. It
// implements failsafe-go's budget.Budget, so that the budget can be given
// as RetryConfig.Budget.
func (b *RetryBudget) Rate() float64 { return math.Float64frombits(b.last.Load()) }

// RecordExecution counts a call; retrace's retry loop calls it once per call.
func (b *RetryBudget) RecordExecution() { b.step(context.Background(), false) }

// ReleaseExecution does nothing: the budget counts calls over a window, not
// calls in flight.
func (b *RetryBudget) ReleaseExecution() {}

// TryAcquirePermit asks for one retry and reports whether it may go ahead.
func (b *RetryBudget) TryAcquirePermit() bool {
	ok, _ := b.step(context.Background(), true)
	return ok
}

// AcquireFrom asks for one retry and says which state decided.
func (b *RetryBudget) AcquireFrom(ctx context.Context) (bool, state.Use) {
	return b.step(ctx, true)
}

// ReleasePermit does nothing: a retry stays counted for the window.
func (b *RetryBudget) ReleasePermit() {}
