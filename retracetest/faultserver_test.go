package retracetest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/retracetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a server with script and returns it with a client of its own.
func start(t *testing.T, script retracetest.Script) (*retracetest.Server, *http.Client) {
	t.Helper()
	srv := retracetest.New(script)
	require.NoError(t, srv.Start())
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return srv, &http.Client{Transport: tr}
}

func body(stream, usage bool) string {
	b := fmt.Sprintf(`{"model":"gpt-test","stream":%t,"messages":[{"role":"user","content":"say hello please"}]`, stream)
	if usage {
		b += `,"stream_options":{"include_usage":true}`
	}
	return b + "}"
}

func post(t *testing.T, ctx context.Context, c *http.Client, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test-secret-abcd")
	return c.Do(req)
}

func mustPost(t *testing.T, c *http.Client, url, body string) *http.Response {
	t.Helper()
	resp, err := post(t, context.Background(), c, url, body)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// events reads server-sent events: it returns the data of each event until
// the body ends, and the error that ended it (io.EOF for a clean end).
func events(r io.Reader) ([]string, error) {
	br := bufio.NewReader(r)
	var out []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line != "" {
				err = io.ErrUnexpectedEOF
			}
			return out, err
		}
		line = strings.TrimRight(line, "\n")
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return out, fmt.Errorf("not a data line: %q", line)
		}
		out = append(out, data)
	}
}

// chunk is a chat.completion.chunk, text or tool calls.
type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      *string `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    *int    `json:"index"`
				ID       *string `json:"id"`
				Type     *string `json:"type"`
				Function struct {
					Name      *string `json:"name"`
					Arguments *string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func decodeChunk(t *testing.T, data string) chunk {
	t.Helper()
	var c chunk
	require.NoError(t, json.Unmarshal([]byte(data), &c), data)
	assert.Equal(t, "chat.completion.chunk", c.Object)
	assert.Equal(t, "gpt-test", c.Model)
	assert.True(t, strings.HasPrefix(c.ID, "chatcmpl-"), c.ID)
	assert.NotZero(t, c.Created)
	return c
}

// contentOf checks that every event is a content chunk and returns the text.
func contentOf(t *testing.T, evs []string) string {
	t.Helper()
	var sb strings.Builder
	for i, e := range evs {
		c := decodeChunk(t, e)
		require.Len(t, c.Choices, 1)
		require.NotNil(t, c.Choices[0].Delta.Content)
		assert.Nil(t, c.Choices[0].FinishReason)
		if i == 0 {
			require.NotNil(t, c.Choices[0].Delta.Role)
			assert.Equal(t, "assistant", *c.Choices[0].Delta.Role)
		}
		sb.WriteString(*c.Choices[0].Delta.Content)
	}
	return sb.String()
}

type errBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func TestStreamingSuccessWithUsage(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.OK()))
	resp := mustPost(t, c, srv.URL(), body(true, true))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	evs, err := events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	pieces := retracetest.ReplyChunks(retracetest.DefaultReply)
	require.Len(t, evs, len(pieces)+3, "content chunks, the finish chunk, the usage chunk and [DONE]")
	assert.Equal(t, retracetest.DefaultReply, contentOf(t, evs[:len(pieces)]))
	assert.Greater(t, len(pieces), 2, "the reply is split into several chunks")

	finish := decodeChunk(t, evs[len(pieces)])
	require.Len(t, finish.Choices, 1)
	assert.Nil(t, finish.Choices[0].Delta.Content)
	require.NotNil(t, finish.Choices[0].FinishReason)
	assert.Equal(t, "stop", *finish.Choices[0].FinishReason)
	assert.Nil(t, finish.Usage)

	u := decodeChunk(t, evs[len(pieces)+1])
	assert.Empty(t, u.Choices)
	assert.Contains(t, evs[len(pieces)+1], `"choices":[]`)
	require.NotNil(t, u.Usage)
	assert.Equal(t, 3, u.Usage.PromptTokens, "three words in the messages")
	assert.Equal(t, len(strings.Fields(retracetest.DefaultReply)), u.Usage.CompletionTokens)
	assert.Equal(t, u.Usage.PromptTokens+u.Usage.CompletionTokens, u.Usage.TotalTokens)

	assert.Equal(t, "[DONE]", evs[len(evs)-1])
	assert.Equal(t, "chatcmpl-0", u.ID)
	assert.Equal(t, 1, srv.Requests())
}

func TestStreamingSuccessWithoutUsage(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.Reply("one  two\nthree ")))
	resp := mustPost(t, c, srv.URL(), body(true, false))
	evs, err := events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, evs, 5, "three content chunks, the finish chunk and [DONE]")
	assert.Equal(t, "one  two\nthree ", contentOf(t, evs[:3]))
	assert.Equal(t, `{"id":"chatcmpl-0","object":"chat.completion.chunk","created":`, evs[3][:strings.Index(evs[3], `"created":`)+10])
	assert.Contains(t, evs[3], `"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]`)
	assert.Equal(t, "[DONE]", evs[4])
}

