package retracetest

import (
	"encoding/json"
	"strings"
)

// ToolAgent is a scripted model, for New, that acts as an agent reading
// retrace's tool failures: it calls primary with query, reads what the
// tool said, calls primary again while a failure says a retry may help,
// turns to fallback once a failure says it cannot ("retryable": false, or a
// hint that the tool is unavailable and names another tool), and answers
// "From {tool}: {result}" once a tool has answered. A bare error text
// ("error: …"), which says nothing of what to do, gets primary called
// again: what a model does in a loop without governance.
func ToolAgent(primary, fallback, query string) func(n int, req Request) Fault {
	args, _ := json.Marshal(map[string]string{"query": query})
	return func(_ int, req Request) Fault {
		call := func(name string) Fault {
			return CallTools(ToolCall{Name: name, Arguments: string(args)})
		}
		if len(req.Messages) == 0 {
			return call(primary)
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role != "tool" {
			return call(primary)
		}
		var res struct {
			Error *struct {
				Retryable bool   `json:"retryable"`
				Hint      string `json:"hint"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(last.Content), &res) == nil && res.Error != nil {
			if !res.Error.Retryable || strings.Contains(res.Error.Hint, "use another tool") && strings.Contains(res.Error.Hint, "unavailable") {
				return call(fallback)
			}
			return call(primary)
		}
		if strings.HasPrefix(last.Content, "error:") {
			return call(primary)
		}
		return Reply("From " + answeredBy(req.Messages, last.ToolCallID) + ": " + last.Content)
	}
}

// answeredBy is the tool a tool message answers, by its call's ID.
func answeredBy(msgs []Message, callID string) string {
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			if c.ID == callID {
				return c.Name
			}
		}
	}
	return "a tool"
}
