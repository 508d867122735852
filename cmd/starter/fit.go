package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/python"
	"github.com/tempotrain/tempotrain/train"
)

func runFit(args []string) error {
	fs := flag.NewFlagSet("fit", flag.ExitOnError)
	var (
		c       conn
		in      inputFlags
		py      pythonFlags
		queue   = fs.String("task-queue", train.DefaultTaskQueue, "task queue of the Fit workflow")
		detach  = fs.Bool("detach", false, "start the run and return without waiting")
		asJSONL = fs.Bool("print-input", false, "print the FitInput JSON (for temporal workflow start --input) and exit")
		asJSON  = fs.Bool("json", false, "print the Result as JSON (default: a short table)")
		dash    = fs.String("dashboard", os.Getenv("TEMPOTRAIN_DASHBOARD"), "URL of a starter dashboard: the run's details in the Web UI link its page there (env TEMPOTRAIN_DASHBOARD)")
	)
	c.flags(fs)
	in.register(fs, "")
	py.register(fs)
	_ = fs.Parse(args)
	input, err := in.build()
	if err != nil {
		return err
	}
	if err := py.apply(&input); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The packed -working-dir goes up before anything starts, -print-input
	// included: the input printed names the uploaded archive.
	if err := py.upload(ctx, &input, os.Stderr); err != nil {
		return err
	}
	if *asJSONL {
		printJSON(input)
		return nil
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	opts := []train.TrainerOption{train.WithTaskQueue(*queue)}
	if *dash != "" {
		opts = append(opts, train.WithDashboard(*dash))
	}
	tr := train.NewTrainerFromInput(cl, input, opts...)
	run, err := tr.Start(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("started run %q: workflow %s (run ID %s)\n", run.Name, run.WorkflowID, run.RunID)
	if *detach {
		return nil
	}
	res, err := waitAndWatch(ctx, cl, run, input)
	if res != nil {
		printResult(os.Stdout, res, *asJSON)
	}
	return err
}

// pythonFlags are fit's and dev's flags of a Python training function
// (FitInput.Python). Like inputFlags, a flag given wins over the -input
// file's field and a flag not given leaves it alone.
type pythonFlags struct {
	fs                                  *flag.FlagSet
	entrypoint, interpreter, workingDir string
	args                                listFlag
	env                                 listFlag

	// packDir is the absolute local directory -working-dir named, which
	// upload packs into the run's storage; "" when there is none.
	packDir string
}

// listFlag collects the values of a repeatable flag, in order.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func (p *pythonFlags) register(fs *flag.FlagSet) {
	p.fs = fs
	fs.StringVar(&p.entrypoint, "python", "", `Python training function: "train.py:train_func", "pkg.module:train_func", or a script "train.py" run as __main__ (python.entrypoint; train_func becomes "python", -func is not needed)`)
	fs.Var(&p.args, "arg", "an argument of the script, repeatable: -arg --epochs -arg 3 (python.args; script entrypoints only)")
	fs.StringVar(&p.interpreter, "interpreter", "", `Python executable on the workers (python.interpreter; default "python3")`)
	fs.Var(&p.env, "env", "an environment variable of the Python process as K=V, repeatable (python.env)")
	fs.StringVar(&p.workingDir, "working-dir", "", `where the function runs: a local directory, packed and uploaded into the run's storage; or a packed one (.tar.gz path, file:// or s3:// URI) passed through (python.working_dir)`)
}

// apply sets in.Python from the flags given on the command line; call it
// after inputFlags.build. A Python input without train_func gets "python".
func (p *pythonFlags) apply(in *train.FitInput) error {
	given := map[string]bool{}
	p.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	var names []string
	for _, n := range []string{"python", "arg", "interpreter", "env", "working-dir"} {
		if given[n] {
			names = append(names, "-"+n)
		}
	}
	if len(names) > 0 && !given["python"] && in.Python == nil {
		return fmt.Errorf("%s: give the Python entrypoint with -python (or \"python\" in the -input file)", strings.Join(names, ", "))
	}
	if in.Python == nil && !given["python"] {
		return nil
	}
	spec := api.PythonSpec{}
	if in.Python != nil {
		spec = *in.Python
	}
	if given["python"] {
		spec.Entrypoint = p.entrypoint
	}
	if given["arg"] {
		spec.Args = append([]string(nil), p.args...)
	}
	if given["interpreter"] {
		spec.Interpreter = p.interpreter
	}
	if given["env"] {
		env := make(map[string]string, len(spec.Env)+len(p.env))
		for k, v := range spec.Env {
			env[k] = v
		}
		for _, kv := range p.env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fmt.Errorf("-env %q: want NAME=VALUE (-env OMP_NUM_THREADS=4)", kv)
			}
			env[k] = v
		}
		spec.Env = env
	}
	if given["working-dir"] {
		wd, pack, err := resolveWorkingDir(p.workingDir)
		if err != nil {
			return err
		}
		spec.WorkingDir, spec.WorkingDirSHA256 = wd, ""
		if pack {
			p.packDir = wd
		}
	}
	in.Python = &spec
	if in.TrainFunc == "" {
		// Set here, not only by the workflow's defaults: the run's default
		// name is made of it ("python-20260102-150405").
		in.TrainFunc = api.PythonFunc
	}
	return nil
}

