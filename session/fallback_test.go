package session_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/failure"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

// chain is a session whose provider is the first of several
// OpenAI-compatible fault servers and whose fallbacks are the others,
// through the real openai-go client, on a virtual clock.
type chain struct {
	srvs []*retracetest.Server
	rec  *tracetest.SpanRecorder
	tp   *sdktrace.TracerProvider
	clk  *clock.Fake
	s    *session.Session
}

// The candidates: their gen_ai.provider.name and model, by index.
var (
	chainNames  = []string{"openai", "backup", "third"}
	chainModels = []string{"gpt-primary", "gpt-backup", "gpt-third"}
)

func startChain(t *testing.T, scripts []retracetest.Script, mod func(*session.Config)) *chain {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := &chain{rec: rec, tp: tp, clk: clock.NewVirtual(epoch)}
	var cands []session.Candidate
	for i, script := range scripts {
		srv := retracetest.New(script)
		require.NoError(t, srv.Start())
		t.Cleanup(srv.Close)
		c.srvs = append(c.srvs, srv)
		p := session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-chain-" + chainNames[i] + "-0123456789abcdef", Name: chainNames[i]})
		cands = append(cands, session.Candidate{Provider: p, Model: chainModels[i]})
	}
	cfg := session.Config{
		Provider:  cands[0].Provider,
		Model:     cands[0].Model,
		Fallbacks: cands[1:],
		System:    "You are terse.",
		Options:   []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(c.clk)},
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := session.New(cfg)
	require.NoError(t, err)
	c.s = s
	return c
}

// requests is what each server received, in the chain's order.
func (c *chain) requests() []int {
	out := make([]int, len(c.srvs))
	for i, s := range c.srvs {
		out[i] = s.Requests()
	}
	return out
}

func (c *chain) layer(name string) []sdktrace.ReadOnlySpan {
	return (&fixture{rec: c.rec}).spans(name)
}

// root is the span no other retrace span encloses.
func (c *chain) root(t *testing.T) sdktrace.ReadOnlySpan {
	t.Helper()
	var roots []sdktrace.ReadOnlySpan
	for _, s := range c.rec.Ended() {
		if !s.Parent().IsValid() {
			roots = append(roots, s)
		}
	}
	require.Len(t, roots, 1)
	return roots[0]
}

// leaves counts the layer and attempt spans beneath which no other retrace
// span started, as the demo counts them: each is one call that reached a
// provider.
func (c *chain) leaves() int {
	spans := c.rec.Ended()
	isRetrace := func(s sdktrace.ReadOnlySpan) bool {
		_, layer := attr(s, telemetry.Layer)
		_, attempt := attr(s, telemetry.Attempt)
		return layer || attempt
	}
	parents := map[trace.SpanID]bool{}
	for _, s := range spans {
		if isRetrace(s) && s.Parent().IsValid() {
			parents[s.Parent().SpanID()] = true
		}
	}
	n := 0
	for _, s := range spans {
		// A policy span (a breaker that refused) is no call, and the span
		// it is in did not reach the provider either.
		if _, policy := attr(s, telemetry.Policy); isRetrace(s) && !policy && !parents[s.SpanContext().SpanID()] {
			n++
		}
	}
	return n
}

func sum(ns []int) int {
	t := 0
	for _, n := range ns {
		t += n
	}
	return t
}

// checkCounts asserts what every trace must prove: provider requests = leaf
// spans = the root's retrace.calls, and a worst case no lower.
func (c *chain) checkCounts(t *testing.T) (calls, worst int64) {
	t.Helper()
	root := c.root(t)
	callsV, ok := attr(root, telemetry.Calls)
	require.True(t, ok, "the root %q has retrace.calls", root.Name())
	worstV, ok := attr(root, telemetry.CallsWorstCase)
	require.True(t, ok, "the root %q has retrace.calls.worst_case", root.Name())
	calls, worst = callsV.AsInt64(), worstV.AsInt64()
	assert.Equal(t, int64(sum(c.requests())), calls, "provider requests = retrace.calls")
	assert.Equal(t, c.leaves(), int(calls), "leaf spans = retrace.calls")
	assert.GreaterOrEqual(t, worst, calls)
	return calls, worst
}

