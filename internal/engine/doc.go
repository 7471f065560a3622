// Package engine is the one implementation of retrace's retry loop, breaker
// state machine and retry budgets. Both ways of running retrace's policies
// use it: the failsafe-go executors in package policies (failsafe.With) and
// the traced layers in package middleware.
//
// The engine is mechanism. It knows the names of the classes and outcomes
// (so that both callers decide alike) and says, with each decision to stop,
// why in a clause (Decision.Why: "the task's retry budget of 6 is
// spent"), since only the decision knows; it does not know how an error
// is classified, what a span is, or how a whole failure is worded: package
// policies owns classification and the errors users inspect (their
// diagnosis frames the engine's clause), package middleware the spans.
// Nothing here is public API.
package engine