func TestNonStreamingSuccess(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.Reply("all good here")))
	resp := mustPost(t, c, srv.URL(), body(false, false))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var got struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		} `json:"usage"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	assert.Equal(t, "chatcmpl-0", got.ID)
	assert.Equal(t, "chat.completion", got.Object)
	assert.Equal(t, "gpt-test", got.Model)
	require.Len(t, got.Choices, 1)
	assert.Equal(t, "assistant", got.Choices[0].Message.Role)
	assert.Equal(t, "all good here", got.Choices[0].Message.Content)
	assert.Equal(t, "stop", got.Choices[0].FinishReason)
	assert.Equal(t, 3, got.Usage.PromptTokens)
	assert.Equal(t, 3, got.Usage.CompletionTokens)
	assert.Equal(t, 6, got.Usage.TotalTokens)
}

func TestPaths(t *testing.T) {
	srv, c := start(t, nil)
	base := strings.TrimSuffix(srv.URL(), "/v1")
	for _, url := range []string{srv.URL(), base} {
		resp := mustPost(t, c, url, body(false, false))
		assert.Equal(t, http.StatusOK, resp.StatusCode, url)
	}
	resp := mustPost(t, c, base+"/v2", body(false, false))
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	get, err := c.Get(srv.URL() + "/chat/completions")
	require.NoError(t, err)
	_ = get.Body.Close()
	assert.Equal(t, http.StatusNotFound, get.StatusCode)
	assert.Equal(t, 2, srv.Requests(), "only chat-completion POSTs are counted")
}

func TestStreamReset(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.StreamReset(2)))
	for range 20 { // a reset must never overtake the chunks sent before it
		resp := mustPost(t, c, srv.URL(), body(true, true))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		evs, err := events(resp.Body)
		require.Error(t, err)
		assert.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF), "got %v", err)
		require.Len(t, evs, 2)
		assert.Equal(t, strings.Join(retracetest.ReplyChunks(retracetest.DefaultReply)[:2], ""), contentOf(t, evs))
		srv.Reset()
	}
}

func TestStreamResetNonStreaming(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.StreamReset(2)))
	resp := mustPost(t, c, srv.URL(), body(false, false))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err := io.ReadAll(resp.Body)
	assert.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF), "got %v", err)
}

func TestStreamEOF(t *testing.T) {
	srv, c := start(t, retracetest.Sequence(retracetest.StreamEOF(3), retracetest.StreamEOF(100)))
	resp := mustPost(t, c, srv.URL(), body(true, true))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs, err := events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, evs, 3)
	assert.NotContains(t, evs, "[DONE]")
	assert.Equal(t, strings.Join(retracetest.ReplyChunks(retracetest.DefaultReply)[:3], ""), contentOf(t, evs))

	// More chunks than the reply has: all of them, still no finish.
	resp = mustPost(t, c, srv.URL(), body(true, true))
	evs, err = events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, evs, len(retracetest.ReplyChunks(retracetest.DefaultReply)))
	assert.NotContains(t, evs, "[DONE]")

	// Without a stream: a truncated JSON body that ends cleanly.
	resp = mustPost(t, c, srv.URL(), body(false, false))
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var v any
	assert.Error(t, json.Unmarshal(raw, &v))
}

// postInto posts body and sends the error (nil for any answer) to done.
func postInto(t *testing.T, ctx context.Context, c *http.Client, url, body string, done chan<- error) {
	resp, err := post(t, ctx, c, url, body)
	if err == nil {
		_ = resp.Body.Close()
	}
	done <- err
}

// arrivals wraps script to report each request on the returned channel.
func arrivals(script retracetest.Script) (retracetest.Script, <-chan int) {
	ch := make(chan int, 100)
	return func(n int, req retracetest.Request) retracetest.Fault {
		ch <- n
		return script(n, req)
	}, ch
}

func TestHangEndsWhenClientCancels(t *testing.T) {
	script, arrived := arrivals(retracetest.Always(retracetest.Hang()))
	srv, c := start(t, script)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go postInto(t, ctx, c, srv.URL(), body(true, false), done)
	<-arrived
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	srv.Close() // returns only once the hung handler has returned
	assert.Equal(t, 1, srv.Requests())
}

func TestCloseEndsHangingAndSlowRequests(t *testing.T) {
	script, arrived := arrivals(retracetest.Sequence(retracetest.Hang(), retracetest.OK().WithDelay(time.Hour)))
	srv, c := start(t, script)
	done := make(chan error, 2)
	for range 2 {
		go postInto(t, context.Background(), c, srv.URL(), body(false, false), done)
	}
	<-arrived
	<-arrived
	srv.Close()
	assert.Error(t, <-done)
	assert.Error(t, <-done)
}

func TestSlow(t *testing.T) {
	script, arrived := arrivals(retracetest.Sequence(retracetest.OK().WithDelay(time.Hour), retracetest.Reply("late").WithDelay(time.Hour)))
	srv, c := start(t, script)

	// A client timeout ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go postInto(t, ctx, c, srv.URL(), body(false, false), done)
	<-arrived
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)

	// A scaled hour passes, and the answer is a success.
	srv.SetTimeScale(1e-12)
	resp := mustPost(t, c, srv.URL(), body(true, false))
	<-arrived
	evs, err := events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, "late", contentOf(t, evs[:1]))
	assert.Equal(t, "[DONE]", evs[len(evs)-1])
}

func TestMalformed(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.Malformed()))
	resp := mustPost(t, c, srv.URL(), body(true, false))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	evs, err := events(resp.Body)
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, evs, 3)
	decodeChunk(t, evs[0])
	assert.False(t, json.Valid([]byte(evs[1])), evs[1])
	assert.Equal(t, "[DONE]", evs[2])

	resp = mustPost(t, c, srv.URL(), body(false, false))
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.False(t, json.Valid(raw))
}

func TestBadJSON(t *testing.T) {
	srv, c := start(t, retracetest.Always(retracetest.BadJSON()))
	for _, stream := range []bool{false, true} {
		resp := mustPost(t, c, srv.URL(), body(stream, false))
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Contains(t, string(raw), "<html>gateway error</html>")
		assert.False(t, json.Valid(raw))
	}
}

func TestInvalidBody(t *testing.T) {
	script, arrived := arrivals(retracetest.Always(retracetest.OK()))
	srv, c := start(t, script)
	for _, b := range []string{`{"model":`, `[]`, ``, `{"messages":[{"role":"user","content":42}]}`} {
		resp := mustPost(t, c, srv.URL(), b)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, b)
		var eb errBody
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb))
		assert.Equal(t, "invalid_request_error", eb.Error.Type)
		assert.Nil(t, eb.Error.Code)
	}
	assert.Equal(t, 4, srv.Requests())
	assert.Empty(t, arrived, "the script is not asked about invalid bodies")
	got := srv.Received()
	require.Len(t, got, 4)
	for i, r := range got {
		assert.Equal(t, i, r.Index)
		assert.Error(t, r.Err)
	}
	assert.Equal(t, `{"model":`, string(got[0].Body))

	// The next valid request is request 4.
	resp := mustPost(t, c, srv.URL(), body(false, false))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 4, <-arrived)
}

func TestReceived(t *testing.T) {
	srv, c := start(t, nil)
	reqBody := `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[` +
		`{"role":"system","content":"be brief"},` +
		`{"role":"user","content":[{"type":"text","text":"what is"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"text","text":"this?"}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"look","arguments":"{\"x\":1}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","name":"look","content":"a cat"}]}`
	resp := mustPost(t, c, srv.URL(), reqBody)
	_, err := io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp = mustPost(t, c, strings.TrimSuffix(srv.URL(), "/v1"), body(false, false))
	assert.Equal(t, "req_1", resp.Header.Get("X-Request-Id"))

	assert.Equal(t, 2, srv.Requests())
	got := srv.Received()
	require.Len(t, got, 2)
	r := got[0]
	assert.Equal(t, 0, r.Index)
	assert.Equal(t, "/v1/chat/completions", r.Path)
	assert.Equal(t, "gpt-4o", r.Model)
	assert.True(t, r.Stream)
	assert.True(t, r.IncludeUsage)
	assert.NoError(t, r.Err)
	assert.Equal(t, reqBody, string(r.Body))
	assert.Equal(t, "Bearer ***abcd", r.Header.Get("Authorization"))
	assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
	assert.Equal(t, []retracetest.Message{
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "what is\nthis?"},
		{Role: "assistant", ToolCalls: []retracetest.ToolCall{{ID: "call_1", Type: "function", Name: "look", Arguments: `{"x":1}`}}},
		{Role: "tool", Content: "a cat", ToolCallID: "call_1", Name: "look"},
	}, r.Messages)
	assert.Equal(t, "/chat/completions", got[1].Path)
	assert.False(t, got[1].Stream)

	// Received returns copies.
	got[0].Messages[0].Content = "changed"
	got[0].Body[0] = 'X'
	again := srv.Received()
	assert.Equal(t, "be brief", again[0].Messages[0].Content)
	assert.Equal(t, reqBody, string(again[0].Body))

	srv.Reset()
	assert.Zero(t, srv.Requests())
	assert.Empty(t, srv.Received())
	resp = mustPost(t, c, srv.URL(), body(false, false))
	assert.Equal(t, "req_0", resp.Header.Get("X-Request-Id"))
	assert.Equal(t, 1, srv.Requests())
}

func TestSequenceRepeatsItsLastFault(t *testing.T) {
	srv, c := start(t, retracetest.Sequence(retracetest.RateLimited(time.Second), retracetest.ServerError(503), retracetest.OK()))
	var statuses []int
	for range 5 {
		resp := mustPost(t, c, srv.URL(), body(false, false))
		_, _ = io.Copy(io.Discard, resp.Body)
		statuses = append(statuses, resp.StatusCode)
	}
	assert.Equal(t, []int{429, 503, 200, 200, 200}, statuses)
	assert.Equal(t, 5, srv.Requests())

	// The last fault repeats even when it is a failure.
	srv.SetScript(retracetest.Sequence(retracetest.OK(), retracetest.ServerError(529)))
	srv.Reset()
	statuses = nil
	for range 4 {
		resp := mustPost(t, c, srv.URL(), body(false, false))
		_, _ = io.Copy(io.Discard, resp.Body)
		statuses = append(statuses, resp.StatusCode)
	}
	assert.Equal(t, []int{200, 529, 529, 529}, statuses)
}

func TestScripts(t *testing.T) {
	var req retracetest.Request
	assert.Equal(t, retracetest.OK(), retracetest.Sequence()(3, req))
	five := retracetest.Sequence(retracetest.ServerError(529), retracetest.Hang())
	assert.Equal(t, retracetest.ServerError(529), five(0, req))
	assert.Equal(t, retracetest.Hang(), five(1, req))
	assert.Equal(t, retracetest.Hang(), five(9, req))

	first2 := retracetest.FailFirst(2, retracetest.ServerError(500))
	assert.Equal(t, []int{500, 500, 0}, []int{first2(0, req).Status, first2(1, req).Status, first2(2, req).Status})
	always := retracetest.FailFirst(0, retracetest.ServerError(502))
	assert.Equal(t, 502, always(1000, req).Status)

	assert.Equal(t, "429 rate_limit_exceeded", retracetest.RateLimited(time.Second).String())
	assert.Equal(t, "reset after 2 chunks", retracetest.StreamReset(2).String())
	assert.Equal(t, "ok after 5s", retracetest.OK().WithDelay(5*time.Second).String())
}

func TestReplyChunks(t *testing.T) {
	for _, text := range []string{"", "   ", "one", "one two", "  lead and trail \n", "a\tb\n\nc"} {
		pieces := retracetest.ReplyChunks(text)
		assert.Equal(t, text, strings.Join(pieces, ""), "%q", text)
		assert.Len(t, pieces, max(1, len(strings.Fields(text))), "%q", text)
	}
	assert.Equal(t, []string{"Hello", " from", " the", " fault", " server."}, retracetest.ReplyChunks(retracetest.DefaultReply))
}

func TestConcurrentCounting(t *testing.T) {
	script, arrived := arrivals(retracetest.Sequence(retracetest.ServerError(500), retracetest.OK()))
	srv, c := start(t, script)
	const n = 50
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for range n {
		wg.Go(func() {
			resp, err := post(t, context.Background(), c, srv.URL(), body(true, true))
			if !assert.NoError(t, err) {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	assert.Equal(t, n, srv.Requests())
	seen := map[int]bool{}
	for range n {
		seen[<-arrived] = true
	}
	assert.Len(t, seen, n, "every request has its own index")
	for i, r := range srv.Received() {
		assert.Equal(t, i, r.Index)
	}
	failed := 0
	for s := range statuses {
		if s == 500 {
			failed++
		}
	}
	assert.Equal(t, 1, failed, "exactly request 0 failed")
}

func TestStartOnRefusesOtherInterfaces(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0", "nonsense"} {
		srv := retracetest.New(nil)
		assert.Error(t, srv.StartOn(addr), addr)
		srv.Close()
	}
	srv := retracetest.New(nil)
	require.NoError(t, srv.StartOn("localhost:0"))
	assert.True(t, strings.HasPrefix(srv.URL(), "http://127.0.0.1:"), srv.URL())
	assert.Error(t, srv.Start(), "a server starts once")
	srv.Close()
	srv.Close()
}

func TestURL(t *testing.T) {
	srv := retracetest.New(nil)
	assert.Empty(t, srv.URL())
	require.NoError(t, srv.Start())
	defer srv.Close()
	assert.True(t, strings.HasPrefix(srv.URL(), "http://127.0.0.1:"))
	assert.True(t, strings.HasSuffix(srv.URL(), "/v1"))
}