func TestFallbackOnFatal(t *testing.T) {
	c := startChain(t, []retracetest.Script{
		retracetest.Always(retracetest.InsufficientQuota()),
		retracetest.Always(retracetest.Reply("From the backup.")),
	}, nil)
	msg, err := c.s.Run(context.Background(), "status?")
	require.NoError(t, err)
	assert.Equal(t, "From the backup.", msg.Content)
	assert.Equal(t, "backup", msg.Provider)
	assert.Equal(t, "gpt-backup", msg.Model)
	want := []session.CandidateFailure{{Index: 0, Provider: "openai", Model: "gpt-primary",
		Outcome: telemetry.OutcomeFailedFatal, Class: policies.Fatal, Type: "insufficient_quota", Attempts: 1}}
	assert.Equal(t, want, msg.PassedOver)
	assert.Equal(t, "openai/gpt-primary failed fatally: insufficient_quota", msg.PassedOver[0].String())
	assert.Equal(t, []int{1, 1}, c.requests(), "a fatal failure is not retried: the next candidate at once")
	assert.Empty(t, c.clk.Slept())

	h := c.s.History()
	require.Equal(t, []string{"user", "assistant"}, historyRoles(h))
	assert.Equal(t, msg, h[1], "the history says who answered and why the first was passed over")
	got := c.srvs[1].Received()[0]
	assert.Equal(t, []string{"system", "user"}, roles(got.Messages), "the backup gets the history as the turn began, no failed message in it")
	assert.Equal(t, "gpt-backup", got.Model)

	fb := c.layer(telemetry.LayerFallback)
	require.Len(t, fb, 1)
	assert.Equal(t, "fallback", fb[0].Name())
	assert.Equal(t, "answered by backup/gpt-backup after openai/gpt-primary failed fatally: insufficient_quota", v(fb[0], telemetry.Diagnosis))
	assert.Equal(t, "backup/gpt-backup", v(fb[0], telemetry.FallbackAnsweredBy))
	assert.Equal(t, "2", v(fb[0], telemetry.FallbackCandidates))
	assert.Equal(t, "2", v(fb[0], telemetry.FallbackTried))
	assert.Equal(t, "success", v(fb[0], telemetry.Outcome))

	cands := c.layer(telemetry.LayerCandidate)
	require.Len(t, cands, 2, "one span per candidate")
	for i, s := range cands {
		assert.Equal(t, "candidate "+chainNames[i]+"/"+chainModels[i], s.Name())
		assert.Equal(t, int64(i), mustAttr(t, s, telemetry.FallbackIndex).AsInt64())
		assert.Equal(t, chainNames[i], v(s, semconv.GenAIProvider))
		assert.Equal(t, chainModels[i], v(s, semconv.GenAIRequestModel))
		assert.Equal(t, fb[0].SpanContext().SpanID(), s.Parent().SpanID(), "a candidate is a child of the fallback span")
	}
	assert.Equal(t, "failed_fatal", v(cands[0], telemetry.Outcome))
	assert.Equal(t, "insufficient_quota", v(cands[0], semconv.ErrorType))
	assert.Equal(t, "success", v(cands[1], telemetry.Outcome))
	for _, s := range c.layer("session") {
		// Each inference span is inside the candidate whose model it calls.
		parent := parentLayer(c.rec.Ended(), s, telemetry.LayerCandidate)
		require.NotNil(t, parent)
		assert.Equal(t, v(parent, semconv.GenAIRequestModel), v(s, semconv.GenAIRequestModel))
	}

	calls, worst := c.checkCounts(t)
	assert.Equal(t, int64(2), calls)
	assert.Equal(t, int64(2*4), worst, "two candidates, each the session's 4 attempts")
	for _, s := range c.rec.Ended() {
		for _, kv := range s.Attributes() {
			assert.NotContains(t, kv.Value.AsString(), "0123456789abcdef", "an API key reached a span")
		}
		assert.NotContains(t, s.Status().Description, "0123456789abcdef")
	}
}

