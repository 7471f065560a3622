// Package surface holds the test that keeps every public package of the
// repository (the core module's and contrib's) expressible from outside
// it: no exported declaration names a type of an internal package, which a
// module elsewhere could not import ("use of internal package … not
// allowed"), so it could not implement the interface or name the value.
package surface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNoInternalTypeInAPublicDeclaration(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	pkgs := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		name := d.Name()
		if name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") || name == "tools" {
			return filepath.SkipDir
		}
		files := parseDir(t, path)
		if len(files) == 0 || isMain(files) {
			return nil
		}
		pkgs++
		for name, f := range files {
			for _, leak := range leaks(name, f) {
				assert.Fail(t, "an exported declaration names an internal type",
					"%s: %s", filepath.Join(rel, leak.file), leak.what)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, pkgs, 15, "the walk found the public packages")
}

// TestTheCheckSeesALeak holds the check to what it is for: the alias that
// policies.State once was is found.
func TestTheCheckSeesALeak(t *testing.T) {
	src := `package p
import "example.com/m/internal/engine"
type State = engine.State
type Store struct{}
func (s *Store) Breaker(op engine.BreakerOp) error { return nil }
func (s *Store) step(op engine.BreakerOp) {}
func Plain(n int) int { return n }
const Cap = engine.CapTurnError
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	require.NoError(t, err)
	var what []string
	for _, l := range leaks("p.go", f) {
		what = append(what, l.what)
	}
	assert.Equal(t, []string{"State: engine.State", "Store.Breaker: engine.BreakerOp", "Cap: engine.CapTurnError"}, what)
}

func isMain(files map[string]*ast.File) bool {
	for _, f := range files {
		return f.Name.Name == "main"
	}
	return false
}

// parseDir parses the package's files in dir, by name, tests left out.
func parseDir(t *testing.T, dir string) map[string]*ast.File {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := map[string]*ast.File{}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		if hasBuildIgnore(f) {
			continue
		}
		files[n] = f
	}
	return files
}

func hasBuildIgnore(f *ast.File) bool {
	for _, c := range f.Comments {
		if c.Pos() < f.Package && strings.Contains(c.Text(), "ignore") {
			return true
		}
	}
	return false
}

type leak struct{ file, what string }

// leaks lists the exported declarations of f that name a type of an
// internal package: alias and type definitions, the fields and methods of
// exported structs and interfaces, the signatures of exported functions and
// methods, and the types of exported variables and constants.
func isLit(e ast.Expr) bool {
	_, ok := e.(*ast.CompositeLit)
	return ok
}

func leaks(file string, f *ast.File) []leak {
	internal := map[string]bool{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !strings.Contains("/"+path+"/", "/internal/") {
			continue
		}
		name := filepath.Base(path)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		internal[name] = true
	}
	if len(internal) == 0 {
		return nil
	}
	var out []leak
	// An unexported field or method of an exported type is not part of
	// what a user sees; a parameter's name says nothing either way.
	hidden := map[*ast.Field]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		var fields *ast.FieldList
		switch n := n.(type) {
		case *ast.StructType:
			fields = n.Fields
		case *ast.InterfaceType:
			fields = n.Methods
		}
		if fields != nil {
			for _, fl := range fields.List {
				if len(fl.Names) > 0 && !anyExported(fl.Names) {
					hidden[fl] = true
				}
			}
		}
		return true
	})
	check := func(decl string, n ast.Node) {
		if n == nil {
			return
		}
		ast.Inspect(n, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Field:
				return !hidden[n]
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && internal[id.Name] {
					out = append(out, leak{file, decl + ": " + id.Name + "." + n.Sel.Name})
				}
			}
			return true
		})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil {
				recv := receiverName(d.Recv.List[0].Type)
				if !ast.IsExported(recv) {
					continue
				}
				name = recv + "." + name
			}
			check(name, d.Type)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						check(s.Name.Name, s.Type)
					}
				case *ast.ValueSpec:
					if anyExported(s.Names) {
						check(s.Names[0].Name, s.Type)
						// go doc prints a value too, but for the
						// insides of a composite literal.
						for _, v := range s.Values {
							if _, lit := v.(*ast.CompositeLit); !lit {
								if u, ok := v.(*ast.UnaryExpr); !ok || !isLit(u.X) {
									check(s.Names[0].Name, v)
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

func anyExported(ids []*ast.Ident) bool {
	for _, id := range ids {
		if id.IsExported() {
			return true
		}
	}
	return false
}

func receiverName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverName(e.X)
	case *ast.IndexExpr:
		return receiverName(e.X)
	case *ast.IndexListExpr:
		return receiverName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}
