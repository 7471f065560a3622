package telemetry

import "go.opentelemetry.io/otel/attribute"

// Fleet state: where a breaker's or a budget's decision came from.
const (
	// State is set on the span of a decision made by a policy with a shared
	// state (a fleet's breaker or budget): StateShared when the shared state
	// decided, StateLocal when the worker's own state did because the shared
	// one failed.
	State = attribute.Key("retrace.state")
	// StateError says why the shared state failed: StateTimeout or
	// StateUnavailable.
	StateError = attribute.Key("retrace.state.error")
)

// The values of retrace.state and retrace.state.error.
const (
	StateShared      = "shared"
	StateLocal       = "local"
	StateTimeout     = "timeout"
	StateUnavailable = "unavailable"
)

// PolicyBudget is the value of retrace.policy for a retry budget.
const PolicyBudget = "budget"

// EventStateDegraded is added to the span of a decision that the policy made
// on its local state because its shared state failed or did not answer in
// time; its attributes are retrace.policy and retrace.state.error.
const EventStateDegraded = "retrace.state.degraded"

// MetricStateDegraded counts those decisions, by retrace.policy.
const MetricStateDegraded = "retrace.state.degraded"