func mustAttr(t *testing.T, s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	t.Helper()
	x, ok := attr(s, k)
	require.True(t, ok, "%s has %s", s.Name(), k)
	return x
}

// parentLayer is the nearest enclosing span of s whose retrace.layer is layer.
func parentLayer(spans []sdktrace.ReadOnlySpan, s sdktrace.ReadOnlySpan, layer string) sdktrace.ReadOnlySpan {
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, x := range spans {
		byID[x.SpanContext().SpanID()] = x
	}
	for p := byID[s.Parent().SpanID()]; p != nil; p = byID[p.Parent().SpanID()] {
		if v(p, telemetry.Layer) == layer {
			return p
		}
	}
	return nil
}

func TestFallbackAfterTransientExhausted(t *testing.T) {
	c := startChain(t, []retracetest.Script{
		retracetest.Always(retracetest.ServerError(503)),
		retracetest.Always(retracetest.OK()),
	}, nil)
	msg, err := c.s.Run(context.Background(), "status?")
	require.NoError(t, err)
	assert.Equal(t, retracetest.DefaultReply, msg.Content)
	assert.Equal(t, []int{4, 1}, c.requests(), "the first candidate's 4 attempts (SessionRetry), then the backup's one")
	assert.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}, c.clk.Slept(), "the fallback itself waits for nothing")
	require.Len(t, msg.PassedOver, 1)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, msg.PassedOver[0].Outcome)
	assert.Equal(t, 4, msg.PassedOver[0].Attempts)
	fb := c.layer(telemetry.LayerFallback)
	require.Len(t, fb, 1)
	assert.Equal(t, "answered by backup/gpt-backup after openai/gpt-primary failed after 4 attempts: server_error", v(fb[0], telemetry.Diagnosis))
	calls, worst := c.checkCounts(t)
	assert.Equal(t, int64(5), calls)
	assert.Equal(t, int64(8), worst)
}

// A context overflow is compacted first, on the candidate that overflowed;
// when the shorter history overflows too, the next candidate gets the whole
// history as the turn began. When nothing can be compacted, it passes on
// after one request.
func TestFallbackAfterContextOverflow(t *testing.T) {
	t.Run("compaction did not help", func(t *testing.T) {
		c := startChain(t, []retracetest.Script{
			retracetest.Always(retracetest.ContextOverflow()),
			retracetest.Always(retracetest.OK()),
		}, nil)
		for i := range 4 {
			c.s.Append(session.Message{Role: session.User, Content: "q"}, session.Message{Role: session.Assistant, Content: "a" + string(rune('0'+i)), StopReason: session.StopEnd})
		}
		msg, err := c.s.Run(context.Background(), "latest")
		require.NoError(t, err)
		assert.Equal(t, []int{2, 1}, c.requests(), "overflow, compaction, overflow again; then the backup")
		first := c.srvs[0].Received()
		assert.Len(t, first[1].Messages, 1+4+1, "the first candidate compacted")
		got := c.srvs[1].Received()[0]
		assert.Len(t, got.Messages, 1+8+1, "the backup gets the whole history, uncompacted")
		require.Len(t, msg.PassedOver, 1)
		assert.Equal(t, policies.ContextOverflow, msg.PassedOver[0].Class)
		assert.Equal(t, "openai/gpt-primary overflowed its context: context_length_exceeded", msg.PassedOver[0].String())
		assert.Len(t, c.s.History(), 8+2, "the answer follows the whole history")
		calls, worst := c.checkCounts(t)
		assert.Equal(t, int64(3), calls)
		assert.Equal(t, int64(2*(4+4)), worst, "two candidates, each up to two session runs of 4 attempts")
	})
	t.Run("nothing to compact", func(t *testing.T) {
		c := startChain(t, []retracetest.Script{
			retracetest.Always(retracetest.ContextOverflow()),
			retracetest.Always(retracetest.OK()),
		}, nil)
		_, err := c.s.Run(context.Background(), "a very long prompt")
		require.NoError(t, err)
		assert.Equal(t, []int{1, 1}, c.requests())
		c.checkCounts(t)
	})
}

