package telemetry

// ErrorTypeOther is the conventions' error.type for an error of no known
// type: on a span whose error no rule knows, and on a metric for every
// error.type beyond the bounded set a metric carries.
const ErrorTypeOther = "_OTHER"
