package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/retrace-go/retrace/policies"
)

// fileStoreMaxTaskIDLen is the longest task ID a FileStore accepts, in
// bytes. With the ".checkpoint.json" suffix and the temporary files'
// decoration, every name the store makes stays below the usual 255-byte
// limit of a file name.
const fileStoreMaxTaskIDLen = 200

// fileStoreSuffix ends the name of every checkpoint file.
const fileStoreSuffix = ".checkpoint.json"

// FileStore is the default Store: one JSON file per task in a directory,
// named "<task id>.checkpoint.json".
//
// Save is atomic. It writes the new state to a temporary file created in the
// same directory as the checkpoint, so that the final os.Rename stays within
// one file system and is atomic: a reader, or a process that restarts after
// the writer was killed, sees either the old file or the new one, never a
// mix. The temporary file is fsynced before the rename, and the directory is
// fsynced after it, so that the rename itself survives a power loss.
//
// A task has one writer at a time. RunTask takes the task's lock (see Lock)
// before it loads the checkpoint and holds it until it returns, so that a
// second RunTask of the same task, in this process or another one, fails at
// once with ErrTaskRunning instead of running the steps a second time. A
// Save takes the lock itself, for its own duration, unless a writer of this
// store holds it already; a Save of a task whose lock another store or
// process holds is refused with ErrTaskRunning. Under the lock, Save reads
// the saved checkpoint and refuses, with ErrCheckpointBehind, to replace it
// with one that has fewer finished steps: the progress on disk never goes
// back. Also under the lock, a Save removes the temporary files that an
// earlier writer of the task left behind when it died: no live writer's
// file can be among them. Tasks never touch each other's files.
//
// Load refuses a checkpoint path that is not a regular file, at once: a
// FIFO is not opened (its open would wait for a writer, past any deadline),
// nor a device or a directory, and a symbolic link is not followed, even to
// a file inside the directory. The store writes a checkpoint by renaming a
// file it made over the path, never through a link, so a link there was put
// in place by something else; following it would let that choose which
// file, anywhere the process can read, a task resumes from. Save refuses
// the same paths, leaving them as they are.
//
// Task IDs are used as file names and must be safe ones: non-empty, at most
// 200 bytes, made only of ASCII letters, digits, '.', '_' and '-', and not
// starting with a dot. Load and Save reject any other ID before touching the
// file system, so no ID can reach outside the directory.
//
// A failure of the file system, in Lock, Load or Save, is a *policies.Error
// of class policies.Fatal and type "checkpoint_io": a task whose progress
// cannot be read or saved must stop rather than run steps it cannot record.
// A checkpoint that cannot be used is a error made by UnusableCheckpoint, classified Fatal
// too, of type "checkpoint_not_regular" for a path that is not a regular
// file and "checkpoint_invalid" for a file whose contents are not a valid
// checkpoint of the task. A Save that fails leaves the previous checkpoint
// in place (or, when only the final fsync of the directory failed, the new
// one), and the next run resumes from it.
type FileStore struct {
	dir    string
	fs     fileStoreFS
	saving sync.Map // task ID → *sync.Mutex, serialising the Saves of one task

	mu   sync.Mutex
	held map[string]struct{} // the tasks whose lock a writer of this store holds
}

var _ Store = (*FileStore)(nil)

// NewFileStore returns a FileStore keeping its checkpoints in dir, which it
// creates (with mode 0o755, and any missing parents) if it does not exist.
func NewFileStore(dir string) (*FileStore, error) {
	return newFileStore(dir, osFS{})
}

// newFileStore returns a FileStore in dir that does its file operations
// through fsys.
func newFileStore(dir string, fsys fileStoreFS) (*FileStore, error) {
	if dir == "" {
		return nil, errors.New("runtime: new file store: the directory is empty")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("runtime: new file store: %w", err)
	}
	return &FileStore{dir: dir, fs: fsys}, nil
}

// fileStoreIOError classifies err, a failure of the file system, as
// described on FileStore.
func fileStoreIOError(err error) error {
	return &policies.Error{Class: policies.Fatal, Type: "checkpoint_io", Err: err}
}

