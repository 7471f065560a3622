package runtime

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	goruntime "runtime"
)

// fileStoreFS is the file system a FileStore works on: the few operations
// its Lock, Load and Save need. The store uses osFS, the os package; its
// tests put a fake in its place, because what makes Save durable (the fsync
// of the temporary file before the rename, and of the directory after it)
// and its handling of a failed operation cannot be seen on a disk that
// works.
type fileStoreFS interface {
	// ReadFile reads the regular file name. Anything else at name, a
	// symbolic link included, is refused with a *notRegularError, without
	// being read and without waiting.
	ReadFile(name string) ([]byte, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	CreateTemp(dir, pattern string) (fileStoreFile, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// OpenDir opens a directory to fsync it.
	OpenDir(name string) (fileStoreSyncer, error)
	// Lock opens the lock file name, creating it if needed, and locks it
	// exclusively without waiting: errLockHeld if another holder has it.
	// Closing the returned file releases the lock. Anything at name that
	// is not a regular file is refused, as by ReadFile.
	Lock(name string) (io.Closer, error)
}

// errLockHeld is the error of fileStoreFS.Lock when another holder has the
// lock.
var errLockHeld = errors.New("the lock is held")

// notRegularError is a path the store reads or locks that is not a regular
// file. Each kind is refused for its own reason: a FIFO's open waits for a
// writer, past any deadline, a device can be read without end, a directory
// holds no data, and a symbolic link may lead out of the store's directory
// (the store itself never makes one: it renames files it wrote).
type notRegularError struct {
	mode     fs.FileMode
	replaced bool // the path was replaced between its check and its open
}

func (e *notRegularError) Error() string {
	var kind string
	switch m := e.mode; {
	case m&fs.ModeSymlink != 0:
		return "it is a symbolic link, which the store does not follow"
	case m.IsDir():
		kind = "a directory"
	case m&fs.ModeNamedPipe != 0:
		kind = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		kind = "a socket"
	case m&fs.ModeCharDevice != 0:
		kind = "a character device"
	case m&fs.ModeDevice != 0:
		kind = "a device"
	case m.IsRegular():
		kind = "another file" // the path was replaced by another regular file
	default:
		kind = fmt.Sprintf("of type %v", m.Type())
	}
	if e.replaced {
		return "it was replaced while being opened: it is now " + kind + ", not the regular file that was checked"
	}
	return "it is " + kind + ", not a regular file"
}

// openRegular opens name with flag, refusing anything but a regular file
// (or, with os.O_CREATE in flag, nothing at all) with a *notRegularError,
// before opening it. The open adds openRegularFlags, which keep it from
// following a link or waiting on a FIFO where the system can (a path
// replaced after its check), and what was opened is checked again.
func openRegular(name string, flag int) (*os.File, error) {
	before, err := os.Lstat(name)
	switch {
	case err == nil && !before.Mode().IsRegular():
		return nil, &notRegularError{mode: before.Mode()}
	case err != nil && (flag&os.O_CREATE == 0 || !errors.Is(err, fs.ErrNotExist)):
		return nil, err
	}
	f, err := os.OpenFile(name, flag|openRegularFlags, 0o600)
	if err != nil {
		return nil, err
	}
	opened, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !opened.Mode().IsRegular() || before != nil && !os.SameFile(before, opened) {
		_ = f.Close()
		return nil, &notRegularError{mode: opened.Mode(), replaced: true}
	}
	return f, nil
}

// fileStoreFile is a temporary file being written.
type fileStoreFile interface {
	Name() string
	Write(p []byte) (int, error)
	fileStoreSyncer
}

// fileStoreSyncer is an open file or directory that can be fsynced.
type fileStoreSyncer interface {
	Sync() error
	Close() error
}

// osFS is the real file system.
type osFS struct{}

func (osFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (osFS) Rename(oldpath, newpath string) error       { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error                   { return os.Remove(name) }
func (osFS) Lock(name string) (io.Closer, error)        { return lockFile(name) }

func (osFS) ReadFile(name string) ([]byte, error) {
	f, err := openRegular(name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func (osFS) CreateTemp(dir, pattern string) (fileStoreFile, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// OpenDir opens dir. Windows cannot fsync a directory (and does not need
// to), so there it returns a directory whose Sync does nothing.
func (osFS) OpenDir(name string) (fileStoreSyncer, error) {
	if goruntime.GOOS == "windows" {
		return noSync{}, nil
	}
	d, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// noSync is a directory that needs no fsync.
type noSync struct{}

func (noSync) Sync() error  { return nil }
func (noSync) Close() error { return nil }
