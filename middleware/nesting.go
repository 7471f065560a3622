package middleware

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// frame is one layer call as the layers nested beneath it see it: which
// layers enclose it, how many attempts each may make, and where leaf calls
// are counted.
type frame struct {
	parent      *frame
	root        *root
	layer       string
	maxAttempts int           // attempts (or steps) it may make; 0: unknown (a retry policy retrace cannot read)
	retries     bool          // it retries: it counts in retrace.retry.depth and the nested-retry event
	perAttempt  bool          // each layer called beneath it is one of its handler's own attempts (WithInnerAttempts)
	nested      atomic.Bool   // a layer started beneath the current attempt
	unknown     atomic.Bool   // a layer beneath has no known worst case
	inner       int           // the handler's own attempts, when perAttempt
	innerName   string        // the retry layer that makes them, if it has a name (WithInnerRetries)
	foreign     *foreignRetry // non-nil: a retry loop retrace does not drive (WithinRetry)
	depth       int           // retrying layers enclosing this one
	attempt     int           // the current attempt, from 1
	delay       time.Duration // the backoff waited before it
	childSum    atomic.Int64  // the worst cases of the layers called in the current attempt, added up
	childMax    atomic.Int64  // the largest such sum of the attempts before it
	// failedBeneath is how the last layer call beneath the current attempt
	// failed, nil when it succeeded: what an error the handler returns
	// stands for when it says nothing of itself (an SDK's error made of an
	// error event's text, which middleware.SDK decoded beneath it), and the
	// classification this layer takes instead of classifying again when
	// the handler's error wraps that call's.
	failedBeneath atomic.Pointer[beneath]
	announced     *atomic.Pointer[nestedChain] // the layer's last announced chain (announceNesting)
	tp            trace.TracerProvider         // the providers the call records on, for the layers beneath that have none
	mp            metric.MeterProvider
}

// root is what the outermost layer call collects from all beneath it.
type root struct {
	calls    atomic.Int64 // leaf calls: handler invocations with no layer beneath them
	untraced atomic.Int64 // leaf calls whose span was not recorded while the root's was
	// uncounted are leaf calls retrace.calls does not count: unsent ones
	// ([Unsent]) and those of a layer WithUncounted.
	uncounted atomic.Int64
	span      trace.Span
	mu        sync.Mutex
	more      *rootMore // guarded by mu; made when a layer beneath first needs it
}

// rootMore is what only some calls collect on their root: nested retries
// announced, credentials seen beneath. Apart from root, so that a call
// that nests nothing carries none of it.
type rootMore struct {
	reported []uint64  // hashes of the nested chains already announced on the root span
	inline   [2]uint64 // reported's first hashes, without another allocation
	secrets  []string  // credentials a layer beneath saw (an SDK request's API key)
}

// moreLocked returns r.more, made if it was not; r.mu must be held.
func (r *root) moreLocked() *rootMore {
	if r.more == nil {
		r.more = new(rootMore)
	}
	return r.more
}

// learn adds credentials a layer beneath saw to those every layer of the
// call redacts: a provider's answer that echoes the key reaches the spans
// of the layers above the request too.
func (r *root) learn(values []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range values {
		if len(v) >= engine.MinSecretLen && (r.more == nil || !slices.Contains(r.more.secrets, v)) {
			m := r.moreLocked()
			m.secrets = append(m.secrets, v)
		}
	}
}

// learned returns the credentials layers beneath saw.
func (r *root) learned() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.more == nil {
		return nil
	}
	return r.more.secrets
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

func (f *frame) init(parent *frame, layer string, maxAttempts int, retries bool, own *root) {
	f.parent, f.layer, f.maxAttempts, f.retries = parent, layer, maxAttempts, retries
	if parent == nil {
		f.root = own
		return
	}
	f.root = parent.root
	f.depth = parent.depth
	if parent.retries {
		f.depth++
	}
	parent.nested.Store(true)
}

// startAttempt begins attempt n, after a wait of delay: the layers the
// previous attempt called are done, and its sum of their worst cases is
// kept if it is the largest so far.
func (f *frame) startAttempt(n int, delay time.Duration) {
	f.attempt, f.delay = n, delay
	f.failedBeneath.Store(nil)
	f.fold()
}

// beneath is how a layer call failed, as the enclosing layer's attempt
// reads it.
type beneath struct {
	cls policies.Classification // as the call's span says it
	// err, when not nil, is the error the call returned, classified raw
	// (the classifier's own words, before the call's context had its say)
	// by the classifier by: a layer above that judges an error wrapping err
	// with the same classifier takes raw, so that one failure is
	// classified once however many layers it crosses.
	err error
	raw policies.Classification
	by  *policies.Classifier
}

// classifiedBeneath returns the classification raw of the failure beneath
// that err stands for, if the classifier by classified it: err is that
// failure's error, or wraps it (a handler's fmt.Errorf with %w around its model
// call's error).
func (f *frame) classifiedBeneath(err error, by *policies.Classifier) (policies.Classification, bool) {
	b := f.failedBeneath.Load()
	if b == nil || b.err == nil || b.by != by {
		return policies.Classification{}, false
	}
	for e, depth := err, 0; e != nil && depth < 8; e, depth = errors.Unwrap(e), depth+1 {
		if sameError(e, b.err) {
			return b.raw, true
		}
	}
	return policies.Classification{}, false
}

// sameError reports whether a and b are the same error value. Only pointers
// are compared: an error of another kind may not be comparable, and == on
// it would panic.
func sameError(a, b error) bool {
	ta := reflect.TypeOf(a)
	return ta != nil && ta.Kind() == reflect.Pointer && ta == reflect.TypeOf(b) && a == b
}

