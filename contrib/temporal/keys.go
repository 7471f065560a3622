package retracetemporal

import "go.opentelemetry.io/otel/attribute"

// The keys this package adds to each activity attempt's root span, declared
// here (as package telemetry declares the core's) for the demo's test that
// every key a trace carries is declared, so each keeps its comment.
const (
	keyActivityAttempt = attribute.Key("temporal.activity.attempt") // temporal root span: the activity attempt's number, from 1 (Temporal's own count, across workers)
	keyActivityType    = attribute.Key("temporal.activity.type")    // temporal root span: the activity's registered name
	keyWorkflowID      = attribute.Key("temporal.workflow.id")      // temporal root span: the workflow's ID, which also keys its task budget
	keyActivityID      = attribute.Key("temporal.activity.id")      // temporal root span: the activity's ID within its workflow
)
