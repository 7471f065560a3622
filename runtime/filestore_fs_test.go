package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/policies"
)

// The operations of a Save, as faultFS records them, in the order a Save
// that works makes them. "read file" reads the saved checkpoint, under the
// task's lock, before anything is written; "remove stale" removes a
// temporary file an earlier, killed writer left; "remove temp" removes the
// Save's own.
var fsSaveOps = []string{
	"lock", "read file",
	"read dir", "remove stale",
	"create temp", "write temp", "sync temp", "close temp",
	"rename temp",
	"open dir", "sync dir", "close dir",
	"unlock",
}

// errInjected is the error faultFS returns from the operation it fails.
var errInjected = errors.New("injected I/O error")

// faultFS is the real file system, recording every operation a FileStore
// makes and failing one kind of them with errInjected. A failed operation
// does not happen, except that a failed write writes half its data (as a
// full disk does) and a failed close still closes the file.
type faultFS struct {
	real fileStoreFS
	fail string   // the operation that fails, one of fsSaveOps or "read file"; "" for none
	ops  []string // the operations made, in order
	temp string   // the temporary file the last CreateTemp made
}

func (f *faultFS) do(op string) error {
	f.ops = append(f.ops, op)
	if op == f.fail {
		return fmt.Errorf("%s: %w", op, errInjected)
	}
	return nil
}

func (f *faultFS) ReadFile(name string) ([]byte, error) {
	if err := f.do("read file"); err != nil {
		return nil, err
	}
	return f.real.ReadFile(name)
}

func (f *faultFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := f.do("read dir"); err != nil {
		return nil, err
	}
	return f.real.ReadDir(name)
}

func (f *faultFS) CreateTemp(dir, pattern string) (fileStoreFile, error) {
	if err := f.do("create temp"); err != nil {
		return nil, err
	}
	file, err := f.real.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	f.temp = file.Name()
	return &faultFile{fs: f, file: file}, nil
}

func (f *faultFS) Rename(oldpath, newpath string) error {
	op := "rename " + f.role(oldpath)
	if err := f.do(op); err != nil {
		return err
	}
	return f.real.Rename(oldpath, newpath)
}

func (f *faultFS) Remove(name string) error {
	if err := f.do("remove " + f.role(name)); err != nil {
		return err
	}
	return f.real.Remove(name)
}

func (f *faultFS) Lock(name string) (io.Closer, error) {
	if err := f.do("lock"); err != nil {
		return nil, err
	}
	l, err := f.real.Lock(name)
	if err != nil {
		return nil, err
	}
	return &faultLock{fs: f, lock: l}, nil
}

// faultLock records its release; releasing a lock cannot fail (closing
// the file releases it, whatever Close reports).
type faultLock struct {
	fs   *faultFS
	lock io.Closer
}

func (l *faultLock) Close() error {
	l.fs.ops = append(l.fs.ops, "unlock")
	return l.lock.Close()
}

func (f *faultFS) OpenDir(name string) (fileStoreSyncer, error) {
	if err := f.do("open dir"); err != nil {
		return nil, err
	}
	d, err := f.real.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &faultDir{fs: f, dir: d}, nil
}

// role names a file by what it is to the Save in progress.
func (f *faultFS) role(name string) string {
	if name == f.temp {
		return "temp"
	}
	return "stale"
}

type faultFile struct {
	fs   *faultFS
	file fileStoreFile
}

func (f *faultFile) Name() string { return f.file.Name() }

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.do("write temp"); err != nil {
		n, _ := f.file.Write(p[:len(p)/2])
		return n, err
	}
	return f.file.Write(p)
}

func (f *faultFile) Sync() error {
	if err := f.fs.do("sync temp"); err != nil {
		return err
	}
	return f.file.Sync()
}

func (f *faultFile) Close() error {
	err := f.fs.do("close temp")
	if cerr := f.file.Close(); err == nil {
		err = cerr
	}
	return err
}

type faultDir struct {
	fs  *faultFS
	dir fileStoreSyncer
}

func (d *faultDir) Sync() error {
	if err := d.fs.do("sync dir"); err != nil {
		return err
	}
	return d.dir.Sync()
}

func (d *faultDir) Close() error {
	err := d.fs.do("close dir")
	if cerr := d.dir.Close(); err == nil {
		err = cerr
	}
	return err
}

// fsFaultStore returns a store on faultFS in a new directory, and the
// directory.
func fsFaultStore(t *testing.T) (*FileStore, *faultFS, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "checkpoints")
	fsys := &faultFS{real: osFS{}}
	store, err := newFileStore(dir, fsys)
	require.NoError(t, err)
	return store, fsys, dir
}

