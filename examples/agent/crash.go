package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// The crash-resume scenario: a 30-step task in a real child process that
// dies abruptly at step 18, then runs again and resumes there.
const (
	childEnv      = "RETRACE_TASK_CHILD" // the child's working directory; set only in the child
	crashEnv      = "RETRACE_CRASH_AT"   // the step at which the child kills itself
	taskSteps     = 30
	crashStep     = 18
	permanentStep = 9 // fails permanently: recorded, never called twice
	taskID        = "nightly-batch"
)

// childReport is what a child prints on its last line.
type childReport struct {
	PID       int                  `json:"pid"`
	ResumedAt int                  `json:"resumed_at"`
	Ran       []int                `json:"ran"`
	Steps     []runtime.StepRecord `json:"steps"`
	Error     string               `json:"error,omitempty"`
}

// runChild is the child process: it runs the task with a file store in dir.
// Every call of a step appends a line to dir/downstream.log, and step 18
// commits a side effect under its idempotency key before it can crash.
func runChild(dir string) int {
	ctx := context.Background()
	shutdown, err := setup.Tracing(ctx, setup.WithServiceName("retrace-agent-task"), setup.WithConsole(os.Stderr))
	if err == nil {
		defer func() { _ = shutdown(context.Background()) }()
	}
	crashAt := 0
	fmt.Sscan(os.Getenv(crashEnv), &crashAt)
	store, err := runtime.NewFileStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var steps []runtime.Step
	for i := 1; i <= taskSteps; i++ {
		steps = append(steps, runtime.Step{Name: fmt.Sprintf("chunk-%02d", i), Run: func(ctx context.Context, s runtime.StepContext) (any, error) {
			if err := appendLine(filepath.Join(dir, "downstream.log"), fmt.Sprintf("step %d key %s pid %d", s.Step, s.Key, os.Getpid())); err != nil {
				return nil, err
			}
			switch s.Step {
			case permanentStep:
				return nil, &policies.Error{StatusCode: 400, Code: "invalid_image", Message: "Invalid image: image data is not a valid base64-encoded image."}
			case crashStep:
				committed, err := commitOnce(dir, s.Key)
				if err != nil {
					return nil, err
				}
				if crashAt == s.Step {
					self, _ := os.FindProcess(os.Getpid())
					_ = self.Kill() // SIGKILL: no defer, no flush, no checkpoint
					select {}
				}
				return map[string]any{"chunk": s.Step, "committed": committed, "pid": os.Getpid()}, nil
			}
			return map[string]any{"chunk": s.Step, "rows": s.Step * 1000, "pid": os.Getpid()}, nil
		}})
	}
	rep, err := runtime.RunTask(ctx, runtime.Task{ID: taskID, Steps: steps}, runtime.TaskConfig{
		Store: store, Options: []middleware.Option{},
	})
	out := childReport{PID: os.Getpid()}
	if rep != nil {
		out.ResumedAt, out.Ran, out.Steps = rep.ResumedAt, rep.Ran, rep.Steps
	}
	if err != nil {
		out.Error = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	if err != nil {
		return 1
	}
	return 0
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// commitOnce is a side effect that recognises its idempotency key: the first
// call with a key commits; later calls find the commit and do nothing again.
func commitOnce(dir, key string) (first bool, err error) {
	path := filepath.Join(dir, "commits", strings.ReplaceAll(key, "/", "_"))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return false, err
	}
	return true, f.Close()
}

// crashResume runs the child twice: once killed at step 18, once to the end.
func (d *demo) crashResume(ctx context.Context) (result, error) {
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	dir, err := os.MkdirTemp("", "retrace-crash-resume-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	start := time.Now()

	child := func(crashAt int) (childReport, *os.ProcessState, error) {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), childEnv+"="+dir, fmt.Sprintf("%s=%d", crashEnv, crashAt))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var rep childReport
		if line := lastLine(stdout.Bytes()); line != nil {
			if jerr := json.Unmarshal(line, &rep); jerr != nil {
				return rep, cmd.ProcessState, fmt.Errorf("the child's report is not JSON: %w: %s", jerr, line)
			}
		}
		if err != nil && stderr.Len() > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return rep, cmd.ProcessState, err
	}

	_, crashed, crashErr := child(crashStep)
	store, err := runtime.NewFileStore(dir)
	if err != nil {
		return result{}, err
	}
	before, err := store.Load(ctx, taskID)
	if err != nil {
		return result{}, fmt.Errorf("after the crash: %w", err)
	}
	second, _, err := child(0)
	if err != nil {
		return result{}, fmt.Errorf("the resumed run failed: %w", err)
	}

	calls, err := countCalls(filepath.Join(dir, "downstream.log"))
	if err != nil {
		return result{}, err
	}
	commits, _ := os.ReadDir(filepath.Join(dir, "commits"))
	intact := before != nil && len(before.Steps) == crashStep-1 && len(second.Steps) == taskSteps
	if intact {
		for i, s := range before.Steps {
			intact = intact && sameJSON(s.Result, second.Steps[i].Result) && s.Status == second.Steps[i].Status
		}
	}
	killed := crashErr != nil && crashed != nil && !crashed.Success()
	res := result{
		Scenario:         "crash-resume",
		ProviderRequests: sum(calls),
		Outcome:          "success",
		WallMs:           time.Since(start).Milliseconds(),
		Details: map[string]any{
			"first_run_killed_at_step": crashStep,
			"first_run_exit":           exitText(crashed),
			"resumed_at_step":          second.ResumedAt,
			"steps_1_17_intact":        intact,
			"calls_of_permanent_step":  calls[permanentStep],
			"calls_of_step_18":         calls[crashStep],
			"commits_of_step_18":       len(commits),
			"recorded_failures":        failedSteps(second.Steps),
		},
	}
	res.Diagnosis = fmt.Sprintf("killed at step %d (%s); resumed at step %d; step %d (permanent failure) called %d×; step %d ran %d× and committed %d×",
		crashStep, exitText(crashed), second.ResumedAt, permanentStep, calls[permanentStep], crashStep, calls[crashStep], len(commits))
	if !killed {
		res.Problems = append(res.Problems, "the first run was not killed")
	}
	if second.ResumedAt != crashStep {
		res.Problems = append(res.Problems, fmt.Sprintf("want the second run to resume at step %d, got %d", crashStep, second.ResumedAt))
	}
	if !intact {
		res.Problems = append(res.Problems, "steps 1–17 changed between the runs")
	}
	if calls[permanentStep] != 1 {
		res.Problems = append(res.Problems, fmt.Sprintf("step %d, a recorded permanent failure, was called %d times", permanentStep, calls[permanentStep]))
	}
	if len(commits) != 1 {
		res.Problems = append(res.Problems, fmt.Sprintf("step %d committed %d times", crashStep, len(commits)))
	}
	return res, nil
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) == 0 || len(lines[len(lines)-1]) == 0 {
		return nil
	}
	return lines[len(lines)-1]
}

func countCalls(path string) (map[int]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	calls := map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var step int
		if _, err := fmt.Sscanf(sc.Text(), "step %d", &step); err == nil {
			calls[step]++
		}
	}
	return calls, sc.Err()
}

func sum(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func failedSteps(steps []runtime.StepRecord) []int {
	var out []int
	for _, s := range steps {
		if s.Status == runtime.StepFailed {
			out = append(out, s.Step)
		}
	}
	return out
}

func exitText(ps *os.ProcessState) string {
	if ps == nil {
		return "did not run"
	}
	return ps.String()
}

// sameJSON reports whether a and b are the same JSON value, whatever their
// spacing.
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
