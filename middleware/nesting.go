package middleware

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/telemetry"
)

// frame is one layer call as the layers nested beneath it see it: which
// layers enclose it, how many attempts each may make, and where leaf calls
// are counted.
type frame struct {
	parent      *frame
	root        *root
	layer       string
	maxAttempts int           // 1: not retrying; 0: unknown (a retry policy retrace cannot read)
	depth       int           // retrying layers enclosing this one
	attempt     int           // the current attempt, from 1
	delay       time.Duration // the backoff waited before it
	nested      atomic.Bool   // a layer started beneath the current attempt
	childWorst  atomic.Int64  // largest worst case among the nested layers; 0 none, -1 unknown
}

// root is what the outermost layer call collects from all beneath it.
type root struct {
	calls    atomic.Int64 // leaf calls: handler invocations with no layer beneath them
	span     trace.Span
	mu       sync.Mutex
	reported []string // nested chains already announced on the root span
}

type frameKey struct{}

// frameCtx carries a frame without a separate allocation: it lives inside
// the call. Cancellation and values pass through to the embedded context.
type frameCtx struct {
	context.Context
	f *frame
}

func (c *frameCtx) Value(key any) any {
	if _, ok := key.(frameKey); ok {
		return c.f
	}
	return c.Context.Value(key)
}

func frameFrom(ctx context.Context) *frame {
	f, _ := ctx.Value(frameKey{}).(*frame)
	return f
}

func (f *frame) init(parent *frame, layer string, maxAttempts int, own *root) {
	f.parent, f.layer, f.maxAttempts = parent, layer, maxAttempts
	if parent == nil {
		f.root = own
		return
	}
	f.root = parent.root
	f.depth = parent.depth
	if parent.retrying() {
		f.depth++
	}
	parent.nested.Store(true)
}

func (f *frame) retrying() bool { return f.maxAttempts != 1 }

// worst is the most leaf calls this layer call could have made: its own max
// attempts times the worst among the layers beneath it; -1 when unknown.
func (f *frame) worst() int64 {
	if f.maxAttempts == 0 {
		return -1
	}
	cw := f.childWorst.Load()
	if cw < 0 {
		return -1
	}
	return int64(f.maxAttempts) * max(cw, 1)
}

// reportWorst hands this call's worst case to the enclosing layer.
func (f *frame) reportWorst() {
	p := f.parent
	if p == nil {
		return
	}
	w := f.worst()
	for {
		cur := p.childWorst.Load()
		if cur < 0 || (w >= 0 && w <= cur) {
			return
		}
		if p.childWorst.CompareAndSwap(cur, w) {
			return
		}
	}
}

// announceNesting adds a span event to the outermost layer span the first
// time a retrying layer starts inside another retrying layer: the chain of
// layers and the worst case of leaf calls it implies, before they happen.
func (f *frame) announceNesting() {
	if !f.retrying() || f.depth == 0 || f.root.span == nil {
		return
	}
	var chain []string
	worst := int64(1)
	for x := f; x != nil; x = x.parent {
		if !x.retrying() {
			continue
		}
		if x.maxAttempts == 0 {
			chain = append(chain, x.layer+"(?)")
			worst = -1
			continue
		}
		chain = append(chain, fmt.Sprintf("%s(%d)", x.layer, x.maxAttempts))
		if worst > 0 {
			worst *= int64(x.maxAttempts)
		}
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	key := strings.Join(chain, " × ")
	r := f.root
	r.mu.Lock()
	for _, k := range r.reported {
		if k == key {
			r.mu.Unlock()
			return
		}
	}
	r.reported = append(r.reported, key)
	r.mu.Unlock()
	r.span.AddEvent(telemetry.EventNestedRetry, trace.WithAttributes(
		telemetry.NestedLayers.String(key),
		telemetry.CallsWorstCase.Int64(worst),
	))
}

// Attempt describes the attempt a handler runs in.
type Attempt struct {
	Layer       string        // the innermost enclosing layer
	N           int           // the attempt, from 1
	MaxAttempts int           // the layer's limit; 0 if unknown
	Delay       time.Duration // the backoff waited before this attempt
}

// AttemptFrom returns the attempt of the innermost layer that ctx runs in,
// and false outside any layer. Handlers use it to number what they record,
// or to treat a retry differently from a first call.
func AttemptFrom(ctx context.Context) (Attempt, bool) {
	f := frameFrom(ctx)
	if f == nil {
		return Attempt{}, false
	}
	return Attempt{Layer: f.layer, N: max(f.attempt, 1), MaxAttempts: f.maxAttempts, Delay: f.delay}, true
}
