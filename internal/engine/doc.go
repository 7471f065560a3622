// Package engine is the one implementation of retrace's retry loop, breaker
// state machine and retry budgets. Both ways of running retrace's policies
// use it: the failsafe-go executors in package policies (failsafe.With) and
// the traced layers in package middleware.
//
// The engine is mechanism only. It knows the names of the classes and
// outcomes (so that both callers decide alike), but not how an error is
// classified, what a span is, or how a failure is worded: package policies
// owns classification and the errors users inspect, package middleware the
// spans. Nothing here is public API.
package engine