// Path returns the file that holds the checkpoint of taskID. It does not
// check the ID: Load and Save do.
func (s *FileStore) Path(taskID string) string {
	return filepath.Join(s.dir, taskID+fileStoreSuffix)
}

// Load returns the checkpoint of taskID, or nil and no error when nothing
// is at the checkpoint's path. A path that is not a regular file (a FIFO, a
// device, a directory, a symbolic link wherever it points) and a file that
// cannot be used (empty, truncated, garbled, followed by trailing data, with
// unknown fields, of another version or another task, or with steps out of
// order) are reported as a error made by UnusableCheckpoint whose Path is the file, without
// waiting; Load never returns a partly decoded checkpoint. An invalid task
// ID and a done ctx are returned as plain errors, a failure to read the file
// as a Fatal *policies.Error. Load takes no lock: a Save replaces the file
// atomically, so a reader sees one whole checkpoint or the other.
func (s *FileStore) Load(ctx context.Context, taskID string) (*Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkFileStoreTaskID(taskID); err != nil {
		return nil, fmt.Errorf("runtime: load checkpoint: %w", err)
	}
	path := s.Path(taskID)
	return s.read(path, taskID, "load checkpoint "+path)
}

// read reads and decodes path, the checkpoint file of taskID, as Load
// describes; op says what failed when the file system fails.
func (s *FileStore) read(path, taskID, op string) (*Checkpoint, error) {
	data, err := s.fs.ReadFile(path)
	var nr *notRegularError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.As(err, &nr):
		return nil, UnusableCheckpoint(path, "checkpoint_not_regular", nr)
	case err != nil:
		return nil, fileStoreIOError(fmt.Errorf("runtime: %s: %w", op, err))
	}
	cp, err := decodeCheckpointFile(data, taskID)
	if err != nil {
		return nil, UnusableCheckpoint(path, "checkpoint_invalid", err)
	}
	return cp, nil
}

// Save replaces the checkpoint of cp.TaskID. It returns ctx.Err() if ctx is
// already done, and an error without writing anything if cp is invalid: a
// Version other than CheckpointVersion, an invalid TaskID, or steps that are
// not numbered 1, 2, 3, … in order, that have an unknown Status or an empty
// Key.
//
// Save writes under the task's lock: the one a writer of this store holds
// (see Lock), or else one it takes for its own duration, failing at once
// with ErrTaskRunning if another store or process holds it. Under it, Save
// reads the saved checkpoint and leaves it in place, returning an error:
// matching ErrCheckpointBehind if it has more finished steps than cp, and
// the error made by UnusableCheckpoint Load would return if it cannot be used (a newer
// version's file included). A checkpoint with as many steps replaces it.
//
// The checkpoint is written as indented JSON to a temporary file in the
// store's directory, fsynced, closed and renamed over the checkpoint file;
// the directory is then fsynced, and only then does Save return. If any of
// this fails, Save returns a Fatal *policies.Error, the temporary file is
// removed and the previous checkpoint, if any, is left as it was (unless
// only the directory's fsync failed: the new checkpoint is then in place but
// may not survive a power loss). Before writing, Save removes the temporary
// files of the same task that a writer killed during a Save left behind.
func (s *FileStore) Save(ctx context.Context, cp *Checkpoint) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if cp == nil {
		return errors.New("runtime: save checkpoint: the checkpoint is nil")
	}
	taskID := cp.TaskID
	if err := checkFileStoreTaskID(taskID); err != nil {
		return fmt.Errorf("runtime: save checkpoint: %w", err)
	}
	if cp.Version != CheckpointVersion {
		return fmt.Errorf("runtime: save checkpoint of task %q: it has version %d; this build writes version %d", taskID, cp.Version, CheckpointVersion)
	}
	if err := checkCheckpointSteps(cp.Steps); err != nil {
		return fmt.Errorf("runtime: save checkpoint of task %q: %w", taskID, err)
	}
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return fmt.Errorf("runtime: save checkpoint of task %q: %w", taskID, err)
	}
	data = append(data, '\n')

	saving := s.saveMutex(taskID)
	saving.Lock()
	defer saving.Unlock()
	// A writer of this store that holds the lock cannot release it before
	// this Save ends: its unlock waits for the mutex held here.
	if !s.holds(taskID) {
		release, err := s.acquire(taskID)
		if err != nil {
			return err
		}
		defer release()
	}

	path := s.Path(taskID)
	saved, err := s.read(path, taskID, "save checkpoint "+path+": read the saved checkpoint")
	if err != nil {
		return err
	}
	if saved != nil && len(saved.Steps) > len(cp.Steps) {
		return fmt.Errorf("runtime: save checkpoint %s: %w: this one has %d finished steps, the saved one %d",
			path, ErrCheckpointBehind, len(cp.Steps), len(saved.Steps))
	}
	if err := s.removeStaleTemps(taskID); err != nil {
		return fileStoreIOError(fmt.Errorf("runtime: save checkpoint %s: %w", path, err))
	}
	if err := s.writeAtomically(path, taskID, data); err != nil {
		return fileStoreIOError(fmt.Errorf("runtime: save checkpoint %s: %w", path, err))
	}
	return nil
}

