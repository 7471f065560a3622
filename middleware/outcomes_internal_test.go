package middleware

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every outcome package telemetry declares is one the calls counter has a
// series for: a call that ended with an outcome missing from allOutcomes
// would be left out of retrace.layer.calls, and so out of every dashboard
// and alert built on it. The constants are read from telemetry's source,
// so that an outcome added there fails this test until it is counted.
func TestAllOutcomesCounted(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../telemetry/outcome.go", nil, 0)
	require.NoError(t, err)
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Outcome") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					declared = append(declared, v)
				}
			}
		}
	}
	require.NotEmpty(t, declared)
	assert.ElementsMatch(t, declared, allOutcomes)
}
