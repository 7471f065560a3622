// Package retracetemporal lets retrace's reading of a failure decide what
// Temporal does next with an activity.
//
// Temporal retries a failed activity by its retry policy, by default
// without limit, whatever the failure was: a spent quota or a bad API key
// is retried like a network blip, and a provider's Retry-After is
// ignored. With the interceptor on the worker, an activity's error is
// read by retrace's classifier (the same rules as every other layer's) and
// handed to Temporal as an *temporal.ApplicationError whose type is the
// class:
//
//   - transient: retried by the policy, after the provider's Retry-After
//     (or an open breaker's remaining cool-down) when there is one;
//   - permanent, fatal, context_overflow, programming, user_action, and a
//     retry budget that refused: not retried;
//   - unknown: not retried, as retrace's own layers do not retry it,
//     unless Config.RetryUnknown;
//   - canceled, and an error already a Temporal error: as it was.
//
// The details carry retrace's reading ([Failure]), so a workflow that
// catches the activity's error reads the class, the error type, the
// outcome and the attempts. A retry policy's NonRetryableErrorTypes can
// name a class ("transient" included) to decide otherwise.
//
//	w := worker.New(c, "agents", worker.Options{
//		Interceptors: []interceptor.WorkerInterceptor{retracetemporal.NewInterceptor(retracetemporal.Config{})},
//	})
package retracetemporal