// A failure of the request itself stops the turn where it failed: the
// next candidate is not called, and the error is the first candidate's,
// unchanged.
func TestNoFallbackOnPermanent(t *testing.T) {
	for _, tt := range []struct {
		fault retracetest.Fault
		typ   string
	}{
		{retracetest.InvalidAPIKey(), "invalid_api_key"},
		{retracetest.InvalidImage(), "invalid_image"},
	} {
		t.Run(tt.typ, func(t *testing.T) {
			c := startChain(t, []retracetest.Script{retracetest.Always(tt.fault), retracetest.Always(retracetest.OK())}, nil)
			msg, err := c.s.Run(context.Background(), "hi")
			require.Error(t, err)
			assert.Equal(t, []int{1, 0}, c.requests())
			assert.Equal(t, policies.Permanent, policies.Classify(err).Class)
			var fe *session.FallbackError
			assert.False(t, errors.As(err, &fe), "one candidate tried: its error, unchanged")
			var failed *policies.Error
			require.ErrorAs(t, err, &failed)
			assert.Equal(t, "session", failed.Layer)
			assert.Equal(t, session.StopError, msg.StopReason)
			assert.Equal(t, "openai", msg.Provider)
			assert.Empty(t, c.s.History())
			fb := c.layer(telemetry.LayerFallback)
			require.Len(t, fb, 1)
			assert.Equal(t, "openai/gpt-primary failed permanently: "+tt.typ+", not a failure that falls back", v(fb[0], telemetry.Diagnosis))
			assert.Equal(t, "failed_permanent", v(fb[0], telemetry.Outcome))
			assert.NotContains(t, err.Error(), "0123456789abcdef")
			c.checkCounts(t)
		})
	}
}

// The caller's end ends the chain: no candidate is called after it.
func TestNoFallbackWhenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := startChain(t, []retracetest.Script{
		func(int, retracetest.Request) retracetest.Fault {
			cancel() // the caller gives up while the first candidate is called
			return retracetest.Hang()
		},
		retracetest.Always(retracetest.OK()),
	}, nil)
	_, err := c.s.Run(ctx, "hi")
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []int{1, 0}, c.requests())
	assert.Equal(t, policies.Canceled, policies.Classify(err).Class)
	assert.Empty(t, c.s.History())
	fb := c.layer(telemetry.LayerFallback)
	require.Len(t, fb, 1)
	assert.Equal(t, "canceled", v(fb[0], telemetry.Outcome))
}

// When every candidate fails, the error and the diagnosis name each
// candidate and how it failed; the chain's class is the one a later run may
// overcome.
func TestEveryCandidateFails(t *testing.T) {
	c := startChain(t, []retracetest.Script{
		retracetest.Always(retracetest.InsufficientQuota()),
		retracetest.Always(retracetest.ServerError(503)),
	}, nil)
	msg, err := c.s.Run(context.Background(), "hi")
	require.Error(t, err)
	assert.Equal(t, []int{1, 4}, c.requests())
	var fe *session.FallbackError
	require.ErrorAs(t, err, &fe)
	const text = "every candidate failed: openai/gpt-primary failed fatally: insufficient_quota, then backup/gpt-backup failed after 4 attempts: server_error"
	assert.Equal(t, text, err.Error())
	require.Len(t, fe.Failures, 2)
	assert.Equal(t, policies.Fatal, fe.Failures[0].Class)
	assert.Equal(t, policies.Transient, fe.Failures[1].Class)
	assert.Equal(t, policies.Transient, policies.Classify(err).Class, "the backup may be up on a later run: the chain is Transient")
	var api *policies.Error
	require.ErrorAs(t, err, &api, "the providers' answers are reachable")
	assert.Equal(t, 503, api.StatusCode, "the decisive failure first")
	assert.Len(t, fe.Unwrap(), 2)
	assert.Equal(t, session.StopError, msg.StopReason)
	assert.Equal(t, "backup", msg.Provider)
	assert.Len(t, msg.PassedOver, 1)
	assert.Empty(t, c.s.History(), "a failed turn leaves the history as it was")

	fb := c.layer(telemetry.LayerFallback)
	require.Len(t, fb, 1)
	assert.Equal(t, text, v(fb[0], telemetry.Diagnosis))
	assert.Equal(t, "failed_exhausted", v(fb[0], telemetry.Outcome))
	assert.Equal(t, "transient", v(fb[0], telemetry.ErrorClass))
	c.checkCounts(t)
}

