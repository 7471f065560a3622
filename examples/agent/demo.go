package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// result is one scenario's line of the summary, and its JSON object.
type result struct {
	Scenario         string   `json:"scenario"`
	ProviderRequests int      `json:"provider_requests"`
	LeafSpans        int      `json:"leaf_spans"`
	Calls            int64    `json:"calls"`
	WorstCase        int64    `json:"worst_case"`
	Outcome          string   `json:"outcome"`
	Diagnosis        string   `json:"diagnosis"`
	TraceID          string   `json:"trace_id"`
	WallMs           int64    `json:"wall_ms"`
	Problems         []string `json:"problems,omitempty"`
	// Skipped says why the scenario was not run: a part it needs is not at
	// hand (the temporal scenario's dev server), and how to get it.
	Skipped string `json:"skipped,omitempty"`
	// Details are a scenario's own figures: both runs of the incident, the
	// two processes of crash-resume.
	Details map[string]any `json:"details,omitempty"`
	// traces are the traces -otlp-file gets besides TraceID's: a scenario
	// of many calls, each a trace of its own (the fleet's).
	traces []trace.TraceID
	// untraced says why -otlp-file gets no trace of the scenario, when it
	// gets none.
	untraced string
}

type demo struct {
	opts      options
	tp        trace.TracerProvider
	shutdown  func(context.Context) error
	mp        metric.MeterProvider
	mshutdown func(context.Context) error
	otlpFile  *os.File // -otlp-file, nil without it
	spans     *store
	exporting bool
	clk       clock.Clock
	getenv    func(string) string
	temporal  *temporalRun // examples/temporal, started and not yet collected
}

func newDemo(ctx context.Context, o options, getenv func(string) string, stderr io.Writer) (*demo, error) {
	x, err := setup.ReadEnv(getenv)
	if err != nil {
		return nil, err
	}
	env := getenv
	if !x.OTLP && getenv("OTEL_TRACES_EXPORTER") == "" {
		// The demo prints its own trees; without a collector nothing else
		// needs the spans.
		env = func(k string) string {
			if k == "OTEL_TRACES_EXPORTER" {
				return "none"
			}
			return getenv(k)
		}
	}
	st := &store{byTrace: map[trace.TraceID][]sdktrace.ReadOnlySpan{}}
	tp, shutdown, err := setup.NewTracerProvider(ctx, setup.WithEnv(env), setup.WithSpanProcessor(st),
		setup.WithServiceName("retrace-agent"), setup.WithWarnings(stderr), setup.WithConsole(stderr))
	if err != nil {
		return nil, err
	}
	d := &demo{opts: o, tp: tp, shutdown: shutdown, spans: st, exporting: x.OTLP, clk: clock.Scaled(o.timeScale), getenv: getenv}
	if err := d.openTelemetryOut(ctx, getenv, stderr); err != nil {
		_ = shutdown(context.Background())
		return nil, err
	}
	return d, nil
}

func (d *demo) close() {
	d.stopTemporal()
	_ = d.closeMetrics()
	_ = d.shutdown(context.Background())
	if d.otlpFile != nil {
		_ = d.otlpFile.Close()
	}
}

// modelTimeout is the per-call timeout on the scaled clock: 2 minutes, and
// never less than 10 s of wall time, so that a scaled-down run on a busy
// machine does not cut healthy calls.
func (d *demo) modelTimeout() time.Duration {
	wall := float64(10*time.Second) / d.opts.timeScale
	return max(2*time.Minute, time.Duration(min(wall, float64(1000*time.Hour))))
}

func (d *demo) middlewareOptions() []middleware.Option {
	return []middleware.Option{middleware.WithTracerProvider(d.tp), middleware.WithMeterProvider(d.mp), middleware.WithClock(d.clk)}
}

