package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

// The fallback scenario: OpenAI's quota is spent, and the session's chain
// passes the turn to the next candidate, Anthropic, which answers. Both are
// the fault server, through the real openai-go and anthropic-sdk-go clients.
const (
	fallbackName   = "anthropic"         // the second candidate's gen_ai.provider.name
	fallbackModel  = "claude-sonnet-4-5" // its model
	fallbackAnswer = "The payment API is rate limited by its upstream; the runbook says to shed batch traffic."
)

func (d *demo) fallback(ctx context.Context) (result, error) {
	primary := retracetest.New(retracetest.Always(retracetest.InsufficientQuota()))
	backup := retracetest.New(retracetest.Always(retracetest.Reply(fallbackAnswer)))
	for _, srv := range []*retracetest.Server{primary, backup} {
		if err := srv.Start(); err != nil {
			return result{}, err
		}
		defer srv.Close()
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport}

	opts := d.middlewareOptions()
	sess, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: primary.URL(), APIKey: "sk-demo-0000000000000000", HTTPClient: hc}),
		Model:    d.opts.model,
		Fallbacks: []session.Candidate{{
			Provider: session.NewAnthropic(session.AnthropicConfig{BaseURL: backup.AnthropicURL(), APIKey: "sk-ant-demo-1111111111111111", HTTPClient: hc}),
			Model:    fallbackModel,
		}},
		System:       "You are the on-call assistant. Answer in one sentence.",
		Options:      opts,
		ModelTimeout: d.modelTimeout(),
	})
	if err != nil {
		return result{}, err
	}
	rt := runtime.New(sess, runtime.Config{Options: opts})

	start := time.Now()
	answer, _ := rt.Exec(ctx, "Summarise the incident in one sentence.") // the trace and the answer tell how it went
	wall := time.Since(start)

	root, ok := d.spans.lastRoot()
	if !ok {
		return result{}, errors.New("no trace was recorded")
	}
	res, err := d.fromTrace("fallback", root.SpanContext().TraceID().String(), wall)
	if err != nil {
		return res, err
	}
	res.ProviderRequests = primary.Requests() + backup.Requests()
	if res.Diagnosis == "" {
		// The runtime succeeded on its first attempt and has nothing to
		// say; the fallback span says who answered and why.
		res.Diagnosis = d.fallbackDiagnosis(root.SpanContext().TraceID())
	}
	var passed []string
	for _, f := range answer.PassedOver {
		passed = append(passed, f.String())
	}
	res.Details = map[string]any{
		"answered_by": answer.Provider + "/" + answer.Model,
		"passed_over": passed,
		"requests":    map[string]int{"openai": primary.Requests(), fallbackName: backup.Requests()},
	}
	res.Problems = checkFallback(res, answer, primary.Requests(), backup.Requests())
	return res, nil
}

// fallbackDiagnosis is the diagnosis on the trace's fallback span.
func (d *demo) fallbackDiagnosis(id trace.TraceID) string {
	for _, s := range d.spans.trace(id) {
		if attrOf(s, telemetry.Layer).AsString() == telemetry.LayerFallback {
			return attrOf(s, telemetry.Diagnosis).AsString()
		}
	}
	return ""
}

func checkFallback(r result, answer session.Message, first, second int) []string {
	p := check(r, expectation{requests: 2, outcome: "success", diag: "answered by " + fallbackName + "/" + fallbackModel + " after openai/"})
	if first != 1 || second != 1 {
		p = append(p, fmt.Sprintf("want 1 request to each provider (a fatal failure is not retried), got %d and %d", first, second))
	}
	if answer.Provider != fallbackName || answer.Model != fallbackModel || answer.Content != fallbackAnswer {
		p = append(p, fmt.Sprintf("want the answer from %s/%s, got %q from %s/%s", fallbackName, fallbackModel, answer.Content, answer.Provider, answer.Model))
	}
	if len(answer.PassedOver) != 1 || !strings.HasSuffix(answer.PassedOver[0].String(), "failed fatally: insufficient_quota") {
		p = append(p, "want the answer to say the first candidate failed fatally on insufficient_quota")
	}
	return p
}