// fileStoreTempPattern is the os.CreateTemp pattern of taskID's temporary
// files: ".<task id>.<random digits>.tmp". The leading dot keeps them out of the
// way, and no task ID starts with a dot, so no temporary file is mistaken
// for a checkpoint.
func fileStoreTempPattern(taskID string) string { return "." + taskID + ".*.tmp" }

// removeStaleTemps removes the temporary files of taskID left by a writer
// that died during a Save. It lists the directory rather than globbing it,
// so that a directory whose name holds a glob metacharacter ('[', '*', '?')
// works too. A name ".<id>.<random>.tmp" may also be the file of a task
// "<id>.<suffix>", so only names whose random part is all digits, as
// os.CreateTemp makes them, are removed.
func (s *FileStore) removeStaleTemps(taskID string) error {
	entries, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("list the directory for stale temporary files: %w", err)
	}
	prefix, suffix := "."+taskID+".", ".tmp"
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) || len(name) < len(prefix)+len(suffix) {
			continue
		}
		random := name[len(prefix) : len(name)-len(suffix)]
		if random == "" || strings.Trim(random, "0123456789") != "" {
			continue // another task's temporary file
		}
		if err := s.fs.Remove(filepath.Join(s.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale temporary file: %w", err)
		}
	}
	return nil
}

// writeAtomically replaces path with data: a temporary file in the same
// directory, written, fsynced and closed, then renamed over path, then an
// fsync of the directory. The temporary file's fsync comes before the
// rename, so that the name never points to data still in the page cache;
// the directory's comes after it, so that the rename itself is on disk
// before Save reports the checkpoint saved.
func (s *FileStore) writeAtomically(path, taskID string, data []byte) error {
	tmp, err := s.writeTemp(taskID, data)
	if err != nil {
		return err
	}
	if err := s.fs.Rename(tmp, path); err != nil {
		_ = s.fs.Remove(tmp)
		return fmt.Errorf("rename temporary file: %w", err)
	}
	if err := s.syncDir(); err != nil {
		return fmt.Errorf("the checkpoint was replaced but may not survive a power loss: sync directory: %w", err)
	}
	return nil
}

