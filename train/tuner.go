package train

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
)

// The search's types, as the api package defines them.
type (
	// TuneInput is the Tune workflow's input: trainer, param_space, tune_config.
	TuneInput = api.TuneInput
	// TuneConfig is Ray's TuneConfig.
	TuneConfig = api.TuneConfig
	// SchedulerConfig is a trial scheduler (ASHA).
	SchedulerConfig = api.SchedulerConfig
	// TuneResult is what a search returns (Ray's ResultGrid).
	TuneResult = api.TuneResult
	// TrialResult is one trial of a TuneResult.
	TrialResult = api.TrialResult
)

// TuneWorkflowID is the ID of the Tune workflow of a search started by a
// Tuner; trial T's Fit is TuneWorkflowID(name) + "-" + T.
func TuneWorkflowID(name string) string { return "tune-" + name }

// Tuner starts a hyperparameter search (Ray's Tuner): the Tune workflow,
// which runs each trial as a child Fit of the trainer's input.
type Tuner struct {
	c         client.Client
	in        TuneInput
	taskQueue string
}

// TunerOption configures a Tuner.
type TunerOption func(*Tuner)

// WithTuneTaskQueue sets the task queue of the Tune workflow and its
// trials' Fits. Default DefaultTaskQueue.
func WithTuneTaskQueue(q string) TunerOption { return func(t *Tuner) { t.taskQueue = q } }

// NewTuner returns a Tuner of trainer (a Fit input: the template of every
// trial), paramSpace (dotted keys into it, each a sampler: Choice,
// Uniform... or a constant) and cfg. An empty trainer.Run.Name becomes
// "tune-<trainFunc>-<UTC time>".
func NewTuner(c client.Client, trainer FitInput, paramSpace map[string]any, cfg TuneConfig, opts ...TunerOption) (*Tuner, error) {
	t := &Tuner{c: c, taskQueue: DefaultTaskQueue, in: TuneInput{Trainer: trainer, TuneConfig: cfg}}
	space, err := ParamSpace(paramSpace)
	if err != nil {
		return nil, err
	}
	t.in.ParamSpace = space
	for _, o := range opts {
		o(t)
	}
	if t.in.Trainer.Run.Name == "" {
		t.in.Trainer.Run.Name = fmt.Sprintf("tune-%s-%s", trainer.TrainFunc, time.Now().UTC().Format("20060102-150405"))
	}
	return t, nil
}

// NewTunerFromInput returns a Tuner of a whole TuneInput (a JSON file's).
func NewTunerFromInput(c client.Client, in TuneInput, opts ...TunerOption) *Tuner {
	t := &Tuner{c: c, taskQueue: DefaultTaskQueue, in: in}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Input is the Tune workflow input this Tuner starts.
func (t *Tuner) Input() TuneInput { return t.in }

// Search is a started Tune.
type Search struct {
	c          client.Client
	Name       string
	WorkflowID string
}

// Start starts the Tune workflow and returns without waiting. The input is
// validated here too (its seed, or 0), so a bad one fails before it reaches
// the server.
func (t *Tuner) Start(ctx context.Context) (*Search, error) {
	seed := int64(0)
	if s := t.in.TuneConfig.Seed; s != nil {
		seed = *s
	}
	if _, err := t.in.WithDefaults().Validate(seed); err != nil {
		return nil, err
	}
	name := t.in.Trainer.Run.Name
	id := TuneWorkflowID(name)
	_, err := t.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                t.taskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		StaticSummary:            fmt.Sprintf("search %s: %s, %s %s", name, t.in.Trainer.TrainFunc, t.in.TuneConfig.Mode, t.in.TuneConfig.Metric),
	}, api.TuneWorkflowType, t.in)
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return nil, fmt.Errorf("search %q is already running (workflow %s)", name, id)
		}
		return nil, fmt.Errorf("start Tune %q: %w", name, err)
	}
	return &Search{c: t.c, Name: name, WorkflowID: id}, nil
}

// Fit runs the search and waits for its TuneResult (Ray's tuner.fit()). A
// search that fails returns its TuneResult, whose Error says why, and an
// error.
func (t *Tuner) Fit(ctx context.Context) (*TuneResult, error) {
	s, err := t.Start(ctx)
	if err != nil {
		return nil, err
	}
	return s.Wait(ctx)
}

// Wait waits for the search to end and returns its TuneResult.
func (s *Search) Wait(ctx context.Context) (*TuneResult, error) {
	return waitTune(ctx, s.c, s.WorkflowID, s.Name)
}

// GetTuneResult returns the search of workflowID as it stands: its result
// once it ended, else its trials so far (the Tune's Query).
func GetTuneResult(ctx context.Context, c client.Client, workflowID string) (*TuneResult, error) {
	d, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", workflowID, err)
	}
	if d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		v, err := c.QueryWorkflow(ctx, workflowID, "", api.QueryTune)
		if err != nil {
			return nil, fmt.Errorf("query search %s: %w", workflowID, err)
		}
		var r TuneResult
		if err := v.Get(&r); err != nil {
			return nil, err
		}
		return &r, nil
	}
	r, err := waitTune(ctx, c, workflowID, workflowID)
	if r != nil {
		return r, nil
	}
	return nil, err
}

func waitTune(ctx context.Context, c client.Client, workflowID, name string) (*TuneResult, error) {
	wr := c.GetWorkflow(ctx, workflowID, "")
	res, err := waitFor(ctx, wr, "search", name, api.ErrTrainingFailed, func(r *TuneResult) string { return r.Error })
	var app *temporal.ApplicationError
	if res == nil && errors.As(err, &app) && app.Type() == string(api.ErrInvalidInput) && app.HasDetails() {
		// A metric no trial reports: the search's result says which they do.
		var r TuneResult
		if app.Details(&r) == nil {
			return &r, fmt.Errorf("search %q failed: %s", name, app.Message())
		}
	}
	return res, err
}
