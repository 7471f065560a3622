package redact

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSkipStopsWhereARuleMayStart holds skip to the table of rules: after
// any byte, at any byte, before any second byte a rule's pairs tell apart,
// skip stops where step would try a rule, so that no rule misses a start.
func TestSkipStopsWhereARuleMayStart(t *testing.T) {
	seconds := []byte("abcdefghijklmnopqrstuvwxyz-_0") // one of each foldIndex
	var buf [3]byte
	for p := range 256 {
		for c := range 256 {
			m := startAfter[p] & startAt[c]
			if m == 0 {
				continue
			}
			for _, d := range seconds {
				buf = [3]byte{byte(p), byte(c), d}
				s := string(buf[:])
				tried := ""
				for r := range numRules {
					if m&(1<<r) == 0 {
						continue
					}
					if pairs := rules[r].pairs; pairs == nil || pairs[c]&(1<<foldIndex[d]) != 0 {
						tried = rules[r].name
						break
					}
				}
				if tried == "" {
					continue
				}
				sc := scanner{in: s, s: s, last: -1, colon: -1, stop: -1}
				require.Equal(t, 1, sc.skip(1), "skip passes over %q, where the %s rule may start", s, tried)
			}
		}
	}
}

// TestRulesTable checks the table: every rule named once, and a start that
// some bytes have and others not.
func TestRulesTable(t *testing.T) {
	seen := map[string]bool{}
	for r, rl := range rules {
		assert.NotEmpty(t, rl.name, "rule %d", r)
		assert.False(t, seen[rl.name], "%s twice", rl.name)
		seen[rl.name] = true
		var after, at int
		for b := range 256 {
			after += int(startAfter[b]>>r) & 1
			at += int(startAt[b]>>r) & 1
		}
		assert.Positive(t, after, rl.name)
		assert.Positive(t, at, rl.name)
		assert.Less(t, at, 256, "%s may start at any byte: step would try it everywhere", rl.name)
	}
	assert.Less(t, numRules, 16, "startAfter and startAt hold a bit per rule")
}

// TestStepTriesTheRulesInTheTablesOrder reads step's source: it tests the
// rules' bits in the order of the constants that index the table, each
// once, so that the table's order is the order in which they are tried.
func TestStepTriesTheRulesInTheTablesOrder(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "rules.go", nil, 0)
	require.NoError(t, err)
	var consts, tried []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				if v, ok := spec.(*ast.ValueSpec); ok && d.Tok == token.CONST {
					for _, n := range v.Names {
						if strings.HasPrefix(n.Name, "rule") {
							consts = append(consts, n.Name)
						}
					}
				}
			}
		case *ast.FuncDecl:
			if d.Name.Name != "step" {
				continue
			}
			ast.Inspect(d.Body, func(n ast.Node) bool {
				// m&(1<<ruleX)
				if b, ok := n.(*ast.BinaryExpr); ok && b.Op == token.AND {
					if x, ok := b.X.(*ast.Ident); ok && x.Name == "m" {
						if sh, ok := ast.Unparen(b.Y).(*ast.BinaryExpr); ok && sh.Op == token.SHL {
							if r, ok := sh.Y.(*ast.Ident); ok {
								tried = append(tried, r.Name)
							}
						}
					}
				}
				return true
			})
		}
	}
	require.Len(t, consts, numRules)
	assert.Equal(t, consts, tried)
}
