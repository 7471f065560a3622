package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const telemetrySrc = `package telemetry

import "go.opentelemetry.io/otel/attribute"

const (
	Layer     = attribute.Key("retrace.layer")    // layer span: runtime, session | yours
	ErrorType = attribute.Key("error.type")       // failed span: the error's type
)

// EventNested is added when a retrying layer starts inside another.
const EventNested = "retrace.nested_retry"
`

// checkout writes a README and a telemetry package beside it, as in the
// repository, and returns the README's path.
func checkout(t *testing.T, readme string) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, "telemetry"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "telemetry", "attributes.go"), []byte(telemetrySrc), 0o644))
	path := filepath.Join(root, "README.md")
	require.NoError(t, os.WriteFile(path, []byte(readme), 0o644))
	return path
}

func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errs bytes.Buffer
	code = run(args, &out, &errs)
	return code, out.String(), errs.String()
}

const before = "# retrace\n\n## Spans\n\nProse before.\n\n" + beginMarker + "\n"
const after = endMarker + "\n\nProse after.\n"

const wantTables = "retrace's own attributes:\n\n| attribute | on | meaning |\n|---|---|---|\n" +
	"| `retrace.layer` | layer span | runtime, session \\| yours |\n" +
	"\nThe OpenTelemetry semantic-convention keys retrace sets:\n\n| attribute | on | meaning |\n|---|---|---|\n" +
	"| `error.type` | failed span | the error's type |\n" +
	"\nSpan events:\n\n| event | meaning |\n|---|---|\n" +
	"| `retrace.nested_retry` | added when a retrying layer starts inside another |\n"

func TestWritesTheTablesBetweenTheMarkers(t *testing.T) {
	path := checkout(t, before+"| old | table |\n"+after)
	code, stdout, stderr := runCmd("-readme", path)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "wrote 2 keys and 1 events")
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before+wantTables+after, string(got), "the prose around the markers is kept")

	code, _, stderr = runCmd("-readme", path, "-check")
	assert.Equal(t, 0, code, "a fresh table passes the check: %s", stderr)
	code, _, _ = runCmd("-readme", path)
	assert.Equal(t, 0, code)
	again, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(got), string(again), "generating twice changes nothing")
}

// contrib/mcp beside the README declares the MCP keys, which get a table of
// their own after the conventions'; a key it declares that telemetry
// declares too fails the command.
func TestWritesContribMCPsTable(t *testing.T) {
	withMCP := func(src string) string {
		path := checkout(t, before+after)
		dir := filepath.Join(filepath.Dir(path), "contrib", "mcp")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "conventions.go"), []byte(src), 0o644))
		return path
	}
	path := withMCP("package retracemcp\n\nimport \"go.opentelemetry.io/otel/attribute\"\n\n" +
		"const keyMethodName = attribute.Key(\"mcp.method.name\") // MCP client and server spans: the request's method\n")
	code, stdout, stderr := runCmd("-readme", path)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "wrote 3 keys and 1 events")
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	mcpTable := "\nThe keys of the OpenTelemetry conventions for MCP that contrib/mcp sets:\n\n| attribute | on | meaning |\n|---|---|---|\n" +
		"| `mcp.method.name` | MCP client and server spans | the request's method |\n"
	want := strings.Replace(wantTables, "\nSpan events:", mcpTable+"\nSpan events:", 1)
	assert.Equal(t, before+want+after, string(got))

	path = withMCP("package retracemcp\n\nimport \"go.opentelemetry.io/otel/attribute\"\n\n" +
		"const keyErrorType = attribute.Key(\"error.type\") // MCP span: the error's type\n")
	code, _, stderr = runCmd("-readme", path)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `declares "error.type", which attributes.go: ErrorType declares already`)
}

func TestCheckFailsOnAStaleTable(t *testing.T) {
	stale := strings.Replace(wantTables, "the error's type", "the error's old meaning", 1)
	path := checkout(t, before+stale+after)
	code, _, stderr := runCmd("-readme", path, "-check")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "the attribute tables differ from package telemetry's declarations")
	assert.Contains(t, stderr, "run go generate ./telemetry")
	assert.Contains(t, stderr, `is "| `+"`error.type`"+` | failed span | the error's old meaning |"`)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before+stale+after, string(got), "-check writes nothing")

	// A key missing from the table fails it as well.
	path = checkout(t, before+strings.Replace(wantTables, "| `retrace.layer` | layer span | runtime, session \\| yours |\n", "", 1)+after)
	code, _, _ = runCmd("-readme", path, "-check")
	assert.Equal(t, 1, code)
}

func TestBadREADMEsAndFlags(t *testing.T) {
	cases := []struct {
		name, readme, want string
	}{
		{"no markers", "# retrace\n", "no line " + beginMarker},
		{"no end marker", before, "no line " + endMarker},
		{"markers reversed", after + before, "comes before"},
		{"a marker twice", before + before + after, "appears twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCmd("-readme", checkout(t, tc.readme), "-check")
			assert.Equal(t, 1, code)
			assert.Contains(t, stderr, tc.want)
		})
	}
	code, _, stderr := runCmd()
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "usage")
	code, _, stderr = runCmd("-readme", filepath.Join(t.TempDir(), "README.md"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "telemetry", "no telemetry package beside a README that does not exist")
}

// The repository's own README is what go generate ./telemetry makes of
// the telemetry package as it is now.
func TestTheRepositoryREADMEIsCurrent(t *testing.T) {
	code, _, stderr := runCmd("-readme", "../../../README.md", "-check")
	assert.Equal(t, 0, code, stderr)
}
