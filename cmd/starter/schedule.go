package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

const scheduleUsage = `usage: starter schedule <command> [flags]

Periodic retraining over Temporal Schedules. Each scheduled Fit gets its own
workflow ID and run name (the schedule ID and the time); with
-resume-from previous-best it warm-starts from the best checkpoint of the
schedule's last successful run, and a run whose best checkpoint beats the
promoted one by run.checkpoint.score_attribute is promoted:
{storage}/{schedule}/promoted.json, which predict and serve accept.
With -tune tune.json the schedule starts a Tune (a hyperparameter search,
docs/tune.md) instead: each start a new search "tune-<id>-<time>", whose best
trial's best checkpoint is promoted the same way.

commands:
  create     -id ID (-cron SPEC | -every DURATION) [-jitter D] [-overlap skip] [-note TEXT] [-paused] (+ Fit flags | -tune tune.json)
  list       the schedules
  describe   -id ID: spec, state, recent and next runs
  pause      -id ID [-note TEXT]
  unpause    -id ID [-note TEXT]
  trigger    -id ID [-overlap POLICY]: start a run now
  backfill   -id ID -start TIME -end TIME [-overlap POLICY]: the runs the spec had in [start, end) (RFC 3339)
  update     -id ID [-cron SPEC | -every D] [-jitter D] [-note TEXT] [Fit flags, applied to the scheduled input | -tune tune.json]
  delete     -id ID

overlap policies: skip (default: a run still going makes the next skip), buffer-one, buffer-all,
cancel-other, terminate-other, allow-all.
`

// runSchedule runs a schedule command; "starter schedule -id X -cron Y ..."
// (flags first) is create, as before the subcommands.
func runSchedule(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" {
		fmt.Print(scheduleUsage)
		return nil
	}
	cmd := "create"
	if !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "create":
		return scheduleCreate(args)
	case "update":
		return scheduleUpdate(args)
	case "list":
		return scheduleList(args)
	case "describe", "pause", "unpause", "trigger", "backfill", "delete":
		return scheduleAct(cmd, args)
	}
	return fmt.Errorf("schedule: unknown command %q\n\n%s", cmd, scheduleUsage)
}

// specFlags are the flags of a schedule's spec and policies.
type specFlags struct {
	cron, note, overlap string
	every, jitter       time.Duration
	paused              bool
}

func (s *specFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.cron, "cron", "", `cron spec, e.g. "0 3 * * *"`)
	fs.DurationVar(&s.every, "every", 0, "an interval instead of a cron spec, e.g. 6h")
	fs.DurationVar(&s.jitter, "jitter", 0, "start each run up to this much later, at random")
	fs.StringVar(&s.overlap, "overlap", "skip", "what a start does while a run is still going: skip, buffer-one, buffer-all, cancel-other, terminate-other, allow-all")
	fs.StringVar(&s.note, "note", "", "a note on the schedule (why it exists, who owns it)")
	fs.BoolVar(&s.paused, "paused", false, "create it paused")
}

func (s *specFlags) spec() (client.ScheduleSpec, error) {
	var sp client.ScheduleSpec
	switch {
	case s.cron != "" && s.every != 0:
		return sp, fmt.Errorf("schedule: -cron %q and -every %v: give one", s.cron, s.every)
	case s.cron != "":
		sp.CronExpressions = []string{s.cron}
	case s.every > 0:
		sp.Intervals = []client.ScheduleIntervalSpec{{Every: s.every}}
	case s.every < 0:
		return sp, fmt.Errorf("schedule: -every %v: must be positive", s.every)
	}
	if s.jitter < 0 {
		return sp, fmt.Errorf("schedule: -jitter %v: must be positive", s.jitter)
	}
	sp.Jitter = s.jitter
	return sp, nil
}

// overlapPolicies are the -overlap values.
var overlapPolicies = map[string]enumspb.ScheduleOverlapPolicy{
	"skip": enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, "buffer-one": enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
	"buffer-all": enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, "cancel-other": enumspb.SCHEDULE_OVERLAP_POLICY_CANCEL_OTHER,
	"terminate-other": enumspb.SCHEDULE_OVERLAP_POLICY_TERMINATE_OTHER, "allow-all": enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL,
}

func overlapPolicy(s string) (enumspb.ScheduleOverlapPolicy, error) {
	p, ok := overlapPolicies[s]
	if !ok {
		names := make([]string, 0, len(overlapPolicies))
		for n := range overlapPolicies {
			names = append(names, n)
		}
		sort.Strings(names)
		return 0, fmt.Errorf("schedule: -overlap %q: want one of %s", s, strings.Join(names, ", "))
	}
	return p, nil
}

