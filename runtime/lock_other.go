//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd || windows)

package runtime

import (
	"io"
	"os"
)

// openRegularFlags adds nothing here: openRegular's checks, before and
// after the open, refuse what is not a regular file.
const openRegularFlags = 0

// lockFile opens (creating it if needed) the lock file name, but takes no
// lock on it: this system has no flock. A FileStore here excludes a second
// writer of a task only within its process (see FileStore.Lock).
func lockFile(name string) (io.Closer, error) {
	return openRegular(name, os.O_RDWR|os.O_CREATE)
}
