package attrs

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// attributePath is the package whose Key type marks an attribute key.
const attributePath = "go.opentelemetry.io/otel/attribute"

// semconvPrefix begins the path of every release of the semantic
// conventions' package: a telemetry key taken from it (semconv.ErrorTypeKey)
// is read from that package's own source.
const semconvPrefix = "go.opentelemetry.io/otel/semconv/"

// OwnPrefix starts every key that is retrace's own; the others are the
// OpenTelemetry semantic conventions' keys that retrace sets.
const OwnPrefix = "retrace."

// Key is one attribute key package telemetry (or an adapter) declares.
type Key struct {
	Name    string // the key as spans carry it: "retrace.layer"
	Const   string // the Go constant: "Layer"
	File    string // the file that declares it: "attributes.go"
	Comment string // its comment, on one line
	On      string // where it is set ("layer span"); "" when the comment does not say
	Meaning string // what it holds: the comment without the On part and a final period
	Own     bool   // a retrace.* key; false for a convention key
}

// Event is one span event package telemetry declares: a string constant
// whose name starts with Event.
type Event struct {
	Name    string // the event's name: "retrace.nested_retry"
	Const   string // the Go constant: "EventNestedRetry"
	File    string
	Comment string // its comment, on one line
	Meaning string // the comment without the constant's name and a final period
}

// Registry is every key and event of a package that declares them (the
// telemetry package, or an adapter's), in a stable order: files by name,
// then as declared; Merge joins the registries of several.
type Registry struct {
	Keys   []Key
	Events []Event
}

// Key returns the declared key of that name.
func (r *Registry) Key(name string) (Key, bool) {
	i := slices.IndexFunc(r.Keys, func(k Key) bool { return k.Name == name })
	if i < 0 {
		return Key{}, false
	}
	return r.Keys[i], true
}

// Event returns the declared event of that name.
func (r *Registry) Event(name string) (Event, bool) {
	i := slices.IndexFunc(r.Events, func(e Event) bool { return e.Name == name })
	if i < 0 {
		return Event{}, false
	}
	return r.Events[i], true
}

// Own returns retrace's own keys (retrace.*), in the registry's order.
func (r *Registry) Own() []Key {
	return slices.DeleteFunc(slices.Clone(r.Keys), func(k Key) bool { return !k.Own })
}

// Conventions returns the OpenTelemetry convention keys, in the registry's
// order.
func (r *Registry) Conventions() []Key {
	return slices.DeleteFunc(slices.Clone(r.Keys), func(k Key) bool { return k.Own })
}

// Load parses the Go files of the package in dir (package telemetry, or an
// adapter's; its tests aside) and returns the keys and events they declare.
// A key is a constant whose value is attribute.Key("…") (or a string
// constant of type attribute.Key) or a key of the conventions' package; an
// event is a string constant named Event…. Every key and event must have a
// comment, since the comment is its documentation, and a name may be
// declared once only.
func Load(dir string) (*Registry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("attrs: %w", err)
	}
	reg := &Registry{}
	fset := token.NewFileSet()
	seen := map[string]string{} // name → where it was declared
	var errs []error
	for _, e := range entries { // ReadDir sorts by name
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("attrs: %w", err)
		}
		conv, err := conventions(f)
		if err != nil {
			return nil, err
		}
		keys, events, ferrs := declared(fset, f, name, conv)
		errs = append(errs, ferrs...)
		for _, k := range keys {
			where := name + ": " + k.Const
			if prev, dup := seen["key "+k.Name]; dup {
				errs = append(errs, fmt.Errorf("attrs: %s declares %q, which %s declares already", where, k.Name, prev))
				continue
			}
			seen["key "+k.Name] = where
			reg.Keys = append(reg.Keys, k)
		}
		for _, ev := range events {
			where := name + ": " + ev.Const
			if prev, dup := seen["event "+ev.Name]; dup {
				errs = append(errs, fmt.Errorf("attrs: %s declares the event %q, which %s declares already", where, ev.Name, prev))
				continue
			}
			seen["event "+ev.Name] = where
			reg.Events = append(reg.Events, ev)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(reg.Keys) == 0 {
		return nil, fmt.Errorf("attrs: %s declares no attribute keys: is it the telemetry package?", dir)
	}
	return reg, nil
}

