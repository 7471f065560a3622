package middleware_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retrace-go/retrace/policies"
)

// FuzzErrorFrom feeds ErrorFrom any status and any body: it never
// panics, always returns an error with that status and a message of at most
// 1 KiB of valid UTF-8, and leaves the body readable in full, byte for byte.
func FuzzErrorFrom(f *testing.F) {
	for _, seed := range []struct {
		status int
		body   string
	}{
		{401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`},
		{401, `{"error":"Invalid API key"}`},
		{429, `{"error":{"code":429,"type":"rate_limit_error","message":"slow down"}}`},
		{529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
		{500, `{"error":{"message":"` + strings.Repeat("é", 600) + `"}}`},
		{500, `{"error":null}`},
		{500, `{"error":[1,2]}`},
		{500, `{"error":{"code":{"nested":true},"type":7}}`},
		{502, `<html><body>Bad Gateway</body></html>`},
		{503, ``},
		{400, "{\"error\":\"\xff\xfe\"}"},
		{0, `{"error":{"message":"no status"}}`},
		{-1, `{`},
		{999, `{"error":{"message":"x"}}   `},
	} {
		f.Add(seed.status, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		resp := &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body))}
		e := policies.ErrorFrom(resp)
		if e == nil {
			t.Fatal("nil error")
		}
		if e.StatusCode != status {
			t.Fatalf("status %d, want %d", e.StatusCode, status)
		}
		if len(e.Message) > 1<<10 {
			t.Fatalf("a message of %d bytes", len(e.Message))
		}
		if !utf8.ValidString(e.Message) {
			t.Fatalf("a message that is not UTF-8: %q", e.Message)
		}
		_ = e.Error()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("the body read back differs: %d bytes, want %d", len(got), len(body))
		}
	})
}
