//go:build windows

package runtime

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// openRegularFlags adds nothing on Windows: openRegular's checks, before
// and after the open, refuse what is not a regular file.
const openRegularFlags = 0

// errorSharingViolation is ERROR_SHARING_VIOLATION: another handle has the
// file open, and this open shares nothing.
const errorSharingViolation syscall.Errno = 32

// lockFile opens (creating it if needed) the lock file name with no sharing
// at all, which no other open of it, in this process or another, can get
// while it is open: errLockHeld if another handle has it. Closing the
// returned file releases the lock, and so does the system when the process
// exits. A link at name is opened as itself (FILE_FLAG_OPEN_REPARSE_POINT),
// never followed, and refused.
func lockFile(name string) (io.Closer, error) {
	if info, err := os.Lstat(name); err == nil && !info.Mode().IsRegular() {
		return nil, &notRegularError{mode: info.Mode()}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	p, err := syscall.UTF16PtrFromString(name)
	if err != nil {
		return nil, err
	}
	h, err := syscall.CreateFile(p, syscall.GENERIC_READ|syscall.GENERIC_WRITE, 0, nil,
		syscall.OPEN_ALWAYS, syscall.FILE_ATTRIBUTE_NORMAL|syscall.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if errors.Is(err, errorSharingViolation) {
		return nil, errLockHeld
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(h), name)
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		_ = f.Close()
		if err != nil {
			return nil, err
		}
		return nil, &notRegularError{mode: info.Mode(), replaced: true}
	}
	return f, nil
}
