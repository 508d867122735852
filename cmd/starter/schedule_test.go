package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

func TestScheduleOptions(t *testing.T) {
	t.Parallel()
	var in train.FitInput
	in.TrainFunc, in.Scaling.NumWorkers, in.Run.StoragePath = "mnist-mlp", 2, "/runs"
	o, err := scheduleOptions("nightly", specFlags{cron: "0 3 * * *", overlap: "skip"}, "q", in)
	if err != nil {
		t.Fatal(err)
	}
	if o.ID != "nightly" || !reflect.DeepEqual(o.Spec.CronExpressions, []string{"0 3 * * *"}) {
		t.Errorf("schedule %q spec %+v", o.ID, o.Spec)
	}
	a, ok := o.Action.(*client.ScheduleWorkflowAction)
	if !ok {
		t.Fatalf("action %T, want a workflow", o.Action)
	}
	if a.ID != "fit-nightly" || a.Workflow != train.WorkflowType || a.TaskQueue != "q" || !reflect.DeepEqual(a.Args, []any{in}) {
		t.Errorf("action %+v", a)
	}
}

// runSchedule refuses a bad command line or input before it dials.
func TestRunScheduleChecksFirst(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-cron", "0 3 * * *"}, "-id and -cron (or -every) are required"},
		{[]string{"-id", "nightly"}, "-id and -cron (or -every) are required"},
		{[]string{"create", "-id", "n", "-cron", "@daily", "-every", "1h", "-func", "f", "-workers", "1", "-storage", "/r"}, "give one"},
		{[]string{"create", "-id", "n", "-every", "1h", "-overlap", "sometimes", "-func", "f", "-workers", "1", "-storage", "/r"}, `-overlap "sometimes": want one of allow-all, buffer-all`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"backfill", "-id", "n", "-start", "2026-01-02T00:00:00Z", "-end", "2026-01-01T00:00:00Z"}, "is not after"},
		{[]string{"-id", "n", "-cron", "@daily", "-func", "f", "-workers", "1", "-config", "{"}, "not valid JSON"},
		{[]string{"-id", "n", "-cron", "@daily", "-func", "f", "-workers", "1", "extra"}, `unexpected argument "extra"`},
	} {
		if err := runSchedule(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
	// No storage path: the input's own validation, naming the field.
	err := runSchedule([]string{"-id", "n", "-cron", "@daily", "-func", "f", "-workers", "1"})
	var bad *train.InvalidInputError
	if !errors.As(err, &bad) || bad.Field != "run.storage_path" {
		t.Errorf("err = %v, want an invalid run.storage_path", err)
	}
}

func TestRunTargetNeedsARun(t *testing.T) {
	t.Parallel()
	if _, _, _, err := runTarget("status", nil); err == nil || !strings.Contains(err.Error(), "give -name or -workflow-id") {
		t.Fatalf("err = %v", err)
	}
}

func TestPrintResultAndMetrics(t *testing.T) {
	t.Parallel()
	res := &api.Result{Name: "r", Attempts: 2, Failures: 1, WorldSizes: []int{4, 3}, Reports: 2, Metrics: api.Metrics{"loss": 0.25, "epoch": 2},
		Checkpoint: &api.Checkpoint{URI: "/runs/r/checkpoint_000002"}, Path: "/runs/r", Promoted: true}
	var b strings.Builder
	printResult(&b, res, false)
	for _, want := range []string{"run", "succeeded", "2 (failures 1), world sizes [4 3]", "loss", "0.25", "/runs/r/checkpoint_000002", "promoted"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("result table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	printResult(&b, res, true)
	if !strings.Contains(b.String(), `"world_sizes": [`) {
		t.Errorf("-json:\n%s", b.String())
	}
	// A run its search's scheduler stopped: not a failure, not "succeeded".
	b.Reset()
	stopped := *res
	stopped.StopReason = "asha: at rung epoch=1"
	printResult(&b, &stopped, false)
	if !strings.Contains(b.String(), "stopped: asha: at rung epoch=1") || strings.Contains(b.String(), "succeeded") {
		t.Errorf("a stopped run's table:\n%s", b.String())
	}
	b.Reset()
	recs := []api.ReportRecord{{Index: 0, Attempt: 1, Metrics: api.Metrics{"loss": 1}}, {Index: 1, Attempt: 2, Checkpoint: 3, Metrics: api.Metrics{"loss": 0.5, "acc": 0.9}}}
	if err := writeMetrics(&b, recs, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if lines[0] != "index,attempt,time,checkpoint,acc,loss" || !strings.HasPrefix(lines[1], "0,1,") || !strings.HasSuffix(lines[1], ",,,1") || !strings.HasSuffix(lines[2], ",3,0.9,0.5") {
		t.Errorf("metrics CSV:\n%s", b.String())
	}
}

// A -tune schedule starts a Tune of the validated input, "tune-<id>", and
// refuses before it dials: a named search (each start must be new), a bad
// input naming its field, Fit flags beside -tune.
func TestScheduleTune(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	trainer := `"trainer": {"train_func": "tabular-mlp", "scaling": {"num_workers": 1}, "run": {"storage_path": "/runs"%s}}`
	good := write("good.json", `{`+fmt.Sprintf(trainer, "")+`, "param_space": {"config.lr": {"loguniform": [0.001, 0.1]}},
		"tune_config": {"metric": "valid_loss", "mode": "min", "num_samples": 3}}`)
	in, err := scheduledTuneInput(good, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if in.Trainer.Run.Schedule != "nightly" {
		t.Errorf("trainer.run.schedule = %q, want the schedule's id", in.Trainer.Run.Schedule)
	}
	o, err := tuneScheduleOptions("nightly", specFlags{every: time.Hour, overlap: "skip"}, "q", in)
	if err != nil {
		t.Fatal(err)
	}
	a := o.Action.(*client.ScheduleWorkflowAction)
	if a.ID != "tune-nightly" || a.Workflow != api.TuneWorkflowType || a.TaskQueue != "q" || !reflect.DeepEqual(a.Args, []any{in}) ||
		!strings.Contains(a.StaticSummary, "3 samples") {
		t.Errorf("action %+v", a)
	}
	named := write("named.json", `{`+fmt.Sprintf(trainer, `, "name": "s"`)+`, "param_space": {"config.lr": {"loguniform": [0.001, 0.1]}},
		"tune_config": {"metric": "valid_loss", "mode": "min"}}`)
	badMode := write("mode.json", `{`+fmt.Sprintf(trainer, "")+`, "param_space": {"config.lr": {"loguniform": [0.001, 0.1]}},
		"tune_config": {"metric": "valid_loss", "mode": "lowest"}}`)
	for _, c := range []struct {
		args  []string
		field string
		want  string
	}{
		{[]string{"create", "-id", "n", "-every", "1h", "-tune", named}, "trainer.run.name", `"tune-n-<time>"`},
		{[]string{"create", "-id", "n", "-every", "1h", "-tune", badMode}, "tune_config.mode", `"lowest"`},
		{[]string{"create", "-id", "n", "-every", "1h", "-tune", good, "-workers", "2"}, "", "-tune and -workers"},
		{[]string{"update", "-id", "n", "-tune", badMode}, "tune_config.mode", `"lowest"`},
	} {
		err := runSchedule(c.args)
		var bad *api.InvalidTuneError
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.field != "" && (!errors.As(err, &bad) || bad.Field != c.field)) {
			t.Errorf("%q: err = %v, want %s %q", c.args, err, c.field, c.want)
		}
	}
}