// Merge returns one registry of the keys and events of regs, in their
// order. Package telemetry declares the core's keys; an adapter that writes
// keys of its own declares them in its package (contrib/mcp, the MCP
// conventions' keys), and is loaded with Load as telemetry is. A name two
// of them declare is an error, as within one package: each key and event
// has one declaration.
func Merge(regs ...*Registry) (*Registry, error) {
	out := &Registry{}
	seen := map[string]string{} // name → where it was declared
	var errs []error
	for _, r := range regs {
		for _, k := range r.Keys {
			where := k.File + ": " + k.Const
			if prev, dup := seen["key "+k.Name]; dup {
				errs = append(errs, fmt.Errorf("attrs: %s declares %q, which %s declares already", where, k.Name, prev))
				continue
			}
			seen["key "+k.Name] = where
			out.Keys = append(out.Keys, k)
		}
		for _, ev := range r.Events {
			where := ev.File + ": " + ev.Const
			if prev, dup := seen["event "+ev.Name]; dup {
				errs = append(errs, fmt.Errorf("attrs: %s declares the event %q, which %s declares already", where, ev.Name, prev))
				continue
			}
			seen["event "+ev.Name] = where
			out.Events = append(out.Events, ev)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// declared returns the keys and events one file declares.
// conv is the keys of the conventions' package f imports, by import name
// and constant.
func declared(fset *token.FileSet, f *ast.File, file string, conv map[string]map[string]string) ([]Key, []Event, []error) {
	attr := importName(f, attributePath)
	var keys []Key
	var events []Event
	var errs []error
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				name, isKey := keyValue(attr, vs.Type, vs.Values[i])
				if sel, ok := vs.Values[i].(*ast.SelectorExpr); ok && !isKey {
					if pkg, ok := sel.X.(*ast.Ident); ok && conv[pkg.Name] != nil {
						name, isKey = conv[pkg.Name][sel.Sel.Name], true
					}
				}
				if !isKey {
					if !strings.HasPrefix(id.Name, "Event") || vs.Type != nil {
						continue
					}
					if name, isKey = stringLit(vs.Values[i]); !isKey {
						continue
					}
					c := comment(gd, vs)
					if c == "" {
						errs = append(errs, fmt.Errorf("attrs: %s: the event %s (%q) has no comment: say when it is added and what it carries", fset.Position(id.Pos()), id.Name, name))
						continue
					}
					events = append(events, Event{Name: name, Const: id.Name, File: file, Comment: c, Meaning: strings.TrimSuffix(withoutSubject(c, id.Name), ".")})
					continue
				}
				if name == "" {
					errs = append(errs, fmt.Errorf("attrs: %s: %s is neither attribute.Key of a string literal nor a key of the conventions' package", fset.Position(id.Pos()), id.Name))
					continue
				}
				c := comment(gd, vs)
				if c == "" {
					errs = append(errs, fmt.Errorf("attrs: %s: %s (%q) has no comment: say where it is set and what it holds", fset.Position(id.Pos()), id.Name, name))
					continue
				}
				k := Key{Name: name, Const: id.Name, File: file, Comment: c, Own: strings.HasPrefix(name, OwnPrefix)}
				on, meaning := split(c, id.Name, vs.Doc != nil || vs.Comment == nil)
				k.On, k.Meaning = on, strings.TrimSuffix(meaning, ".")
				keys = append(keys, k)
			}
		}
	}
	return keys, events, errs
}