// scenario runs one scenario against a fresh fault server.
func (d *demo) scenario(ctx context.Context, sc scenario) (result, error) {
	if sc.custom != nil {
		return sc.custom(d, ctx)
	}
	srv := retracetest.New(sc.script)
	if err := srv.Start(); err != nil {
		return result{}, err
	}
	defer srv.Close()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	cfg := session.OpenAIConfig{
		BaseURL: srv.URL(), APIKey: "sk-demo-0000000000000000", SDKRetries: sc.sdkRetries,
		HTTPClient: &http.Client{Transport: transport},
	}
	declared := sc.sdkRetries + 1 // the SDK's attempts, declared to the session: counted, not seen
	if sc.sdkSpans {
		// Each HTTP request of the SDK's retries a span of its own: the
		// hidden layer shows, and names itself.
		cfg.Middleware = append(cfg.Middleware, middleware.SDK("openai-go", sc.sdkRetries, d.middlewareOptions()...))
		declared = 1
	}
	var provider session.Provider = session.NewOpenAI(cfg)
	model := d.opts.model
	if sc.provider == providerAnthropic {
		provider, model = anthropicProvider(srv, cfg.HTTPClient), anthropicModel
	}
	res, err := d.exec(ctx, sc.name, provider, model, sc.history, sc.singleOwner, declared)
	if err != nil {
		return res, err
	}
	res.ProviderRequests = srv.Requests()
	res.Problems = check(res, sc.want)
	return res, nil
}

// live runs one prompt against a real endpoint.
func (d *demo) live(ctx context.Context, baseURL, key string) (result, error) {
	if key == "" {
		return result{}, errors.New("-base-url needs OPENAI_API_KEY")
	}
	counter := &countingTransport{base: http.DefaultTransport}
	provider := session.NewOpenAI(session.OpenAIConfig{BaseURL: baseURL, APIKey: key, HTTPClient: &http.Client{Transport: counter}})
	res, err := d.exec(ctx, "live", provider, d.opts.model, nil, false, 1)
	res.ProviderRequests = int(counter.n.Load())
	return res, err
}

// exec runs the two-layer chain: runtime.Exec around a session around the
// provider, and reads the trace it left.
func (d *demo) exec(ctx context.Context, name string, provider session.Provider, model string, history []session.Message, singleOwner bool, providerAttempts int) (result, error) {
	opts := d.middlewareOptions()
	sess, err := session.New(session.Config{
		Provider: provider, Model: model, System: "You are the on-call assistant. Answer in one sentence.",
		ProviderAttempts: providerAttempts, Options: opts, ModelTimeout: d.modelTimeout(),
	})
	if err != nil {
		return result{}, err
	}
	sess.Append(history...)
	rt := runtime.New(sess, runtime.Config{SingleOwner: singleOwner, Options: opts})

	start := time.Now()
	_, _ = rt.Exec(ctx, "Summarise the incident in one sentence.") // the trace tells how it went
	wall := time.Since(start)

	root, ok := d.spans.lastRoot()
	if !ok {
		return result{}, errors.New("no trace was recorded")
	}
	return d.fromTrace(name, root.SpanContext().TraceID().String(), wall)
}

// fromTrace reads a scenario's result off its trace: the root's counts,
// outcome and diagnosis, and the leaf spans beneath it.
func (d *demo) fromTrace(name, traceID string, wall time.Duration) (result, error) {
	id, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		return result{}, fmt.Errorf("%s: no trace: %w", name, err)
	}
	spans := d.spans.trace(id)
	var root sdktrace.ReadOnlySpan
	for _, s := range spans {
		if !s.Parent().IsValid() {
			root = s
		}
	}
	if root == nil {
		return result{}, fmt.Errorf("%s: trace %s has no root", name, traceID)
	}
	return result{
		Scenario:  name,
		TraceID:   traceID,
		WallMs:    wall.Milliseconds(),
		LeafSpans: leafSpans(spans),
		Calls:     attrOf(root, telemetry.Calls).AsInt64(),
		WorstCase: attrOf(root, telemetry.CallsWorstCase).AsInt64(),
		Outcome:   attrOf(root, telemetry.Outcome).AsString(),
		Diagnosis: attrOf(root, telemetry.Diagnosis).AsString(),
	}, nil
}

