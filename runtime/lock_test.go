package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/runtime"
)

// lockRequireRunning checks that err is the refusal of a second writer of
// task id.
func lockRequireRunning(t *testing.T, err error, id string) {
	t.Helper()
	require.ErrorIs(t, err, runtime.ErrTaskRunning)
	assert.Contains(t, err.Error(), fmt.Sprintf("%q", id), "the error names the task")
	cl := policies.Classify(err)
	assert.Equal(t, policies.Permanent, cl.Class, "a retry would collide again, or run what the other writer did")
	assert.Equal(t, "task_running", cl.Type)
}

// Two RunTasks of one task ID in one process: the second, started while the
// first is in its first step, is refused at once, and the first runs every
// step once. Once the first has ended, the task's lock is free again. The
// file store and a user's own store behave alike.
func TestTaskSecondRunInProcessIsRefused(t *testing.T) {
	stores := map[string]func(t *testing.T) runtime.Store{
		"file store": func(t *testing.T) runtime.Store {
			store, _ := fsNewStore(t)
			return store
		},
		"memory store": func(*testing.T) runtime.Store { return &memStore{} },
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			store := newStore(t)
			var mu sync.Mutex
			calls := map[int]int{}
			inFirstStep, release := make(chan struct{}), make(chan struct{})
			task := runtime.Task{ID: "shared"}
			for i := 1; i <= 20; i++ {
				task.Steps = append(task.Steps, runtime.Step{Name: fmt.Sprintf("step-%02d", i), Run: func(_ context.Context, s runtime.StepContext) (any, error) {
					mu.Lock()
					calls[s.Step]++
					first := s.Step == 1 && calls[1] == 1
					mu.Unlock()
					if first { // the first run waits here until the second has been tried
						close(inFirstStep)
						<-release
					}
					return s.Step, nil
				}})
			}
			type result struct {
				rep *runtime.TaskReport
				err error
			}
			firstDone := make(chan result, 1)
			go func() {
				rep, err := runtime.RunTask(context.Background(), task, taskConfig(store))
				firstDone <- result{rep, err}
			}()
			<-inFirstStep

			// A second run that waited for the lock would wait for a first
			// run that waits for it: its context ends that wait rather
			// than the test's timeout.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, err := runtime.RunTask(ctx, task, taskConfig(store))
			close(release)
			first := <-firstDone

			lockRequireRunning(t, err, "shared")
			assert.Nil(t, rep)
			require.NoError(t, first.err)
			assert.Len(t, first.rep.Ran, 20)
			for step := 1; step <= 20; step++ {
				assert.Equal(t, 1, calls[step], "step %d ran once", step)
			}

			rep, err = runtime.RunTask(context.Background(), task, taskConfig(store))
			require.NoError(t, err, "the first run released the lock")
			assert.Equal(t, 21, rep.ResumedAt)
			assert.Empty(t, rep.Ran)
		})
	}
}

// A FileStore's Lock: one holder per task, tasks independent of each other,
// free again once unlocked (unlocking twice is harmless), and no lock for a
// cancelled context or an ID that is not a safe file name.
func TestFileStoreLock(t *testing.T) {
	ctx := context.Background()
	store, dir := fsNewStore(t)

	unlock, err := store.Lock(ctx, "a")
	require.NoError(t, err)
	_, err = store.Lock(ctx, "a")
	lockRequireRunning(t, err, "a")
	assert.NoError(t, store.Save(ctx, fsDone("a", 1, 0)), "the holder's Save goes ahead")
	unlockB, err := store.Lock(ctx, "b")
	require.NoError(t, err, "another task has a lock of its own")
	unlockB()

	unlock()
	unlock()
	again, err := store.Lock(ctx, "a")
	require.NoError(t, err, "free once unlocked")
	again()
	_, err = os.Stat(filepath.Join(dir, "a.lock"))
	assert.NoError(t, err, "the lock file stays beside the checkpoint")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = store.Lock(canceled, "c")
	assert.ErrorIs(t, err, context.Canceled)
	_, err = store.Lock(ctx, "../c")
	assert.ErrorContains(t, err, "invalid task ID")
	assert.False(t, errors.Is(err, runtime.ErrTaskRunning))
	_, err = os.Stat(filepath.Join(dir, "c.lock"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no lock file for a refused Lock")
}

// A symbolic link at the lock file's path is not followed: the store never
// creates, opens or locks a file out of its directory.
func TestFileStoreLockRefusesASymlink(t *testing.T) {
	ctx := context.Background()
	store, dir := fsNewStore(t)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	fsSymlink(t, victim, filepath.Join(dir, "t.lock"))

	_, err := store.Lock(ctx, "t")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "symbolic link")
	assert.False(t, errors.Is(err, runtime.ErrTaskRunning), "nobody holds the lock: it cannot be taken")
	assert.Equal(t, policies.Fatal, policies.Classify(err).Class)

	calls := map[int]int{}
	_, err = runtime.RunTask(ctx, runtime.Task{ID: "t", Steps: steps(2, calls, func(int, int) error { return nil })}, taskConfig(store))
	require.Error(t, err)
	assert.Empty(t, calls, "no step runs without the lock")
	_, err = os.Lstat(victim)
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing was created out of the directory")
}
