package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// The metrics retrace records, with their units. The GenAI client metrics
// follow the OpenTelemetry GenAI semantic conventions, so that dashboards
// made for them chart retrace's model calls as they are.
const (
	// MetricOperationDuration is a histogram of model calls' durations, by
	// gen_ai.operation.name, gen_ai.provider.name, gen_ai.request.model and,
	// on failure, error.type.
	MetricOperationDuration = "gen_ai.client.operation.duration"
	// MetricTokenUsage is a histogram of the tokens each model call used,
	// by gen_ai.token.type and the attributes of the duration.
	MetricTokenUsage = "gen_ai.client.token.usage"
	// MetricLayerCalls counts the calls through a layer, by retrace.layer
	// and retrace.outcome.
	MetricLayerCalls = "retrace.layer.calls"
	// MetricLayerAttempts is a histogram of the attempts each call through a
	// retrying layer made, the first included, by retrace.layer.
	MetricLayerAttempts = "retrace.layer.attempts"
	// MetricRetryDelay is a histogram of the backoffs waited before
	// retries, by retrace.layer.
	MetricRetryDelay = "retrace.retry.delay"
	// MetricCircuitState is a gauge per breaker (retrace.circuit.name) and
	// state (retrace.circuit.state): 1 for the state it is in, 0 for the
	// others it has been in.
	MetricCircuitState = "retrace.circuit.state"
	// MetricCircuitTransitions counts a breaker's transitions, by
	// retrace.circuit.name and the state it moved to (retrace.circuit.state).
	MetricCircuitTransitions = "retrace.circuit.transitions"
	// MetricBudgetRefusals counts the retries a retry budget refused (the
	// task budget, or a rate budget), by retrace.layer.
	MetricBudgetRefusals = "retrace.budget.refusals"
)

// The metrics' units, in UCUM as the conventions write them.
const (
	UnitSeconds    = "s"
	UnitToken      = "{token}"
	UnitCall       = "{call}"
	UnitAttempt    = "{attempt}"
	UnitTransition = "{transition}"
	UnitRefusal    = "{refusal}"
	UnitState      = "{state}"
)

// Attributes that only metrics carry.
const (
	CircuitName = attribute.Key("retrace.circuit.name") // breaker metrics: the breaker's name, else its layer's
	TokenType   = semconv.GenAITokenTypeKey             // token usage: input or output
)

// The values of gen_ai.token.type.
const (
	TokenInput  = "input"
	TokenOutput = "output"
)

// Histogram bucket boundaries, each a fresh slice. The GenAI ones are the
// conventions' advice; retrace's own fit what they measure: a handful of
// attempts, and backoffs from a few milliseconds to a minute.
func DurationBuckets() []float64 {
	return []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
}

func TokenBuckets() []float64 {
	return []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
}

func AttemptBuckets() []float64 { return []float64{1, 2, 3, 4, 5, 6, 8, 10, 16, 32} }

func RetryDelayBuckets() []float64 {
	return []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64}
}
