package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"
)

type lookup struct {
	Query string `json:"query"`
}

// loopFixture is a tool-using model played by the fault server, through the
// real openai-go client, and a box with one tool.
func loopFixture(t *testing.T, script retracetest.Script, maxSteps int) (*runtime.Loop, *retracetest.Server, *tracetest.SpanRecorder) {
	t.Helper()
	srv := retracetest.New(script)
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	clk := clock.NewVirtual(epoch)
	opts := []middleware.Option{middleware.WithTracerProvider(tp), middleware.WithClock(clk)}
	box := tool.NewBox(tool.New("search_docs", func(_ context.Context, q lookup) (string, error) {
		return "runbook for " + q.Query, nil
	}, tool.Config{Clock: clk, Options: opts}))
	sess, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-test"}),
		Model:    "gpt-test", Tools: box.Specs(), Options: opts,
	})
	require.NoError(t, err)
	return &runtime.Loop{Session: sess, Tools: box, MaxSteps: maxSteps, Options: opts}, srv, rec
}

func lastTool(req retracetest.Request) (retracetest.Message, bool) {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "tool" {
		return req.Messages[n-1], true
	}
	return retracetest.Message{}, false
}

func TestLoopCallsToolsThenAnswers(t *testing.T) {
	loop, srv, rec := loopFixture(t, func(n int, req retracetest.Request) retracetest.Fault {
		if m, ok := lastTool(req); ok {
			return retracetest.Reply("Found: " + m.Content)
		}
		return retracetest.CallTools(retracetest.ToolCall{Name: "search_docs", Arguments: `{"query":"429 storm"}`})
	}, 0)

	res, err := loop.Run(context.Background(), "What does the runbook say?")
	require.NoError(t, err)
	assert.Equal(t, "Found: runbook for 429 storm", res.Answer.Content)
	assert.Equal(t, 2, res.Steps)
	assert.Equal(t, 1, res.ToolCalls)
	assert.Equal(t, []string{"search_docs"}, srv.Received()[0].Tools, "the tools were offered to the model")
	second := srv.Received()[1].Messages
	assert.Equal(t, "tool", second[len(second)-1].Role)
	assert.Equal(t, "search_docs", second[len(second)-2].ToolCalls[0].Name)

	var root sdktrace.ReadOnlySpan
	names := map[string]int{}
	for _, s := range rec.Ended() {
		names[s.Name()]++
		if !s.Parent().IsValid() {
			root = s
		}
	}
	require.NotNil(t, root)
	assert.Equal(t, "invoke_agent", root.Name())
	assert.Equal(t, 1, names["execute_tool search_docs"])
	assert.Equal(t, 2, names["chat gpt-test"])
	assert.Contains(t, root.Attributes(), telemetry.Calls.Int64(3), "2 model calls and 1 tool call")
	assert.Contains(t, root.Attributes(), semconv.GenAIOperation.String("invoke_agent"))
	assert.Contains(t, root.Attributes(), semconv.GenAIProvider.String("openai"), "the session says which provider")

	callID := second[len(second)-1].ToolCallID
	require.NotEmpty(t, callID, "the server named the call")
	for _, s := range rec.Ended() {
		if s.Name() == "execute_tool search_docs" {
			assert.Contains(t, s.Attributes(), semconv.GenAIToolCallID.String(callID), "the model's ID for the call")
			assert.Contains(t, s.Attributes(), semconv.GenAIToolType.String("function"))
		}
		if s.Name() != "execute_tool search_docs" {
			for _, kv := range s.Attributes() {
				assert.NotEqual(t, semconv.GenAIToolCallID, kv.Key, "only the tool's own span carries the call's ID: %s", s.Name())
			}
		}
	}
}

func TestLoopNamesTheAgent(t *testing.T) {
	loop, _, rec := loopFixture(t, retracetest.Always(retracetest.Reply("hi")), 0)
	loop.Name = "oncall"
	_, err := loop.Run(context.Background(), "hello")
	require.NoError(t, err)
	var root sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if !s.Parent().IsValid() {
			root = s
		}
	}
	require.NotNil(t, root)
	assert.Equal(t, "invoke_agent oncall", root.Name())
	assert.Contains(t, root.Attributes(), semconv.GenAIAgentName.String("oncall"))
}

func TestLoopStepLimit(t *testing.T) {
	loop, srv, rec := loopFixture(t, retracetest.Always(retracetest.CallTools(retracetest.ToolCall{Name: "search_docs", Arguments: `{"query":"again"}`})), 3)

	res, err := loop.Run(context.Background(), "loop forever")
	require.ErrorIs(t, err, runtime.ErrStepLimit)
	sl, ok := errors.AsType[*policies.Error](err)
	require.True(t, ok)
	assert.Equal(t, telemetry.OutcomeStepLimit, sl.Outcome)
	assert.Contains(t, sl.Error(), "step limit of 3 turns")
	assert.Equal(t, 3, res.ToolCalls)
	assert.Equal(t, 3, srv.Requests())
	assert.Equal(t, policies.Fatal, policies.Classify(err).Class, "no layer above retries a loop that used up its steps")
	for _, s := range rec.Ended() {
		if !s.Parent().IsValid() {
			assert.Contains(t, s.Attributes(), telemetry.Outcome.String("step_limit"))
			assert.Contains(t, s.Attributes(), attribute.String("retrace.diagnosis",
				"stopped at the step limit: the agent loop reached its step limit of 3 turns (3 tool calls) without an answer"))
		}
	}
}

func TestLoopSessionFailure(t *testing.T) {
	loop, _, _ := loopFixture(t, retracetest.Always(retracetest.InvalidAPIKey()), 0)
	_, err := loop.Run(context.Background(), "hi")
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "invalid_api_key"), err.Error())
}

// A loop missing its Session or Tools refuses to start with a clear
// configuration error, instead of panicking when the model calls a tool.
func TestLoopRefusesAMissingPart(t *testing.T) {
	_, err := (&runtime.Loop{}).Run(context.Background(), "hi")
	require.ErrorIs(t, err, runtime.ErrLoopConfig)
	assert.Contains(t, err.Error(), "Session is nil")
	assert.Equal(t, policies.Programming, policies.Classify(err).Class)

	conv := &scripted{turns: []session.Message{{Role: session.Assistant, ToolCalls: []session.ToolCall{{ID: "1", Name: "x"}}}}}
	_, err = (&runtime.Loop{Session: conv}).Run(context.Background(), "hi")
	require.ErrorIs(t, err, runtime.ErrLoopConfig)
	assert.Contains(t, err.Error(), "Tools is nil")
	var pe *policies.Error
	assert.False(t, errors.As(err, &pe) && pe.Type == "panic", "no recovered panic")
	assert.Zero(t, conv.runs, "it did not start")
}

// scripted is a Conversation that answers with its turns in order.
type scripted struct {
	turns []session.Message
	runs  int
}

func (s *scripted) Run(context.Context, string) (session.Message, error) {
	s.runs++
	return s.turns[0], nil
}

func (s *scripted) Continue(context.Context) (session.Message, error) {
	s.runs++
	return s.turns[min(s.runs-1, len(s.turns)-1)], nil
}

func (s *scripted) Append(...session.Message) {}
