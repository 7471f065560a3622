package runtime_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/runtime"
)

// fsT0 is the base of every deterministic time in these tests.
var fsT0 = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

func fsNewStore(t *testing.T) (*runtime.FileStore, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "checkpoints")
	store, err := runtime.NewFileStore(dir)
	require.NoError(t, err)
	return store, dir
}

// fsSmallCheckpoint is a checkpoint with one done and one failed step.
func fsSmallCheckpoint(taskID string, updated time.Time) *runtime.Checkpoint {
	return &runtime.Checkpoint{
		Version: runtime.CheckpointVersion,
		TaskID:  taskID,
		Steps: []runtime.StepRecord{
			{
				Step: 1, Name: "fetch", Status: runtime.StepDone, Key: runtime.IdempotencyKey(taskID, 1),
				Result: json.RawMessage(`{"items":[1,2,3],"note":"ok"}`), Attempts: 2, FinishedAt: updated.Add(-time.Minute),
			},
			{
				Step: 2, Name: "charge", Status: runtime.StepFailed, Key: runtime.IdempotencyKey(taskID, 2),
				Error:    &runtime.StepFailure{Class: "permanent", Type: "APIError", Message: "400: card declined"},
				Attempts: 1, FinishedAt: updated,
			},
		},
		UpdatedAt: updated,
	}
}

// fsRequireSame compares two checkpoints, times with time.Time.Equal and
// results as JSON (Save re-indents a result that is an object).
func fsRequireSame(t *testing.T, want, got *runtime.Checkpoint) {
	t.Helper()
	require.NotNil(t, got)
	assert.Equal(t, want.Version, got.Version)
	assert.Equal(t, want.TaskID, got.TaskID)
	assert.True(t, want.UpdatedAt.Equal(got.UpdatedAt), "UpdatedAt: want %v, got %v", want.UpdatedAt, got.UpdatedAt)
	require.Len(t, got.Steps, len(want.Steps))
	for i := range want.Steps {
		w, g := want.Steps[i], got.Steps[i]
		assert.True(t, w.FinishedAt.Equal(g.FinishedAt), "step %d FinishedAt: want %v, got %v", w.Step, w.FinishedAt, g.FinishedAt)
		if w.Result == nil {
			assert.Nil(t, g.Result, "step %d", w.Step)
		} else {
			assert.JSONEq(t, string(w.Result), string(g.Result), "step %d", w.Step)
		}
		w.FinishedAt, g.FinishedAt = time.Time{}, time.Time{}
		w.Result, g.Result = nil, nil
		assert.Equal(t, w, g)
	}
}

func TestFileStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	store, dir := fsNewStore(t)
	assert.Equal(t, filepath.Join(dir, "task-1.checkpoint.json"), store.Path("task-1"))

	first := fsSmallCheckpoint("task-1", time.Now()) // monotonic reading, local zone
	first.Steps = first.Steps[:1]
	require.NoError(t, store.Save(ctx, first))
	got, err := store.Load(ctx, "task-1")
	require.NoError(t, err)
	fsRequireSame(t, first, got)

	// A second Save replaces the first.
	second := fsSmallCheckpoint("task-1", fsT0)
	require.NoError(t, store.Save(ctx, second))
	got, err = store.Load(ctx, "task-1")
	require.NoError(t, err)
	fsRequireSame(t, second, got)

	data, err := os.ReadFile(store.Path("task-1"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), "{\n  \"version\": 1,\n"), "indented JSON: %s", data)
	assert.True(t, strings.HasSuffix(string(data), "}\n"), "a trailing newline")

	// No steps at all is a valid checkpoint too.
	empty := &runtime.Checkpoint{Version: runtime.CheckpointVersion, TaskID: "task-2", UpdatedAt: fsT0}
	require.NoError(t, store.Save(ctx, empty))
	got, err = store.Load(ctx, "task-2")
	require.NoError(t, err)
	fsRequireSame(t, empty, got)
}

func TestFileStoreLoadMissing(t *testing.T) {
	store, _ := fsNewStore(t)
	cp, err := store.Load(context.Background(), "never-saved")
	assert.NoError(t, err)
	assert.Nil(t, cp)
}

func TestFileStoreNewCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "c")
	_, err := runtime.NewFileStore(dir)
	require.NoError(t, err)
	info, err := os.Stat(dir)
	require.NoError(t, err)
	assert.True(t, info.IsDir())

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = runtime.NewFileStore(filepath.Join(file, "sub"))
	assert.Error(t, err, "a directory under a regular file cannot be made")
}

func TestFileStoreContextDone(t *testing.T) {
	store, _ := fsNewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, store.Save(ctx, fsSmallCheckpoint("t", fsT0)), context.Canceled)
	_, err := os.Stat(store.Path("t"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a cancelled Save writes nothing")
	cp, err := store.Load(ctx, "t")
	assert.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, cp)
}

func TestFileStoreSaveRejectsInvalidCheckpoint(t *testing.T) {
	cases := map[string]struct {
		edit func(cp *runtime.Checkpoint)
		want string
	}{
		"wrong version":  {func(cp *runtime.Checkpoint) { cp.Version = 7 }, "version 7; this build writes version 1"},
		"first step 0":   {func(cp *runtime.Checkpoint) { cp.Steps[0].Step = 0 }, "steps[0] is step 0, want step 1"},
		"gap":            {func(cp *runtime.Checkpoint) { cp.Steps[1].Step = 3 }, "steps[1] is step 3, want step 2"},
		"duplicate step": {func(cp *runtime.Checkpoint) { cp.Steps[1].Step = 1 }, "steps[1] is step 1, want step 2"},
		"bad status":     {func(cp *runtime.Checkpoint) { cp.Steps[1].Status = "retrying" }, `step 2 has status "retrying"`},
		"empty key":      {func(cp *runtime.Checkpoint) { cp.Steps[0].Key = "" }, "step 1 has an empty idempotency_key"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			store, _ := fsNewStore(t)
			cp := fsSmallCheckpoint("t", fsT0)
			c.edit(cp)
			err := store.Save(context.Background(), cp)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			_, statErr := os.Stat(store.Path("t"))
			assert.ErrorIs(t, statErr, os.ErrNotExist, "an invalid checkpoint is not written")
		})
	}
	store, _ := fsNewStore(t)
	assert.ErrorContains(t, store.Save(context.Background(), nil), "nil")
}

func TestFileStoreInvalidTaskIDs(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	store, err := runtime.NewFileStore(filepath.Join(base, "store"))
	require.NoError(t, err)

	long := strings.Repeat("x", 201)
	cases := []struct {
		name, id string
		mention  string // how the error names the ID
	}{
		{"parent", "../x", `"../x"`},
		{"slash", "a/b", `"a/b"`},
		{"backslash", `a\b`, `"a\\b"`},
		{"hidden", ".hidden", `".hidden"`},
		{"dot-dot", "..", `".."`},
		{"empty", "", "empty"},
		{"space", "a b", `"a b"`},
		{"NUL", "a\x00b", `"a\x00b"`},
		{"non-ASCII", "tâche", `"tâche"`},
		{"201 bytes", long, strconv.Quote(long[:200])},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, name := c.id, c.mention
			cp, err := store.Load(ctx, id)
			require.Error(t, err)
			assert.Nil(t, cp)
			assert.Contains(t, err.Error(), "invalid task ID")
			assert.Contains(t, err.Error(), name, "the error names the bad ID")
			assert.False(t, isUnusable(err), "a bad ID is not a bad checkpoint")

			bad := fsSmallCheckpoint(id, fsT0)
			err = store.Save(ctx, bad)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "invalid task ID")
			assert.Contains(t, err.Error(), name)
		})
	}
	require.NoError(t, store.Save(ctx, fsSmallCheckpoint(strings.Repeat("y", 200), fsT0)), "200 bytes are allowed")

	// Nothing was written outside the store's directory, nor any file for
	// the bad IDs inside it.
	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	assert.Equal(t, []string{"store"}, fsNames(entries))
	entries, err = os.ReadDir(filepath.Join(base, "store"))
	require.NoError(t, err)
	assert.Equal(t, []string{strings.Repeat("y", 200) + ".checkpoint.json", strings.Repeat("y", 200) + ".lock"}, fsNames(entries))
}

func fsNames(entries []os.DirEntry) []string {
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	slices.Sort(names)
	return names
}

