package conformance_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README marks a Go program "<!-- program NAME: … -->" on the line
// before its fence, and a block that shows what it prints "<!-- output of
// NAME: … -->". The quick start is the program named quickStart.
const (
	programMark = "<!-- program "
	outputMark  = "<!-- output of "
	quickStart  = "quickstart"
)

// markName returns the NAME of a marker that begins with prefix, or "".
func markName(marker, prefix string) string {
	rest, ok := strings.CutPrefix(marker, prefix)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ":")
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(name), "-->"))
}

// The README's Go blocks that are whole files, as a reader copies them into
// a module of their own: each builds there against this checkout, with the
// root module's requirements (so that it builds from the module cache, as
// the root does); a program runs and exits 0, and prints every line the
// README shows of its output; a test file's benchmarks run once each. The
// quick start prints the outage's trace tree, and its counts are the
// README's: 12 provider requests = 12 leaf spans = retrace.calls,
// runtime(3) × session(4).
func TestREADMEPrograms(t *testing.T) {
	var files []snippet
	programs := map[int]string{} // a program's line → its name
	outputs := map[string][]snippet{}
	for _, s := range fenced(t, "../../README.md") {
		if s.lang == "go" && s.file() {
			files = append(files, s)
		}
		if name := markName(s.marker, programMark); name != "" {
			require.True(t, s.lang == "go" && s.file(), "README.md:%d: the program %s is not a whole Go file", s.line, name)
			programs[s.line] = name
		}
		if name := markName(s.marker, outputMark); name != "" {
			outputs[name] = append(outputs[name], s)
		}
	}
	require.Contains(t, slices.Collect(maps.Values(programs)), quickStart, "README.md has no Go block marked %q", programMark+quickStart)
	for name := range outputs {
		require.Contains(t, slices.Collect(maps.Values(programs)), name, "README.md shows the output of %s, a program it does not have", name)
	}
	mod := readmeModule(t, files)

	for _, s := range files {
		dir := blockDir(s)
		t.Run(fmt.Sprintf("README.md:%d", s.line), func(t *testing.T) {
			if testFile(s) {
				out := goCmd(t, mod, "test", "-count=1", "-run", "^$", "-bench", ".", "-benchtime", "1x", "./"+dir)
				assert.Contains(t, out, "ok ")
				return
			}
			if pkgName(s) != "main" {
				return // a file of a package of yours: the module's vet compiled it
			}
			goCmd(t, mod, "build", "-o", filepath.Join(mod, "bin", dir), "./"+dir)
			out := runProgram(t, filepath.Join(mod, "bin", dir))
			name := programs[s.line]
			if name == quickStart {
				t.Logf("the quick start's output:\n%s", out)
				checkQuickStart(t, out)
			}
			for _, shown := range outputs[name] {
				checkShown(t, name, shown, out)
			}
		})
	}
}

// checkQuickStart checks the quick start's output against what the README
// says of it.
func checkQuickStart(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{
		"outcome=failed_exhausted attempts=3/3  calls=12  calls.worst_case=12",
		"nested retries runtime(3) × session(4)",
		"failed after 3 attempts: session: failed after 4 attempts: 503 server_error",
		"failed_exhausted (transient) after 3 attempts; provider requests: 12",
	} {
		assert.Contains(t, out, want)
	}
	assert.Equal(t, 12, strings.Count(out, "─ model "), "the tree's leaf spans, one per request")
	assert.Equal(t, 3, strings.Count(out, "─ runtime attempt "))
	assert.Equal(t, 12, strings.Count(out, "─ session attempt "))
	// The virtual clock passed the backoffs at once, and the spans say them
	// as configured: each session's 2 s, 4 s, 8 s; the runtime's 1.5 s, 3 s.
	assert.Equal(t, 3, strings.Count(out, "attempt=4 after=8s"))
	assert.Contains(t, out, "attempt=3 after=3s")
}