// resolveWorkingDir reads -working-dir: a URI or a packed directory
// (.tar.gz, .tgz) is passed through, a relative path made absolute; any
// other value must be a local directory, which is to be packed.
func resolveWorkingDir(v string) (dir string, pack bool, err error) {
	switch {
	case strings.TrimSpace(v) == "":
		return "", false, fmt.Errorf("-working-dir %q: give a directory or a packed directory's URI", v)
	case strings.Contains(v, "://"):
		return v, false, nil
	}
	abs, err := filepath.Abs(v)
	if err != nil {
		return "", false, fmt.Errorf("-working-dir %s: %w", v, err)
	}
	if api.IsPackedWorkingDir(abs) {
		return abs, false, nil
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("-working-dir %s: no such directory here (to name a directory present only on the workers, set python.working_dir in the -input file)", v)
	case err != nil:
		return "", false, fmt.Errorf("-working-dir %s: %w", v, err)
	case !st.IsDir():
		return "", false, fmt.Errorf("-working-dir %s: not a directory (a packed one ends in .tar.gz)", v)
	}
	return abs, true, nil
}

// upload packs the local -working-dir (if any) and puts it into the run's
// storage, and points in.Python at the archive and its sha256. A run
// without a name is named here, as the Trainer would name it, since the
// archive lives in the run's directory.
func (p *pythonFlags) upload(ctx context.Context, in *train.FitInput, out io.Writer) error {
	if p.packDir == "" {
		return nil
	}
	if in.Run.Name == "" {
		in.Run.Name = fmt.Sprintf("%s-%s", in.TrainFunc, time.Now().UTC().Format("20060102-150405"))
	}
	// A bad input fails before anything is packed or written.
	if err := in.WithDefaults().Validate(); err != nil {
		return err
	}
	if local := strings.TrimPrefix(in.Run.StoragePath, "file://"); filepath.IsAbs(local) {
		if rel, err := filepath.Rel(p.packDir, local); err == nil && filepath.IsLocal(rel) && !underSkipped(rel) {
			return fmt.Errorf("-working-dir %s holds the run's storage %s: each run would pack the archives of the ones before; put the storage elsewhere (starter dev's .tempotrain is left out)", p.packDir, in.Run.StoragePath)
		}
	}
	archive, sum, err := python.Pack(p.packDir, python.DefaultMaxWorkingDir)
	if err != nil {
		return fmt.Errorf("-working-dir: %w", err)
	}
	uri, err := python.Upload(ctx, in.Run.StoragePath, in.Run.Name, archive, sum)
	if err != nil {
		return fmt.Errorf("-working-dir %s: %w", p.packDir, err)
	}
	in.Python.WorkingDir, in.Python.WorkingDirSHA256 = uri, sum
	fmt.Fprintf(out, "working dir %s packed (%d bytes, sha256 %s) to %s\n", p.packDir, len(archive), sum[:12], uri)
	return nil
}