// fsCheckpointOf is a checkpoint of task id with n done steps.
func fsCheckpointOf(id string, n int) *Checkpoint {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cp := &Checkpoint{Version: CheckpointVersion, TaskID: id, UpdatedAt: at.Add(time.Duration(n) * time.Hour)}
	for step := 1; step <= n; step++ {
		cp.Steps = append(cp.Steps, StepRecord{
			Step: step, Name: fmt.Sprintf("step-%d", step), Status: StepDone, Key: IdempotencyKey(id, step),
			Result: []byte(`"ok"`), Attempts: 1, FinishedAt: at.Add(time.Duration(step) * time.Minute),
		})
	}
	return cp
}

// fsLoadSteps loads task id's checkpoint from dir with a store on the real
// file system and returns its number of steps.
func fsLoadSteps(t *testing.T, dir, id string) int {
	t.Helper()
	store, err := NewFileStore(dir)
	require.NoError(t, err)
	cp, err := store.Load(context.Background(), id)
	require.NoError(t, err, "the checkpoint loads")
	require.NotNil(t, cp, "a checkpoint is there")
	return len(cp.Steps)
}

func fsDirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// The order of a Save's operations is what makes it durable: the temporary
// file's data is on disk before the rename points the checkpoint's name at
// it, and the rename is on disk (the directory fsynced) before Save returns.
func TestFileStoreSaveSyncsBeforeRenameAndDirBeforeReturn(t *testing.T) {
	store, fsys, dir := fsFaultStore(t)
	const id = "t"
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".t.123.tmp"), []byte(`{"half`), 0o600))

	require.NoError(t, store.Save(context.Background(), fsCheckpointOf(id, 2)))
	assert.Equal(t, fsSaveOps, fsys.ops, "the operations of a Save, in order, all made before it returned")
	assert.Equal(t, 2, fsLoadSteps(t, dir, id))
	assert.Equal(t, []string{"t.checkpoint.json", "t.lock"}, fsDirNames(t, dir))
}

// Each operation of a Save that fails makes Save return a classified error
// naming the operation, leaves no temporary file of its own behind, releases
// the task's lock and keeps the previous checkpoint; a failure after the
// rename leaves the new one, which may not survive a power loss. The next
// Save works.
func TestFileStoreSaveFaults(t *testing.T) {
	cases := []struct {
		fail     string
		want     string   // in the error's message
		cleanup  []string // the operations after the failed one
		replaced bool     // the new checkpoint is in place
	}{
		{fail: "lock", want: `runtime: lock task "t"`},
		{fail: "read file", want: "read the saved checkpoint", cleanup: []string{"unlock"}},
		{fail: "read dir", want: "list the directory for stale temporary files"},
		{fail: "remove stale", want: "remove stale temporary file"},
		{fail: "create temp", want: "create temporary file"},
		{fail: "write temp", want: "write temporary file", cleanup: []string{"close temp", "remove temp"}},
		{fail: "sync temp", want: "sync temporary file", cleanup: []string{"close temp", "remove temp"}},
		{fail: "close temp", want: "close temporary file", cleanup: []string{"remove temp"}},
		{fail: "rename temp", want: "rename temporary file", cleanup: []string{"remove temp"}},
		{fail: "open dir", want: "may not survive a power loss: sync directory", replaced: true},
		{fail: "sync dir", want: "may not survive a power loss: sync directory", cleanup: []string{"close dir"}, replaced: true},
		{fail: "close dir", want: "may not survive a power loss: sync directory", replaced: true},
	}
	for _, c := range cases {
		t.Run(c.fail, func(t *testing.T) {
			ctx := context.Background()
			store, fsys, dir := fsFaultStore(t)
			const id = "t"
			require.NoError(t, store.Save(ctx, fsCheckpointOf(id, 1)), "the previous checkpoint")
			stale := ".t.123.tmp"
			require.NoError(t, os.WriteFile(filepath.Join(dir, stale), []byte(`{"half`), 0o600))

			fsys.fail, fsys.ops = c.fail, nil
			err := store.Save(ctx, fsCheckpointOf(id, 2))
			require.Error(t, err)
			assert.ErrorIs(t, err, errInjected)
			assert.Contains(t, err.Error(), c.want)
			file := store.Path(id)
			if c.fail == "lock" {
				file = store.lockPath(id)
			}
			assert.Contains(t, err.Error(), file, "the error names the file")
			cl := policies.Classify(err)
			assert.Equal(t, policies.Fatal, cl.Class, "a checkpoint that cannot be saved stops the task")
			assert.Equal(t, "checkpoint_io", cl.Type)

			at := slices.Index(fsSaveOps, c.fail)
			require.GreaterOrEqual(t, at, 0)
			want := append(slices.Clone(fsSaveOps[:at+1]), c.cleanup...)
			if c.fail != "lock" && c.fail != "read file" {
				want = append(want, "unlock")
			}
			assert.Equal(t, want, fsys.ops, "the operations up to the failed one, then the cleanup and the unlock")
			assert.Empty(t, store.held, "the lock is released")

			wantSteps := 1
			if c.replaced {
				wantSteps = 2
			}
			assert.Equal(t, wantSteps, fsLoadSteps(t, dir, id), "the checkpoint loads, and is the one expected")
			wantNames := []string{"t.checkpoint.json", "t.lock"}
			if at <= slices.Index(fsSaveOps, "remove stale") {
				wantNames = []string{stale, "t.checkpoint.json", "t.lock"} // failed before removing it
			}
			assert.Equal(t, wantNames, fsDirNames(t, dir), "no temporary file of this Save is left")

			// The store is not stuck: once the file system works, Save does.
			fsys.fail = ""
			require.NoError(t, store.Save(ctx, fsCheckpointOf(id, 3)))
			assert.Equal(t, 3, fsLoadSteps(t, dir, id))
			assert.Equal(t, []string{"t.checkpoint.json", "t.lock"}, fsDirNames(t, dir))
		})
	}
}