// checkShown checks that every line the README shows as a program's output
// is one it printed, in its order, but for durations and the trace ID; a
// line with ⋮ stands for lines left out.
func checkShown(t *testing.T, name string, shown snippet, out string) {
	t.Helper()
	got := strings.Split(normalize(out), "\n")
	i := 0
	for _, l := range strings.Split(strings.TrimRight(shown.code, "\n"), "\n") {
		if strings.Contains(l, "⋮") {
			continue
		}
		want := normalize(l)
		for i < len(got) && got[i] != want {
			i++
		}
		if i == len(got) {
			t.Errorf("README.md:%d shows a line the program %s does not print (or not in this order): %q", shown.line, name, l)
			return
		}
		i++
	}
}

var (
	durationRE = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s|m)\b`)
	traceIDRE  = regexp.MustCompile(`\btrace [0-9a-f]{32}\b`)
)

func normalize(s string) string {
	s = traceIDRE.ReplaceAllString(s, "trace ID")
	return strings.TrimRight(durationRE.ReplaceAllString(s, "D"), " ")
}

// pkgName is the package a whole-file block declares.
func pkgName(s snippet) string {
	f, err := parser.ParseFile(token.NewFileSet(), "snippet.go", s.code, parser.PackageClauseOnly)
	if err != nil {
		return ""
	}
	return f.Name.Name
}

// testFile says whether a whole-file block is a test file: its package is
// an external test package, or it declares a test or a benchmark.
func testFile(s snippet) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "snippet.go", s.code, 0)
	if err != nil {
		return false // the vet of the module reports it
	}
	if strings.HasSuffix(f.Name.Name, "_test") {
		return true
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil &&
			(strings.HasPrefix(fn.Name.Name, "Test") || strings.HasPrefix(fn.Name.Name, "Benchmark")) {
			return true
		}
	}
	return false
}

// blockDir is the directory of the temporary module a block is written to.
func blockDir(s snippet) string { return fmt.Sprintf("line%d", s.line) }

// readmeModule writes the blocks into a temporary module that requires
// retrace, replaced by this checkout, with the root module's requirements,
// and its go.sum, and returns its directory.
func readmeModule(t *testing.T, files []snippet) string {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)

	mod := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "module readme.example\n\ngo 1.26.0\n\nrequire github.com/retrace-go/retrace v0.0.0\n\n")
	b.WriteString(requirements(string(gomod)))
	fmt.Fprintf(&b, "\nreplace github.com/retrace-go/retrace => %s\n", root)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(b.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.sum"), gosum, 0o644))
	for _, s := range files {
		name := "main.go"
		if testFile(s) {
			name = "readme_test.go"
		}
		dir := filepath.Join(mod, blockDir(s))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(s.code), 0o644))
	}
	goCmd(t, mod, "vet", "./...")
	return mod
}

// requirements returns the require directives of a go.mod, single and in
// blocks.
func requirements(gomod string) string {
	var b strings.Builder
	in := false
	for _, l := range strings.Split(gomod, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case in:
			b.WriteString(l + "\n")
			in = trimmed != ")"
		case strings.HasPrefix(trimmed, "require ("):
			b.WriteString(l + "\n")
			in = true
		case strings.HasPrefix(trimmed, "require "):
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// goCmd runs the go command in dir as a reader's module builds: the module's
// own go.mod (no workspace) and updated as needed (-mod=mod, where CI sets
// -mod=readonly for the repository's modules). The caller's other flags stay
// (CI's -race -trimpath), so that the build cache's packages serve the
// program instead of being compiled once more in another mode.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+withModMod(os.Getenv("GOFLAGS")), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// runProgram runs a README program with none of the OTEL_* variables set, as
// a reader with none runs it, and returns its output. The deadline is a guard
// against a program that hangs, not a measure: the quick start takes
// milliseconds.
func runProgram(t *testing.T, bin string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s:\n%s", filepath.Base(bin), out)
	return string(out)
}

// withModMod is the flags of a GOFLAGS with its -mod setting, if any,
// replaced by -mod=mod.
func withModMod(goflags string) string {
	fs := []string{"-mod=mod"}
	for _, f := range strings.Fields(goflags) {
		if !strings.HasPrefix(f, "-mod=") && !strings.HasPrefix(f, "--mod=") {
			fs = append(fs, f)
		}
	}
	return strings.Join(fs, " ")
}
