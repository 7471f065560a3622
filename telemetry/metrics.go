package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
)

// The metrics retrace records. The GenAI client metrics follow the
// OpenTelemetry GenAI semantic conventions, so that dashboards made for them
// chart retrace's model calls as they are.
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

// Attributes that only metrics carry.
const (
	CircuitName = attribute.Key("retrace.circuit.name") // breaker metrics: the breaker's name, else its layer's
)
