//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package runtime

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// openRegularFlags are added to every open of a file the store reads or
// locks. O_NOFOLLOW refuses a symbolic link put in place after the Lstat
// that checked the path, and O_NONBLOCK keeps the open of a FIFO put there
// from waiting for a writer: the checks after the open then refuse either.
const openRegularFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// lockFile opens (creating it if needed) the lock file name and takes an
// exclusive flock on it without waiting; errLockHeld if another open file
// holds one. Closing the returned file releases the lock, and so does the
// kernel when the process exits. An flock belongs to the open file, not to
// the process, so two opens in one process exclude each other too; Go opens
// every file close-on-exec, so a child process does not inherit the lock.
func lockFile(name string) (io.Closer, error) {
	f, err := openRegular(name, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	var lockErr error
	if err := rc.Control(func(fd uintptr) {
		for {
			lockErr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
			if !errors.Is(lockErr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		_ = f.Close()
		return nil, err
	}
	if errors.Is(lockErr, syscall.EWOULDBLOCK) {
		_ = f.Close()
		return nil, errLockHeld
	}
	if lockErr != nil {
		_ = f.Close()
		return nil, &os.PathError{Op: "flock", Path: name, Err: lockErr}
	}
	return f, nil
}
