//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd || windows

package runtime_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/runtime"
)

// lockHolderEnv names the store's directory for TestHelperLockHolder.
const lockHolderEnv = "RETRACE_LOCK_HOLDER"

// TestHelperLockHolder is the child process of TestTaskLockAcrossProcesses;
// it does nothing unless RETRACE_LOCK_HOLDER names a store's directory. It
// takes the lock of task "shared" there, prints "locked" and holds the lock
// until its standard input ends: it stops by itself when the parent closes
// the pipe or dies, if it is not killed first.
func TestHelperLockHolder(t *testing.T) {
	dir := os.Getenv(lockHolderEnv)
	if dir == "" {
		return
	}
	store, err := runtime.NewFileStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	unlock, err := store.Lock(context.Background(), "shared")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	unlock()
	os.Exit(0)
}

// Across processes: while another process holds the task's lock, RunTask
// fails at once without running a step, and a Save is refused; once that
// process is killed, the kernel has released its lock and the task runs,
// every step once.
func TestTaskLockAcrossProcesses(t *testing.T) {
	if os.Getenv(lockHolderEnv) != "" {
		t.Skip("this is the holder process")
	}
	ctx := context.Background()
	store, dir := fsNewStore(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLockHolder$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), lockHolderEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	waited := false
	t.Cleanup(func() { // the holder never outlives the test
		_ = stdin.Close()
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	// A RunTask that waited for the lock instead of failing would wait for
	// the holder: the holder is killed after a minute rather than letting
	// the test hang until its timeout.
	watchdog := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	defer watchdog.Stop()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the holder's stderr: %s", &stderr)
	require.Equal(t, "locked\n", line)

	calls := map[int]int{}
	task := runtime.Task{ID: "shared", Steps: steps(5, calls, func(int, int) error { return nil })}
	rep, err := runtime.RunTask(ctx, task, taskConfig(store))
	lockRequireRunning(t, err, "shared")
	assert.Contains(t, err.Error(), "another process")
	assert.Nil(t, rep)
	assert.Empty(t, calls, "no step ran")
	lockRequireRunning(t, store.Save(ctx, fsDone("shared", 1, 0)), "shared")
	_, err = os.Stat(store.Path("shared"))
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing was saved")

	require.NoError(t, cmd.Process.Kill()) // by its PID
	err = cmd.Wait()
	waited = true
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the holder was killed; its stderr: %s", &stderr)

	rep, err = runtime.RunTask(ctx, task, taskConfig(store))
	require.NoError(t, err, "the lock died with its holder")
	assert.Equal(t, []int{1, 2, 3, 4, 5}, rep.Ran)
	for step := 1; step <= 5; step++ {
		assert.Equal(t, 1, calls[step], "step %d ran once", step)
	}
}

// Two FileStores on one directory in one process are two writers as much as
// two processes are: the lock file excludes them from each other.
func TestFileStoreLockBetweenStoresOfOneDirectory(t *testing.T) {
	ctx := context.Background()
	a, dir := fsNewStore(t)
	b, err := runtime.NewFileStore(dir)
	require.NoError(t, err)

	unlock, err := a.Lock(ctx, "t")
	require.NoError(t, err)
	_, err = b.Lock(ctx, "t")
	lockRequireRunning(t, err, "t")
	lockRequireRunning(t, b.Save(ctx, fsDone("t", 1, 0)), "t")
	require.NoError(t, a.Save(ctx, fsDone("t", 1, 0)), "the holder saves")
	unlock()

	require.NoError(t, b.Save(ctx, fsDone("t", 2, 0)), "the lock is free: a Save takes it for its own time")
	unlock, err = b.Lock(ctx, "t")
	require.NoError(t, err)
	unlock()
}
