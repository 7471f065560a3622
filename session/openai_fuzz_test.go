package session_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/session"
)

// FuzzStreamDecode serves any bytes as an event stream to the OpenAI
// provider, through the real openai-go client and a real HTTP server: it
// never panics, a success is a finished assistant message, and every failure
// is a classified error, never of class unknown, whose text for the history
// is at most MaxErrorText bytes. The limits are small, so that the fuzzer
// reaches them.
func FuzzStreamDecode(f *testing.F) {
	chunk := func(delta, finish string) string {
		return `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + finish + `}]}`
	}
	ok := "data: " + chunk(`{"role":"assistant","content":"Hi"}`, "null") + "\n\n" +
		"data: " + chunk(`{}`, `"stop"`) + "\n\n" +
		`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}` + "\n\n" +
		"data: [DONE]\n\n"
	for _, seed := range []string{
		ok,
		strings.ReplaceAll(ok, "\n", "\r\n"),
		strings.ReplaceAll(ok, "\n", "\r"),
		": ping\nid: 7\nretry: 100\n" + ok,
		"data: " + chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"search","arguments":"{\"q\":"}}]}`, "null") + "\n\n" +
			"data: " + chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}`, `"tool_calls"`) + "\n\ndata: [DONE]\n\n",
		"data: " + chunk(`{"tool_calls":[{"index":99999999,"function":{"arguments":"x"}}]}`, "null") + "\n\n",
		"data: " + chunk(`{"content":"Hi"}`, "null") + "\n\n" + `data: {"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}` + "\n\n",
		`data: {"error":{"message":"boom","type":"server_error","code":null}}` + "\n\n",
		`data: {"error":"Internal error"}` + "\n\n",
		`data: {"error":42}` + "\n\n",
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
		"event: error\ndata: {\"type\":\"error\",\"code\":\"context_length_exceeded\",\"message\":\"too long\"}\n\n",
		"event: error\r\ndata: upstream went away\r\n\r\n",
		"event: error\ndata: partial",
		"event: thread.run.created\ndata: {}\n\n",
		"data: " + chunk(`{"content":"Hi"}`, "null") + "\n\n",
		"data: {\"id\": \"x\", \"choices\": [\n\n",
		"data: " + strings.Repeat("x", 1100) + "\n\n",
		"data: x\n" + strings.Repeat("data: yyyyyyyy\n", 80),
		"data: [DONE]\n\n",
		"data:[DONE]\n\n",
		"",
		"\n\n\n",
		"\r\n\r",
		"data: \xff\xfe\n\n",
	} {
		f.Add([]byte(seed))
	}
	var body atomic.Pointer[[]byte]
	url := serveSSE(f, func() []byte { return *body.Load() })
	tr := &http.Transport{}
	f.Cleanup(tr.CloseIdleConnections)
	p := session.NewOpenAI(session.OpenAIConfig{
		BaseURL: url, HTTPClient: &http.Client{Transport: tr},
		Limits: session.Limits{MaxEventBytes: 1 << 10, MaxResponseBytes: 4 << 10},
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		body.Store(&b)
		msg, err := p.Stream(context.Background(), session.Request{Model: "gpt-test", Messages: []session.Message{{Role: session.User, Content: "hi"}}}, nil)
		if err == nil {
			if msg.Role != session.Assistant || msg.StopReason == "" {
				t.Fatalf("a success that is not a finished message: %+v", msg)
			}
			return
		}
		c := policies.Classify(err)
		if c.Class == policies.Unknown || c.Class == "" {
			t.Fatalf("class %q (type %s, %s) for %T: %v", c.Class, c.Type, c.Reason, err, err)
		}
		if n := len(session.ErrorText(err)); n > session.MaxErrorText {
			t.Fatalf("an error text of %d bytes", n)
		}
	})
}
