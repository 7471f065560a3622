package retracetest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/retracetest"
)

func TestRawAndStringError(t *testing.T) {
	srv, c := start(t, retracetest.Sequence(
		retracetest.StringError(502, "").WithBody("<html>bad gateway</html>"),
		retracetest.StringError(401, "Invalid API key"),
	))
	for _, want := range []struct {
		status int
		body   string
	}{{502, "<html>bad gateway</html>"}, {401, `{"error":"Invalid API key"}`}} {
		resp := mustPost(t, c, srv.URL(), body(true, true))
		assert.Equal(t, want.status, resp.StatusCode)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, want.body, string(b))
	}
}

// An error event comes after the chunks it was asked for, as the last
// event, with or without an event name, and the stream then ends.
func TestErrorEvent(t *testing.T) {
	cases := []struct {
		name  string
		fault retracetest.Fault
		raw   string // the answer after its content chunks
	}{
		{"object", retracetest.ErrorEvent(2, "insufficient_quota", "insufficient_quota", "quota"),
			`data: {"error":{"message":"quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}` + "\n\n"},
		{"no code", retracetest.ErrorEvent(2, "", "server_error", "boom"),
			`data: {"error":{"message":"boom","type":"server_error","param":null,"code":null}}` + "\n\n"},
		{"named, raw data on two lines", retracetest.ErrorEvent(2, "", "", "").WithEvent("error").WithBody("{\"type\":\"error\",\n\"code\":\"server_error\"}"),
			"event: error\ndata: {\"type\":\"error\",\ndata: \"code\":\"server_error\"}\n\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, c := start(t, retracetest.Always(tc.fault))
			resp := mustPost(t, c, srv.URL(), body(true, true))
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err, "the stream ends cleanly after the error event")
			evs := strings.SplitAfterN(string(b), "\n\n", 3)
			require.Len(t, evs, 3)
			first := decodeChunk(t, strings.TrimSuffix(strings.TrimPrefix(evs[0], "data: "), "\n\n"))
			require.NotNil(t, first.Choices[0].Delta.Content)
			assert.Equal(t, "Hello", *first.Choices[0].Delta.Content)
			assert.Equal(t, tc.raw, evs[2])
		})
	}
	t.Run("not a stream", func(t *testing.T) {
		srv, c := start(t, retracetest.Always(retracetest.ErrorEvent(2, "server_error", "server_error", "boom").WithBody("ignored")))
		resp := mustPost(t, c, srv.URL(), body(false, false))
		assert.Equal(t, 500, resp.StatusCode)
		var e struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		assert.Equal(t, "server_error", e.Error.Code)
	})
}

// A huge event is exactly its size, in lines of the size asked for, with no
// blank line; Written counts it.
func TestHugeEvent(t *testing.T) {
	const size = 1<<20 + 7
	for _, lineBytes := range []int{0, 1024, 100} {
		srv, c := start(t, retracetest.Always(retracetest.HugeEvent(size, lineBytes)))
		resp := mustPost(t, c, srv.URL(), body(true, true))
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, size, len(b))
		assert.False(t, bytes.Contains(b, []byte("\n\n")), "no blank line ends the event")
		lines := bytes.SplitAfter(b, []byte("\n"))
		if len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		if lineBytes == 0 {
			require.Equal(t, 1, len(lines))
		} else {
			require.Equal(t, (size+lineBytes-1)/lineBytes, len(lines))
			for _, l := range lines[:len(lines)-1] {
				require.Equal(t, lineBytes, len(l))
			}
		}
		for _, l := range lines {
			require.True(t, bytes.HasPrefix(l, []byte("data: ")), "%.20q", l)
		}
		srv.Close()
		assert.Equal(t, int64(size), srv.Written())
	}
}

// A client that hangs up stops the answer: the server does not write the
// whole 64 MiB into a closed connection.
func TestHugeEventStopsWhenTheClientHangsUp(t *testing.T) {
	const size = 64 << 20
	srv, c := start(t, retracetest.Always(retracetest.HugeEvent(size, 0)))
	resp, err := post(t, t.Context(), c, srv.URL(), body(true, true))
	require.NoError(t, err)
	_, err = io.ReadFull(resp.Body, make([]byte, 1<<20))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	srv.Close() // waits for the handler
	t.Logf("written: %d bytes of %d", srv.Written(), size)
	assert.Less(t, srv.Written(), int64(size/2))
}

func TestHugeError(t *testing.T) {
	srv, c := start(t, retracetest.Sequence(retracetest.HugeError(500, 100<<10), retracetest.HugeError(503, 10)))
	resp := mustPost(t, c, srv.URL(), body(true, true))
	assert.Equal(t, 500, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, 100<<10, len(b))
	var e struct {
		Error struct{ Code, Type, Message string }
	}
	require.NoError(t, json.Unmarshal(b, &e), "the body is an OpenAI error")
	assert.Equal(t, "server_error", e.Error.Code)
	assert.Equal(t, "server_error", e.Error.Type)
	assert.Equal(t, strings.Repeat("x", len(e.Error.Message)), e.Error.Message)

	resp = mustPost(t, c, srv.URL(), body(true, true))
	assert.Equal(t, 503, resp.StatusCode)
	b, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, `{"error":{`, string(b), "a body too small for the object is cut")
}

func TestNewFaultStrings(t *testing.T) {
	assert.Equal(t, "401", retracetest.StringError(401, "Invalid API key").String())
	assert.Equal(t, "error event insufficient_quota after 2 chunks", retracetest.ErrorEvent(2, "insufficient_quota", "x", "m").String())
	assert.Equal(t, "error event server_error after 0 chunks", retracetest.ErrorEvent(0, "", "server_error", "m").String())
	assert.Equal(t, "an event of 100 bytes", retracetest.HugeEvent(100, 0).String())
	assert.Equal(t, "500 with a body of 100 bytes", retracetest.HugeError(500, 100).String())
}
