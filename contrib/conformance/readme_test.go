package conformance_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// imports are the packages the README's snippets use, by the name they use
// them under. openai is eino-ext's model in a snippet that calls its
// constructors, openai-go otherwise.
var imports = map[string]string{
	"context":         "context",
	"errors":          "errors",
	"fmt":             "fmt",
	"http":            "net/http",
	"os":              "os",
	"slog":            "log/slog",
	"time":            "time",
	"failsafe":        "github.com/failsafe-go/failsafe-go",
	"tracetest":       "go.opentelemetry.io/otel/sdk/trace/tracetest",
	"sdktrace":        "go.opentelemetry.io/otel/sdk/trace",
	"openai":          "github.com/openai/openai-go/v3",
	"option":          "github.com/openai/openai-go/v3/option",
	"anthropic":       "github.com/anthropics/anthropic-sdk-go/v2",
	"aoption":         "github.com/anthropics/anthropic-sdk-go/v2/option",
	"clock":           "github.com/retrace-go/retrace/clock",
	"middleware":      "github.com/retrace-go/retrace/middleware",
	"policies":        "github.com/retrace-go/retrace/policies",
	"retracetest":     "github.com/retrace-go/retrace/retracetest",
	"runtime":         "github.com/retrace-go/retrace/runtime",
	"session":         "github.com/retrace-go/retrace/session",
	"setup":           "github.com/retrace-go/retrace/telemetry/setup",
	"telemetry":       "github.com/retrace-go/retrace/telemetry",
	"tool":            "github.com/retrace-go/retrace/tool",
	"retraceeino":     "github.com/retrace-go/retrace/contrib/eino",
	"retracegenkit":   "github.com/retrace-go/retrace/contrib/genkit",
	"retracemcp":      "github.com/retrace-go/retrace/contrib/mcp",
	"mcp":             "github.com/modelcontextprotocol/go-sdk/mcp",
	"exec":            "os/exec",
	"redisstate":      "github.com/retrace-go/retrace/contrib/redis",
	"redis":           "github.com/redis/go-redis/v9",
	"adk":             "github.com/cloudwego/eino/adk",
	"genkit":          "github.com/firebase/genkit/go/genkit",
	"ai":              "github.com/firebase/genkit/go/ai",
	"compat_oai":      "github.com/firebase/genkit/go/plugins/compat_oai",
	"retracetemporal": "github.com/retrace-go/retrace/contrib/temporal",
	"opentelemetry":   "go.temporal.io/sdk/contrib/opentelemetry",
	"worker":          "go.temporal.io/sdk/worker",
	"interceptor":     "go.temporal.io/sdk/interceptor",
}

// einoOpenAI is eino-ext's OpenAI model, the openai of a snippet that makes
// an eino chat model.
const einoOpenAI = "github.com/cloudwego/eino-ext/components/model/openai"

// snippet is one fenced block of the README: for a ```go block, statements
// or a whole file (it begins with its package clause); with the HTML comment
// on the line before its fence, if any, that marks it.
type snippet struct {
	line   int
	lang   string // what follows the fence: go, sh, or nothing
	code   string
	marker string
}

// file says whether the snippet is a whole Go file, not statements.
func (s snippet) file() bool {
	_, err := parser.ParseFile(token.NewFileSet(), "snippet.go", s.code, parser.PackageClauseOnly)
	return err == nil
}

// snippets returns the README's ```go blocks.
func snippets(t *testing.T, readme string) []snippet {
	var out []snippet
	for _, s := range fenced(t, readme) {
		if s.lang == "go" {
			out = append(out, s)
		}
	}
	return out
}

// fenced returns every fenced block of the README.
func fenced(t *testing.T, readme string) []snippet {
	data, err := os.ReadFile(readme)
	require.NoError(t, err)
	var out []snippet
	var cur *snippet
	prev := ""
	for i, l := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &snippet{line: i + 2, lang: strings.TrimPrefix(trimmed, "```")}
			if strings.HasPrefix(prev, "<!--") {
				cur.marker = prev
			}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += l + "\n"
		}
		if trimmed != "" {
			prev = trimmed
		}
	}
	return out
}

