package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The demo on a real dev server: per fault, the provider's requests, the
// leaf spans and retrace.calls agree, and Temporal stops what retrying
// cannot fix.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), &out)
	if errors.Is(err, errNoServer) {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	require.NoError(t, err, out.String())
	rows := map[string][]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 7 {
			rows[f[0]] = f[1:]
		}
	}
	for name, want := range map[string][]string{
		"always-503":                  {"3", "12", "12", "12", "ok", "gave"},
		"insufficient-quota":          {"1", "1", "1", "1", "ok", "stopped:", "fatal"},
		"invalid-api-key":             {"1", "1", "1", "1", "ok", "stopped:", "permanent"},
		"rate-limited-retry-after-2s": {"3", "12", "12", "12", "ok", "gave"},
	} {
		require.Contains(t, rows, name, out.String())
		assert.Equal(t, want, rows[name][:len(want)], name)
	}
	assert.Contains(t, out.String(), "nested retries temporal(3) × session(4)")
}
