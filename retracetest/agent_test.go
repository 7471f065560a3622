package retracetest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retrace-go/retrace/retracetest"
)

func TestToolAgent(t *testing.T) {
	agent := retracetest.ToolAgent("search_docs", "search_cache", "q")
	asked := []retracetest.Message{
		{Role: "user", Content: "what broke?"},
		{Role: "assistant", ToolCalls: []retracetest.ToolCall{{ID: "c1", Name: "search_docs"}}},
	}
	answer := func(content string) []retracetest.Message {
		return append(append([]retracetest.Message(nil), asked...),
			retracetest.Message{Role: "tool", ToolCallID: "c1", Content: content})
	}
	calls := func(name string) retracetest.Fault {
		return retracetest.CallTools(retracetest.ToolCall{Name: name, Arguments: `{"query":"q"}`})
	}
	for _, tc := range []struct {
		name string
		msgs []retracetest.Message
		want retracetest.Fault
	}{
		{"no messages", nil, calls("search_docs")},
		{"the user asks", asked[:1], calls("search_docs")},
		{"a retryable failure", answer(`{"error":{"retryable":true,"hint":"wait 2s"}}`), calls("search_docs")},
		{"a permanent failure", answer(`{"error":{"retryable":false}}`), calls("search_cache")},
		{"an unavailable tool", answer(`{"error":{"retryable":true,"hint":"search_docs is unavailable; use another tool"}}`), calls("search_cache")},
		{"a bare error text", answer("error: 429 Too Many Requests"), calls("search_docs")},
		{"an answer", answer("the runbook"), retracetest.Reply("From search_docs: the runbook")},
		{"an answer to an unknown call", append(asked[:1:1], retracetest.Message{Role: "tool", ToolCallID: "zz", Content: "x"}), retracetest.Reply("From a tool: x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, agent(0, retracetest.Request{Messages: tc.msgs}))
		})
	}
}
