package main

import (
	"context"
	"flag"
	"fmt"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/train"
)

// runSchedule creates a Temporal Schedule that starts a Fit on a cron spec:
// periodic retraining. Each scheduled Fit gets its own workflow ID (the
// schedule ID and the time), which becomes its run name unless the input
// names one; a fixed run.name makes every scheduled Fit resume that run.
func runSchedule(args []string) error {
	fs := flag.NewFlagSet("schedule", flag.ExitOnError)
	var (
		c     conn
		in    inputFlags
		id    = fs.String("id", "", "schedule ID (required)")
		cron  = fs.String("cron", "", `cron spec, e.g. "0 3 * * *" (required)`)
		queue = fs.String("task-queue", train.DefaultTaskQueue, "task queue of the Fit workflow")
	)
	c.flags(fs)
	in.register(fs, "")
	_ = fs.Parse(args)
	if *id == "" || *cron == "" {
		return fmt.Errorf("schedule: -id and -cron are required")
	}
	input, err := in.build()
	if err != nil {
		return err
	}
	if err := input.WithDefaults().Validate(); err != nil {
		return err
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	h, err := cl.ScheduleClient().Create(context.Background(), scheduleOptions(*id, *cron, *queue, input))
	if err != nil {
		return fmt.Errorf("create schedule %q: %w", *id, err)
	}
	fmt.Printf("schedule %q created: starts Fit %q on %q\n", h.GetID(), input.TrainFunc, *cron)
	return nil
}

// scheduleOptions is the Schedule runSchedule creates: on cron, a Fit of
// input on queue, with workflow IDs "fit-<id>" (Temporal appends the time).
func scheduleOptions(id, cron, queue string, input train.FitInput) client.ScheduleOptions {
	return client.ScheduleOptions{
		ID:   id,
		Spec: client.ScheduleSpec{CronExpressions: []string{cron}},
		Action: &client.ScheduleWorkflowAction{
			ID: "fit-" + id, Workflow: train.WorkflowType, TaskQueue: queue, Args: []any{input},
		},
	}
}
