package main

import (
	"archive/zip"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	coreGoMod    = "module github.com/retrace-go/retrace\n\ngo 1.26.0\n"
	contribGoMod = "module github.com/retrace-go/retrace/contrib/x\n\ngo 1.26.0\n\nrequire github.com/retrace-go/retrace v0.6.0\n\nreplace github.com/retrace-go/retrace => ../..\n"
	changelog    = "# Changelog\n\n## [Unreleased]\n\n## [0.6.0] - 2026-12-04\n\n## [0.5.0] - 2026-12-03\n"
)

// repoWith commits files (name → content) into a new git repository and
// leaves untracked.txt beside them, uncommitted; it returns the
// repository's directory.
func repoWith(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "."},
		{"-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "-m", "files"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE=2026-12-04T10:00:00Z", "GIT_AUTHOR_DATE=2026-12-04T10:00:00Z",
			"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "untracked.txt"), []byte("not committed"), 0o644))
	return dir
}

// repoFiles is a repository with a core, a contrib module with a module
// nested in it, and an example module.
func repoFiles() map[string]string {
	return map[string]string{
		"go.mod":                     coreGoMod,
		"LICENSE":                    "the terms\n",
		"CHANGELOG.md":               changelog,
		"retrace.go":                 "package retrace\n",
		"contrib/x/go.mod":           contribGoMod,
		"contrib/x/x.go":             "package x\n",
		"contrib/x/nested/go.mod":    "module github.com/retrace-go/retrace/contrib/x/nested\n",
		"contrib/x/nested/nested.go": "package nested\n",
		"examples/e/go.mod":          "module example.com/e\n",
		"examples/e/main.go":         "package main\n",
	}
}

// zipNames are the names in a module zip, sorted.
func zipNames(t *testing.T, name string) map[string]string {
	t.Helper()
	r, err := zip.OpenReader(name)
	require.NoError(t, err)
	defer r.Close()
	files := map[string]string{}
	for _, f := range r.File {
		rc, err := f.Open()
		require.NoError(t, err)
		var b bytes.Buffer
		_, err = b.ReadFrom(rc)
		rc.Close()
		require.NoError(t, err)
		files[f.Name] = b.String()
	}
	return files
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(b)
}

func TestPublishWritesTheCoreAndEachContribModule(t *testing.T) {
	repo := repoWith(t, repoFiles())
	out := t.TempDir()
	var stdout bytes.Buffer
	require.NoError(t, publish(repo, "HEAD", "", out, &stdout))

	core := filepath.Join(out, "github.com/retrace-go/retrace/@v")
	assert.Equal(t, "v0.6.0\n", read(t, filepath.Join(core, "list")), "the CHANGELOG's newest release")
	assert.JSONEq(t, `{"Version":"v0.6.0","Time":"2026-12-04T10:00:00Z"}`, read(t, filepath.Join(core, "v0.6.0.info")))
	assert.Equal(t, coreGoMod, read(t, filepath.Join(core, "v0.6.0.mod")))
	assert.Equal(t, map[string]string{
		"github.com/retrace-go/retrace@v0.6.0/go.mod":       coreGoMod,
		"github.com/retrace-go/retrace@v0.6.0/LICENSE":      "the terms\n",
		"github.com/retrace-go/retrace@v0.6.0/CHANGELOG.md": changelog,
		"github.com/retrace-go/retrace@v0.6.0/retrace.go":   "package retrace\n",
	}, zipNames(t, filepath.Join(core, "v0.6.0.zip")), "no nested module's file, nothing uncommitted")

	x := filepath.Join(out, "github.com/retrace-go/retrace/contrib/x/@v")
	assert.Equal(t, "v0.6.0\n", read(t, filepath.Join(x, "list")))
	assert.Equal(t, contribGoMod, read(t, filepath.Join(x, "v0.6.0.mod")), "its replace kept: the go command ignores it in a dependency")
	assert.Equal(t, map[string]string{
		"github.com/retrace-go/retrace/contrib/x@v0.6.0/go.mod":  contribGoMod,
		"github.com/retrace-go/retrace/contrib/x@v0.6.0/x.go":    "package x\n",
		"github.com/retrace-go/retrace/contrib/x@v0.6.0/LICENSE": "the terms\n",
	}, zipNames(t, filepath.Join(x, "v0.6.0.zip")), "the repository's LICENSE, as the go command adds it")

	for _, unpublished := range []string{"github.com/retrace-go/retrace/contrib/x/nested", "github.com/retrace-go/retrace/examples", "example.com"} {
		assert.NoDirExists(t, filepath.Join(out, unpublished))
	}
	assert.Contains(t, stdout.String(), "github.com/retrace-go/retrace/contrib/x v0.6.0: 3 files (2 omitted: nested modules)")

}