// A later candidate that fails in a way that does not fall back stops the
// chain, and its class is the chain's.
func TestChainStopsAtPermanent(t *testing.T) {
	c := startChain(t, []retracetest.Script{
		retracetest.Always(retracetest.InsufficientQuota()),
		retracetest.Always(retracetest.InvalidImage()),
		retracetest.Always(retracetest.OK()),
	}, nil)
	_, err := c.s.Run(context.Background(), "hi")
	require.Error(t, err)
	assert.Equal(t, []int{1, 1, 0}, c.requests())
	assert.Equal(t, "openai/gpt-primary failed fatally: insufficient_quota, then backup/gpt-backup failed permanently: invalid_image, not a failure that falls back", err.Error())
	assert.Equal(t, policies.Permanent, policies.Classify(err).Class)
	_, worst := c.checkCounts(t)
	assert.Equal(t, int64(3*4), worst, "the third candidate, not needed, counts as the costliest one")
}

// Under a runtime, the chain is one attempt of its retry: a chain that
// failed transiently is run again, and the worst case multiplies.
func TestFallbackUnderRuntime(t *testing.T) {
	c := startChain(t, []retracetest.Script{
		retracetest.Always(retracetest.InsufficientQuota()),
		retracetest.Always(retracetest.ServerError(503)),
	}, nil)
	rt := runtime.New(c.s, runtime.Config{Options: []middleware.Option{middleware.WithTracerProvider(c.tp), middleware.WithClock(c.clk)}})
	_, err := rt.Exec(context.Background(), "hi")
	require.Error(t, err)
	assert.Equal(t, []int{3, 12}, c.requests(), "exec (3) × the chain (1 + 4)")
	root := c.root(t)
	assert.Equal(t, "runtime", v(root, telemetry.Layer))
	assert.Equal(t, "failed_exhausted", v(root, telemetry.Outcome))
	assert.Contains(t, v(root, telemetry.Diagnosis), "failed after 3 attempts: every candidate failed: openai/gpt-primary failed fatally")
	assert.Len(t, c.layer(telemetry.LayerCandidate), 6)
	calls, worst := c.checkCounts(t)
	assert.Equal(t, int64(15), calls)
	assert.Equal(t, int64(3*2*4), worst)
}

// FallbackOn replaces the default rule.
func TestFallbackOnCustomRule(t *testing.T) {
	c := startChain(t, []retracetest.Script{
		retracetest.Always(retracetest.InvalidImage()),
		retracetest.Always(retracetest.OK()),
	}, func(cfg *session.Config) {
		cfg.FallbackOn = func(err error) bool {
			return session.DefaultFallbackOn(err) || policies.Classify(err).Type == "invalid_image"
		}
	})
	msg, err := c.s.Run(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 1}, c.requests())
	assert.Equal(t, "gpt-backup", msg.Model)
}

func TestDefaultFallbackOn(t *testing.T) {
	failed := func(o string, c policies.Class) error {
		return &policies.Error{Layer: "session", Outcome: o, Class: c, Attempts: 1, Err: errors.New("x")}
	}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{failed(telemetry.OutcomeFailedFatal, policies.Fatal), true},
		{failed(telemetry.OutcomeFailedExhausted, policies.Transient), true},
		{failed(telemetry.OutcomeRejected, policies.Transient), true},
		{failed(telemetry.OutcomeFailedPermanent, policies.ContextOverflow), true},
		{failed(telemetry.OutcomeFailedPermanent, policies.Permanent), false},
		{failed(telemetry.OutcomeBudgetExhausted, policies.Transient), false},
		{failed(telemetry.OutcomeCanceled, policies.Canceled), false},
		{failed(telemetry.OutcomeFailedUnknown, policies.Unknown), false},
		{failure.Recovered("bug", nil), false},
		{context.Canceled, false},
	} {
		assert.Equal(t, tt.want, session.DefaultFallbackOn(tt.err), "%v", tt.err)
	}
}

