package soak

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	seed = flag.Uint64("soak.seed", 1, "the seed of the chaos soak's fault mix")
	// calls is the number of logical calls: soakCalls unless asked (CI asks
	// for 10,000 under the race detector, whose build the rest of CI shares).
	calls = flag.Int("soak.calls", soakCalls, "the chaos soak's number of logical calls")
)

const (
	workers = 8 // goroutines making the logical calls
	// faultRate is the share of provider requests answered with a fault. A
	// fault rate of 30% on every request alone would almost never exhaust the
	// runtime's 3 × 4 attempts (0.3^12 per call), so outageRate of the calls
	// run into an outage, where every request is faulted, and the other calls
	// see callRate: together about 30% of the requests.
	faultRate  = 0.30
	outageRate = 0.01
	callRate   = 0.24
	// deadline bounds the whole soak. It is generous, so that only a hang
	// reaches it. Every call's virtual clock starts when the soak starts, and
	// a call's waits add up to at most 64 s, so no retry ever finds the next
	// wait past the deadline, however slow the machine.
	deadline = 3 * time.Minute
	prompt   = "soak call " // the user prompt of call i is prompt + i
	apiKey   = "sk-soak-0123456789abcdefghij"
)

// callKey is the attribute on each root span that names its logical call.
const callKey = attribute.Key("soak.call")

// kind is what the fault server does with a request.
type kind int

const (
	kindOK kind = iota
	kind503
	kind429
	kindReset
	kindEOF
	kind401
	kinds
)

func (k kind) String() string {
	return [kinds]string{"ok", "503", "429+Retry-After", "reset mid-stream", "EOF before [DONE]", "401"}[k]
}

// share is each fault's share of the faulted requests.
func (k kind) share() float64 {
	return [kinds]float64{kind503: 0.30, kind429: 0.25, kindReset: 0.22, kindEOF: 0.20, kind401: 0.03}[k]
}

// fault is the answer to one provider request.
type fault struct {
	kind       kind
	retryAfter time.Duration // kind429: the Retry-After header, 1–5 s
	chunks     int           // kindReset, kindEOF: the content chunks sent before the cut, 0–5 of 5
}

// outage reports whether logical call i runs into an outage.
func outage(seed uint64, i int) bool {
	return rand.New(rand.NewPCG(^seed, uint64(i))).Float64() < outageRate
}

// faultAt is the fault for request n (from 0) of logical call i. It is a
// pure function of the seed, i and n, so the soak is deterministic whatever
// order the calls' requests reach the server in, and predict can replay it.
func faultAt(seed uint64, i, n int) fault {
	rng := rand.New(rand.NewPCG(seed, uint64(i)<<20|uint64(n)))
	if rng.Float64() >= callRate && !outage(seed, i) {
		return fault{kind: kindOK}
	}
	f := fault{kind: kind401}
	p := rng.Float64()
	for k := kind503; k < kind401; k++ {
		if p < k.share() {
			f.kind = k
			break
		}
		p -= k.share()
	}
	switch f.kind {
	case kind429:
		f.retryAfter = time.Duration(1+rng.IntN(5)) * time.Second
	case kindReset, kindEOF:
		f.chunks = rng.IntN(len(retracetest.ReplyChunks(retracetest.DefaultReply)) + 1)
	}
	return f
}

func (f fault) answer() retracetest.Fault {
	switch f.kind {
	case kind503:
		return retracetest.ServerError(http.StatusServiceUnavailable)
	case kind429:
		return retracetest.RateLimited(f.retryAfter)
	case kindReset:
		return retracetest.StreamReset(f.chunks)
	case kindEOF:
		return retracetest.StreamEOF(f.chunks)
	case kind401:
		return retracetest.InvalidAPIKey()
	}
	return retracetest.OK()
}

// expectation is how a logical call must end, by the layers' documented
// rules: the session makes up to 4 attempts with 2 s, 4 s and 8 s between
// them, the runtime up to 3 sessions with 1.5 s and 3 s between them; each
// waits the larger of its backoff and the last error's Retry-After; a 401
// is permanent and stops both, every other fault is transient.
type expectation struct {
	requests int
	outcome  string          // of the root span
	attempts int             // the runtime's attempts
	delays   []time.Duration // the runtime's waits before its attempts 2, 3
	class    policies.Class  // a failed call's class
	sleeps   []time.Duration // every wait on the call's clock, in order
}

