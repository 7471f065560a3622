package policies

// Retrace's own failures, made as the policies make them, for the tests
// outside the package.
var (
	TimedOut  = timedOut
	Rejection = rejection
)

const TypeCircuitOpen = typeCircuitOpen
