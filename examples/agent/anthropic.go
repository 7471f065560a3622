package main

import (
	"net/http"

	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
)

// providerAnthropic names the scenarios run through session.NewAnthropic
// against the fault server's Messages API; the others use OpenAI's.
const providerAnthropic = "anthropic"

// anthropicModel is the model the Anthropic scenarios ask for.
const anthropicModel = "claude-sonnet-4-5"

// anthropicProvider is the Anthropic provider against srv: the real
// anthropic-sdk-go client, its retries off, through hc.
func anthropicProvider(srv *retracetest.Server, hc *http.Client) session.Provider {
	return session.NewAnthropic(session.AnthropicConfig{
		BaseURL: srv.AnthropicURL(), APIKey: "sk-ant-demo-0000000000000000", HTTPClient: hc,
	})
}

// anthropicOverloaded: Anthropic answers 529 overloaded_error twice, then
// answers; the session retries a transient error, the runtime never sees it.
func anthropicOverloaded() scenario {
	return scenario{
		name:     "anthropic-overloaded",
		about:    "Anthropic answers 529 overloaded_error twice, then an answer: transient, the session retries after 2 s and 4 s, 3 requests",
		provider: providerAnthropic,
		script:   retracetest.Sequence(retracetest.ServerError(529), retracetest.ServerError(529), retracetest.OK()),
		want:     expectation{requests: 3, outcome: "success"},
	}
}

// anthropicBilling: the account cannot pay; billing_error is fatal, so
// neither layer retries it.
func anthropicBilling() scenario {
	return scenario{
		name:     "anthropic-billing",
		about:    "Anthropic answers 402 billing_error: fatal, nothing in this task can succeed, one request",
		provider: providerAnthropic,
		script:   retracetest.Always(retracetest.InsufficientQuota()),
		want:     expectation{requests: 1, outcome: "failed_fatal", diag: "failed fatally, nothing in this task can succeed: 402 billing_error"},
	}
}