// A proxy that already lists other versions keeps them.
func TestPublishAddsToTheList(t *testing.T) {
	out := t.TempDir()
	list := filepath.Join(out, "github.com/retrace-go/retrace/@v/list")
	require.NoError(t, os.MkdirAll(filepath.Dir(list), 0o755))
	require.NoError(t, os.WriteFile(list, []byte("v0.7.0\nv0.5.0\n"), 0o644))
	require.NoError(t, publish(repoWith(t, repoFiles()), "HEAD", "", out, &bytes.Buffer{}))
	assert.Equal(t, "v0.5.0\nv0.6.0\nv0.7.0\n", read(t, list))
}

func TestPublishRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  map[string]string
		version string
		want    string
	}{
		{"a contrib module requiring the core at another version",
			map[string]string{"contrib/x/go.mod": "module github.com/retrace-go/retrace/contrib/x\n\nrequire github.com/retrace-go/retrace v0.0.0\n"}, "",
			"contrib/x/go.mod: requires github.com/retrace-go/retrace v0.0.0, but github.com/retrace-go/retrace is published at v0.6.0 only"},
		{"a replace in the core",
			map[string]string{"go.mod": coreGoMod + "\nreplace golang.org/x/mod => ../mod\n"}, "",
			"go.mod: has a replace directive (golang.org/x/mod)"},
		{"a module whose path is not its directory's",
			map[string]string{"contrib/x/go.mod": "module github.com/retrace-go/retrace/contrib/y\n"}, "",
			"contrib/x/go.mod: the module in this directory must be github.com/retrace-go/retrace/contrib/x"},
		{"no released version in the CHANGELOG",
			map[string]string{"CHANGELOG.md": "# Changelog\n\n## [Unreleased]\n"}, "",
			"CHANGELOG.md releases no version"},
		{"a version that is not canonical", nil, "v0.6", `version "v0.6" is not a canonical semantic version`},
		{"files a module zip cannot hold (names alike but for case)",
			map[string]string{"contrib/x/Notes.txt": "a", "contrib/x/notes.txt": "b"}, "",
			"case-insensitive file name collision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := repoFiles()
			for name, content := range tc.change {
				files[name] = content
			}
			err := publish(repoWith(t, files), "HEAD", tc.version, t.TempDir(), &bytes.Buffer{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestCommandLine(t *testing.T) {
	repo := repoWith(t, repoFiles())
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"-repo", repo, "-out", out}, &stdout, &stderr), stderr.String())
	entries, err := os.ReadDir(filepath.Join(out, "github.com/retrace-go/retrace/@v"))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.True(t, slices.Equal([]string{"list", "v0.6.0.info", "v0.6.0.mod", "v0.6.0.zip"}, names), "%v", names)

	stderr.Reset()
	assert.Equal(t, 2, run([]string{"-repo", repo}, &stdout, &stderr), "-out is required")
	assert.Contains(t, stderr.String(), "usage: modproxy")
	stderr.Reset()
	assert.Equal(t, 1, run([]string{"-repo", repo, "-rev", "no-such-revision", "-out", out}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "modproxy: git rev-parse --verify no-such-revision^{commit}")
}