func predict(seed uint64, i int, sessionRetry, runtimeRetry policies.RetryConfig) expectation {
	wait := func(cfg policies.RetryConfig, n int, f fault) time.Duration {
		return max(cfg.Backoff.Delay(n, nil), min(f.retryAfter, cfg.MaxRetryAfter))
	}
	var e expectation
	for k := 1; ; k++ {
		e.attempts = k
		var last fault
		for j := 1; ; j++ {
			last = faultAt(seed, i, e.requests)
			e.requests++
			if last.kind == kindOK || last.kind == kind401 || j == sessionRetry.MaxAttempts {
				break
			}
			e.sleeps = append(e.sleeps, wait(sessionRetry, j, last))
		}
		switch {
		case last.kind == kindOK && k == 1:
			e.outcome = telemetry.OutcomeSuccess
			return e
		case last.kind == kindOK:
			e.outcome = telemetry.OutcomeSuccessAfterRetry
			return e
		case last.kind == kind401:
			e.outcome, e.class = telemetry.OutcomeFailedPermanent, policies.Permanent
			return e
		case k == runtimeRetry.MaxAttempts:
			e.outcome, e.class = telemetry.OutcomeFailedExhausted, policies.Transient
			return e
		}
		d := wait(runtimeRetry, k, last)
		e.sleeps, e.delays = append(e.sleeps, d), append(e.delays, d)
	}
}

// rootSpans is a span processor that keeps, of all the spans, only what the
// soak checks: each root's retrace.calls and outcome by logical call, the
// sum of retrace.calls, and a histogram of the layer spans' outcomes.
type rootSpans struct {
	mu      sync.Mutex
	byCall  []root
	stray   int   // roots that name no logical call
	calls   int64 // Σ retrace.calls over the roots
	layers  map[string]int
	models  int // model layer spans: one per provider call
	spans   int // every span ended
	unknown int // spans with retrace.error.class unknown
	leaked  int // spans whose attributes or status carry the API key
}

type root struct {
	seen      int
	calls     int64
	worstCase int64
	outcome   string
	class     string
	failed    bool // the span's status is Error
}

func newRootSpans(n int) *rootSpans {
	return &rootSpans{byCall: make([]root, n), layers: map[string]int{}}
}

func (r *rootSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *rootSpans) Shutdown(context.Context) error                  { return nil }
func (r *rootSpans) ForceFlush(context.Context) error                { return nil }