// writeTemp writes data to a new temporary file of taskID, fsyncs and
// closes it, and returns its name. If any of this fails, it closes and
// removes the file.
func (s *FileStore) writeTemp(taskID string, data []byte) (name string, err error) {
	f, err := s.fs.CreateTemp(s.dir, fileStoreTempPattern(taskID))
	if err != nil {
		return "", fmt.Errorf("create temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = s.fs.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return "", fmt.Errorf("write temporary file: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return "", fmt.Errorf("sync temporary file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("close temporary file: %w", err)
	}
	return f.Name(), nil
}

// syncDir fsyncs the store's directory, making a rename in it durable.
func (s *FileStore) syncDir() error {
	d, err := s.fs.OpenDir(s.dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

// checkFileStoreTaskID reports whether id is a safe file name for a
// FileStore.
func checkFileStoreTaskID(id string) error {
	switch {
	case id == "":
		return errors.New("invalid task ID: it is empty")
	case len(id) > fileStoreMaxTaskIDLen:
		return fmt.Errorf("invalid task ID %q…: it is %d bytes long; at most %d are allowed", id[:fileStoreMaxTaskIDLen], len(id), fileStoreMaxTaskIDLen)
	case id[0] == '.':
		return fmt.Errorf("invalid task ID %q: it starts with a dot", id)
	}
	for _, r := range id {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("invalid task ID %q: it contains %q; only ASCII letters, digits, '.', '_' and '-' are allowed", id, r)
		}
	}
	return nil
}

// checkCheckpointSteps checks the invariants of Checkpoint.Steps: Step i+1 at
// index i, a known Status and a non-empty Key.
func checkCheckpointSteps(steps []StepRecord) error {
	for i, st := range steps {
		if st.Step != i+1 {
			return fmt.Errorf("steps[%d] is step %d, want step %d: steps must be numbered 1, 2, 3, … in order, without gaps", i, st.Step, i+1)
		}
		if st.Status != StepDone && st.Status != StepFailed {
			return fmt.Errorf("step %d has status %q, want %q or %q", st.Step, st.Status, StepDone, StepFailed)
		}
		if st.Key == "" {
			return fmt.Errorf("step %d has an empty idempotency_key", st.Step)
		}
	}
	return nil
}

// decodeCheckpointFile decodes the contents of taskID's checkpoint file. It
// returns either a valid checkpoint or an error saying what is wrong with
// the file, never both.
func decodeCheckpointFile(data []byte, taskID string) (*Checkpoint, error) {
	if len(data) == 0 {
		return nil, errors.New("the file is empty")
	}
	var cp Checkpoint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	// The decoder reads the whole JSON value, checking its syntax, before
	// it decodes any of it: a syntax error comes first.
	err := dec.Decode(&cp)
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF):
		return nil, errors.New("the file holds only white space, no JSON")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("the JSON is truncated after %d bytes: unexpected end of JSON input", len(data))
	case errors.As(err, &se):
		return nil, fmt.Errorf("the JSON is garbled at byte offset %d: %v", se.Offset, se)
	}
	end := int(dec.InputOffset())
	if rest := bytes.TrimLeft(data[end:], " \t\r\n"); len(rest) > 0 {
		return nil, fmt.Errorf("trailing data after the JSON object at byte offset %d", len(data)-len(rest))
	}
	if value := bytes.TrimLeft(data[:end], " \t\r\n"); len(value) == 0 || value[0] != '{' {
		return nil, errors.New("the JSON is not an object")
	}
	if err != nil {
		// A file of another version is reported as such rather than by
		// the fields this build does not know.
		var probe struct {
			Version int `json:"version"`
		}
		if json.Unmarshal(data[:end], &probe) == nil && probe.Version != CheckpointVersion {
			return nil, checkpointVersionError(probe.Version)
		}
		return nil, fmt.Errorf("the JSON does not match the checkpoint format: %w", err)
	}
	if cp.Version != CheckpointVersion {
		return nil, checkpointVersionError(cp.Version)
	}
	if cp.TaskID != taskID {
		return nil, fmt.Errorf("it belongs to task %q, not %q", cp.TaskID, taskID)
	}
	if err := checkCheckpointSteps(cp.Steps); err != nil {
		return nil, err
	}
	return &cp, nil
}

// checkpointVersionError reports a checkpoint file of another version.
func checkpointVersionError(version int) error {
	if version == 0 {
		return fmt.Errorf("it has no version; this build reads version %d", CheckpointVersion)
	}
	return fmt.Errorf("written by version %d; this build reads version %d", version, CheckpointVersion)
}
