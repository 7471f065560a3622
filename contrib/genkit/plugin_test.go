package retracegenkit_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/core/api"
	"github.com/firebase/genkit/go/genkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	retracegenkit "github.com/retrace-go/retrace/contrib/genkit"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/tool"
)

// askDocs plays an LLM that searches the docs once per conversation and
// answers with what the tool said.
func askDocs(_ int, req retracetest.Request) retracetest.Fault {
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "tool" {
		return retracetest.CallTools(retracetest.ToolCall{Name: "search_docs", Arguments: `{"query":"payment 429"}`})
	}
	return retracetest.Reply("From the tools: " + last.Content)
}

// The README's lines, written per request: a Middleware made for each
// Generate. With the Plugin registered on the genkit instance, the tool's
// breaker is the instance's: the 3 failures of the first request and the 2
// of the second open it, and the third request's call is refused without
// running the tool. Without the Plugin each Middleware has a breaker of its
// own, which never sees 5 failures in a row.
func TestBreakerKeptAcrossGenerates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		plugins []api.Plugin
		calls   []int64 // the tool's calls after each request
		hints   []string
	}{
		{"with the Plugin", []api.Plugin{&retracegenkit.Plugin{}}, []int64{3, 5, 5},
			[]string{"search_docs failed 3 times", "search_docs is unavailable", "search_docs is unavailable, circuit open"}},
		{"without the Plugin", nil, []int64{3, 6, 9},
			[]string{"search_docs failed 3 times", "search_docs failed 3 times", "search_docs failed 3 times"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStackWith(t, askDocs, stackConfig{plugins: tc.plugins})
			var docsCalls atomic.Int64
			docs := genkit.DefineTool(s.g, "search_docs", "Search the runbooks.",
				func(*ai.ToolContext, searchArgs) (string, error) {
					docsCalls.Add(1)
					return "", &policies.Error{StatusCode: 429, Code: "rate_limit_error", Message: "Too Many Requests"}
				})
			cfg := retracegenkit.Config{Options: s.opts, Tool: tool.Config{Clock: s.clk}}
			for i := range 3 {
				rt := retracegenkit.New(cfg) // per request, as a handler writes it
				resp, err := s.generate(context.Background(), []ai.Middleware{rt}, docs)
				require.NoError(t, err, "request %d", i+1)
				assert.Equal(t, tc.calls[i], docsCalls.Load(), "the tool's calls after request %d", i+1)

				var out struct {
					Error *tool.Failure `json:"error"`
				}
				reqs := s.srv.Received()
				last := reqs[len(reqs)-1].Messages
				require.NoError(t, json.Unmarshal([]byte(last[len(last)-1].Content), &out), "request %d", i+1)
				require.NotNil(t, out.Error, "request %d: the model reads the failure", i+1)
				assert.Contains(t, out.Error.Hint, tc.hints[i], "request %d", i+1)
				assert.Contains(t, resp.Text(), "From the tools")
			}
			// One trace per request; together they count every provider
			// request and every tool attempt as a leaf.
			traces := retracetest.ByTrace(s.rec.Ended())
			require.Len(t, traces, 3)
			var calls int64
			for _, tr := range traces {
				c, err := retracetest.TraceCounts(tr)
				require.NoError(t, err)
				assert.Equal(t, int64(c.LeafSpans), c.Calls)
				assert.LessOrEqual(t, c.Calls, c.WorstCase)
				calls += c.Calls
			}
			assert.Equal(t, int64(s.srv.Requests())+docsCalls.Load(), calls)
		})
	}
}
