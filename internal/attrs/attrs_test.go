package attrs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/internal/attrs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// writePackage writes files (name → source) into a fresh directory.
func writePackage(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644))
	}
	return dir
}

const fixture = `package telemetry

import otelattr "go.opentelemetry.io/otel/attribute"

// The group's own comment, which describes no single key.
const (
	Layer = otelattr.Key("retrace.layer") // layer span: runtime, session
	Plain = otelattr.Key("gen_ai.tool.name") // the tool called

	// Index is on a candidate span: its place in the chain.
	Index = otelattr.Key("retrace.fallback.index")
	// Marked marks a call made with a compacted history.
	Marked = otelattr.Key("gen_ai.conversation.compacted")
)

// Typed is a key declared as a typed string constant, not a conversion.
const Typed otelattr.Key = "retrace.typed"

// The values of retrace.layer: strings, not keys.
const (
	LayerFallback = "fallback" // the chain
)

// EventDone is added when the thing is done.
const EventDone = "retrace.done"

// MetricCalls is a metric's name, not a key or an event.
const MetricCalls = "retrace.layer.calls"
`

func TestLoadReadsKeysCommentsAndEvents(t *testing.T) {
	dir := writePackage(t, map[string]string{
		"a.go": fixture,
		"b.go": "package telemetry\n\nimport \"go.opentelemetry.io/otel/attribute\"\n\n" +
			"const Later = attribute.Key(\"http.request.method\") // request span: GET, POST, …\n",
		"a_test.go": "package telemetry\n\nimport \"go.opentelemetry.io/otel/attribute\"\n\n" +
			"const InTest = attribute.Key(\"retrace.only_in_a_test\") // test: ignored\n",
		"notes.txt": "not Go",
	})
	reg, err := attrs.Load(dir)
	require.NoError(t, err)

	assert.Equal(t, []attrs.Key{
		{Name: "retrace.layer", Const: "Layer", File: "a.go", Comment: "layer span: runtime, session", On: "layer span", Meaning: "runtime, session", Own: true},
		{Name: "gen_ai.tool.name", Const: "Plain", File: "a.go", Comment: "the tool called", Meaning: "the tool called"},
		{Name: "retrace.fallback.index", Const: "Index", File: "a.go", Comment: "Index is on a candidate span: its place in the chain.",
			On: "candidate span", Meaning: "its place in the chain", Own: true},
		{Name: "gen_ai.conversation.compacted", Const: "Marked", File: "a.go", Comment: "Marked marks a call made with a compacted history.",
			Meaning: "marks a call made with a compacted history"},
		{Name: "retrace.typed", Const: "Typed", File: "a.go", Comment: "Typed is a key declared as a typed string constant, not a conversion.",
			Meaning: "a key declared as a typed string constant, not a conversion", Own: true},
		{Name: "http.request.method", Const: "Later", File: "b.go", Comment: "request span: GET, POST, …", On: "request span", Meaning: "GET, POST, …"},
	}, reg.Keys, "files by name, then as declared; tests, values and metric names left out")
	assert.Equal(t, []attrs.Event{
		{Name: "retrace.done", Const: "EventDone", File: "a.go", Comment: "EventDone is added when the thing is done.", Meaning: "added when the thing is done"},
	}, reg.Events)

	k, ok := reg.Key("retrace.fallback.index")
	assert.True(t, ok)
	assert.Equal(t, "Index", k.Const)
	_, ok = reg.Key("retrace.only_in_a_test")
	assert.False(t, ok)
	_, ok = reg.Event("retrace.done")
	assert.True(t, ok)
	_, ok = reg.Event("retrace.layer.calls")
	assert.False(t, ok)

	var own, conv []string
	for _, k := range reg.Own() {
		own = append(own, k.Name)
	}
	for _, k := range reg.Conventions() {
		conv = append(conv, k.Name)
	}
	assert.Equal(t, []string{"retrace.layer", "retrace.fallback.index", "retrace.typed"}, own)
	assert.Equal(t, []string{"gen_ai.tool.name", "gen_ai.conversation.compacted", "http.request.method"}, conv)
}

