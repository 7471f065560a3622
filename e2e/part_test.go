package e2e

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

// ciEnv is the variable that says the tests run in CI.
const ciEnv = "CI"

// inCI reports whether the tests run in CI: CI holds a true value, as CI
// systems set it ("true"; "1" too).
func inCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv(ciEnv))
	return ci
}

// needPart is what a test calls when a real part it needs (Jaeger; later
// Redis or a contrib module's server) is missing, with the reason. Under CI
// the test fails: a CI run that skipped the test would be green without
// having checked what the test is for. Elsewhere it skips, saying why, so
// that a machine without the part can still run the other tests.
func needPart(t testing.TB, format string, args ...any) {
	t.Helper()
	if inCI() {
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
	cases := []struct {
		ci   string
		fail bool
	}{
		{"true", true}, {"1", true}, {"TRUE", true},
		{"", false}, {"false", false}, {"0", false}, {"yes-ish", false},
	}
	for _, c := range cases {
		t.Run("CI="+c.ci, func(t *testing.T) {
			t.Setenv(ciEnv, c.ci)
			r := &recordTB{TB: t}
			needPart(r, "Jaeger could not be built: %v", "exit status 1")
			if c.fail {
				assert.Empty(t, r.skip)
				assert.Contains(t, r.fatal, "FAIL: Jaeger could not be built: exit status 1")
				assert.Contains(t, r.fatal, "CI="+c.ci)
			} else {
				assert.Empty(t, r.fatal)
				assert.Equal(t, "SKIP: Jaeger could not be built: exit status 1", r.skip)
			}
		})
	}
}
