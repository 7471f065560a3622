// Package middleware runs handlers through failsafe-go policies and makes
// every decision visible as OpenTelemetry spans.
//
// A [Handler] is any func(ctx, req) (resp, error); a [Middleware] wraps one;
// [Chain] composes them, first outermost. [Layer] is the middleware that
// matters: it runs the handler through the failsafe-go policies of its
// [Spec] (retry, circuit breaker, bulkhead, timeout, or any other) and wraps
// the call in a layer span, each attempt in a child span, and each policy
// that acts in a span of its own. The layer span says how the call ended
// (retrace.outcome, retrace.diagnosis); the outermost one also says how many
// leaf calls the nested layers beneath it made (retrace.calls) and how many
// they could have made (retrace.calls.worst_case).
//
// A Spec is of the layer's response type, its policies and the readers of
// a model call's answer alike, so that one of another type does not
// compile; every other setting is an [Option]. [Policies] is a layer with
// only its policies:
//
//	session := middleware.Policies[Prompt, Reply]("session", policies.NewRetry[Reply](policies.SessionRetry))
//	runtime := middleware.Layer[Task, Reply]("runtime", middleware.Spec[Reply]{
//		Policies: []failsafe.Policy[Reply]{policies.NewRetry[Reply](policies.RuntimeRetry)},
//	}, middleware.WithTracerProvider(tp))
package middleware
