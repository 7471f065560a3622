package policies_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// policies exports what users configure and inspect, and none of the
// engine's machinery, which lives in internal/engine.
func TestSurfaceIsSmall(t *testing.T) {
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.ParseComments)
		require.NoError(t, err)
		files[e.Name()] = f
	}
	pkg, err := doc.NewFromFiles(fset, mapValues(files), "github.com/retrace-go/retrace/policies")
	require.NoError(t, err)

	var names []string
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			names = append(names, v.Names...)
		}
	}
	values(pkg.Consts)
	values(pkg.Vars)
	for _, f := range pkg.Funcs {
		names = append(names, f.Name)
	}
	for _, typ := range pkg.Types {
		names = append(names, typ.Name)
		values(typ.Consts)
		values(typ.Vars)
		for _, f := range typ.Funcs {
			names = append(names, f.Name)
		}
		for _, m := range typ.Methods {
			for _, banned := range []string{"TryAcquire", "RecordClass", "Rejection", "Retrier", "Engine"} {
				assert.NotEqual(t, banned, m.Name, "%s.%s is the engine's", typ.Name, m.Name)
			}
		}
	}
	t.Logf("%d top-level exported names", len(names))
	// One failure type (Error) and the three who make the failures users
	// make (ErrorFrom, ErrorEventFrom and AsAnswer read an answer;
	// StreamDropped and Recovered), where seven error types and an
	// interface were.
	assert.LessOrEqual(t, len(names), 63)
	for _, banned := range []string{"Do", "Attempter", "Gate", "Decision", "Report", "Retrier", "NewRetrier",
		"Diagnose", "Describe", "TransientPattern", "ClassifyContext",
		"APIError", "FailedError", "RejectedError", "TimeoutError", "PanicError", "StreamError", "OutcomeError"} {
		assert.NotContains(t, names, banned)
	}
}

func mapValues(m map[string]*ast.File) []*ast.File {
	out := make([]*ast.File, 0, len(m))
	for _, f := range m {
		out = append(out, f)
	}
	return out
}
