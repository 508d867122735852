package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
)

// WorkflowID is the ID of the Fit workflow of a run started by a Trainer:
// one run name, one workflow, so two Fits of a run never overlap.
func WorkflowID(runName string) string { return "fit-" + runName }

// Trainer starts a training run on a Temporal cluster (Ray's TorchTrainer).
type Trainer struct {
	c         client.Client
	in        FitInput
	taskQueue string
	dashboard string
	err       error
}

// TrainerOption configures a Trainer.
type TrainerOption func(*Trainer)

// WithTaskQueue sets the task queue of the Fit workflow. Default
// DefaultTaskQueue.
func WithTaskQueue(q string) TrainerOption { return func(t *Trainer) { t.taskQueue = q } }

// WithDashboard links the run's page on a tempotrain dashboard (starter
// dashboard, package dashboard) from the run's details in the Temporal Web
// UI: base is the dashboard's URL ("http://localhost:8266").
func WithDashboard(base string) TrainerOption {
	return func(t *Trainer) { t.dashboard = strings.TrimRight(base, "/") }
}

// WithDatasets gives the run datasets by name ("train", "valid", ...), which
// its ranks open with Context.Dataset (FitInput.Datasets).
func WithDatasets(d map[string]DatasetSpec) TrainerOption {
	return func(t *Trainer) { t.in.Datasets = d }
}

// WithPreprocessors gives the run preprocessors, fitted on its "train"
// dataset (FitInput.Preprocessors).
func WithPreprocessors(p ...PreprocessorSpec) TrainerOption {
	return func(t *Trainer) { t.in.Preprocessors = p }
}

// WithPython makes the training function a Python one (FitInput.Python):
// every rank runs spec's entrypoint on workers that allow Python. The
// trainFunc given to NewTrainer may then be "" (api.PythonFunc).
func WithPython(spec PythonSpec) TrainerOption {
	return func(t *Trainer) {
		t.in.Python = &spec
		if t.in.TrainFunc == "" {
			t.in.TrainFunc = api.PythonFunc
		}
	}
}

// NewTrainerFromInput returns a Trainer of a whole FitInput, as the command
// line and JSON files give one. An empty Run.Name is named as by NewTrainer.
func NewTrainerFromInput(c client.Client, in FitInput, opts ...TrainerOption) *Trainer {
	t := NewTrainer(c, in.TrainFunc, in.Config, in.Scaling, in.Run)
	t.in.Datasets, t.in.Preprocessors, t.in.Python = in.Datasets, in.Preprocessors, in.Python
	for _, o := range opts {
		o(t)
	}
	return t
}

// NewTrainer returns a Trainer of the function registered as trainFunc, with
// config (any JSON-encodable value, or nil) handed to every rank. An empty
// run.Name becomes "<trainFunc>-<UTC time>".
func NewTrainer(c client.Client, trainFunc string, config any, scaling ScalingConfig, run RunConfig, opts ...TrainerOption) *Trainer {
	t := &Trainer{c: c, taskQueue: DefaultTaskQueue}
	var raw json.RawMessage
	switch v := config.(type) {
	case nil:
	case json.RawMessage:
		raw = v
	default:
		raw, t.err = json.Marshal(config)
		if t.err != nil {
			t.err = fmt.Errorf("encode config: %w", t.err)
		}
	}
	t.in = FitInput{TrainFunc: trainFunc, Config: raw, Scaling: scaling, Run: run}
	for _, o := range opts {
		o(t)
	}
	if t.in.Run.Name == "" {
		name := t.in.TrainFunc
		if name == "" && t.in.Python != nil {
			name = api.PythonFunc
		}
		t.in.Run.Name = fmt.Sprintf("%s-%s", name, time.Now().UTC().Format("20060102-150405"))
	}
	return t
}

// Input is the Fit workflow input this Trainer starts.
func (t *Trainer) Input() FitInput { return t.in }

// Run is a started Fit.
type Run struct {
	c          client.Client
	Name       string
	WorkflowID string
	RunID      string
}

// Start starts the Fit workflow and returns without waiting. The input is
// validated here too, so a bad one fails before it reaches the server.
func (t *Trainer) Start(ctx context.Context) (*Run, error) {
	if t.err != nil {
		return nil, t.err
	}
	if err := t.in.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	id := WorkflowID(t.in.Run.Name)
	details := t.in.Details()
	if t.dashboard != "" {
		details += fmt.Sprintf("\n[The run on the dashboard](%s/runs/%s)\n", t.dashboard, url.PathEscape(id))
	}
	wr, err := t.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                t.taskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		StaticSummary:            t.in.Summary(),
		StaticDetails:            details,
	}, WorkflowType, t.in)
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return nil, fmt.Errorf("run %q is already running (workflow %s)", t.in.Run.Name, id)
		}
		return nil, fmt.Errorf("start Fit for run %q: %w", t.in.Run.Name, err)
	}
	return &Run{c: t.c, Name: t.in.Run.Name, WorkflowID: wr.GetID(), RunID: wr.GetRunID()}, nil
}

// Fit starts the run and waits for its Result (Ray's trainer.fit()). A run
// that fails returns its Result, whose Error says why, and an error.
func (t *Trainer) Fit(ctx context.Context) (*Result, error) {
	r, err := t.Start(ctx)
	if err != nil {
		return nil, err
	}
	return r.Wait(ctx)
}

// Wait waits for the run to end and returns its Result.
func (r *Run) Wait(ctx context.Context) (*Result, error) {
	return waitResult(ctx, r.c.GetWorkflow(ctx, r.WorkflowID, ""), r.Name)
}

// GetResult waits for the Fit of the named run (started by a Trainer, so with
// WorkflowID(runName)) and returns its Result; for a finished run it returns
// at once.
func GetResult(ctx context.Context, c client.Client, runName string) (*Result, error) {
	return GetResultByWorkflowID(ctx, c, WorkflowID(runName), runName)
}

// GetResultByWorkflowID is GetResult for a Fit started under any workflow ID
// (from the CLI, the UI or a Schedule).
func GetResultByWorkflowID(ctx context.Context, c client.Client, workflowID, runName string) (*Result, error) {
	return waitResult(ctx, c.GetWorkflow(ctx, workflowID, ""), runName)
}

func waitResult(ctx context.Context, wr client.WorkflowRun, name string) (*Result, error) {
	return waitFor(ctx, wr, "run", name, api.ErrTrainingFailed, func(r *Result) string { return r.Error })
}

// waitFor waits for a workflow's T: a failure of kind failed with T in its
// details returns T and an error saying why (errOf T), a cancellation with
// T returns it too.
func waitFor[T any](ctx context.Context, wr client.WorkflowRun, what, name string, failed api.ErrorKind, errOf func(*T) string) (*T, error) {
	var res T
	err := wr.Get(ctx, &res)
	if err == nil {
		return &res, nil
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.Type() == string(failed) && app.HasDetails() {
		if derr := app.Details(&res); derr == nil {
			msg := errOf(&res)
			if msg == "" {
				msg = app.Message()
			}
			return &res, fmt.Errorf("%s %q failed: %s", what, name, msg)
		}
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		if canceled.HasDetails() && canceled.Details(&res) == nil {
			return &res, fmt.Errorf("%s %q was cancelled", what, name)
		}
		return nil, fmt.Errorf("%s %q was cancelled", what, name)
	}
	return nil, fmt.Errorf("%s %q: %w", what, name, err)
}