// check compares a result with what its scenario must show.
func check(r result, want expectation) []string {
	p := checkSeen(r, want.hidden)
	if r.ProviderRequests != want.requests {
		p = append(p, fmt.Sprintf("want %d provider requests", want.requests))
	}
	if r.Outcome != want.outcome {
		p = append(p, "want outcome "+want.outcome)
	}
	if !strings.HasPrefix(r.Diagnosis, want.diag) {
		p = append(p, fmt.Sprintf("want a diagnosis that starts %q", want.diag))
	}
	return p
}

// checkCounts is what every trace must prove: the requests the downstreams
// received = leaf spans = retrace.calls, and a worst case no lower than what
// happened.
func checkCounts(r result) []string {
	return checkSeen(r, 0)
}

// checkSeen is checkCounts for a scenario whose trace cannot see hidden of
// the requests made (an SDK's retries without retrace's middleware).
func checkSeen(r result, hidden int) []string {
	var p []string
	if r.ProviderRequests-hidden != r.LeafSpans || int64(r.LeafSpans) != r.Calls {
		p = append(p, fmt.Sprintf("requests %d, leaf spans %d and retrace.calls %d differ", r.ProviderRequests, r.LeafSpans, r.Calls))
	}
	if r.WorstCase < r.Calls {
		p = append(p, fmt.Sprintf("retrace.calls.worst_case %d is below retrace.calls %d", r.WorstCase, r.Calls))
	}
	return p
}

func (d *demo) tree(w io.Writer, traceID string) error {
	id, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		return err
	}
	return setup.WriteTree(w, d.spans.trace(id))
}

// leafSpans counts the calls of one trace that reached a downstream, by
// the rule retracetest's users check their own traces with
// (retracetest.TraceCounts): the layer and attempt spans beneath which no
// other started, but those a policy refused; 0 for spans that are not one
// whole trace.
func leafSpans(spans []sdktrace.ReadOnlySpan) int {
	c, err := retracetest.TraceCounts(spans)
	if err != nil {
		return 0
	}
	return c.LeafSpans
}

func lookup(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	v, _ := lookup(s, k)
	return v
}

// store keeps every finished span by trace, for the trees and the counts.
type store struct {
	mu      sync.Mutex
	byTrace map[trace.TraceID][]sdktrace.ReadOnlySpan
	roots   []sdktrace.ReadOnlySpan
}

func (s *store) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (s *store) OnEnd(span sdktrace.ReadOnlySpan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := span.SpanContext().TraceID()
	s.byTrace[id] = append(s.byTrace[id], span)
	if !span.Parent().IsValid() {
		s.roots = append(s.roots, span)
	}
}

func (s *store) Shutdown(context.Context) error   { return nil }
func (s *store) ForceFlush(context.Context) error { return nil }

// reset forgets every span.
func (s *store) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byTrace, s.roots = map[trace.TraceID][]sdktrace.ReadOnlySpan{}, nil
}

func (s *store) trace(id trace.TraceID) []sdktrace.ReadOnlySpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sdktrace.ReadOnlySpan(nil), s.byTrace[id]...)
}

// rootCount is the number of root spans ended so far.
func (s *store) rootCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.roots)
}

// rootsSince returns the root spans that ended after the first n.
func (s *store) rootsSince(n int) []sdktrace.ReadOnlySpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sdktrace.ReadOnlySpan{}, s.roots[min(n, len(s.roots)):]...)
}

func (s *store) lastRoot() (sdktrace.ReadOnlySpan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.roots) == 0 {
		return nil, false
	}
	return s.roots[len(s.roots)-1], true
}

// countingTransport counts the requests a live run makes.
type countingTransport struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}