// A stale temporary file that is gone by the time Save removes it (another
// process removed it first) is no failure.
func TestFileStoreStaleTempAlreadyGone(t *testing.T) {
	store, fsys, dir := fsFaultStore(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".t.123.tmp"), nil, 0o600))
	gone := &goneFS{faultFS: fsys}
	store.fs = gone
	require.NoError(t, store.Save(context.Background(), fsCheckpointOf("t", 1)))
	require.Len(t, gone.errs, 1, "the stale file was found")
	require.NoError(t, gone.errs[0], "and removed before the store's Remove")
	assert.Equal(t, fsSaveOps, fsys.ops)
	assert.Equal(t, 1, fsLoadSteps(t, dir, "t"))
	assert.Equal(t, []string{"t.checkpoint.json", "t.lock"}, fsDirNames(t, dir))
}

// goneFS removes a stale file before the store does, so that the store's
// Remove reports fs.ErrNotExist.
type goneFS struct {
	*faultFS
	errs []error // of each early removal
}

func (g *goneFS) Remove(name string) error {
	if g.role(name) == "stale" {
		g.errs = append(g.errs, os.Remove(name))
	}
	return g.faultFS.Remove(name)
}

// A checkpoint that cannot be read is a classified error too, never a
// missing checkpoint (which would start the task over) nor a bad one.
func TestFileStoreLoadFault(t *testing.T) {
	ctx := context.Background()
	store, fsys, _ := fsFaultStore(t)
	require.NoError(t, store.Save(ctx, fsCheckpointOf("t", 1)))

	fsys.fail = "read file"
	cp, err := store.Load(ctx, "t")
	assert.Nil(t, cp)
	require.ErrorIs(t, err, errInjected)
	assert.Contains(t, err.Error(), store.Path("t"))
	ce, _ := errors.AsType[*policies.Error](err)
	assert.False(t, ce != nil && ce.Reason == "checkpoint unusable", "the file may be fine: it could not be read")
	cl := policies.Classify(err)
	assert.Equal(t, policies.Fatal, cl.Class)
	assert.Equal(t, "checkpoint_io", cl.Type)
}

// noLockFS is a file system whose locks exclude nobody, as on a system
// without flock, or with flock emulated by per-process fcntl locks (NFS).
type noLockFS struct{ *faultFS }

func (noLockFS) Lock(string) (io.Closer, error) { return nopCloser{}, nil }

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// Within a process, the store's own table refuses a second writer of a task
// even where the file lock cannot tell two holders in one process apart; the
// holder's Saves go ahead, and the task is free again once unlocked.
func TestFileStoreLockTableWithoutFileLock(t *testing.T) {
	ctx := context.Background()
	store, fsys, dir := fsFaultStore(t)
	store.fs = noLockFS{fsys}

	unlock, err := store.Lock(ctx, "t")
	require.NoError(t, err)
	_, err = store.Lock(ctx, "t")
	require.ErrorIs(t, err, ErrTaskRunning)
	assert.Contains(t, err.Error(), "another writer in this process holds its lock")
	require.NoError(t, store.Save(ctx, fsCheckpointOf("t", 1)), "the holder saves")
	assert.Equal(t, 1, fsLoadSteps(t, dir, "t"))
	unlock()

	again, err := store.Lock(ctx, "t")
	require.NoError(t, err, "free once unlocked")
	again()
	assert.Empty(t, store.held)
}