func TestFileStoreTempFiles(t *testing.T) {
	ctx := context.Background()
	store, dir := fsNewStore(t)
	require.NoError(t, store.Save(ctx, fsSmallCheckpoint("id", fsT0)))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"id.checkpoint.json", "id.lock"}, fsNames(entries), "no temporary file is left behind")

	// Files a killed writer of "id" left, and files of other tasks: "id.x"
	// (whose temporary files also match the glob ".id.*.tmp") and "other".
	for _, name := range []string{".id.123.tmp", ".id.4294967295.tmp", ".id.x.456.tmp", ".other.789.tmp", ".id.abc.tmp"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(`{"half`), 0o600))
	}
	require.NoError(t, store.Save(ctx, fsSmallCheckpoint("id", fsT0.Add(time.Hour))))
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{".id.abc.tmp", ".id.x.456.tmp", ".other.789.tmp", "id.checkpoint.json", "id.lock"}, fsNames(entries),
		"the stale temporary files of id are gone, other tasks' files stay")

	got, err := store.Load(ctx, "id")
	require.NoError(t, err)
	fsRequireSame(t, fsSmallCheckpoint("id", fsT0.Add(time.Hour)), got)
}

// A directory whose name holds glob metacharacters is a directory like any
// other: the stale temporary files in it are found and removed, and nothing
// else is.
func TestFileStoreDirWithGlobCharacters(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"a[b", "a*b", "a?b", "[ab]"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), name)
			store, err := runtime.NewFileStore(dir)
			require.NoError(t, err)
			for _, f := range []string{".id.123.tmp", ".other.456.tmp"} {
				require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(`{"half`), 0o600))
			}
			require.NoError(t, store.Save(ctx, fsSmallCheckpoint("id", fsT0)))
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Equal(t, []string{".other.456.tmp", "id.checkpoint.json", "id.lock"}, fsNames(entries))
			got, err := store.Load(ctx, "id")
			require.NoError(t, err)
			fsRequireSame(t, fsSmallCheckpoint("id", fsT0), got)
		})
	}
}

// fsReplace replaces old by repl in data, once, and fails if old is absent.
func fsReplace(t *testing.T, data []byte, old, repl string) []byte {
	t.Helper()
	require.Contains(t, string(data), old)
	return bytes.Replace(data, []byte(old), []byte(repl), 1)
}

