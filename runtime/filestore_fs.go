package runtime

import (
	"io/fs"
	"os"
	goruntime "runtime"
)

// fileStoreFS is the file system a FileStore works on: the few operations
// its Load and Save need. The store uses osFS, the os package; its tests put
// a fake in its place, because what makes Save durable (the fsync of the
// temporary file before the rename, and of the directory after it) and its
// handling of a failed operation cannot be seen on a disk that works.
type fileStoreFS interface {
	ReadFile(name string) ([]byte, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	CreateTemp(dir, pattern string) (fileStoreFile, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// OpenDir opens a directory to fsync it.
	OpenDir(name string) (fileStoreSyncer, error)
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

func (osFS) ReadFile(name string) ([]byte, error)       { return os.ReadFile(name) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (osFS) Rename(oldpath, newpath string) error       { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error                   { return os.Remove(name) }

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
