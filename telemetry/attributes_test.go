package telemetry_test

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// telemetry is names only, importable by every retrace package: it must not
// import one itself.
func TestImportsNoRetracePackage(t *testing.T) {
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	files := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			assert.False(t, strings.HasPrefix(path, "github.com/retrace-go/retrace"), "%s imports %s", e.Name(), path)
		}
	}
	assert.Positive(t, files)
}
