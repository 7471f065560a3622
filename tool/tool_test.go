package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

type query struct {
	Query string `json:"query"`
}

// docs is a downstream that answers 429 until its clock passes until.
type docs struct {
	clk    clock.Clock
	until  time.Time
	calls  atomic.Int64
	failed atomic.Int64 // calls answered with 429
}

func (d *docs) search(ctx context.Context, q query) ([]string, error) {
	d.calls.Add(1)
	if d.clk.Now().Before(d.until) {
		d.failed.Add(1)
		return nil, &policies.Error{StatusCode: 429, Code: "rate_limit_exceeded", Message: "Too Many Requests"}
	}
	return []string{"runbook: " + q.Query}, nil
}

func failureOf(t *testing.T, content string) tool.Failure {
	t.Helper()
	var out struct {
		Error *tool.Failure `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(content), &out), content)
	require.NotNil(t, out.Error, content)
	return *out.Error
}

func recorder(t *testing.T) (*tracetest.SpanRecorder, middleware.Option) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, middleware.WithTracerProvider(tp)
}

func TestSuccessIsTheValue(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	d := &docs{clk: clk}
	search := tool.New("search_docs", d.search, tool.Config{Clock: clk, Options: []middleware.Option{tp}})
	res := search.Invoke(context.Background(), `{"query":"429 storm"}`)
	assert.Nil(t, res.Failure)
	assert.JSONEq(t, `["runbook: 429 storm"]`, res.Content)
	spans := rec.Ended()
	require.Len(t, spans, 2, "the tool layer and its one attempt")
	layer := spans[1]
	assert.Equal(t, "execute_tool search_docs", layer.Name())
	assert.Contains(t, layer.Attributes(), attribute.String("gen_ai.tool.name", "search_docs"))
	assert.Contains(t, layer.Attributes(), telemetry.Layer.String("tool"))
}

// Retries happen inside the tool; the model gets one final, structured state.
func TestRetriesThenStructuredFailure(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	d := &docs{clk: clk, until: epoch.Add(time.Hour)}
	search := tool.New("search_docs", d.search, tool.Config{Clock: clk})
	res := search.Invoke(context.Background(), `{"query":"x"}`)

	assert.Equal(t, int64(3), d.calls.Load(), "ToolRetry: 3 attempts, the first call included")
	f := failureOf(t, res.Content)
	assert.Equal(t, *res.Failure, f)
	assert.Equal(t, "transient", f.Class)
	assert.True(t, f.Retryable)
	assert.Equal(t, "429 rate_limit_exceeded: Too Many Requests", f.Message)
	assert.Equal(t, "search_docs failed 3 times (rate_limit_exceeded): try again later, or use another tool", f.Hint)
	slept := clk.Slept()
	require.Len(t, slept, 2)
	assert.InDelta(t, 0.6, slept[0].Seconds(), 0.2, "0.8 s × a factor in [0.5, 1]")
	assert.InDelta(t, 1.2, slept[1].Seconds(), 0.4, "1.6 s × a factor in [0.5, 1]")
}

// After 5 consecutive failures the breaker opens; the model is told the tool
// is unavailable and for how long.
func TestOpenBreakerTellsTheModel(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	d := &docs{clk: clk, until: epoch.Add(time.Hour)}
	search := tool.New("search_docs", d.search, tool.Config{Clock: clk})
	ctx := context.Background()
	search.Invoke(ctx, `{}`)
	res := search.Invoke(ctx, `{}`)

	assert.Equal(t, int64(5), d.calls.Load(), "5 calls, then the breaker opened")
	f := failureOf(t, res.Content)
	assert.Equal(t, "transient", f.Class)
	assert.False(t, f.Retryable, "a call now would be refused: not before retry_after_s")
	assert.Equal(t, float64(60), f.RetryAfterS)
	assert.Equal(t, "search_docs is unavailable, circuit open for another 60 s: use another tool or answer with what you have", f.Hint)

	clk.Advance(17 * time.Second)
	f = failureOf(t, search.Invoke(ctx, `{}`).Content)
	assert.Equal(t, "search_docs is unavailable, circuit open for another 43 s: use another tool or answer with what you have", f.Hint)
	assert.Equal(t, int64(5), d.calls.Load(), "the open breaker kept the call from the downstream")
}

// The incident: search_docs answers 429 for 30 minutes while the agent
// keeps asking. Under governance the downstream sees 5 calls before the
// breaker opens and then one probe per cool-down, and the retries stay
// within the task's budget of 6.
func TestThirtyMinutesOf429(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	d := &docs{clk: clk, until: epoch.Add(30 * time.Minute)}
	search := tool.New("search_docs", d.search, tool.Config{Clock: clk})
	ctx := policies.WithTaskBudget(context.Background(), 6)
	calls := 0
	var last tool.Result
	for clk.Now().Before(epoch.Add(31 * time.Minute)) {
		last = search.Invoke(ctx, `{"query":"incident"}`)
		calls++
		clk.Advance(10 * time.Second) // the agent asks again every 10 s
	}
	cooldowns := int64(30*time.Minute/(60*time.Second)) + 1
	assert.LessOrEqual(t, d.failed.Load(), 5+cooldowns, "at most 5 calls before the breaker opens, then one probe per cool-down")
	assert.GreaterOrEqual(t, d.failed.Load(), int64(5+25), "a probe after each cool-down")
	t.Logf("30 minutes of 429 at one call per 10 s: %d tool calls, %d reached the downstream while it failed, %d retries drawn", calls, d.failed.Load(), policies.TaskBudgetFrom(ctx).Used())
	assert.Greater(t, calls, 180)
	assert.LessOrEqual(t, policies.TaskBudgetFrom(ctx).Used(), 6)
	assert.Nil(t, last.Failure, "after 30 minutes the probe succeeds and the breaker closes")
}

func TestInvalidArguments(t *testing.T) {
	d := &docs{clk: clock.NewVirtual(epoch)}
	search := tool.New("search_docs", d.search, tool.Config{})
	f := failureOf(t, search.Invoke(context.Background(), `{"query": 42}`).Content)
	assert.Equal(t, "permanent", f.Class)
	assert.False(t, f.Retryable)
	assert.Equal(t, "the arguments were not valid for search_docs: fix them and call it again", f.Hint)
	assert.Equal(t, int64(0), d.calls.Load())
}

func TestFatalAndPermanent(t *testing.T) {
	calls := 0
	quota := tool.New("web_search", func(context.Context, query) (string, error) {
		calls++
		return "", &policies.Error{StatusCode: 429, Code: "insufficient_quota", Message: "quota used up; key=sk-live-abcdefghijklmnop"}
	}, tool.Config{Clock: clock.NewVirtual(epoch)})
	f := failureOf(t, quota.Invoke(context.Background(), `{}`).Content)
	assert.Equal(t, 1, calls)
	assert.Equal(t, "fatal", f.Class)
	assert.False(t, f.Retryable)
	assert.NotContains(t, f.Message, "abcdefghijklmnop", "secrets never reach the model")
	assert.Equal(t, "web_search cannot be used for the rest of this task (insufficient_quota): do not call it again; tell the user", f.Hint)

	notFound := tool.New("read_file", func(context.Context, query) (string, error) {
		return "", &policies.Error{Class: policies.Permanent, Type: "not_found", Err: errors.New("no such file")}
	}, tool.Config{})
	f = failureOf(t, notFound.Invoke(context.Background(), `{}`).Content)
	assert.Equal(t, "read_file cannot do this request (not_found): calling it again with the same arguments fails the same way; change them or use another tool", f.Hint)
	assert.Equal(t, "no such file", f.Message)
}

// A call that needs the user first is not retried, and the model is told to
// ask the user, then call again with the same arguments.
func TestUserActionTellsTheModelToAskTheUser(t *testing.T) {
	calls := 0
	auth := tool.New("calendar", func(context.Context, query) (string, error) {
		calls++
		return "", &policies.Error{Class: policies.UserAction, Type: "-32042",
			Err: errors.New("authorization required: open https://auth.example/consent")}
	}, tool.Config{Clock: clock.NewVirtual(epoch)})
	f := failureOf(t, auth.Invoke(context.Background(), `{}`).Content)
	assert.Equal(t, 1, calls, "not retried")
	assert.Equal(t, "user_action", f.Class)
	assert.False(t, f.Retryable)
	assert.Equal(t, "authorization required: open https://auth.example/consent", f.Message)
	assert.Equal(t, "calendar needs the user to act first (-32042): ask the user to do what the message says (open its link), then call calendar again with the same arguments", f.Hint)
}

func TestBudgetExhaustedTellsTheModel(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	d := &docs{clk: clk, until: epoch.Add(time.Hour)}
	search := tool.New("search_docs", d.search, tool.Config{Clock: clk, NoBreaker: true})
	ctx := policies.WithTaskBudget(context.Background(), 1)
	search.Invoke(ctx, `{}`)
	f := failureOf(t, search.Invoke(ctx, `{}`).Content)
	assert.False(t, f.Retryable)
	assert.Equal(t, "the task's retry budget is spent, so search_docs was not retried: use another tool or answer with what you have", f.Hint)
	assert.Equal(t, int64(3), d.calls.Load())
}

func TestBox(t *testing.T) {
	d := &docs{clk: clock.NewVirtual(epoch)}
	box := tool.NewBox(tool.New("search_docs", d.search, tool.Config{Description: "Search the runbooks."}))
	assert.Equal(t, []session.Tool{{Name: "search_docs", Description: "Search the runbooks."}}, box.Specs())
	msg := box.Invoke(context.Background(), session.ToolCall{ID: "call_1", Name: "search_docs", Arguments: `{"query":"q"}`})
	assert.Equal(t, session.Message{Role: session.ToolRole, ToolCallID: "call_1", Name: "search_docs", Content: `["runbook: q"]`}, msg)
	msg = box.Invoke(context.Background(), session.ToolCall{ID: "call_2", Name: "rm_rf"})
	f := failureOf(t, msg.Content)
	assert.Equal(t, "there is no tool named \"rm_rf\"", f.Message)
}

// Five tasks fail at the same moment. Without jitter they all retry at the
// same instant; with ToolRetry's jitter their retries spread out.
func TestJitterSpreadsConcurrentRetries(t *testing.T) {
	spread := func(jitter float64) []time.Duration {
		rec, tp := recorder(t)
		clk := clock.NewFake(epoch)
		cfg := policies.ToolRetry
		cfg.Backoff.Jitter = jitter
		cfg.Rand = policies.SeededRand(42)
		var mu sync.Mutex
		failed := map[int]bool{}
		fn := func(_ context.Context, q struct{ Client int }) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			if !failed[q.Client] {
				failed[q.Client] = true
				return "", &policies.Error{StatusCode: 503}
			}
			return "ok", nil
		}
		shared := tool.New("search_docs", fn, tool.Config{Retry: cfg, Clock: clk, NoBreaker: true, Options: []middleware.Option{tp}})
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				assert.Nil(t, shared.Invoke(context.Background(), `{"Client":`+string(rune('0'+i))+`}`).Failure)
			})
		}
		clk.BlockUntilSleepers(5) // all five failed at the same moment and are backing off
		clk.Advance(time.Second)
		wg.Wait()
		var retryAt []time.Duration
		for _, s := range rec.Ended() {
			for _, kv := range s.Attributes() {
				if kv.Key == telemetry.Attempt && kv.Value.AsInt64() == 2 {
					for _, kv := range s.Attributes() {
						if kv.Key == telemetry.RetryDelayMs {
							retryAt = append(retryAt, time.Duration(kv.Value.AsInt64())*time.Millisecond)
						}
					}
				}
			}
		}
		sort.Slice(retryAt, func(i, j int) bool { return retryAt[i] < retryAt[j] })
		require.Len(t, retryAt, 5)
		return retryAt
	}

	together := spread(0)
	assert.Equal(t, together[0], together[4], "without jitter all five retry at the same instant: %v", together)
	assert.Equal(t, 800*time.Millisecond, together[0])

	jittered := spread(0.5)
	t.Logf("retry times after the common failure: without jitter %v, with jitter %v", together, jittered)
	assert.GreaterOrEqual(t, jittered[4]-jittered[0], 150*time.Millisecond, "jitter spreads the retries")
	for i := 1; i < 5; i++ {
		assert.NotEqual(t, jittered[i-1], jittered[i], "no two retries at the same millisecond")
	}
	for _, d := range jittered {
		assert.GreaterOrEqual(t, d, 400*time.Millisecond)
		assert.LessOrEqual(t, d, 800*time.Millisecond)
	}
}

// A classifier given in a tool's Retry, with MaxAttempts left zero, is kept:
// the preset fills the other fields, it does not replace the whole config.
func TestToolKeepsItsClassifier(t *testing.T) {
	errFlaky := errors.New("flaky upstream")
	cl := policies.NewClassifier(func(err error) (policies.Classification, bool) {
		if errors.Is(err, errFlaky) {
			return policies.Classification{Class: policies.Transient, Type: "flaky", Reason: "rule: flaky"}, true
		}
		return policies.Classification{}, false
	})
	calls := 0
	flaky := func(context.Context, query) (string, error) {
		calls++
		return "", errFlaky
	}
	clk := clock.NewVirtual(epoch)
	tl := tool.New("flaky", flaky, tool.Config{Retry: policies.RetryConfig{Classifier: cl}, Clock: clk})
	res := tl.Invoke(context.Background(), `{"query":"x"}`)
	assert.Equal(t, 3, calls, "the rule made it Transient, and ToolRetry's 3 attempts applied")
	assert.Equal(t, "transient", failureOf(t, res.Content).Class)
	assert.Len(t, clk.Slept(), 2, "ToolRetry's backoff applied too")

	calls = 0
	plain := tool.New("flaky", flaky, tool.Config{Clock: clk})
	res = plain.Invoke(context.Background(), `{"query":"x"}`)
	assert.Equal(t, 1, calls, "without the rule it is Unknown: a tool does not retry it")
	assert.Equal(t, "unknown", failureOf(t, res.Content).Class)
}

// A credential the task registered, and secret patterns, never reach what
// the model reads or the spans, however the tool's own error words them.
func TestToolFailureHoldsNoSecret(t *testing.T) {
	rec, tp := recorder(t)
	const token = "tok_4f9a8b7c6d5e4f3a2b1c" // the tool's credential, in no known shape
	leaky := func(context.Context, query) (string, error) {
		return "", &policies.Error{StatusCode: 403, Code: token, Message: "token " + token + " rejected for https://bot:pa55w0rd@api.example.com/v1?api_key=sk-proj-abcdefghijklmnop"}
	}
	tl := tool.New("leaky", leaky, tool.Config{Options: []middleware.Option{tp}})
	ctx := policies.WithSecrets(context.Background(), token)
	res := tl.Invoke(ctx, `{"query":"x"}`)
	for _, secret := range []string{token, "pa55w0rd", "sk-proj-abcdefghijklmnop"} {
		assert.NotContains(t, res.Content, secret)
		for _, s := range rec.Ended() {
			assert.NotContains(t, s.Status().Description, secret)
			for _, kv := range s.Attributes() {
				assert.NotContains(t, kv.Value.String(), secret, "%s on %s", kv.Key, s.Name())
			}
		}
	}
	assert.Equal(t, "permanent", failureOf(t, res.Content).Class)
}

// A failure whose type says nothing (_OTHER) is not named to the model.
func TestHintWithoutAnUnnamedType(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	flaky := tool.New("lookup", func(context.Context, struct{}) (string, error) {
		return "", errors.New("upstream said: 503 service unavailable")
	}, tool.Config{Clock: clk})
	f := failureOf(t, flaky.Invoke(context.Background(), `{}`).Content)
	assert.Equal(t, "transient", f.Class)
	assert.NotContains(t, f.Hint, "_OTHER")
	assert.Equal(t, "lookup failed 3 times: try again later, or use another tool", f.Hint)
}

// A tool whose calls each bring their work: the work is the call's, the
// governance (retry, breaker) the tool's, one for every call whatever its
// work; without work a call is refused as a bug.
func TestCallWith(t *testing.T) {
	clk := clock.NewVirtual(epoch)
	endpoint := tool.New[json.RawMessage, string]("endpoint", nil, tool.Config{Clock: clk, Breaker: policies.BreakerConfig{FailureThreshold: 3}})

	tries := 0
	out, err := endpoint.CallWith(context.Background(), `{"q":"a"}`, func(_ context.Context, args string) (string, error) {
		tries++
		if tries < 2 {
			return "", &policies.Error{StatusCode: 503}
		}
		return "got " + args, nil
	})
	require.NoError(t, err)
	assert.Equal(t, `got {"q":"a"}`, out)
	assert.Equal(t, 2, tries, "retried as the tool's governance says")

	// Other work, the same breaker: its 3 failures in a row open it, and
	// the next call's work is refused.
	res := endpoint.InvokeWith(context.Background(), `{}`, func(context.Context, string) (string, error) {
		return "", &policies.Error{StatusCode: 503}
	})
	require.NotNil(t, res.Failure)
	res = endpoint.InvokeWith(context.Background(), `{}`, func(context.Context, string) (string, error) { return "ok", nil })
	require.NotNil(t, res.Failure)
	assert.Contains(t, res.Failure.Hint, "circuit open")

	_, err = endpoint.Call(context.Background(), `{}`)
	assert.Equal(t, "no_handler", policies.Classify(err).Type)
	_, err = endpoint.CallWith(context.Background(), `{}`, nil)
	assert.Equal(t, policies.Programming, policies.Classify(err).Class)
}
