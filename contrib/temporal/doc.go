// Package retracetemporal makes Temporal's activity retries a retry layer
// retrace governs and traces: the outermost layer of an agent that
// outgrew one process.
//
// Temporal retries a failed activity by its retry policy, by default
// without limit, whatever the failure was: a spent quota or a bad API key
// is retried like a network blip, a provider's Retry-After is ignored, and
// a session that retries 4 times inside each of Temporal's attempts makes
// attempts × 4 requests that no trace counts. With the interceptor on the
// worker:
//
//   - an activity's error is read by retrace's classifier (the same rules
//     as every other layer's) and handed to Temporal as an
//     *temporal.ApplicationError whose type is the class: transient is
//     retried, after the provider's Retry-After (or an open breaker's
//     remaining cool-down) when there is one; permanent, fatal,
//     context_overflow, programming, user_action and a spent retry budget
//     are not; unknown is not, as retrace's own layers do not retry it,
//     unless Config.RetryUnknown. A canceled context's error and one
//     already Temporal's stay as they were. The details carry retrace's
//     reading ([Failure]); what Temporal records is redacted.
//   - each activity attempt is a retrace root layer ([LayerName],
//     temporal.activity.attempt its number) whose retrace.calls are its
//     own, and the activity's retry policy is a retry layer around the
//     layers it calls: the worst case is MaximumAttempts times what one
//     attempt may cost, the nested-retry event says "temporal(3) ×
//     session(4)", and a policy without a limit says "temporal(?)".
//     With Temporal's tracing interceptor (go.temporal.io/sdk/contrib/opentelemetry)
//     on the same tracer provider, the workflow's trace holds every
//     attempt, with retrace's spans beneath each; retrace explain reads it.
//   - with Config.TaskBudget, one count of retries per workflow, on
//     Config.State (contrib/redis for a fleet), that Temporal's retries
//     draw from like every retrace layer's.
//
// The workflows and activities stay as they are:
//
//	tracing, _ := opentelemetry.NewTracingInterceptor(opentelemetry.TracerOptions{})
//	w := worker.New(c, "agents", worker.Options{
//		Interceptors: []interceptor.WorkerInterceptor{tracing, retracetemporal.NewInterceptor(retracetemporal.Config{TaskBudget: 6})},
//	})
package retracetemporal
