package browser

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// ciEnv is the variable that says the tests run in CI.
const ciEnv = "CI"

// needPart is what a test calls when a real part it needs (Chromium) is
// missing, with the reason. Under CI (CI holds a true value) the test
// fails: a CI run that skipped it would be green without having looked at
// the page in a browser. Elsewhere it skips, saying why. It is e2e's rule,
// restated here because e2e's tests are not a package this module can
// import.
func needPart(t testing.TB, format string, args ...any) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv(ciEnv)); ci {
		t.Fatalf("FAIL: "+format+"\n(%s=%s: in CI a test whose real part is missing fails rather than skips)", append(args, ciEnv, os.Getenv(ciEnv))...)
	} else {
		t.Skipf("SKIP: "+format, args...)
	}
}

// recordTB records how needPart ends a test instead of ending it.
type recordTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordTB) Helper()                        {}
func (r *recordTB) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }
func (r *recordTB) Skipf(format string, a ...any)  { r.skip = fmt.Sprintf(format, a...) }

func TestNeedPart(t *testing.T) {
	for _, c := range []struct {
		ci   string
		fail bool
	}{{"true", true}, {"1", true}, {"", false}, {"false", false}} {
		t.Run("CI="+c.ci, func(t *testing.T) {
			t.Setenv(ciEnv, c.ci)
			r := &recordTB{TB: t}
			needPart(r, "no Chromium: %s", "not on PATH")
			if c.fail {
				if r.skip != "" || r.fatal == "" {
					t.Errorf("CI=%s: want a failure, got fatal %q, skip %q", c.ci, r.fatal, r.skip)
				}
			} else if r.fatal != "" || r.skip != "SKIP: no Chromium: not on PATH" {
				t.Errorf("CI=%s: want a skip, got fatal %q, skip %q", c.ci, r.fatal, r.skip)
			}
		})
	}
}
