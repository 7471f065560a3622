package retracetemporal_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	retracetemporal "github.com/retrace-go/retrace/contrib/temporal"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/session"
)

// A worker with the interceptor: an activity whose provider says the quota
// is spent is not retried by Temporal, though its policy allows 3
// attempts. (The SDK's test environment stands for a worker here; on a
// real one, add the interceptor to worker.Options the same way.)
func Example() {
	provider := retracetest.New(retracetest.Always(retracetest.InsufficientQuota()))
	if err := provider.Start(); err != nil {
		panic(err)
	}
	defer provider.Close()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()

	turn := func(ctx context.Context, prompt string) (string, error) {
		s, err := session.New(session.Config{
			Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: provider.URL(), APIKey: "sk-example", HTTPClient: &http.Client{Transport: transport}}),
			Model:    "gpt-4o-mini",
			Retry:    policies.RetryConfig{MaxAttempts: 4},
		})
		if err != nil {
			return "", err
		}
		msg, err := s.Run(ctx, prompt)
		return msg.Content, err
	}
	agent := func(ctx workflow.Context, prompt string) (string, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		})
		var out string
		err := workflow.ExecuteActivity(ctx, turn, prompt).Get(ctx, &out)
		return out, err
	}

	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler))) // the example's output is its own
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{
		Interceptors: []interceptor.WorkerInterceptor{retracetemporal.NewInterceptor(retracetemporal.Config{})},
	})
	env.RegisterWorkflow(agent)
	env.RegisterActivity(turn)
	env.ExecuteWorkflow(agent, "status?")

	var app *temporal.ApplicationError
	if errors.As(env.GetWorkflowError(), &app) {
		var f retracetemporal.Failure
		_ = app.Details(&f)
		fmt.Println(app.Type(), "retryable:", !app.NonRetryable(), "code:", f.Code)
	}
	fmt.Println("requests:", provider.Requests())
	// Output:
	// fatal retryable: false code: insufficient_quota
	// requests: 1
}
