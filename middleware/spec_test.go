package middleware_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mismatched is a package that builds layers of int requests and string
// responses. The first layer's Spec matches; each line marked "want" gives
// a Spec, a policy or a reader of int responses instead, and must be a type
// error that says so.
const mismatched = `package mismatch

import (
	"github.com/failsafe-go/failsafe-go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

var (
	_ = middleware.Layer[int, string]("x", middleware.Spec[string]{
		Policies:      []failsafe.Policy[string]{policies.NewRetry[string](policies.SessionRetry)},
		EndAttributes: func(string, error) []attribute.KeyValue { return nil },
		GenAIMetrics:  func(string) (int, int, bool) { return 0, 0, false },
	})
	_ = middleware.Layer[int, string]("x", middleware.Spec[int]{}) // want "as middleware.Spec[string] value in argument to middleware.Layer[int, string]"
	_ = middleware.Layer[int, string]("x", middleware.Spec[string]{
		Policies: []failsafe.Policy[string]{policies.NewRetry[int](policies.SessionRetry)}, // want "as failsafe.Policy[string] value"
		EndAttributes: func(int, error) []attribute.KeyValue { return nil }, // want "as func(resp string, err error) []"
		GenAIMetrics: func(int) (int, int, bool) { return 0, 0, false }, // want "as func(resp string) (input int, output int, ok bool) value"
	})
	_ = middleware.Policies[int, string]("x", policies.NewRetry[int](policies.SessionRetry)) // want "as failsafe.Policy[string] value"
)
`

// A layer's Spec is of the layer's response type: a Spec, a policy or a
// reader of another type fails to compile where the layer is built, rather
// than at its first call. The package above is built once, as a package of
// this module through an overlay: it compiles but for the lines marked
// "want", each a type error naming what it expected.
func TestSpecOfAnotherTypeDoesNotCompile(t *testing.T) {
	want := map[int]string{}
	for i, line := range strings.Split(mismatched, "\n") {
		if _, q, ok := strings.Cut(line, "// want "); ok {
			s, err := strconv.Unquote(q)
			require.NoError(t, err)
			want[i+1] = s
		}
	}
	require.NotEmpty(t, want)

	dir, err := filepath.Abs("zz_mismatch") // no such directory: the overlay alone makes the package
	require.NoError(t, err)
	tmp := t.TempDir()
	src := filepath.Join(tmp, "mismatch.go")
	require.NoError(t, os.WriteFile(src, []byte(mismatched), 0o644))
	overlay := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(overlay, []byte(`{"Replace":{`+strconv.Quote(filepath.Join(dir, "mismatch.go"))+":"+strconv.Quote(src)+`}}`), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-overlay="+overlay, "./zz_mismatch").CombinedOutput()
	require.Error(t, err, "the mismatched package compiled:\n%s", out)

	got := map[int][]string{}
	for _, m := range regexp.MustCompile(`mismatch\.go:(\d+):\d+: (.*)`).FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.Atoi(m[1])
		got[n] = append(got[n], m[2])
	}
	for n, s := range want {
		if assert.Len(t, got[n], 1, "line %d:\n%s", n, out) {
			assert.Contains(t, got[n][0], s, "line %d", n)
		}
	}
	for n, msgs := range got {
		_, expected := want[n]
		assert.True(t, expected, "line %d is an error no line was meant to be: %v", n, msgs)
	}
}
