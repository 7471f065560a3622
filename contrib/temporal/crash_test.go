package retracetemporal_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	retracetemporal "github.com/retrace-go/retrace/contrib/temporal"
	"github.com/retrace-go/retrace/policies"
)

// A task of steps on Temporal, as runtime.RunTask's steps map onto it: each
// step an activity, its result in the workflow's history. Step 5 fails
// permanently; the workflow records the failure and goes on, as RunTask
// records a step's permanent failure in its checkpoint.
const taskSteps = 30

func stepsWorkflow(ctx workflow.Context) ([]string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		// A worker that dies stops heartbeating: its step runs again
		// elsewhere after this long.
		HeartbeatTimeout: 2 * time.Second,
		RetryPolicy:      &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 5},
	})
	var results []string
	for i := 1; i <= taskSteps; i++ {
		var out string
		if err := workflow.ExecuteActivity(ctx, "Step", i).Get(ctx, &out); err != nil {
			var app *temporal.ApplicationError
			if errors.As(err, &app) && app.NonRetryable() {
				results = append(results, fmt.Sprintf("%d: %s", i, app.Type()))
				continue
			}
			return results, err
		}
		results = append(results, out)
	}
	return results, nil
}

// stepper is a worker process's steps: each run is noted in dir (run-N-PID,
// a file per run), and each step's effect committed once (commit-N, made
// only if absent), as an idempotent step commits.
type stepper struct {
	dir    string
	stopAt int // the step at which this worker waits to be killed; 0: none
}

func (s stepper) Step(ctx context.Context, n int) (string, error) {
	run := filepath.Join(s.dir, fmt.Sprintf("run-%d-%d-%d", n, os.Getpid(), activity.GetInfo(ctx).Attempt))
	if err := os.WriteFile(run, nil, 0o600); err != nil {
		return "", err
	}
	fmt.Printf("run %d\n", n) // the test reads it on the process's stdout
	if n == 5 {
		return "", &policies.Error{StatusCode: 400, Code: "invalid_request_error", Message: "step 5's request is malformed"}
	}
	if n == s.stopAt {
		// The test kills this process now; it heartbeats until then.
		for ctx.Err() == nil {
			activity.RecordHeartbeat(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		return "", ctx.Err()
	}
	f, err := os.OpenFile(filepath.Join(s.dir, fmt.Sprintf("commit-%d", n)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	switch {
	case errors.Is(err, os.ErrExist):
		// Committed by an earlier run: the effect is there once.
	case err != nil:
		return "", err
	default:
		_ = f.Close()
	}
	return fmt.Sprintf("%d: ok", n), nil
}

// workerEnv names the variables a worker process of the crash test reads.
const workerEnv = "RETRACE_TEMPORAL_CRASH_WORKER"

// runCrashWorker is a worker process of the crash test: it serves the
// task queue until it is killed.
func runCrashWorker() {
	parts := strings.SplitN(os.Getenv(workerEnv), ",", 4) // address, queue, dir, stopAt
	stopAt, _ := strconv.Atoi(parts[3])
	c, err := client.Dial(client.Options{HostPort: parts[0], Logger: quiet{}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := worker.New(c, parts[1], worker.Options{
		Interceptors: []interceptor.WorkerInterceptor{retracetemporal.NewInterceptor(retracetemporal.Config{})},
	})
	w.RegisterWorkflow(stepsWorkflow)
	w.RegisterActivityWithOptions(stepper{dir: parts[2], stopAt: stopAt}.Step, activity.RegisterOptions{Name: "Step"})
	if err := w.Run(worker.InterruptCh()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// A worker dies at step 18 of 30; another finishes the task. The steps
// before 18 are not run again (their results are in the workflow's
// history), step 18 runs twice at most and commits once, step 5's
// permanent failure is not called again, and the task completes.
func TestCrashResumeOnTwoWorkers(t *testing.T) {
	c, addr := startDevServer(t)
	dir := t.TempDir()
	queue := "steps"
	self, err := os.Executable()
	require.NoError(t, err)
	// startWorker starts a worker process; reached is closed when it runs
	// step stopAt.
	startWorker := func(stopAt int) (*exec.Cmd, <-chan struct{}) {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%s,%d", workerEnv, addr, queue, dir, stopAt))
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		reached := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if sc.Text() == fmt.Sprintf("run %d", stopAt) {
					close(reached)
				}
			}
		}()
		var once sync.Once
		t.Cleanup(func() {
			once.Do(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() })
		})
		return cmd, reached
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a guard: the task ends by its own timeouts
	defer cancel()
	first, reached := startWorker(18)
	we, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, stepsWorkflow)
	require.NoError(t, err)
	// The first worker reaches step 18: kill it there.
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the first worker never reached step 18")
	}
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	startWorker(0)

	var results []string
	require.NoError(t, we.Get(ctx, &results))
	require.Len(t, results, taskSteps)
	assert.Equal(t, "5: permanent", results[4])
	runs := map[int]int{}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	commits := map[int]int{}
	for _, e := range entries {
		var n, pid, attempt int
		if _, err := fmt.Sscanf(e.Name(), "run-%d-%d-%d", &n, &pid, &attempt); err == nil {
			runs[n]++
		}
		if _, err := fmt.Sscanf(e.Name(), "commit-%d", &n); err == nil {
			commits[n]++
		}
	}
	for i := 1; i <= taskSteps; i++ {
		switch {
		case i == 18:
			assert.LessOrEqual(t, runs[i], 2, "step 18 runs at most twice")
			assert.GreaterOrEqual(t, runs[i], 2, "step 18 ran on the worker that died, then on the other")
		default:
			assert.Equal(t, 1, runs[i], "step %d runs once", i)
		}
		if i != 5 {
			assert.Equal(t, 1, commits[i], "step %d commits once", i)
		}
	}
	t.Logf("steps run: %v", runs)
}
