package main

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/retrace-go/retrace/internal/instrument"
)

// modulePath is the module this command belongs to: the one whose version
// it reports.
const modulePath = "github.com/retrace-go/retrace"

// version prints the version of retrace this binary was built from, one
// line: "retrace v0.6.0" for a binary built from a published version.
func version(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: retrace version\n\nPrints the version of retrace this binary was built from.\n")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version: unexpected argument %q", fs.Arg(0))
	}
	info, _ := debug.ReadBuildInfo()
	_, err := fmt.Fprintln(stdout, "retrace", moduleVersion(info))
	return err
}

// moduleVersion is retrace's version as the build recorded it: that of
// the main module when retrace is it (go install …/cmd/retrace@v0.6.0
// records v0.6.0; a build in a checkout with VCS stamping, a
// pseudo-version naming the commit), else that of retrace among the
// dependencies (a program of another module that builds this command),
// through its replacement if it has one.
//
// A build that recorded none says so rather than pass for a release: a
// build in a checkout without VCS stamping (-buildvcs=false, or no git)
// and a test binary record "(devel)", a dependency replaced by a directory
// records no version, and then the version is instrument.Version, the one
// this source says it is, marked "(devel)": "v0.6.0 (devel)".
func moduleVersion(info *debug.BuildInfo) string {
	if info != nil {
		var m *debug.Module
		if info.Main.Path == modulePath {
			m = &info.Main
		} else {
			for _, d := range info.Deps {
				if d.Path == modulePath {
					m = d
					break
				}
			}
		}
		if m != nil && m.Replace != nil {
			m = m.Replace
		}
		if m != nil && m.Version != "" && m.Version != "(devel)" {
			return m.Version
		}
	}
	return "v" + instrument.Version + " (devel)"
}