func (r *rootSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	var (
		layer, outcome, class string
		call                  = -1
		calls, worstCase      int64
		sub                   bool // an attempt or policy span, not a layer span
		leaked                = strings.Contains(s.Status().Description, apiKey)
	)
	for _, kv := range s.Attributes() {
		leaked = leaked || strings.Contains(kv.Value.String(), apiKey)
		switch kv.Key {
		case telemetry.Layer:
			layer = kv.Value.AsString()
		case telemetry.Outcome:
			outcome = kv.Value.AsString()
		case telemetry.ErrorClass:
			class = kv.Value.AsString()
		case telemetry.Calls:
			calls = kv.Value.AsInt64()
		case telemetry.CallsWorstCase:
			worstCase = kv.Value.AsInt64()
		case telemetry.Attempt, telemetry.Policy:
			sub = true
		case callKey:
			call = int(kv.Value.AsInt64())
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans++
	if class == string(policies.Unknown) {
		r.unknown++
	}
	if leaked {
		r.leaked++
	}
	if !sub && layer != "" {
		r.layers[layer+" "+outcome]++
		if layer == "model" {
			r.models++
		}
	}
	if s.Parent().IsValid() {
		return
	}
	if call < 0 || call >= len(r.byCall) {
		r.stray++
		return
	}
	r.calls += calls
	rt := &r.byCall[call]
	rt.seen++
	rt.calls, rt.worstCase, rt.outcome, rt.class = calls, worstCase, outcome, class
	rt.failed = s.Status().Code == codes.Error
}

func (r *rootSpans) root(i int) root {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byCall[i]
}

// problems counts what went wrong by kind and keeps a few examples of each.
type problems struct {
	mu       sync.Mutex
	count    map[string]int
	examples map[string][]string
}

func (p *problems) add(what, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count[what]++
	if len(p.examples[what]) < 3 {
		p.examples[what] = append(p.examples[what], fmt.Sprintf(format, args...))
	}
}

func (p *problems) report(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, what := range slices.Sorted(maps.Keys(p.count)) {
		t.Errorf("%s: %d calls, e.g.\n\t%s", what, p.count[what], strings.Join(p.examples[what], "\n\t"))
	}
}

// soak is one run: the fault server, the shared provider and tracing, and
// what the server and the spans saw of each logical call.
type soak struct {
	seed                       uint64
	srv                        *retracetest.Server
	provider                   *session.OpenAI
	tp                         *sdktrace.TracerProvider
	roots                      *rootSpans
	sessionRetry, runtimeRetry policies.RetryConfig

	requests []atomic.Int32 // requests the server received, by logical call
	state    []atomic.Int32 // 0 not started, 1 running, 2 ended, by logical call
	injected [kinds]atomic.Int64
	unparsed atomic.Int64 // requests that named no logical call
	shape    atomic.Int64 // requests whose messages were not [system, user], or not a stream
	slept    atomic.Int64 // virtual time slept by all calls
	problems problems
}

// script answers each request with its logical call's next fault.
func (s *soak) script(_ int, req retracetest.Request) retracetest.Fault {
	i := -1
	for _, m := range slices.Backward(req.Messages) {
		if m.Role == "user" {
			if rest, ok := strings.CutPrefix(m.Content, prompt); ok {
				if n, err := strconv.Atoi(rest); err == nil && n >= 0 && n < len(s.requests) {
					i = n
				}
			}
			break
		}
	}
	if i < 0 {
		s.unparsed.Add(1)
		return retracetest.OK()
	}
	if m := req.Messages; len(m) != 2 || m[0].Role != "system" || m[1].Role != "user" || !req.Stream || !req.IncludeUsage {
		// A failed turn's message must not reach the next request, and a
		// failed Run must leave the history as it was.
		s.shape.Add(1)
	}
	f := faultAt(s.seed, i, int(s.requests[i].Add(1))-1)
	s.injected[f.kind].Add(1)
	return f.answer()
}

// call makes logical call i: a session and a runtime of its own, on a
// virtual clock of its own that starts at start (so that one call's backoffs
// never advance the time under another's model timeout), through the shared
// provider.
func (s *soak) call(ctx context.Context, start time.Time, i int) {
	s.state[i].Store(1)
	defer s.state[i].Store(2)
	clk := clock.NewVirtual(start)
	opts := []middleware.Option{middleware.WithTracerProvider(s.tp), middleware.WithClock(clk)}
	sess, err := session.New(session.Config{Provider: s.provider, Model: "gpt-soak", System: "You are terse.", Options: opts})
	if err != nil {
		s.problems.add("session.New failed", "call %d: %v", i, err)
		return
	}
	rt := runtime.New(sess, runtime.Config{Options: append(opts, middleware.WithAttributes(callKey.Int(i)))})
	msg, err := rt.Exec(ctx, prompt+strconv.Itoa(i))
	s.check(i, msg, err, clk.Slept())
}

// check compares how call i ended with its expectation, its root span and
// the server's count of its requests.
func (s *soak) check(i int, msg session.Message, err error, slept []time.Duration) {
	want := predict(s.seed, i, s.sessionRetry, s.runtimeRetry)
	var total time.Duration
	for _, d := range slept {
		total += d
	}
	s.slept.Add(int64(total))

	got := s.roots.root(i)
	requests := int(s.requests[i].Load())
	switch {
	case got.seen == 0:
		s.problems.add("no root span when Exec returned", "call %d: err %v", i, err)
		return
	case got.seen > 1:
		s.problems.add("more than one root span", "call %d: %d roots", i, got.seen)
	}
	switch string(got.outcome) {
	case telemetry.OutcomeSuccess, telemetry.OutcomeSuccessAfterRetry, telemetry.OutcomeFailedPermanent, telemetry.OutcomeFailedExhausted:
	default:
		s.problems.add("root outcome "+got.outcome, "call %d: class %q, %d requests, err %v", i, got.class, requests, err)
	}
	if got.outcome != string(want.outcome) {
		s.problems.add("root outcome differs from the expected one", "call %d: outcome %s, want %s (faults %v); err %v",
			i, got.outcome, want.outcome, faultsOf(s.seed, i, max(requests, want.requests)), err)
	}
	if worst := int64(s.sessionRetry.MaxAttempts * s.runtimeRetry.MaxAttempts); got.worstCase != worst {
		s.problems.add("retrace.calls.worst_case ≠ runtime × session attempts", "call %d: worst case %d, retrace.calls %d", i, got.worstCase, got.calls)
	}
	if got.failed != failed(want.outcome) {
		s.problems.add("root span status disagrees with its outcome", "call %d: status error %t, outcome %s", i, got.failed, got.outcome)
	}
	if int64(requests) != got.calls {
		s.problems.add("server requests ≠ retrace.calls", "call %d: %d requests, retrace.calls %d, outcome %s", i, requests, got.calls, got.outcome)
	}
	if requests != want.requests {
		s.problems.add("server requests ≠ the expected requests", "call %d: %d requests, want %d (faults %v)",
			i, requests, want.requests, faultsOf(s.seed, i, max(requests, want.requests)))
	}
	if !slices.Equal(slept, want.sleeps) {
		s.problems.add("waits differ from the expected ones", "call %d: slept %v, want %v (faults %v)",
			i, slept, want.sleeps, faultsOf(s.seed, i, want.requests))
	}

	if !failed(want.outcome) {
		if err != nil {
			s.problems.add("Exec failed where the call should succeed", "call %d: %v", i, err)
		} else if msg.Content != retracetest.DefaultReply {
			s.problems.add("wrong reply", "call %d: %q", i, msg.Content)
		}
		return
	}
	if err == nil {
		s.problems.add("Exec succeeded where the call should fail", "call %d: want %s", i, want.outcome)
		return
	}
	if strings.Contains(err.Error(), apiKey) {
		s.problems.add("the API key in Exec's error", "call %d", i)
	}
	if cls := policies.Classify(err); cls.Class == policies.Unknown {
		s.problems.add("error of class unknown", "call %d: reason %q: %v", i, cls.Reason, err)
	} else if cls.Class != want.class {
		s.problems.add("error class differs from the expected one", "call %d: class %s, want %s: %v", i, cls.Class, want.class, err)
	}
	ee, ok := errors.AsType[*runtime.ExecError](err)
	switch {
	case !ok:
		s.problems.add("error is not an *ExecError", "call %d: %T %v", i, err, err)
	case ee.Outcome != want.outcome:
		s.problems.add("ExecError.Outcome differs from the expected one", "call %d: %s, want %s: %v", i, ee.Outcome, want.outcome, err)
	case len(ee.Attempts) != want.attempts:
		s.problems.add("ExecError.Attempts differs from the expected one", "call %d: %d attempts, want %d: %v", i, len(ee.Attempts), want.attempts, err)
	default:
		for k, a := range ee.Attempts {
			class, delay := policies.Transient, time.Duration(0)
			if k == len(ee.Attempts)-1 {
				class = want.class
			}
			if k > 0 {
				delay = want.delays[k-1]
			}
			if a.N != k+1 || a.Class != class || a.Delay != delay {
				s.problems.add("an ExecError attempt differs from the expected one", "call %d: attempt %+v, want N %d, class %s, delay %s", i, a, k+1, class, delay)
			}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		s.problems.add("call canceled (the soak's deadline reached it)", "call %d: %v", i, err)
	}
}

// faultsOf lists the first n faults of call i, for a problem's message.
func faultsOf(seed uint64, i, n int) []string {
	out := make([]string, n)
	for k := range n {
		out[k] = faultAt(seed, i, k).answer().String()
	}
	return out
}

// TestChaosSoak sends -soak.calls logical calls (soakCalls by default) through runtime.Exec, a
// session and the OpenAI provider to the fault server, which faults a seeded
// 30% of the requests. Every call must end, with a known outcome and the
// one its faults call for; the server's requests must equal retrace.calls,
// call by call and in sum; and nothing may be lost.
func TestChaosSoak(t *testing.T) {
	soakCalls := *calls
	if soakCalls < 1 {
		t.Fatalf("-soak.calls=%d: want at least 1", soakCalls)
	}
	s := &soak{
		seed:         *seed,
		sessionRetry: policies.NewRetry[session.Message](policies.SessionRetry).Config(),
		runtimeRetry: policies.NewRetry[session.Message](policies.RuntimeRetry).Config(),
		roots:        newRootSpans(soakCalls),
		requests:     make([]atomic.Int32, soakCalls),
		state:        make([]atomic.Int32, soakCalls),
		problems:     problems{count: map[string]int{}, examples: map[string][]string{}},
	}
	s.srv = retracetest.New(s.script)
	require.NoError(t, s.srv.Start())
	t.Cleanup(s.srv.Close)
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.roots))
	t.Cleanup(func() { _ = s.tp.Shutdown(context.Background()) })
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = workers
	t.Cleanup(transport.CloseIdleConnections)
	s.provider = session.NewOpenAI(session.OpenAIConfig{
		BaseURL: s.srv.URL(), APIKey: apiKey, HTTPClient: &http.Client{Transport: transport},
	})

	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < soakCalls; i = int(next.Add(1)) - 1 {
				s.call(ctx, start, i)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(deadline + 10*time.Second):
		t.Fatalf("hang: %d of %d calls ended; still running 10 s past the context's deadline: %v",
			s.count(2), soakCalls, s.running(10))
	}
	wall := time.Since(start)

	requests := s.srv.Requests()
	var perCall, want int
	expected := map[string]int{} // the outcomes the calls' faults call for
	for i := range soakCalls {
		perCall += int(s.requests[i].Load())
		e := predict(s.seed, i, s.sessionRetry, s.runtimeRetry)
		want += e.requests
		expected[string(e.outcome)]++
	}
	var faulted int64
	injected := make([]string, 0, kinds)
	for k := range kinds {
		n := s.injected[k].Load()
		if k != kindOK {
			faulted += n
		}
		injected = append(injected, fmt.Sprintf("%s %d", k, n))
	}
	r := s.roots
	r.mu.Lock()
	defer r.mu.Unlock()
	var roots int
	outcomes := map[string]int{}
	for _, rt := range r.byCall {
		roots += rt.seen
		if rt.seen > 0 {
			outcomes[rt.outcome]++
		}
	}
	var mem goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&mem)

	t.Logf("seed %d, %d workers, %d logical calls in %s (%.0f calls/s)", s.seed, workers, soakCalls, wall.Round(time.Millisecond), float64(soakCalls)/wall.Seconds())
	t.Logf("provider requests %d (server), Σ retrace.calls %d over %d roots, %d model spans, %d expected", requests, r.calls, roots, r.models, want)
	t.Logf("faults %d of %d requests (%.1f%%): %s", faulted, requests, 100*float64(faulted)/float64(requests), strings.Join(injected, ", "))
	t.Logf("root outcomes %v", outcomes)
	t.Logf("layer outcomes %v", r.layers)
	t.Logf("virtual time slept %s; %d spans ended; live heap at the end %d MiB (the fault server keeps every request)", time.Duration(s.slept.Load()).Round(time.Second), r.spans, mem.HeapAlloc>>20)

	s.problems.report(t)
	assert.Equal(t, int64(soakCalls), s.count(2), "calls that ended")
	assert.Equal(t, soakCalls, roots, "root spans of the logical calls")
	assert.Zero(t, r.stray, "root spans that name no logical call")
	assert.Zero(t, s.unparsed.Load(), "requests that named no logical call")
	assert.Equal(t, int64(requests), r.calls, "provider requests = Σ retrace.calls")
	assert.Equal(t, requests, perCall, "provider requests = Σ requests by call")
	assert.Equal(t, requests, r.models, "provider requests = model spans")
	assert.Equal(t, want, requests, "provider requests = the expected requests")
	assert.Equal(t, expected, outcomes, "root outcomes = the expected outcomes")
	assert.Zero(t, outcomes[string(telemetry.OutcomeFailedUnknown)], "calls that ended failed_unknown")
	assert.Zero(t, r.unknown, "spans of class unknown")
	assert.Zero(t, r.leaked, "spans carrying the API key")
	assert.Zero(t, s.shape.Load(), "requests whose messages were not [system, user], or not a stream with usage")
	assert.InDelta(t, faultRate, float64(faulted)/float64(requests), 0.05, "the share of faulted requests")
	for k := kindOK; k < kinds; k++ {
		assert.Positive(t, s.injected[k].Load(), "requests answered %s", k)
	}
}

// count returns how many calls are in state st.
func (s *soak) count(st int32) int64 {
	var n int64
	for i := range s.state {
		if s.state[i].Load() == st {
			n++
		}
	}
	return n
}

// running lists up to n calls still running.
func (s *soak) running(n int) []int {
	var out []int
	for i := range s.state {
		if s.state[i].Load() == 1 && len(out) < n {
			out = append(out, i)
		}
	}
	return out
}

// failed reports whether outcome is a failure's: anything but a success.
func failed(outcome string) bool {
	return outcome != telemetry.OutcomeSuccess && outcome != telemetry.OutcomeSuccessAfterRetry
}