// underSkipped reports whether a relative path lies under a directory that
// python.Pack leaves out.
func underSkipped(rel string) bool {
	for _, el := range strings.Split(filepath.ToSlash(rel), "/") {
		if el == ".tempotrain" || el == ".git" || el == ".venv" || el == "__pycache__" {
			return true
		}
	}
	return false
}

// runTarget parses the flags of a command that names one run, and dials.
func runTarget(cmd string, args []string, extra ...func(*flag.FlagSet)) (client.Client, string, string, error) {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	var c conn
	c.flags(fs)
	for _, e := range extra {
		e(fs)
	}
	name := fs.String("name", "", "run name (its workflow is fit-<name>)")
	wfID := fs.String("workflow-id", "", "workflow ID of a Fit started another way (CLI, UI, Schedule)")
	_ = fs.Parse(args)
	if *name == "" && *wfID == "" {
		return nil, "", "", fmt.Errorf("%s: give -name or -workflow-id", cmd)
	}
	cl, err := c.dial()
	if err != nil {
		return nil, "", "", err
	}
	id := *wfID
	if id == "" {
		id = train.WorkflowID(*name)
	}
	return cl, id, *name, nil
}

func runResult(args []string) error {
	cl, id, name, err := runTarget("result", args)
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := train.GetResultByWorkflowID(context.Background(), cl, id, name)
	if res != nil {
		printJSON(res)
	}
	return err
}

func runStatus(args []string) error {
	var asJSON bool
	cl, id, _, err := runTarget("status", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the status as JSON (default: tables)")
	})
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := train.StatusOf(context.Background(), cl, id)
	if st == nil {
		return err
	}
	if asJSON {
		printJSON(st)
	} else {
		printStatus(os.Stdout, st, time.Now())
	}
	return err
}

// printStatus writes a run's status as tables: the run, its ranks (from
// their heartbeats) and its attempts.
func printStatus(w io.Writer, st *train.Status, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	state := "running"
	if st.Done {
		state = "finished"
	}
	fmt.Fprintf(tw, "run\t%s (%s)\n", st.Name, state)
	fmt.Fprintf(tw, "now\t%s, epoch %d\n", summary(st), epochsDone(st))
	fmt.Fprintf(tw, "reports\t%d\t%s\n", st.Reports, fmtMetrics(st.Latest))
	if st.Checkpoint != nil {
		fmt.Fprintf(tw, "checkpoint\t%d\t%s\n", st.Checkpoint.Seq, st.Checkpoint.URI)
	}
	_ = tw.Flush()
	if len(st.Ranks) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ATTEMPT\tRANK\tPHASE\tEPOCH\tSTEP\tSAMPLES\tSAMPLES/S\tCKPT\tHEARTBEAT\tSTATE\tWORKER")
		for _, r := range st.Ranks {
			rank := fmt.Sprint(r.Rank)
			if r.Rank < 0 {
				rank = "standby"
			}
			hb := "-"
			if !r.LastHeartbeat.IsZero() {
				hb = now.Sub(r.LastHeartbeat).Round(100*time.Millisecond).String() + " ago"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%.0f\t%d\t%s\t%s\t%s\n", r.Attempt, rank, r.Phase, r.Epoch, r.Step, r.Samples, r.SamplesPerSec, r.Checkpoint, hb, r.State, r.Worker)
		}
		_ = tw.Flush()
	}
	if len(st.History) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ATTEMPT\tWORLD\tSTART\tTOOK\tRESUMED FROM\tENDED")
		for _, h := range st.History {
			took, ended := "running", ""
			if !h.End.IsZero() {
				took = h.End.Sub(h.Start).Round(100 * time.Millisecond).String()
				ended = "ok"
				if h.Error != "" {
					ended = clipLine(h.Error, 100)
				}
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\n", h.Attempt, h.WorldSize, h.Start.Local().Format("15:04:05"), took, h.ResumedFrom, ended)
		}
		_ = tw.Flush()
		for _, h := range st.History {
			if h.KernelPathChanged != "" {
				fmt.Fprintf(w, "attempt %d: %s\n", h.Attempt, h.KernelPathChanged)
			}
		}
	}
}

// clipLine keeps the first line of s, at most n bytes.
func clipLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}
