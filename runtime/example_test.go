package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/tool"
)

// Exec retries what its agent could not fix: a provider that is down twice
// and then answers costs two backoffs (1.5 s, then 3 s), not a failure. The
// agent is usually a *session.Session; here it is a function.
func ExampleRuntime_Exec() {
	clk := clock.NewVirtual(time.Unix(0, 0)) // the backoffs pass at once
	calls := 0
	agent := runtime.AgentFunc(func(ctx context.Context, prompt string) (session.Message, error) {
		calls++
		if calls < 3 {
			return session.Message{}, &policies.Error{StatusCode: 503, Message: "Service unavailable"}
		}
		return session.Message{Role: session.Assistant, Content: "answer to " + prompt}, nil
	})
	rt := runtime.New(agent, runtime.Config{Options: []middleware.Option{middleware.WithClock(clk)}})

	msg, err := rt.Exec(context.Background(), "hello")
	fmt.Println(msg.Content, err)
	fmt.Println(calls, "attempts of", rt.MaxAttempts(), "slept", clk.Slept())
	// Output:
	// answer to hello <nil>
	// 3 attempts of 3 slept [1.5s 3s]
}

// A permanent failure (a revoked API key) is not retried. One errors.As to
// *policies.Error answers what failed and how the call ended; the
// *runtime.ExecError around it lists the attempts.
func ExampleRuntime_Exec_permanent() {
	agent := runtime.AgentFunc(func(ctx context.Context, prompt string) (session.Message, error) {
		return session.Message{}, &policies.Error{StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided"}
	})
	rt := runtime.New(agent, runtime.Config{})

	_, err := rt.Exec(context.Background(), "hello")
	fmt.Println(err)
	var failed *policies.Error
	if errors.As(err, &failed) {
		fmt.Println("layer:", failed.Layer)
		fmt.Println("outcome:", failed.Outcome, "after", failed.Attempts, "attempt")
		fmt.Println("class:", failed.Class, failed.StatusCode, failed.Code)
	}
	// Output:
	// exec failed permanently after 1 attempt: APIError: 401 invalid_api_key: Incorrect API key provided
	// layer: runtime
	// outcome: failed_permanent after 1 attempt
	// class: permanent 401 invalid_api_key
}

// A tool-using agent: the model asks for a tool, the loop calls it, and the
// model answers from its result. The model is played by retracetest's server,
// reached through the real OpenAI client, and its first answer is a 503,
// which the session retries after 2 s of clock time.
func ExampleLoop() {
	srv := retracetest.New(func(n int, req retracetest.Request) retracetest.Fault {
		switch last := req.Messages[len(req.Messages)-1]; {
		case n == 0:
			return retracetest.ServerError(503)
		case last.Role == "tool":
			return retracetest.Reply("The runbook says: " + last.Content)
		default:
			return retracetest.CallTools(retracetest.ToolCall{Name: "search_docs", Arguments: `{"query":"429 storm"}`})
		}
	})
	if err := srv.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	clk := clock.NewVirtual(time.Unix(0, 0)) // the backoffs pass at once
	opts := []middleware.Option{middleware.WithClock(clk)}
	type query struct {
		Query string `json:"query"`
	}
	tools := tool.NewBox(tool.New("search_docs", func(ctx context.Context, q query) (string, error) {
		return "shed load for " + q.Query, nil
	}, tool.Config{Clock: clk, Options: opts}))
	sess, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-test"}),
		Model:    "gpt-4o-mini",
		Tools:    tools.Specs(),
		Options:  opts,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	loop := &runtime.Loop{Session: sess, Tools: tools, MaxSteps: 10, Name: "oncall", Options: opts}

	res, err := loop.Run(context.Background(), "What do we do about the 429s?")
	fmt.Println(res.Answer.Content, err)
	fmt.Println(res.Steps, "model turns,", res.ToolCalls, "tool call,", srv.Requests(), "provider requests, slept", clk.Slept())
	// Output:
	// The runbook says: shed load for 429 storm <nil>
	// 2 model turns, 1 tool call, 3 provider requests, slept [2s]
}

// A task saves a checkpoint after every step, in a FileStore here. Its first
// run stops at a deploy that is still failing when its retries run out; the
// next run resumes there, with the build's result read back from the
// checkpoint, and does not build again.
func ExampleRunTask() {
	dir, err := os.MkdirTemp("", "retrace-tasks")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	store, err := runtime.NewFileStore(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := runtime.TaskConfig{
		Store:   store,
		Options: []middleware.Option{middleware.WithClock(clock.NewVirtual(time.Unix(0, 0)))}, // the backoffs pass at once
	}

	targetDown := true
	task := runtime.Task{ID: "release-42", Steps: []runtime.Step{
		{Name: "build", Run: func(ctx context.Context, s runtime.StepContext) (any, error) {
			fmt.Println("  build")
			return "artifact-7", nil
		}},
		{Name: "deploy", Run: func(ctx context.Context, s runtime.StepContext) (any, error) {
			var artifact string
			if err := json.Unmarshal(s.Results[1], &artifact); err != nil {
				return nil, err
			}
			fmt.Println("  deploy", artifact, "as", s.Key) // the key is the same on every run
			if targetDown {
				return nil, &policies.Error{StatusCode: 503, Message: "Service unavailable"}
			}
			return "deployed", nil
		}},
	}}

	fmt.Println("first run:")
	rep, err := runtime.RunTask(context.Background(), task, cfg)
	fmt.Println("  saved", len(rep.Steps), "step")
	fmt.Println(" ", err)

	targetDown = false
	fmt.Println("second run:")
	rep, err = runtime.RunTask(context.Background(), task, cfg)
	fmt.Println("  resumed at step", rep.ResumedAt, "ran", rep.Ran, "saved", len(rep.Steps), "steps;", err)
	// Output:
	// first run:
	//   build
	//   deploy artifact-7 as release-42/2
	//   deploy artifact-7 as release-42/2
	//   deploy artifact-7 as release-42/2
	//   saved 1 step
	//   task release-42 stopped at step 2 (deploy), to be resumed there: step: failed after 3 attempts: 503: Service unavailable
	// second run:
	//   deploy artifact-7 as release-42/2
	//   resumed at step 2 ran [2] saved 2 steps; <nil>
}