// endedBeneath tells the enclosing layer's current attempt how a layer call
// beneath it ended: cls when it failed, nil when it succeeded.
func (f *frame) endedBeneath(cls *beneath) {
	if p := f.parent; p != nil {
		p.failedBeneath.Store(cls)
	}
}

func (f *frame) fold() {
	if sum := f.childSum.Swap(0); sum > f.childMax.Load() {
		f.childMax.Store(sum)
	}
}

// worst is the most leaf calls this layer call could have made: its max
// attempts (or steps) times the costliest attempt among those it made, each
// attempt costing the worst cases of the layers it called, added up (one
// leaf call if it called none); -1 when unknown.
func (f *frame) worst() int64 {
	if f.maxAttempts == 0 || f.unknown.Load() {
		return -1
	}
	per := max(f.childMax.Load(), f.childSum.Load(), 1)
	return int64(f.maxAttempts) * per
}

// reportWorst adds this call's worst case to the enclosing layer's current
// attempt.
func (f *frame) reportWorst() {
	p := f.parent
	if p == nil {
		return
	}
	w := f.worst()
	switch {
	case w < 0:
		p.unknown.Store(true)
	case p.perAttempt:
		// The enclosing handler's own retries (an SDK's) call this layer once
		// each: they are already counted by its WithInnerAttempts, so the
		// costliest of them counts, not their sum.
		for cur := p.childSum.Load(); w > cur && !p.childSum.CompareAndSwap(cur, w); cur = p.childSum.Load() {
		}
	default:
		p.childSum.Add(w)
	}
	if p.foreign != nil {
		p.carryWorst()
	}
}

// NextStep marks, in a handler that repeats work of its own and declared it
// with [WithSteps] (an agent loop's turns), the start of its next step: the
// layer's worst case is its steps times its costliest step, not the sum of
// every step's. Outside a layer it does nothing.
func NextStep(ctx context.Context) {
	if f := frameFrom(ctx); f != nil {
		f.fold()
	}
}

// FNV-1a, 64 bits (hash/fnv's), written out: a chain is hashed on every
// nested layer call, and hash/fnv's Hash64 would be one allocation each.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

func fnvInt(h uint64, n int) uint64 {
	for i := 0; i < 64; i += 8 {
		h = fnvByte(h, byte(uint64(n)>>i))
	}
	return h
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, s[i])
	}
	return h
}

// announceNesting adds a span event to the outermost layer span the first
// time a retrying layer starts inside another retrying layer: the chain of
// layers and the worst case of leaf calls it implies, before they happen.
// A chain already announced costs a hash and a look-up, no allocation.
func (f *frame) announceNesting() {
	// A layer that declares a named retry beneath its own (WithInnerRetries)
	// nests two retrying layers by itself.
	if !f.retries || f.depth == 0 && (f.innerName == "" || f.inner < 2 || f.maxAttempts <= f.inner) || f.root.span == nil {
		return
	}
	sum := uint64(fnvOffset)
	for x := f; x != nil; x = x.parent {
		if x.retries {
			// Everything the chain's words are made of (nestedChain).
			sum = fnvString(sum, x.layer)
			sum = fnvInt(sum, x.maxAttempts)
			sum = fnvInt(sum, x.inner)
			if x.perAttempt {
				sum = fnvByte(sum, 1)
			}
			sum = fnvString(fnvByte(sum, 0), x.innerName)
		}
	}
	r := f.root
	r.mu.Lock()
	m := r.moreLocked()
	if slices.Contains(m.reported, sum) {
		r.mu.Unlock()
		return
	}
	if m.reported == nil {
		m.reported = m.inline[:0]
	}
	m.reported = append(m.reported, sum)
	r.mu.Unlock()

	// A layer's chain is the same on every call its layers make, so it is
	// worded once and kept on the layer for the calls after.
	var nc *nestedChain
	if f.announced != nil {
		nc = f.announced.Load()
	}
	if nc == nil || nc.sum != sum {
		nc = f.nestedChain(sum)
		if f.announced != nil {
			f.announced.Store(nc)
		}
	}
	r.span.AddEvent(telemetry.EventNestedRetry, nc.event)
}

// nestedChain is a chain of retrying layers as the nested-retry event
// tells it: the layers outermost first with their attempts, and the worst
// case of leaf calls they imply (-1 when a limit is unknown).
type nestedChain struct {
	sum    uint64 // its hash
	layers string // "runtime(3) × session(3)"
	worst  int64
	event  trace.EventOption // the event's attributes, made with the chain
}

func (f *frame) nestedChain(sum uint64) *nestedChain {
	var chain []string
	worst := int64(1)
	for x := f; x != nil; x = x.parent {
		if !x.retries {
			continue
		}
		own := x.maxAttempts
		if x.innerName != "" && x.perAttempt && own > 0 {
			// The named inner layer stands beneath the layer's own retries;
			// the chain is reversed below, so it goes in first.
			chain = append(chain, x.innerName+"("+strconv.Itoa(x.inner)+")")
			if worst > 0 {
				worst *= int64(x.inner)
			}
			if own /= x.inner; own <= 1 {
				continue
			}
		}
		if own == 0 {
			chain = append(chain, x.layer+"(?)")
			worst = -1
			continue
		}
		chain = append(chain, x.layer+"("+strconv.Itoa(own)+")")
		if worst > 0 {
			worst *= int64(own)
		}
	}
	slices.Reverse(chain)
	nc := &nestedChain{sum: sum, layers: strings.Join(chain, " × "), worst: worst}
	nc.event = trace.WithAttributes(telemetry.NestedLayers.String(nc.layers), telemetry.CallsWorstCase.Int64(nc.worst))
	return nc
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