func TestFileStoreBadFiles(t *testing.T) {
	ctx := context.Background()
	const id = "bad-task"
	store, _ := fsNewStore(t)
	path := store.Path(id)
	require.NoError(t, store.Save(ctx, fsSmallCheckpoint(id, fsT0)))
	valid, err := os.ReadFile(path)
	require.NoError(t, err)

	type badFile struct {
		name string
		data []byte
		want string // in the error's message
	}
	cases := []badFile{
		{"empty", nil, "the file is empty"},
		{"white space only", []byte(" \n\t\n"), "only white space"},
		{"zeros", make([]byte, 64), "garbled at byte offset 1: invalid character '\\x00'"},
		{"brace to bracket", fsReplace(t, valid, "{", "["), "garbled at byte offset"},
		{"quote removed", fsReplace(t, valid, `"fetch"`, `"fetch`), "garbled at byte offset"},
		{"trailing garbage", append(slices.Clone(valid), "garbage\n"...), "trailing data after the JSON object at byte offset " + strconv.Itoa(len(valid))},
		{"second object", append(slices.Clone(valid), "{}"...), "trailing data"},
		{"not an object", []byte("[1, 2, 3]\n"), "not an object"},
		{"null", []byte("null\n"), "not an object"},
		{"wrong version", fsReplace(t, valid, `"version": 1,`, `"version": 7,`), "written by version 7; this build reads version 1"},
		{"newer version with new fields", fsReplace(t, valid, `"version": 1,`, `"version": 2, "lease": {"owner": "x"},`), "written by version 2; this build reads version 1"},
		{"no version", fsReplace(t, valid, `"version": 1,`, ``), "no version"},
		{"version of another type", fsReplace(t, valid, `"version": 1,`, `"version": "1",`), "does not match the checkpoint format"},
		{"wrong task id", fsReplace(t, valid, `"task_id": "bad-task"`, `"task_id": "other-task"`), `it belongs to task "other-task", not "bad-task"`},
		{"unknown field", fsReplace(t, valid, `"version": 1,`, `"version": 1, "extra": true,`), `unknown field "extra"`},
		{"unknown step field", fsReplace(t, valid, `"step": 2,`, `"step": 2, "colour": "red",`), `unknown field "colour"`},
		{"unknown error field", fsReplace(t, valid, `"class": "permanent",`, `"class": "permanent", "stack": "",`), `unknown field "stack"`},
		{"step numbering gap", fsReplace(t, valid, `"step": 2,`, `"step": 3,`), "steps[1] is step 3, want step 2"},
		{"steps from 0", fsReplace(t, valid, `"step": 1,`, `"step": 0,`), "steps[0] is step 0, want step 1"},
		{"bad status", fsReplace(t, valid, `"status": "done"`, `"status": "weird"`), `step 1 has status "weird"`},
		{"empty key", fsReplace(t, valid, `"idempotency_key": "bad-task/2"`, `"idempotency_key": ""`), "step 2 has an empty idempotency_key"},
	}

	// Truncated: the valid file cut at every 7th byte (all but its final
	// newline, which leaves a complete object).
	complete := len(bytes.TrimRight(valid, "\n"))
	for cut := 1; cut < complete; cut += 7 {
		cases = append(cases, badFile{fmt.Sprintf("truncated at %d", cut), valid[:cut], "unexpected end of JSON input"})
	}
	cases = append(cases, badFile{"truncated before the last brace", valid[:complete-1], "unexpected end of JSON input"})

	// Garbled: a run of random control characters (invalid anywhere in
	// JSON, in a string or between tokens) written over the middle.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 8 {
		data := slices.Clone(valid)
		at := len(data)/4 + rng.IntN(len(data)/2)
		n := 1 + rng.IntN(16)
		for j := at; j < at+n && j < len(data); j++ {
			c := byte(rng.IntN(0x20))
			for c == '\t' || c == '\n' || c == '\r' {
				c = byte(rng.IntN(0x20))
			}
			data[j] = c
		}
		cases = append(cases, badFile{fmt.Sprintf("random bytes %d at %d", i, at), data, "garbled at byte offset"})
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path, c.data, 0o600))
			cp, err := store.Load(ctx, id)
			require.Error(t, err)
			assert.Nil(t, cp, "no partly decoded checkpoint")
			ce := requireUnusable(t, err)
			assert.Contains(t, ce.Message, "checkpoint "+path+" cannot be used")
			assert.Contains(t, err.Error(), path, "the error names the file")
			assert.Contains(t, err.Error(), c.want)
		})
	}

	// A path that exists but is not a file is an error too, never nil, nil.
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Mkdir(path, 0o755))
	cp, err := store.Load(ctx, id)
	assert.Error(t, err)
	assert.Nil(t, cp)
}

// The kill test. The writer is a copy of the test binary running
// TestHelperCheckpointWriter, which saves the states 1, 2, 3, … of one task
// until it is killed.

const (
	fsWriterEnv  = "RETRACE_CHECKPOINT_WRITER"
	fsWriterTask = "killed-writer"
	fsOldSteps   = 1 // the number of steps of the old state the parent saves before each round
)

// fsResult is the result of step in the state n written by label: a JSON
// string of 20–30 KB, different for every (label, n, step), so that a file
// mixing two states, or cut short, cannot pass for a complete one.
func fsResult(label string, n, step int) json.RawMessage {
	unit := fmt.Sprintf("%s state %d step %d; ", label, n, step)
	size := 20_000 + (n*7919+step*104_729)%10_000
	var b strings.Builder
	b.Grow(size + len(unit) + 2)
	b.WriteByte('"')
	for b.Len() < size {
		b.WriteString(unit)
	}
	b.WriteByte('"')
	return json.RawMessage(b.String())
}

// fsState is the state n written by label ("writer" for the writer process,
// "old" for the state the parent saves before a round): n steps.
func fsState(label string, n int) *runtime.Checkpoint {
	steps := make([]runtime.StepRecord, n)
	for i := range steps {
		step := i + 1
		steps[i] = runtime.StepRecord{
			Step: step, Name: fmt.Sprintf("%s-%d", label, step), Status: runtime.StepDone,
			Key: runtime.IdempotencyKey(fsWriterTask, step), Result: fsResult(label, n, step),
			Attempts: 1 + step%3, FinishedAt: fsT0.Add(time.Duration(100*n+step) * time.Second),
		}
	}
	return &runtime.Checkpoint{
		Version: runtime.CheckpointVersion, TaskID: fsWriterTask, Steps: steps,
		UpdatedAt: fsT0.Add(time.Duration(n) * time.Hour),
	}
}

