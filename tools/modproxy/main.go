// Command modproxy writes a Go module proxy on disk holding retrace's
// published modules at one version, made from one commit of the repository
// as the go command makes them from a tag: the core and every module under
// contrib/. The modules under examples/ and tools/ are not published.
//
//	go run ./tools/modproxy -out DIR            (from tools/modproxy: go run . -repo ../.. -out DIR)
//	GOPROXY=file://DIR,… go get github.com/retrace-go/retrace@v0.6.0
//
// For each module it writes DIR/<module path>/@v/list, <version>.info,
// <version>.mod and <version>.zip, in the layout GOPROXY=file://DIR reads.
// A module's zip is the commit's files under its directory (git archive:
// nothing untracked, nothing ignored), in the module zip format of
// golang.org/x/mod/zip, which omits the files of nested modules and refuses
// files past the size limits; a contrib module without a LICENSE of its own
// gets the repository's, as the go command gives it one.
//
// The version is the newest one CHANGELOG.md releases ("## [0.6.0] - …"),
// unless -version says another. A published module that requires another of
// retrace's modules at a version other than the one published is refused:
// its users could not resolve that version. So is a replace directive in the
// core's go.mod: go install …/cmd/retrace@version refuses a module that has
// one. A contrib module's replace directives (to the checkout, for its
// development) are published as they are; the go command ignores them in a
// dependency's go.mod.
package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// corePath is the core module's path; the contrib modules' are beneath it.
const corePath = "github.com/retrace-go/retrace"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("modproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repo := fs.String("repo", "", "the repository's `DIR` (default: the git work tree of the current directory)")
	rev := fs.String("rev", "HEAD", "the git `REVISION` the modules are made from")
	version := fs.String("version", "", "the `VERSION` to publish, such as v0.6.0 (default: the newest one CHANGELOG.md releases)")
	out := fs.String("out", "", "the proxy's `DIR`, created if missing (required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: modproxy [-repo DIR] [-rev REVISION] [-version VERSION] -out DIR")
		return 2
	}
	if err := publish(*repo, *rev, *version, *out, stdout); err != nil {
		fmt.Fprintln(stderr, "modproxy:", err)
		return 1
	}
	return 0
}

// publish writes the proxy: every published module of repo at rev, as
// version (the CHANGELOG's if empty), into out.
func publish(repo, rev, version, out string, stdout io.Writer) error {
	if repo == "" {
		top, err := git(".", "rev-parse", "--show-toplevel")
		if err != nil {
			return err
		}
		repo = strings.TrimSpace(string(top))
	}
	hash, err := git(repo, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return err
	}
	commit := strings.TrimSpace(string(hash))
	when, err := git(repo, "show", "-s", "--format=%cI", commit)
	if err != nil {
		return err
	}
	commitTime, err := time.Parse(time.RFC3339, strings.TrimSpace(string(when)))
	if err != nil {
		return fmt.Errorf("the commit time of %s: %w", commit, err)
	}
	// One archive of the whole tree, as the go command reads a tag: the
	// files git tracks, with the line endings they were committed with.
	archive, err := git(repo, "-c", "core.autocrlf=input", "-c", "core.eol=lf", "archive", "--format=zip", commit)
	if err != nil {
		return err
	}
	tree, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		return fmt.Errorf("git archive of %s: %w", commit, err)
	}
	if version == "" {
		if version, err = changelogVersion(tree); err != nil {
			return err
		}
	}
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Build(version) != "" {
		return fmt.Errorf("version %q is not a canonical semantic version such as v0.6.0", version)
	}

	mods := modules(tree)
	if len(mods) == 0 || mods[0] != "" {
		return fmt.Errorf("%s has no go.mod at its root", commit)
	}
	published := make(map[string]bool, len(mods))
	for _, dir := range mods {
		published[modulePathOf(dir)] = true
	}
	fmt.Fprintf(stdout, "modproxy: %s at commit %.12s (%s), into %s\n", version, commit, commitTime.UTC().Format(time.RFC3339), out)
	for _, dir := range mods {
		if err := publishModule(tree, dir, version, commitTime, published, out, stdout); err != nil {
			return err
		}
	}
	return nil
}

// modules are the directories of the published modules in the archive: ""
// for the core, then contrib/NAME for each contrib module, sorted.
func modules(tree *zip.Reader) []string {
	var dirs []string
	for _, f := range tree.File {
		switch dir, base := path.Split(f.Name); {
		case base != "go.mod":
		case dir == "":
			dirs = append(dirs, "")
		case strings.Count(dir, "/") == 2 && strings.HasPrefix(dir, "contrib/"):
			dirs = append(dirs, strings.TrimSuffix(dir, "/"))
		}
	}
	slices.Sort(dirs)
	return dirs
}

// modulePathOf is the path a module in dir must declare.
func modulePathOf(dir string) string {
	if dir == "" {
		return corePath
	}
	return corePath + "/" + dir
}