func scheduleCreate(args []string) error {
	fs := flag.NewFlagSet("schedule create", flag.ExitOnError)
	var (
		c     conn
		in    inputFlags
		sf    specFlags
		id    = fs.String("id", "", "schedule ID (required)")
		queue = fs.String("task-queue", train.DefaultTaskQueue, "task queue of the Fit (or Tune) workflow")
		tune  = fs.String("tune", "", "start a Tune (a hyperparameter search) of this input file instead of a Fit (docs/tune.md)")
	)
	c.flags(fs)
	sf.register(fs)
	in.register(fs, "")
	_ = fs.Parse(args)
	if *id == "" || (sf.cron == "" && sf.every == 0) {
		return fmt.Errorf("schedule: -id and -cron (or -every) are required")
	}
	var (
		o    client.ScheduleOptions
		what string
		err  error
	)
	if *tune != "" {
		if err := noFitFlags(fs, in); err != nil {
			return err
		}
		tin, err := scheduledTuneInput(*tune, *id)
		if err != nil {
			return err
		}
		if o, err = tuneScheduleOptions(*id, sf, *queue, tin); err != nil {
			return err
		}
		what = fmt.Sprintf("Tune of %s", tin.Trainer.TrainFunc)
	} else {
		input, err := in.build()
		if err != nil {
			return err
		}
		if err := input.WithDefaults().Validate(); err != nil {
			return err
		}
		if o, err = scheduleOptions(*id, sf, *queue, input); err != nil {
			return err
		}
		what = fmt.Sprintf("Fit %q", input.TrainFunc)
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	h, err := cl.ScheduleClient().Create(context.Background(), o)
	if err != nil {
		return fmt.Errorf("create schedule %q: %w", *id, err)
	}
	fmt.Printf("schedule %q created: starts %s %s\n", h.GetID(), what, describeSpec(o.Spec))
	return nil
}

// noFitFlags says that a -tune schedule takes no Fit flags: its trainer is
// the Tune input's.
func noFitFlags(fs *flag.FlagSet, in inputFlags) error {
	var given []string
	setters := in.setters(&train.FitInput{})
	fs.Visit(func(f *flag.Flag) {
		if _, ok := setters[f.Name]; ok {
			given = append(given, "-"+f.Name)
		}
	})
	if len(given) > 0 {
		return fmt.Errorf("schedule: -tune and %s: a scheduled search's Fit is its input's trainer; set it there", strings.Join(given, ", "))
	}
	return nil
}

// scheduledTuneInput reads and validates the Tune input of schedule id:
// each start must be a new search (named by its workflow ID, unique per
// start), so trainer.run.name must be empty; the search belongs to the
// schedule (trainer.run.schedule).
func scheduledTuneInput(path, id string) (api.TuneInput, error) {
	in, err := readTuneInput(path)
	if err != nil {
		return in, err
	}
	if in.Trainer.Run.Name != "" {
		return in, &api.InvalidTuneError{Field: "trainer.run.name", Value: in.Trainer.Run.Name, Reason: fmt.Sprintf(
			`a scheduled search is named by its workflow ID ("tune-%s-<time>"), a new search each start: leave it empty`, id)}
	}
	if in.Trainer.Run.Schedule == "" {
		in.Trainer.Run.Schedule = id
	}
	if _, err := in.WithDefaults().Validate(0); err != nil {
		return in, err
	}
	return in, nil
}

// tuneScheduleOptions is the Schedule of a Tune: workflow IDs "tune-<id>"
// (Temporal appends the time, which names each search).
func tuneScheduleOptions(id string, sf specFlags, queue string, in api.TuneInput) (client.ScheduleOptions, error) {
	o, err := scheduleOptions(id, sf, queue, in.Trainer)
	if err != nil {
		return o, err
	}
	o.Action = &client.ScheduleWorkflowAction{
		ID: "tune-" + id, Workflow: api.TuneWorkflowType, TaskQueue: queue, Args: []any{in},
		StaticSummary: fmt.Sprintf("search of %s · %d samples · %s %s · schedule %s", in.Trainer.TrainFunc,
			in.WithDefaults().TuneConfig.NumSamples, in.TuneConfig.Mode, in.TuneConfig.Metric, id),
	}
	return o, nil
}

// scheduleOptions is the Schedule scheduleCreate creates: on the spec, a Fit
// of input on queue, with workflow IDs "fit-<id>" (Temporal appends the
// time), the overlap policy, and the note.
func scheduleOptions(id string, sf specFlags, queue string, input train.FitInput) (client.ScheduleOptions, error) {
	spec, err := sf.spec()
	if err != nil {
		return client.ScheduleOptions{}, err
	}
	overlap, err := overlapPolicy(sf.overlap)
	if err != nil {
		return client.ScheduleOptions{}, err
	}
	return client.ScheduleOptions{
		ID:   id,
		Spec: spec,
		Action: &client.ScheduleWorkflowAction{
			ID: "fit-" + id, Workflow: train.WorkflowType, TaskQueue: queue, Args: []any{input},
			StaticSummary: withSchedule(input, id).Summary(), StaticDetails: withSchedule(input, id).Details(),
		},
		Overlap: overlap, Note: sf.note, Paused: sf.paused,
	}, nil
}

// withSchedule is input as a run of schedule id sees it.
func withSchedule(in train.FitInput, id string) train.FitInput {
	if in.Run.Schedule == "" {
		in.Run.Schedule = id
	}
	return in
}

func describeSpec(s client.ScheduleSpec) string {
	var parts []string
	for _, c := range s.CronExpressions {
		parts = append(parts, fmt.Sprintf("on %q", c))
	}
	for _, i := range s.Intervals {
		parts = append(parts, fmt.Sprintf("every %v", i.Every))
	}
	if s.Jitter > 0 {
		parts = append(parts, fmt.Sprintf("(jitter %v)", s.Jitter))
	}
	return strings.Join(parts, " ")
}

func scheduleUpdate(args []string) error {
	fs := flag.NewFlagSet("schedule update", flag.ExitOnError)
	var (
		c    conn
		in   inputFlags
		sf   specFlags
		id   = fs.String("id", "", "schedule ID (required)")
		tune = fs.String("tune", "", "a -tune schedule: its new Tune input file")
	)
	c.flags(fs)
	sf.register(fs)
	in.register(fs, "")
	_ = fs.Parse(args)
	if *id == "" {
		return fmt.Errorf("schedule update: -id is required")
	}
	var tin *api.TuneInput
	if *tune != "" {
		if err := noFitFlags(fs, in); err != nil {
			return err
		}
		t, err := scheduledTuneInput(*tune, *id)
		if err != nil {
			return err
		}
		tin = &t
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	opts, err := c.connection().ClientOptions(telemetry)
	if err != nil {
		return err
	}
	// The scheduled input comes back as a payload: decoded (and
	// decrypted) with the client's converter.
	dc := opts.DataConverter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	cl, err := client.Dial(opts)
	if err != nil {
		return err
	}
	defer cl.Close()
	var failed error
	err = cl.ScheduleClient().GetHandle(context.Background(), *id).Update(context.Background(), client.ScheduleUpdateOptions{
		DoUpdate: func(u client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			s := u.Description.Schedule
			if set["cron"] || set["every"] || set["jitter"] {
				if !set["cron"] && !set["every"] {
					sf.cron = strings.Join(s.Spec.CronExpressions, "")
					if len(s.Spec.Intervals) > 0 {
						sf.every = s.Spec.Intervals[0].Every
					}
				}
				spec, err := sf.spec()
				if err != nil {
					failed = err
					return nil, err
				}
				s.Spec = &spec
			}
			if set["overlap"] {
				p, err := overlapPolicy(sf.overlap)
				if err != nil {
					failed = err
					return nil, err
				}
				s.Policy.Overlap = p
			}
			if set["note"] {
				s.State.Note = sf.note
			}
			a, ok := s.Action.(*client.ScheduleWorkflowAction)
			isTune := ok && fmt.Sprint(a.Workflow) == api.TuneWorkflowType
			switch {
			case tin != nil && !isTune:
				failed = fmt.Errorf("schedule update: -tune %s: schedule %q does not start a Tune", *tune, *id)
			case isTune:
				failed = noFitFlags(fs, in)
			}
			if failed != nil {
				return nil, failed
			}
			if isTune {
				if tin != nil {
					a.Args = []any{*tin}
				}
			} else if ok && len(a.Args) == 1 {
				// The scheduled input, with the Fit flags given applied.
				var input train.FitInput
				switch arg := a.Args[0].(type) {
				case *commonpb.Payload:
					if err := dc.FromPayload(arg, &input); err != nil {
						failed = fmt.Errorf("the scheduled input: %w", err)
						return nil, failed
					}
				case train.FitInput:
					input = arg
				}
				changed := false
				setters := in.setters(&input)
				fs.Visit(func(f *flag.Flag) {
					if fn, ok := setters[f.Name]; ok {
						fn()
						changed = true
					}
				})
				if changed {
					if err := input.WithDefaults().Validate(); err != nil {
						failed = err
						return nil, err
					}
					a.Args = []any{input}
				}
			}
			return &client.ScheduleUpdate{Schedule: &s}, nil
		},
	})
	if failed != nil {
		return failed
	}
	if err != nil {
		return fmt.Errorf("update schedule %q: %w", *id, err)
	}
	fmt.Printf("schedule %q updated\n", *id)
	return nil
}

func scheduleList(args []string) error {
	fs := flag.NewFlagSet("schedule list", flag.ExitOnError)
	var c conn
	c.flags(fs)
	_ = fs.Parse(args)
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	it, err := cl.ScheduleClient().List(context.Background(), client.ScheduleListOptions{})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSPEC\tPAUSED\tNEXT RUN\tNOTE")
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return err
		}
		next := "-"
		if len(e.NextActionTimes) > 0 {
			next = e.NextActionTimes[0].Local().Format(time.RFC3339)
		}
		spec := ""
		if e.Spec != nil {
			spec = describeSpec(*e.Spec)
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", e.ID, spec, e.Paused, next, e.Note)
	}
	return tw.Flush()
}

func scheduleAct(cmd string, args []string) error {
	fs := flag.NewFlagSet("schedule "+cmd, flag.ExitOnError)
	var (
		c       conn
		id      = fs.String("id", "", "schedule ID (required)")
		note    = fs.String("note", "", "why (pause, unpause)")
		overlap = fs.String("overlap", "", "overlap policy of this trigger or backfill (default: the schedule's)")
		start   = fs.String("start", "", "backfill: start time, RFC 3339")
		end     = fs.String("end", "", "backfill: end time, RFC 3339")
	)
	c.flags(fs)
	_ = fs.Parse(args)
	if *id == "" {
		return fmt.Errorf("schedule %s: -id is required", cmd)
	}
	var policy enumspb.ScheduleOverlapPolicy
	if *overlap != "" {
		var err error
		if policy, err = overlapPolicy(*overlap); err != nil {
			return err
		}
	}
	var from, to time.Time
	if cmd == "backfill" {
		var err error
		if from, err = time.Parse(time.RFC3339, *start); err != nil {
			return fmt.Errorf("schedule backfill: -start %q: %w", *start, err)
		}
		if to, err = time.Parse(time.RFC3339, *end); err != nil {
			return fmt.Errorf("schedule backfill: -end %q: %w", *end, err)
		}
		if !to.After(from) {
			return fmt.Errorf("schedule backfill: -end %s is not after -start %s", *end, *start)
		}
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := context.Background()
	h := cl.ScheduleClient().GetHandle(ctx, *id)
	switch cmd {
	case "describe":
		d, err := h.Describe(ctx)
		if err != nil {
			return err
		}
		return printSchedule(*id, d)
	case "pause":
		err = h.Pause(ctx, client.SchedulePauseOptions{Note: *note})
	case "unpause":
		err = h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: *note})
	case "trigger":
		err = h.Trigger(ctx, client.ScheduleTriggerOptions{Overlap: policy})
	case "backfill":
		err = h.Backfill(ctx, client.ScheduleBackfillOptions{Backfill: []client.ScheduleBackfill{{Start: from, End: to, Overlap: policy}}})
	case "delete":
		err = h.Delete(ctx)
	}
	if err != nil {
		return fmt.Errorf("schedule %s %q: %w", cmd, *id, err)
	}
	fmt.Printf("schedule %q: %s done\n", *id, cmd)
	return nil
}

func printSchedule(id string, d *client.ScheduleDescription) error {
	s := d.Schedule
	fmt.Printf("schedule %s\n", id)
	if s.Spec != nil {
		fmt.Printf("  spec:     %s\n", describeSpec(*s.Spec))
	}
	if s.Policy != nil {
		fmt.Printf("  overlap:  %v\n", s.Policy.Overlap)
	}
	if s.State != nil {
		fmt.Printf("  paused:   %v  note: %q\n", s.State.Paused, s.State.Note)
	}
	fmt.Printf("  runs:     %d (%d skipped for overlap)\n", d.Info.NumActions, d.Info.NumActionsSkippedOverlap)
	for _, r := range d.Info.RecentActions {
		fmt.Printf("  recent:   %s  %s\n", r.ScheduleTime.Local().Format(time.RFC3339), r.StartWorkflowResult.WorkflowID)
	}
	for i, t := range d.Info.NextActionTimes {
		if i == 3 {
			break
		}
		fmt.Printf("  next:     %s\n", t.Local().Format(time.RFC3339))
	}
	return nil
}