// fsStateDiff says how got differs from want, or returns "" if it is exactly
// want, every result byte-identical. It keeps the message short: a state
// holds hundreds of kilobytes.
func fsStateDiff(got, want *runtime.Checkpoint) string {
	switch {
	case got.Version != want.Version || got.TaskID != want.TaskID:
		return fmt.Sprintf("version %d, task %q", got.Version, got.TaskID)
	case len(got.Steps) != len(want.Steps):
		return fmt.Sprintf("%d steps, want %d", len(got.Steps), len(want.Steps))
	case !got.UpdatedAt.Equal(want.UpdatedAt):
		return fmt.Sprintf("updated_at %v, want %v", got.UpdatedAt, want.UpdatedAt)
	}
	for i, w := range want.Steps {
		g := got.Steps[i]
		if !bytes.Equal(g.Result, w.Result) {
			return fmt.Sprintf("step %d: a result of %d bytes is not the generator's (%d bytes)", w.Step, len(g.Result), len(w.Result))
		}
		if g.Step != w.Step || g.Name != w.Name || g.Status != w.Status || g.Key != w.Key ||
			g.Attempts != w.Attempts || !g.FinishedAt.Equal(w.FinishedAt) || g.Error != nil {
			return fmt.Sprintf("step %d: name %q, status %q, key %q, attempts %d, finished %v",
				g.Step, g.Name, g.Status, g.Key, g.Attempts, g.FinishedAt)
		}
	}
	return ""
}