func TestNewValidatesFallbacks(t *testing.T) {
	p := session.NewOpenAI(session.OpenAIConfig{})
	_, err := session.New(session.Config{Provider: p, Model: "m", Fallbacks: []session.Candidate{{Model: "m"}}})
	assert.ErrorContains(t, err, "Fallbacks[0].Provider is nil")
	_, err = session.New(session.Config{Provider: p, Model: "m", Fallbacks: []session.Candidate{{Provider: p}}})
	assert.ErrorContains(t, err, "Fallbacks[0].Model is empty")
}

// Without fallbacks, a session's spans are as they were: no fallback or
// candidate layer, and its answers still name their provider and model.
func TestNoChainWithoutFallbacks(t *testing.T) {
	f := start(t, retracetest.Always(retracetest.OK()), nil)
	msg, err := f.s.Run(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, "openai", msg.Provider)
	assert.Equal(t, "gpt-test", msg.Model)
	assert.Empty(t, msg.PassedOver)
	assert.Empty(t, f.spans(telemetry.LayerFallback))
	assert.Empty(t, f.spans(telemetry.LayerCandidate))
	assert.Len(t, f.spans("session"), 1)
}

// A circuit breaker of the first candidate that opens and stays open past
// the session's MaxRetryAfter ends its turn rejected: the next candidate
// answers, and its own calls never pass through the first one's breaker.
func TestFallbackWhenCircuitOpen(t *testing.T) {
	breaker := policies.NewCircuitBreaker[session.Message](policies.BreakerConfig{Name: "openai", FailureThreshold: 2, Delay: time.Minute})
	c := startChain(t, []retracetest.Script{
		retracetest.Always(retracetest.ServerError(503)),
		retracetest.Always(retracetest.OK()),
	}, func(cfg *session.Config) {
		cfg.ModelPolicies = []failsafe.Policy[session.Message]{breaker}
	})
	msg, err := c.s.Run(context.Background(), "hi")
	require.NoError(t, err)
	assert.Equal(t, []int{2, 1}, c.requests(), "two failures open the breaker; its 60 s cool-down is past MaxRetryAfter")
	require.Len(t, msg.PassedOver, 1)
	assert.Equal(t, telemetry.OutcomeRejected, msg.PassedOver[0].Outcome)
	assert.Equal(t, "openai/gpt-primary was rejected: circuit_open", msg.PassedOver[0].String())
	assert.Equal(t, "gpt-backup", msg.Model)
	c.checkCounts(t)
}

// A chain of two providers: the first one's quota is spent, the second
// answers, and the answer says who made it and who was passed over.
func ExampleCandidate() {
	primary := retracetest.New(retracetest.Always(retracetest.InsufficientQuota()))
	backup := retracetest.New(retracetest.Always(retracetest.Reply("All systems nominal.")))
	for _, srv := range []*retracetest.Server{primary, backup} {
		if err := srv.Start(); err != nil {
			fmt.Println(err)
			return
		}
		defer srv.Close()
	}
	s, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: primary.URL(), APIKey: "sk-primary"}),
		Model:    "gpt-4o",
		Fallbacks: []session.Candidate{{
			Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: backup.URL(), APIKey: "sk-backup", Name: "azure"}),
			Model:    "gpt-4o",
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	reply, err := s.Run(context.Background(), "status?")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s (%s/%s)\n", reply.Content, reply.Provider, reply.Model)
	for _, f := range reply.PassedOver {
		fmt.Println("passed over:", f)
	}
	// Output:
	// All systems nominal. (azure/gpt-4o)
	// passed over: openai/gpt-4o failed fatally: insufficient_quota
}
