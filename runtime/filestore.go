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
	goruntime "runtime"
	"strings"
	"sync"
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
// A FileStore assumes one writer per task: at most one process saves a given
// task at a time. Within a process, Saves of the same task are serialised. A
// Save removes the temporary files that an earlier writer of the same task
// left behind when it died, which would also remove the in-flight temporary
// file of a second, concurrent writer in another process; tasks never touch
// each other's files.
//
// Task IDs are used as file names and must be safe ones: non-empty, at most
// 200 bytes, made only of ASCII letters, digits, '.', '_' and '-', and not
// starting with a dot. Load and Save reject any other ID before touching the
// file system, so no ID can reach outside the directory.
type FileStore struct {
	dir   string
	locks sync.Map // task ID → *sync.Mutex, serialising Saves of one task
}

var _ Store = (*FileStore)(nil)

// NewFileStore returns a FileStore keeping its checkpoints in dir, which it
// creates (with mode 0o755, and any missing parents) if it does not exist.
func NewFileStore(dir string) (*FileStore, error) {
	if dir == "" {
		return nil, errors.New("runtime: new file store: the directory is empty")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("runtime: new file store: %w", err)
	}
	return &FileStore{dir: dir}, nil
}

// Path returns the file that holds the checkpoint of taskID. It does not
// check the ID: Load and Save do.
func (s *FileStore) Path(taskID string) string {
	return filepath.Join(s.dir, taskID+fileStoreSuffix)
}

// Load returns the checkpoint of taskID, or nil and no error when the task
// has no checkpoint file. A file that exists but cannot be used (empty,
// truncated, garbled, followed by trailing data, with unknown fields, of
// another version or another task, or with steps out of order) is reported
// as a *CheckpointError whose Path is the file; Load never returns a partly
// decoded checkpoint. An invalid task ID, a cancelled ctx and a failure to
// read the file are returned as plain errors.
func (s *FileStore) Load(ctx context.Context, taskID string) (*Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkFileStoreTaskID(taskID); err != nil {
		return nil, fmt.Errorf("runtime: load checkpoint: %w", err)
	}
	path := s.Path(taskID)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runtime: load checkpoint %s: %w", path, err)
	}
	cp, err := decodeCheckpointFile(data, taskID)
	if err != nil {
		return nil, &CheckpointError{Path: path, Err: err}
	}
	return cp, nil
}

// Save replaces the checkpoint of cp.TaskID. It returns ctx.Err() if ctx is
// already done, and an error without writing anything if cp is invalid: a
// Version other than CheckpointVersion, an invalid TaskID, or steps that are
// not numbered 1, 2, 3, … in order, that have an unknown Status or an empty
// Key.
//
// The checkpoint is written as indented JSON to a temporary file in the
// store's directory, fsynced, closed and renamed over the checkpoint file;
// the directory is then fsynced. If any of this fails, the temporary file is
// removed and the previous checkpoint, if any, is left as it was (unless only
// the directory fsync failed: the new checkpoint is then in place but may not
// survive a power loss). Before writing, Save removes the temporary files of
// the same task that a writer killed during a Save left behind.
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

	mu, _ := s.locks.LoadOrStore(taskID, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()

	path := s.Path(taskID)
	if err := s.removeStaleTemps(taskID); err != nil {
		return fmt.Errorf("runtime: save checkpoint %s: %w", path, err)
	}
	if err := s.writeAtomically(path, taskID, data); err != nil {
		return fmt.Errorf("runtime: save checkpoint %s: %w", path, err)
	}
	return nil
}

// fileStoreTempPattern is the os.CreateTemp pattern of taskID's temporary
// files: ".<task id>.<random digits>.tmp". The leading dot keeps them out of the
// way, and no task ID starts with a dot, so no temporary file is mistaken
// for a checkpoint.
func fileStoreTempPattern(taskID string) string { return "." + taskID + ".*.tmp" }

// removeStaleTemps removes the temporary files of taskID left by a writer
// that died during a Save. The glob ".<id>.*.tmp" also matches the files of
// a task "<id>.<suffix>", so only names whose random part is all digits, as
// os.CreateTemp makes them, are removed.
func (s *FileStore) removeStaleTemps(taskID string) error {
	matches, err := filepath.Glob(filepath.Join(s.dir, fileStoreTempPattern(taskID)))
	if err != nil {
		return err
	}
	prefix, suffix := "."+taskID+".", ".tmp"
	for _, m := range matches {
		name := filepath.Base(m)
		random := strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix)
		if random == "" || strings.Trim(random, "0123456789") != "" {
			continue // another task's temporary file
		}
		if err := os.Remove(m); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale temporary file: %w", err)
		}
	}
	return nil
}

// writeAtomically replaces path with data: temporary file in the same
// directory, write, fsync, close, rename, fsync of the directory.
func (s *FileStore) writeAtomically(path, taskID string, data []byte) (err error) {
	f, err := os.CreateTemp(s.dir, fileStoreTempPattern(taskID))
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				_ = f.Close()
			}
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write temporary file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync temporary file: %w", err)
	}
	closed = true
	if err := f.Close(); err != nil {
		return fmt.Errorf("close temporary file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename temporary file: %w", err)
	}
	if err := fileStoreSyncDir(s.dir); err != nil {
		return fmt.Errorf("the checkpoint was replaced but may not survive a power loss: sync directory: %w", err)
	}
	return nil
}

// fileStoreSyncDir fsyncs dir, making a rename in it durable. Windows cannot
// fsync a directory (and does not need to), so there it does nothing.
func fileStoreSyncDir(dir string) error {
	if goruntime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
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