// TestHelperCheckpointWriter is the writer process of
// TestCheckpointSurvivesKill; it does nothing unless RETRACE_CHECKPOINT_WRITER
// names the store's directory. It saves the states 1, 2, 3, … and prints
// "writing n" before and "saved n" after each Save.
func TestHelperCheckpointWriter(t *testing.T) {
	dir := os.Getenv(fsWriterEnv)
	if dir == "" {
		return
	}
	store, err := runtime.NewFileStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// The parent kills the writer at a state of at most 4 (5 at worst); a
	// bound keeps a writer that is never killed from running on.
	for n := 1; n <= 32; n++ {
		fmt.Printf("writing %d\n", n) // os.Stdout is unbuffered: one write(2)
		if err := store.Save(context.Background(), fsState("writer", n)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Printf("saved %d\n", n)
	}
	fmt.Fprintln(os.Stderr, "the writer was never killed")
	os.Exit(3)
}

// TestCheckpointSurvivesKill checks that the checkpoint file is always either
// the old or the new state when the writer is killed during a write: a
// subprocess killed at random points, over 100 rounds.
//
// Each round saves an old state, starts a writer, waits until it prints
// "writing k" for a random k in [1, 4], lets a random time go by and kills it
// with SIGKILL. The file must then load without error and be exactly the
// state the writer's output says it can have left: the last state it saved
// (the old one if none), or the one it was writing if the kill came after
// the rename but before "saved k" was printed.
func TestCheckpointSurvivesKill(t *testing.T) {
	if os.Getenv(fsWriterEnv) != "" {
		t.Skip("this is the writer process")
	}
	const rounds = 100
	ctx := context.Background()
	seed := uint64(20261130)
	if s := os.Getenv("RETRACE_KILL_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	base := t.TempDir()
	start := time.Now()

	// How long a Save of each state takes here: the kill moments are spread
	// over it, so that they land in the marshalling, the write, the fsyncs
	// and the rename alike. (Under the race detector the marshalling alone
	// takes milliseconds, far more than 300 µs.) Three writers that run up
	// to "saved 4" give the first samples; every round adds those of the
	// Saves it sees complete before "writing k"; the median is used.
	var saveTimes fsSaveTimes
	for i := range 3 {
		lines := fsKillWriter(t, filepath.Join(base, fmt.Sprintf("calibration-%d", i)), "saved 4", 0)
		saveTimes.add(t, lines, 4)
	}
	t.Logf("seed %d (RETRACE_KILL_SEED=n chooses another); a Save of state 1, 2, 3, 4 takes %v, %v, %v, %v", seed,
		saveTimes.median(1), saveTimes.median(2), saveTimes.median(3), saveTimes.median(4))

	var tempLeft, keptOld, keptK, keptPrevious, pastK int
	for round := range rounds {
		dir := filepath.Join(base, fmt.Sprintf("round-%03d", round))
		store, err := runtime.NewFileStore(dir)
		require.NoError(t, err)
		old := fsState("old", fsOldSteps)
		require.NoError(t, store.Save(ctx, old))

		k := 1 + rng.IntN(4)
		window := max(300*time.Microsecond, saveTimes.median(k)*5/4)
		delay := time.Duration(rng.Int64N(int64(window)))
		lines := fsKillWriter(t, dir, fmt.Sprintf("writing %d", k), delay)
		saveTimes.add(t, lines, k-1)

		lastWriting, lastSaved := 0, 0
		for _, l := range lines {
			if verb, n := fsParseLine(t, l.text); verb == "writing" {
				lastWriting = n
			} else {
				lastSaved = n
			}
		}
		candidates := []*runtime.Checkpoint{old}
		if lastSaved > 0 {
			candidates[0] = fsState("writer", lastSaved)
		}
		if lastWriting != lastSaved {
			candidates = append(candidates, fsState("writer", lastWriting))
		}

		temps, err := filepath.Glob(filepath.Join(dir, ".*.tmp"))
		require.NoError(t, err)
		if len(temps) > 0 {
			tempLeft++
		}

		cp, err := store.Load(ctx, fsWriterTask)
		require.NoError(t, err, "round %d: k=%d, killed %v after %q", round, k, delay, lines[len(lines)-1].text)
		require.NotNil(t, cp, "round %d", round)
		var diffs []string
		var kept *runtime.Checkpoint
		for _, c := range candidates {
			d := fsStateDiff(cp, c)
			if d == "" {
				kept = c
				break
			}
			diffs = append(diffs, d)
		}
		require.NotNil(t, kept, "round %d: k=%d, killed %v after %q: the file is none of the states the writer can have left: %q",
			round, k, delay, lines[len(lines)-1].text, diffs)
		switch n := len(kept.Steps); {
		case kept == old:
			keptOld++
		case n == k:
			keptK++
		case n < k:
			keptPrevious++
		default:
			pastK++
		}
	}
	t.Logf("%d rounds in %v; the file held the old state %d times, state k %d times, state k-1 %d times, a state past k %d times; %d rounds left a temporary file behind (killed mid-write)",
		rounds, time.Since(start).Round(time.Millisecond), keptOld, keptK, keptPrevious, pastK, tempLeft)
}

// fsLine is a line the writer printed and when the parent read it.
type fsLine struct {
	text string
	at   time.Time
}

// fsSaveTimes holds how long the writer took to save each state 1…4, as
// seen by the parent between "writing n" and "saved n".
type fsSaveTimes [5][]time.Duration

// add records the Saves of the states up to last that lines show complete.
func (st *fsSaveTimes) add(t *testing.T, lines []fsLine, last int) {
	t.Helper()
	begun := map[int]time.Time{}
	for _, l := range lines {
		verb, n := fsParseLine(t, l.text)
		if verb == "writing" {
			begun[n] = l.at
		} else if n <= last && n < len(st) {
			st[n] = append(st[n], l.at.Sub(begun[n]))
		}
	}
}

// median is the median time to save state n.
func (st *fsSaveTimes) median(n int) time.Duration {
	sorted := slices.Sorted(slices.Values(st[n]))
	return sorted[len(sorted)/2]
}

// fsParseLine parses "writing n" or "saved n".
func fsParseLine(t *testing.T, line string) (verb string, n int) {
	t.Helper()
	verb, num, _ := strings.Cut(line, " ")
	n, err := strconv.Atoi(num)
	require.True(t, err == nil && (verb == "writing" || verb == "saved"), "unexpected line from the writer: %q", line)
	return verb, n
}

// fsKillWriter starts the writer on dir, waits until it prints target, spins
// for delay and kills it (SIGKILL). It returns every line the writer printed
// before it died.
func fsKillWriter(t *testing.T, dir, target string, delay time.Duration) []fsLine {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCheckpointWriter$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), fsWriterEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	waited := false
	t.Cleanup(func() { // the writer never outlives the test
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	// A writer that hangs is killed rather than blocking the test until its
	// timeout.
	watchdog := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	defer watchdog.Stop()

	var lines []fsLine
	sc := bufio.NewScanner(stdout)
	found := false
	for !found && sc.Scan() {
		lines = append(lines, fsLine{sc.Text(), time.Now()})
		found = sc.Text() == target
	}
	if found {
		for begin := time.Now(); time.Since(begin) < delay; {
			// Spin: this chooses the moment of the kill, it waits for nothing.
		}
		require.NoError(t, cmd.Process.Kill())
	}
	for sc.Scan() { // what the writer printed before it died, up to EOF
		lines = append(lines, fsLine{sc.Text(), time.Now()})
	}
	require.NoError(t, sc.Err())
	err = cmd.Wait()
	waited = true
	require.True(t, found, "the writer never printed %q: stdout %q, stderr %q, %v", target, lines, stderr.String(), err)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the writer was killed; stderr %q", stderr.String())
	assert.Equal(t, -1, exit.ExitCode(), "the writer died of the signal: %v", exit)
	return lines
}

// fsDone is a checkpoint of task id with n done steps, updated at fsT0+at.
func fsDone(id string, n int, at time.Duration) *runtime.Checkpoint {
	cp := &runtime.Checkpoint{Version: runtime.CheckpointVersion, TaskID: id, UpdatedAt: fsT0.Add(at)}
	for step := 1; step <= n; step++ {
		cp.Steps = append(cp.Steps, runtime.StepRecord{
			Step: step, Name: fmt.Sprintf("step-%d", step), Status: runtime.StepDone, Key: runtime.IdempotencyKey(id, step),
			Result: json.RawMessage(`"ok"`), Attempts: 1, FinishedAt: fsT0.Add(at + time.Duration(step)*time.Second),
		})
	}
	return cp
}

// A Save never replaces a checkpoint that has more finished steps: a writer
// that fell behind (a slower run, or one that loaded an older state) is
// refused with a classified error, and the saved progress stays. A
// checkpoint with as many steps, or more, replaces it.
func TestFileStoreSaveNeverGoesBack(t *testing.T) {
	ctx := context.Background()
	store, dir := fsNewStore(t)
	six := fsDone("t", 6, 0)
	require.NoError(t, store.Save(ctx, six))
	for _, fewer := range []int{0, 2, 5} {
		err := store.Save(ctx, fsDone("t", fewer, time.Hour))
		require.ErrorIs(t, err, runtime.ErrCheckpointBehind, "%d steps over 6", fewer)
		assert.Contains(t, err.Error(), store.Path("t"), "the error names the checkpoint")
		assert.Contains(t, err.Error(), fmt.Sprintf("this one has %d finished steps, the saved one 6", fewer))
		cl := policies.Classify(err)
		assert.Equal(t, policies.Fatal, cl.Class, "the run that fell behind must stop, not retry")
		assert.Equal(t, "checkpoint_behind", cl.Type)
		got, err := store.Load(ctx, "t")
		require.NoError(t, err)
		fsRequireSame(t, six, got)
	}
	temps, err := filepath.Glob(filepath.Join(dir, ".*.tmp"))
	require.NoError(t, err)
	assert.Empty(t, temps, "a refused Save writes nothing")

	again := fsDone("t", 6, 2*time.Hour)
	require.NoError(t, store.Save(ctx, again), "as many steps replace the saved checkpoint")
	got, err := store.Load(ctx, "t")
	require.NoError(t, err)
	fsRequireSame(t, again, got)
	more := fsDone("t", 7, 3*time.Hour)
	require.NoError(t, store.Save(ctx, more))
	got, err = store.Load(ctx, "t")
	require.NoError(t, err)
	fsRequireSame(t, more, got)
}

// fsNoBlock runs op in a goroutine and returns its error. An op still
// running when ctx ends is a failure of the test; if it is blocked opening
// the FIFO at path, the FIFO is opened for writing so that it returns and
// no goroutine is left behind.
func fsNoBlock(t *testing.T, ctx context.Context, path string, op func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		fsUnblockFIFO(path)
		err := <-done
		t.Errorf("the operation was still blocked when its context ended (then it returned %v)", err)
		return err
	}
}

// Load and Save refuse, at once and with a classified error, a checkpoint
// path that is not a regular file: a FIFO (whose open would block until a
// writer came, past any deadline), a directory, or a symbolic link, wherever
// it points. The store writes a checkpoint by renaming a file it made, never
// through a link, so a link at the path was put there by something else:
// following it out of the directory would read (and resume from) any file
// the process can read, and even within the directory it would make one
// task resume from a file that is not its own. A dangling link is refused
// too rather than taken for a task that has no checkpoint, which would
// start the task over.
func TestFileStoreRefusesWhatIsNotARegularFile(t *testing.T) {
	cases := []struct {
		name string
		make func(t *testing.T, path, dir, outside string)
		want string // in the error's message
	}{
		{"FIFO", func(t *testing.T, path, _, _ string) { fsMkfifo(t, path) }, "it is a named pipe (FIFO), not a regular file"},
		{"directory", func(t *testing.T, path, _, _ string) { require.NoError(t, os.Mkdir(path, 0o755)) }, "it is a directory, not a regular file"},
		{"symlink out of the directory", func(t *testing.T, path, _, outside string) {
			target := filepath.Join(outside, "t.checkpoint.json")
			fsWriteCheckpoint(t, target, fsDone("t", 3, 0))
			fsSymlink(t, target, path)
		}, "it is a symbolic link, which the store does not follow"},
		{"symlink inside the directory", func(t *testing.T, path, dir, _ string) {
			fsWriteCheckpoint(t, filepath.Join(dir, "elsewhere.json"), fsDone("t", 3, 0))
			fsSymlink(t, "elsewhere.json", path)
		}, "it is a symbolic link, which the store does not follow"},
		{"dangling symlink", func(t *testing.T, path, _, outside string) {
			fsSymlink(t, filepath.Join(outside, "nothing"), path)
		}, "it is a symbolic link, which the store does not follow"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store, dir := fsNewStore(t)
			outside := t.TempDir()
			path := store.Path("t")
			c.make(t, path, dir, outside)
			before := fsSnapshot(t, dir, outside)
			// A deadline far beyond what the refusal takes: the test asserts
			// the error, never the time.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			var cp *runtime.Checkpoint
			err := fsNoBlock(t, ctx, path, func() (err error) {
				cp, err = store.Load(ctx, "t")
				return err
			})
			assert.Nil(t, cp, "nothing is loaded through it")
			fsRequireNotRegular(t, err, path, c.want)

			err = fsNoBlock(t, ctx, path, func() error { return store.Save(ctx, fsDone("t", 4, time.Hour)) })
			fsRequireNotRegular(t, err, path, c.want)
			after := fsSnapshot(t, dir, outside)
			lock := filepath.Join(dir, "t.lock")
			assert.Equal(t, "file ", after[lock], "the task's lock file, empty")
			delete(after, lock)
			assert.Equal(t, before, after, "Save changed nothing else, inside the directory or out of it")
		})
	}
}

// fsRequireNotRegular checks that err refuses the checkpoint at path, which
// is not a regular file.
func fsRequireNotRegular(t *testing.T, err error, path, want string) {
	t.Helper()
	require.Error(t, err)
	ce := requireUnusable(t, err)
	assert.Contains(t, ce.Message, "checkpoint "+path+" cannot be used")
	assert.Contains(t, err.Error(), want)
	cl := policies.Classify(err)
	assert.Equal(t, policies.Fatal, cl.Class, "the task stops until someone removes what is at the path")
	assert.Equal(t, "checkpoint_not_regular", cl.Type)
}

// fsWriteCheckpoint writes cp to path as Save would.
func fsWriteCheckpoint(t *testing.T, path string, cp *runtime.Checkpoint) {
	t.Helper()
	data, err := json.MarshalIndent(cp, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

// fsSymlink makes link point to target, or skips the test where the system
// does not let this process make links (Windows without the privilege).
func fsSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		if goruntime.GOOS == "windows" {
			t.Skipf("cannot make a symbolic link here: %v", err)
		}
		require.NoError(t, err)
	}
}

// fsSnapshot describes every entry of dirs: its name, type and, for a
// regular file, its contents; for a link, its target.
func fsSnapshot(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			name := filepath.Join(dir, e.Name())
			switch {
			case e.Type().IsRegular():
				data, err := os.ReadFile(name)
				require.NoError(t, err)
				out[name] = "file " + string(data)
			case e.Type()&fs.ModeSymlink != 0:
				target, err := os.Readlink(name)
				require.NoError(t, err)
				out[name] = "link to " + target
			default:
				out[name] = e.Type().String()
			}
		}
	}
	return out
}