func TestLoadRejectsBadDeclarations(t *testing.T) {
	head := "package telemetry\n\nimport \"go.opentelemetry.io/otel/attribute\"\n\n"
	cases := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"a key declared twice", map[string]string{
			"a.go": head + "const A = attribute.Key(\"retrace.x\") // span: x\n",
			"b.go": head + "const B = attribute.Key(\"retrace.x\") // span: x again\n",
		}, `b.go: B declares "retrace.x", which a.go: A declares already`},
		{"an event declared twice", map[string]string{
			"a.go": head + "const A = attribute.Key(\"retrace.x\") // span: x\n\n// EventA is added.\nconst EventA = \"retrace.e\"\n\n// EventB is added.\nconst EventB = \"retrace.e\"\n",
		}, `the event "retrace.e"`},
		{"a key without a comment", map[string]string{
			"a.go": head + "const (\n\tA = attribute.Key(\"retrace.x\")\n)\n",
		}, `A ("retrace.x") has no comment`},
		{"an event without a comment", map[string]string{
			"a.go": head + "const A = attribute.Key(\"retrace.x\") // span: x\n\nconst (\n\tEventA = \"retrace.e\"\n)\n",
		}, `the event EventA ("retrace.e") has no comment`},
		{"a key that is not a literal", map[string]string{
			"a.go": head + "const name = \"retrace.x\"\n\nconst A = attribute.Key(name) // span: x\n",
		}, "A is neither attribute.Key of a string literal nor a key of the conventions' package"},
		{"a key of the conventions that they do not declare", map[string]string{
			"a.go": "package telemetry\n\nimport semconv \"go.opentelemetry.io/otel/semconv/v1.41.0\"\n\nconst A = semconv.NoSuchKey // span: x\n",
		}, "A is neither attribute.Key of a string literal nor a key of the conventions' package"},
		{"no keys at all", map[string]string{
			"a.go": "package telemetry\n\nconst A = \"retrace.x\"\n",
		}, "declares no attribute keys"},
		{"a file that does not parse", map[string]string{
			"a.go": "package telemetry\n\nconst (\n",
		}, "a.go"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := attrs.Load(writePackage(t, tc.files))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := attrs.Load(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorContains(t, err, "missing")
}

// A key taken from the conventions' package is read from that package's
// source: its name is the convention's, and it is not retrace's own.
func TestLoadReadsKeysOfTheConventions(t *testing.T) {
	reg, err := attrs.Load(writePackage(t, map[string]string{
		"a.go": "package telemetry\n\nimport (\n\t\"go.opentelemetry.io/otel/attribute\"\n\tsemconv \"go.opentelemetry.io/otel/semconv/v1.41.0\"\n)\n\n" +
			"const (\n\tErrorType = semconv.ErrorTypeKey // failed span: the error's type\n\tOwn = attribute.Key(\"retrace.x\") // span: x\n)\n",
	}))
	require.NoError(t, err)
	require.Len(t, reg.Keys, 2)
	assert.Equal(t, "error.type", reg.Keys[0].Name)
	assert.False(t, reg.Keys[0].Own)
	assert.Equal(t, "failed span", reg.Keys[0].On)
	assert.Equal(t, []attrs.Key{reg.Keys[0]}, reg.Conventions())
	_, err = attrs.Load(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorContains(t, err, "missing")
}

// The real packages: telemetry's keys come out with their places and
// meanings, retrace's retry keys all live under retrace.retry, and the
// conventions' keys retrace sets come from internal/semconv.
func TestLoadTheTelemetryPackage(t *testing.T) {
	reg, err := attrs.Load("../../telemetry")
	require.NoError(t, err)
	layer, ok := reg.Key("retrace.layer")
	require.True(t, ok)
	assert.Equal(t, "Layer", layer.Const)
	assert.Equal(t, "layer span", layer.On)
	assert.True(t, layer.Own)
	_, ok = reg.Key("error.type")
	assert.False(t, ok, "the conventions' keys are declared in internal/semconv, not among retrace's own")
	conv, err := attrs.Load("../semconv")
	require.NoError(t, err)
	et, ok := conv.Key("error.type")
	require.True(t, ok)
	assert.False(t, et.Own)
	_, ok = reg.Event("retrace.nested_retry")
	assert.True(t, ok)

	after, ok := reg.Key("retrace.retry.after_ms")
	require.True(t, ok, "the server's wait sits with the other retry keys")
	assert.Equal(t, "RetryAfterMs", after.Const)
	for _, k := range reg.Own() {
		if strings.HasPrefix(k.Name, "retrace.retry") {
			assert.True(t, strings.HasPrefix(k.Name, "retrace.retry."), "%s is outside retrace.retry.*", k.Name)
		}
		assert.NotEmpty(t, k.Meaning, k.Name)
	}

	again, err := attrs.Load("../../telemetry")
	require.NoError(t, err)
	assert.Equal(t, reg, again, "the same order every time")
}

// Merge joins registries in their order, and a name two of them declare is
// an error, as it is within one package.
func TestMerge(t *testing.T) {
	head := "package p\n\nimport \"go.opentelemetry.io/otel/attribute\"\n\n"
	core, err := attrs.Load(writePackage(t, map[string]string{
		"a.go": head + "const A = attribute.Key(\"retrace.a\") // span: a\n\n// EventA is added.\nconst EventA = \"retrace.e\"\n",
	}))
	require.NoError(t, err)
	adapter, err := attrs.Load(writePackage(t, map[string]string{
		"b.go": head + "const keyB = attribute.Key(\"mcp.b\") // MCP span: b\n",
	}))
	require.NoError(t, err)
	reg, err := attrs.Merge(core, adapter)
	require.NoError(t, err)
	var names []string
	for _, k := range reg.Keys {
		names = append(names, k.Name)
	}
	assert.Equal(t, []string{"retrace.a", "mcp.b"}, names)
	_, ok := reg.Event("retrace.e")
	assert.True(t, ok)

	again, err := attrs.Load(writePackage(t, map[string]string{
		"c.go": head + "const C = attribute.Key(\"retrace.a\") // span: a again\n\n// EventC is added.\nconst EventC = \"retrace.e\"\n",
	}))
	require.NoError(t, err)
	_, err = attrs.Merge(core, again)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `c.go: C declares "retrace.a", which a.go: A declares already`)
	assert.Contains(t, err.Error(), `the event "retrace.e"`)
}

// contrib/mcp declares the MCP conventions' keys it sets, unexported, with
// their comments; none is one telemetry declares.
func TestLoadContribMCP(t *testing.T) {
	core, err := attrs.Load("../../telemetry")
	require.NoError(t, err)
	mcp, err := attrs.Load("../../contrib/mcp")
	require.NoError(t, err)
	reg, err := attrs.Merge(core, mcp)
	require.NoError(t, err)
	k, ok := reg.Key("mcp.method.name")
	require.True(t, ok)
	assert.False(t, k.Own)
	assert.Equal(t, "MCP client and server spans", k.On)
	_, ok = core.Key("mcp.method.name")
	assert.False(t, ok, "the MCP keys are contrib/mcp's, not the core's")
	for _, k := range mcp.Keys {
		assert.NotEmpty(t, k.Meaning, k.Name)
	}
	assert.Empty(t, mcp.Events)
}
