package api

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Summary is the one line the Web UI and `temporal workflow list` show for
// a Fit (the workflow's static summary): the training function, the ranks,
// the datasets and the run name. A Trainer and `starter schedule` set it.
func (in FitInput) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s · %s", in.TrainFunc, ranksText(in.Scaling))
	if len(in.Datasets) > 0 {
		names := make([]string, 0, len(in.Datasets))
		for n := range in.Datasets {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(&b, " · datasets %s", strings.Join(names, ", "))
	}
	if in.Run.Schedule != "" {
		fmt.Fprintf(&b, " · schedule %s", in.Run.Schedule)
	}
	if in.Run.Name != "" {
		fmt.Fprintf(&b, " · run %s", in.Run.Name)
	}
	return b.String()
}

// Details is the Markdown the Web UI shows on a Fit's page (the workflow's
// static details): where the run stores its state, its failure policy,
// its datasets and its config.
func (in FitInput) Details() string {
	in = in.WithDefaults()
	var b strings.Builder
	name := in.Run.Name
	if name == "" {
		name = "(named when it starts)"
	}
	fmt.Fprintf(&b, "**Run** `%s`, training function `%s`\n\n", name, in.TrainFunc)
	fmt.Fprintf(&b, "- storage: `%s`\n", in.Run.StoragePath)
	fmt.Fprintf(&b, "- ranks: %s, task queue `%s`\n", ranksText(in.Scaling), in.Scaling.RankQueue())
	f := in.Run.Failure
	fmt.Fprintf(&b, "- failures: max %d, heartbeat timeout %s\n", f.MaxFailures, f.HeartbeatTimeout)
	if c := in.Run.Checkpoint; c.ScoreAttribute != "" {
		fmt.Fprintf(&b, "- checkpoints: best by %s (%s), keep %d\n", c.ScoreAttribute, c.ScoreOrder, c.NumToKeep)
	}
	if in.Run.ResumeFrom != "" {
		fmt.Fprintf(&b, "- warm start from `%s`\n", in.Run.ResumeFrom)
	}
	names := make([]string, 0, len(in.Datasets))
	for n := range in.Datasets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "- dataset %s: `%s`\n", n, in.Datasets[n].URI)
	}
	if len(in.Config) > 0 {
		cfg := string(in.Config)
		if len(cfg) > 2000 {
			cfg = cfg[:2000] + "..."
		} else if pretty, err := json.MarshalIndent(json.RawMessage(in.Config), "", "  "); err == nil {
			cfg = string(pretty)
		}
		fmt.Fprintf(&b, "\n```json\n%s\n```\n", cfg)
	}
	return b.String()
}

// ranksText says how many ranks a run has: "4 ranks", "2-4 ranks" (elastic),
// with " (GPU)".
func ranksText(s ScalingConfig) string {
	t := fmt.Sprintf("%d ranks", max(s.NumWorkers, 1))
	if s.Elastic() {
		t = fmt.Sprintf("%d-%d ranks", s.Min(), s.Slots())
	}
	if s.UseGPU {
		t += " (GPU)"
	}
	if r := s.Resources(); !r.IsZero() {
		t += ", each " + r.String()
	}
	return t
}
