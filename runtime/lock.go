package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/retrace-go/retrace/policies"
)

// ErrTaskRunning is matched, with errors.Is, by the error of a Store's Lock
// (and so of RunTask) when the task already has a writer: another RunTask of
// the same task ID, in this process or in another one.
//
// It is classified policies.Permanent, type "task_running": the identical
// call fails identically for as long as the other writer runs, and a blind
// retry would at best run after it and find its work done. A caller that
// wants the task run once more waits for the other run to end (it ends
// its RunTask, or its process exits) and then calls RunTask again, which
// resumes from the other run's checkpoint.
var ErrTaskRunning error = &policies.Error{
	Class: policies.Permanent, Type: "task_running",
	Err: errors.New("the task is already running: a task has one writer at a time"),
}

// fileStoreLockSuffix ends the name of every lock file: "<task id>.lock".
// No checkpoint name ends with it and no temporary file's name (which starts
// with a dot) can be one, so the three kinds of file never collide.
const fileStoreLockSuffix = ".lock"

// lockPath returns the lock file of taskID, beside its checkpoint.
func (s *FileStore) lockPath(taskID string) string {
	return filepath.Join(s.dir, taskID+fileStoreLockSuffix)
}

// Lock makes the caller the only writer of taskID until it calls unlock
// (calling it again does nothing). It never waits: while another writer
// holds the task's lock, Lock fails at once with an error matching
// ErrTaskRunning and naming the task.
//
// The lock is held at two levels, because neither suffices alone:
//   - within the process, in a table of the tasks this store's writers
//     hold, which refuses a second writer through the store even where the
//     file lock cannot tell two holders in one process apart (flock
//     emulated with fcntl locks, as on NFS, is per process; the fallback
//     below has no file lock): a process should use one FileStore per
//     directory;
//   - across processes, with an advisory lock on "<task id>.lock" beside
//     the checkpoint: flock(2) LOCK_EX|LOCK_NB on Linux, macOS and the
//     BSDs, a file opened without sharing on Windows. The kernel releases
//     it when its holder exits, however it exits: a killed writer leaves no
//     lock behind. Other systems have only the in-process lock, and then
//     one process at a time may use a store's directory.
//
// The lock file is created with mode 0o600 and never removed: removing it
// on unlock would let a process that opened the file just before the
// removal lock the removed file while another creates a new one and locks
// that, two writers at once. A symbolic link, or anything else that is not
// a regular file, at its path is refused, not followed.
//
// A failure of the file system is a Fatal *policies.Error of type
// "checkpoint_io", as in Load and Save; a done ctx and an invalid task ID
// are returned as plain errors, before anything is locked.
func (s *FileStore) Lock(ctx context.Context, taskID string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkFileStoreTaskID(taskID); err != nil {
		return nil, fmt.Errorf("runtime: lock task: %w", err)
	}
	release, err := s.acquire(taskID)
	if err != nil {
		return nil, err
	}
	saving := s.saveMutex(taskID)
	return sync.OnceFunc(func() {
		// A Save of the task that is under way ends under the lock.
		saving.Lock()
		defer saving.Unlock()
		release()
	}), nil
}

// acquire takes taskID's lock, first in the store's table and then in the
// lock file, and returns the function that releases both, in the opposite
// order: the file first, so that no writer of this process finds the task
// free in the table while its lock file is still locked.
func (s *FileStore) acquire(taskID string) (release func(), err error) {
	s.mu.Lock()
	if _, held := s.held[taskID]; held {
		s.mu.Unlock()
		return nil, fmt.Errorf("runtime: task %q: %w: another writer in this process holds its lock", taskID, ErrTaskRunning)
	}
	if s.held == nil {
		s.held = map[string]struct{}{}
	}
	s.held[taskID] = struct{}{}
	s.mu.Unlock()

	path := s.lockPath(taskID)
	f, err := s.fs.Lock(path)
	if err != nil {
		s.forget(taskID)
		if errors.Is(err, errLockHeld) {
			return nil, fmt.Errorf("runtime: task %q: %w: another process holds %s", taskID, ErrTaskRunning, path)
		}
		return nil, fileStoreIOError(fmt.Errorf("runtime: lock task %q: %s: %w", taskID, path, err))
	}
	return func() {
		_ = f.Close() // closing the file releases its lock, whatever Close reports
		s.forget(taskID)
	}, nil
}

// holds reports whether a writer of this store holds taskID's lock.
func (s *FileStore) holds(taskID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, held := s.held[taskID]
	return held
}

// forget removes taskID from the table of held locks.
func (s *FileStore) forget(taskID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, taskID)
}

// saveMutex returns the mutex that serialises the Saves of taskID, and a
// Save with the release of the task's lock.
func (s *FileStore) saveMutex(taskID string) *sync.Mutex {
	mu, _ := s.saving.LoadOrStore(taskID, new(sync.Mutex))
	return mu.(*sync.Mutex)
}