// changelogVersion is the newest version CHANGELOG.md releases: its first
// "## [X.Y.Z]" heading ("## [Unreleased]" is not one).
func changelogVersion(tree *zip.Reader) (string, error) {
	f, err := tree.Open("CHANGELOG.md")
	if err != nil {
		return "", fmt.Errorf("no -version, and no CHANGELOG.md to read it from: %w", err)
	}
	defer f.Close()
	text, err := io.ReadAll(f)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`).FindSubmatch(text)
	if m == nil {
		return "", errors.New("CHANGELOG.md releases no version (no \"## [X.Y.Z] - date\" heading); give -version")
	}
	return "v" + string(m[1]), nil
}

// publishModule writes the module in dir of the archive at version.
func publishModule(tree *zip.Reader, dir, version string, commitTime time.Time, published map[string]bool, out string, stdout io.Writer) error {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	var files []modzip.File
	var goMod []byte
	haveLicense := false
	for _, f := range tree.File {
		name, ok := strings.CutPrefix(f.Name, prefix)
		if !ok || name == "" || strings.HasSuffix(name, "/") {
			continue
		}
		files = append(files, archived{name, f})
		switch name {
		case "go.mod":
			b, err := readAll(f)
			if err != nil {
				return err
			}
			goMod = b
		case "LICENSE":
			haveLicense = true
		}
	}
	if !haveLicense {
		// The go command gives a module in a subdirectory without a LICENSE
		// the repository's, so that its users read the terms it is under.
		lic, err := tree.Open("LICENSE")
		if err != nil {
			return fmt.Errorf("%sgo.mod: the module has no LICENSE, nor has the repository", prefix)
		}
		data, err := io.ReadAll(lic)
		lic.Close()
		if err != nil {
			return err
		}
		files = append(files, inMemory{"LICENSE", data})
	}
	if err := checkGoMod(prefix+"go.mod", goMod, modulePathOf(dir), dir == "", version, published); err != nil {
		return err
	}

	m := module.Version{Path: modulePathOf(dir), Version: version}
	checked, err := modzip.CheckFiles(files)
	if err != nil {
		return fmt.Errorf("%s: %w", m, err)
	}
	var zipped bytes.Buffer
	if err := modzip.Create(&zipped, m, files); err != nil {
		return fmt.Errorf("%s: %w", m, err)
	}

	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, commitTime.UTC()})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		escVersion + ".info": append(info, '\n'),
		escVersion + ".mod":  goMod,
		escVersion + ".zip":  zipped.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	if err := addToList(filepath.Join(vdir, "list"), version); err != nil {
		return err
	}
	// The zip as the go command will read it: a module that fails here
	// would fail every user's download.
	if _, err := modzip.CheckZip(m, filepath.Join(vdir, escVersion+".zip")); err != nil {
		return fmt.Errorf("%s: the zip written: %w", m, err)
	}
	fmt.Fprintf(stdout, "  %s %s: %d files (%d omitted: nested modules), %d KiB zip\n",
		m.Path, m.Version, len(checked.Valid), len(checked.Omitted), (zipped.Len()+1023)/1024)
	return nil
}

// checkGoMod holds a published go.mod to what its users need: the module
// path its directory gives it, every one of retrace's modules it requires
// at the version published with it, and, for the core, no replace.
func checkGoMod(name string, data []byte, wantPath string, core bool, version string, published map[string]bool) error {
	if data == nil {
		return fmt.Errorf("%s: missing", name)
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return err
	}
	if f.Module == nil || f.Module.Mod.Path != wantPath {
		return fmt.Errorf("%s: the module in this directory must be %s", name, wantPath)
	}
	for _, r := range f.Require {
		if published[r.Mod.Path] && r.Mod.Version != version {
			return fmt.Errorf("%s: requires %s %s, but %s is published at %s only: require it at %s",
				name, r.Mod.Path, r.Mod.Version, r.Mod.Path, version, version)
		}
	}
	if core && len(f.Replace) > 0 {
		return fmt.Errorf("%s: has a replace directive (%s), which go install %s/cmd/retrace@%s refuses", name, f.Replace[0].Old.Path, corePath, version)
	}
	return nil
}

// addToList adds version to a proxy's list file, one version a line,
// keeping the versions already there.
func addToList(name, version string) error {
	var versions []string
	if data, err := os.ReadFile(name); err == nil {
		versions = strings.Fields(string(data))
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return os.WriteFile(name, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// git runs git in dir and returns its standard output; its standard error
// is in the error.
func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func readAll(f *zip.File) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// archived is a file of the archive, named as in its module.
type archived struct {
	name string
	f    *zip.File
}

func (a archived) Path() string                { return a.name }
func (a archived) Lstat() (os.FileInfo, error) { return a.f.FileInfo(), nil }
func (a archived) Open() (io.ReadCloser, error) {
	return a.f.Open()
}

// inMemory is a file added to a module that its directory does not hold.
type inMemory struct {
	name string
	data []byte
}

func (m inMemory) Path() string                 { return m.name }
func (m inMemory) Lstat() (os.FileInfo, error)  { return memInfo{m}, nil }
func (m inMemory) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(m.data)), nil }

type memInfo struct{ m inMemory }

func (i memInfo) Name() string       { return path.Base(i.m.name) }
func (i memInfo) Size() int64        { return int64(len(i.m.data)) }
func (i memInfo) Mode() os.FileMode  { return 0o644 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }
