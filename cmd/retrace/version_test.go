package main

import (
	"bytes"
	"os"
	"regexp"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/internal/instrument"
)

func TestModuleVersion(t *testing.T) {
	devel := "v" + instrument.Version + " (devel)"
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"installed at a version", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.6.0"}}, "v0.6.0"},
		{"a checkout's build, VCS-stamped", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.6.1-0.20261204044100-e757393abcde+dirty"}}, "v0.6.1-0.20261204044100-e757393abcde+dirty"},
		{"a checkout's build, unstamped", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, devel},
		{"no version at all", &debug.BuildInfo{Main: debug.Module{Path: modulePath}}, devel},
		{"no build info", nil, devel},
		{"a dependency of another module", &debug.BuildInfo{
			Main: debug.Module{Path: "example.com/agent", Version: "v9.9.9"},
			Deps: []*debug.Module{{Path: "github.com/retrace-go/retrace/contrib/mcp", Version: "v0.7.0"}, {Path: modulePath, Version: "v0.6.0"}},
		}, "v0.6.0"},
		{"a dependency replaced by a directory", &debug.BuildInfo{
			Main: debug.Module{Path: "example.com/agent", Version: "v9.9.9"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.6.0", Replace: &debug.Module{Path: "../retrace"}}},
		}, devel},
		{"a dependency replaced by another version", &debug.BuildInfo{
			Main: debug.Module{Path: "example.com/agent"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.6.0", Replace: &debug.Module{Path: modulePath, Version: "v0.6.1"}}},
		}, "v0.6.1"},
		{"another main module's version is not retrace's", &debug.BuildInfo{Main: debug.Module{Path: "example.com/agent", Version: "v9.9.9"}}, devel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, moduleVersion(tc.info))
		})
	}
}

// The command prints one line; a test binary records no version of its
// own, so it prints the source's version marked (devel).
func TestVersionCommand(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"version"}, &out, &errb), errb.String())
	info, _ := debug.ReadBuildInfo()
	assert.Equal(t, "retrace "+moduleVersion(info)+"\n", out.String())
	assert.Regexp(t, `^retrace v\d+\.\d+\.\d+\S* `, out.String())
	assert.Empty(t, errb.String())

	out.Reset()
	assert.Equal(t, 1, run([]string{"version", "extra"}, &out, &errb))
	assert.Contains(t, errb.String(), `unexpected argument "extra"`)
	assert.Empty(t, out.String())

	errb.Reset()
	assert.Equal(t, 0, run([]string{"version", "-help"}, &out, &errb))
	assert.Contains(t, errb.String(), "usage: retrace version")
}

// The version the source says it is, printed by a build that recorded
// none and set on every span as the instrumentation scope's, is the
// newest one the CHANGELOG releases: a release that forgets one of them
// fails here.
func TestFallbackVersionIsTheChangelogs(t *testing.T) {
	changelog, err := os.ReadFile("../../CHANGELOG.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`).FindSubmatch(changelog)
	require.NotNil(t, m, "CHANGELOG.md has no released version (## [X.Y.Z] - date)")
	assert.Equal(t, string(m[1]), instrument.Version)
}
