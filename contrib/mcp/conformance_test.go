package retracemcp_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// connectLine is the line of the go-sdk's conformance client that connects;
// the retrace build points it at the hook in testdata/conformance.
const connectLine = "session, err := client.Connect(ctx, transport, nil)"

// TestConformance runs the MCP conformance suite's client scenarios, every
// suite, against the go-sdk's own conformance client twice in one run: as
// the go-sdk ships it, and with retrace installed (its middleware and
// transport, through Client.Connect). retrace may fail no check that plain
// go-sdk passes.
func TestConformance(t *testing.T) {
	p := peers(t)
	dir := t.TempDir()
	plain := buildConformanceClient(t, dir, false)
	retraced := buildConformanceClient(t, dir, true)

	want := runConformance(t, p, plain, filepath.Join(dir, "plain"))
	got := runConformance(t, p, retraced, filepath.Join(dir, "retrace"))

	t.Logf("conformance, client scenarios (suite all): plain go-sdk %d passed, %d failed; go-sdk + retrace %d passed, %d failed",
		want.total(want.passed), want.total(want.failed), got.total(got.passed), got.total(got.failed))
	require.NotZero(t, want.total(want.passed), "the suite ran no check")
	var lost []string
	for check, n := range want.passed {
		if got.passed[check] < n {
			lost = append(lost, check)
		}
	}
	sort.Strings(lost)
	assert.Empty(t, lost, "checks plain go-sdk passes and go-sdk + retrace does not")
	assert.GreaterOrEqual(t, got.total(got.passed), want.total(want.passed))
	if path := os.Getenv("RETRACE_CONFORMANCE_REPORT"); path != "" {
		// CI keeps the counts of this run beside its log.
		b, _ := json.MarshalIndent(map[string]any{
			"plain":   map[string]int{"passed": want.total(want.passed), "failed": want.total(want.failed)},
			"retrace": map[string]int{"passed": got.total(got.passed), "failed": got.total(got.failed)},
		}, "", "  ")
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}
}

// buildConformanceClient builds the go-sdk's conformance client from the
// module cache, as it is, or with its connect pointed at retrace, by an
// overlay: nothing of it is copied into this repository.
func buildConformanceClient(t *testing.T, dir string, withRetrace bool) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/modelcontextprotocol/go-sdk").Output()
	require.NoError(t, err)
	src := filepath.Join(strings.TrimSpace(string(out)), "conformance", "everything-client", "main.go")
	main, err := os.ReadFile(src)
	require.NoError(t, err, "the go-sdk's conformance client")

	name := "plain"
	pkg, err := filepath.Abs("internal/conformanceclient") // a package only the overlay makes
	require.NoError(t, err)
	files := map[string]string{filepath.Join(pkg, "main.go"): src}
	if withRetrace {
		name = "retrace"
		require.Equal(t, 1, strings.Count(string(main), connectLine), "the go-sdk's conformance client no longer connects in one line: update connectLine")
		patched := filepath.Join(dir, "main.go")
		require.NoError(t, os.WriteFile(patched, []byte(strings.Replace(string(main), connectLine,
			"session, err := retraceConnect(ctx, client, transport)", 1)), 0o644))
		hook, err := filepath.Abs("testdata/conformance/retrace.go")
		require.NoError(t, err)
		files[filepath.Join(pkg, "main.go")] = patched
		files[filepath.Join(pkg, "retrace.go")] = hook
	}
	overlay := filepath.Join(dir, name+"-overlay.json")
	b, err := json.Marshal(map[string]any{"Replace": files})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(overlay, b, 0o644))
	bin := filepath.Join(dir, name+"-client")
	build := exec.Command("go", "build", "-overlay", overlay, "-o", bin, "./internal/conformanceclient")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the %s conformance client: %v\n%s", name, err, out)
	}
	return bin
}

// runConformance runs every client scenario against client and reads the
// checks it recorded. The suite exits 1 when a check fails, which go-sdk's
// missing OAuth flows make it do: the checks say what failed.
func runConformance(t *testing.T, p peerDir, client, out string) checkRun {
	t.Helper()
	cmd := exec.Command(p.node(), p.conformance(), "client", "--command", client, "--suite", "all", "-o", out)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(p.node())+string(os.PathListSeparator)+os.Getenv("PATH"))
	log, err := cmd.CombinedOutput()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("the conformance suite did not run: %v\n%s", err, log)
	}
	run := readChecks(t, out)
	if run.total(run.passed)+run.total(run.failed) == 0 {
		t.Fatalf("the conformance suite recorded no check:\n%s", log)
	}
	return run
}
