package telemetry

import "go.opentelemetry.io/otel/attribute"

// The layers of a session's fallback chain (retrace.layer). A turn through
// a chain is one fallback span, and beneath it one candidate span for each
// candidate it tried, around that candidate's session layer.
const (
	LayerFallback  = "fallback"  // the chain: one span per turn, around the candidates it tried
	LayerCandidate = "candidate" // one candidate: a provider and a model, around its session layer
)

// The attributes of a fallback chain.
const (
	// FallbackIndex is on a candidate span: its place in the chain, 0 for
	// the session's own provider and model, 1 for the first fallback.
	FallbackIndex = attribute.Key("retrace.fallback.index")
	// FallbackCandidates is on the fallback span: the candidates the chain has.
	FallbackCandidates = attribute.Key("retrace.fallback.candidates")
	// FallbackTried is on the fallback span: the candidates the turn called.
	FallbackTried = attribute.Key("retrace.fallback.tried")
	// FallbackAnsweredBy is on the fallback span of a turn that succeeded:
	// "{gen_ai.provider.name}/{gen_ai.request.model}" of the candidate that
	// answered.
	FallbackAnsweredBy = attribute.Key("retrace.fallback.answered_by")
)