// conventions returns, for each release of the conventions' package that f
// imports, its keys by constant name (ErrorTypeKey → "error.type"), read
// from that package's source where the go command finds it from the
// working directory (a test's package, go generate's): the module's, whose
// go.mod names the release.
func conventions(f *ast.File) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !strings.HasPrefix(path, semconvPrefix) {
			continue
		}
		dir, err := packageDir(path)
		if err != nil {
			return nil, err
		}
		keys := map[string]string{}
		fset := token.NewFileSet()
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("attrs: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			sf, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
			if err != nil {
				return nil, fmt.Errorf("attrs: %w", err)
			}
			attr := importName(sf, attributePath)
			for _, d := range sf.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if i < len(vs.Values) {
							if name, ok := keyValue(attr, vs.Type, vs.Values[i]); ok && name != "" {
								keys[id.Name] = name
							}
						}
					}
				}
			}
		}
		name := "semconv" // the package's own name, whatever its release
		if imp.Name != nil {
			name = imp.Name.Name
		}
		out[name] = keys
	}
	return out, nil
}

// importName is the name under which f imports path, "" when it does not.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return filepath.Base(path)
		}
	}
	return ""
}

// keyValue reports whether a constant is an attribute key, and its name:
// attribute.Key("name"), or "name" with the type attribute.Key. A key whose
// value is not a string literal has the name "".
func keyValue(attr string, typ, v ast.Expr) (string, bool) {
	if attr == "" {
		return "", false
	}
	if isSel(typ, attr, "Key") {
		name, _ := stringLit(v)
		return name, true
	}
	call, ok := v.(*ast.CallExpr)
	if !ok || !isSel(call.Fun, attr, "Key") {
		return "", false
	}
	if len(call.Args) != 1 {
		return "", true
	}
	name, _ := stringLit(call.Args[0])
	return name, true
}

func isSel(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// comment is a constant's documentation on one line: its doc comment, else
// its line comment, else, for a constant declared alone, the declaration's
// doc comment. A group's doc comment describes the group, not each member.
func comment(gd *ast.GenDecl, vs *ast.ValueSpec) string {
	cg := vs.Doc
	if cg == nil {
		cg = vs.Comment
	}
	if cg == nil && !gd.Lparen.IsValid() {
		cg = gd.Doc
	}
	if cg == nil {
		return ""
	}
	return strings.Join(strings.Fields(cg.Text()), " ")
}

// docOn is a doc comment that says where its key is set, after the
// constant's name: "is on a candidate span: its place in the chain".
var docOn = regexp.MustCompile(`^(?:is |are )?(?:set |added )?on (?:the |an? )?([^:]+?): (.+)$`)

// split divides a comment into where the key is set and what it holds. A
// line comment has the form "on: meaning" when it has a colon at all (the
// first one divides it); a doc comment is a sentence about the constant,
// "Name is on the X span: meaning", and has an On part only in that form.
func split(c, constName string, doc bool) (on, meaning string) {
	if !doc {
		if before, after, ok := strings.Cut(c, ": "); ok && before != "" {
			return before, after
		}
		return "", c
	}
	rest, _ := strings.CutPrefix(c, constName+" ")
	if m := docOn.FindStringSubmatch(rest); m != nil {
		return m[1], m[2]
	}
	return "", withoutSubject(c, constName)
}

// withoutSubject drops the constant's name (and a following "is") from the
// start of its doc comment: "EventCompacted is added when …" → "added when …".
func withoutSubject(c, constName string) string {
	rest, ok := strings.CutPrefix(c, constName+" ")
	if !ok {
		return c
	}
	return strings.TrimPrefix(rest, "is ")
}

// packageDir is the directory of the package path as the go command finds
// it from the working directory. go list, not go/build: a binary built with
// -trimpath (as CI builds every one) has no GOROOT of its own, and go/build
// then looks in GOPATH only.
func packageDir(path string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("go", "list", "-find", "-f", "{{.Dir}}", path)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("attrs: finding %s: go list: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("attrs: finding %s: go list found no directory", path)
	}
	return dir, nil
}