// The README's Go snippets of statements compile as written, with only the
// names readme/given.go declares taken as given (a reader's own types, ctx),
// and none declares a variable that hides a package the README uses.
// Whole files are TestREADMEPrograms'.
func TestREADMESnippetsCompile(t *testing.T) {
	var all []snippet
	for _, s := range snippets(t, "../../README.md") {
		if !s.file() {
			all = append(all, s)
		}
	}
	require.NotEmpty(t, all)
	for _, s := range all {
		_, names, _, err := wrap(s.code)
		if err != nil {
			t.Errorf("README.md:%d: %v", s.line, err)
			continue
		}
		for _, n := range names {
			if _, isPkg := imports[n]; isPkg {
				t.Errorf("README.md:%d: the snippet's variable %q hides the package of that name", s.line, n)
			}
		}
	}
	vetSnippets(t, all)
}

// vetSnippets writes each snippet as a file of package readme, through an
// overlay, and vets the package.
func vetSnippets(t *testing.T, all []snippet) {
	dir, err := filepath.Abs("readme")
	require.NoError(t, err)
	tmp := t.TempDir()
	overlay := map[string]string{}
	for i, s := range all {
		body, _, pkgs, err := wrap(s.code)
		if err != nil {
			continue // reported above
		}
		var f bytes.Buffer
		f.WriteString("package readme\n\nimport (\n")
		names := make([]string, 0, len(pkgs))
		for n := range pkgs {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			fmt.Fprintf(&f, "\t%s %q\n", n, pkgs[n])
		}
		fmt.Fprintf(&f, ")\n\nfunc snippet%d() {\n//line README.md:%d\n%s}\n", i, s.line, body)
		path := filepath.Join(tmp, fmt.Sprintf("snippet%d.go", i))
		require.NoError(t, os.WriteFile(path, f.Bytes(), 0o644))
		overlay[filepath.Join(dir, fmt.Sprintf("zz_snippet%d.go", i))] = path
	}
	o, err := json.Marshal(map[string]any{"Replace": overlay})
	require.NoError(t, err)
	ofile := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(ofile, o, 0o644))
	cmd := exec.Command("go", "vet", "-overlay="+ofile, "./readme")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's snippets do not compile:\n%s", out)
	}
}

// wrap parses code as a function body and returns it with a use of every
// variable it declares (a snippet shows a value it does not go on to use),
// the names it declares, and the packages it refers to.
func wrap(code string) (string, []string, map[string]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", "package p\nfunc _() {\n"+code+"\n}\n", parser.ParseComments)
	if err != nil {
		return "", nil, nil, fmt.Errorf("not Go statements: %v", err)
	}
	fn := f.Decls[0].(*ast.FuncDecl)
	declared := map[string]bool{}
	var names []string
	for _, st := range fn.Body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok != token.DEFINE {
				continue
			}
			for _, l := range st.Lhs {
				if id, ok := l.(*ast.Ident); ok && id.Name != "_" && !declared[id.Name] {
					declared[id.Name] = true
					names = append(names, id.Name)
				}
			}
		case *ast.DeclStmt:
			if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, sp := range g.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						declared[id.Name] = true
						names = append(names, id.Name)
					}
				}
			}
		}
	}
	pkgs := map[string]string{}
	eino := false
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok || declared[id.Name] {
			return true
		}
		if path, known := imports[id.Name]; known {
			pkgs[id.Name] = path
		}
		if id.Name == "openai" && (sel.Sel.Name == "NewChatModel" || sel.Sel.Name == "ChatModelConfig") {
			eino = true
		}
		return true
	})
	if eino {
		pkgs["openai"] = einoOpenAI
	}
	var b strings.Builder
	b.WriteString(code)
	for _, n := range names {
		fmt.Fprintf(&b, "_ = %s\n", n)
	}
	return b.String(), names, pkgs, nil
}

// Every link of the README to one of its own sections (the contents, "see
// below") names a heading that is there, by the anchor GitHub gives it.
func TestREADMELinksToItsSections(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	anchors := map[string]bool{}
	inFence := false
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(l, "#") {
			anchors[anchor(strings.TrimLeft(l, "# "))] = true
		}
	}
	links := regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(string(data), -1)
	require.NotEmpty(t, links)
	for _, m := range links {
		assert.True(t, anchors[m[1]], "README.md links to #%s, which no heading is", m[1])
	}
}

// anchor is GitHub's anchor of a heading: lower case, spaces to hyphens,
// other punctuation dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
