package train

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
)

// Status asks the run where it is: the workflow's status Query (attempt,
// world size, reports, checkpoints, the history of attempts, standbys),
// and every running rank's last heartbeat (epoch, step, samples/s, its
// worker), read from the workflow's pending activities (and its rank
// groups', past 128 ranks). Ranks lists the
// current attempt's ranks by rank, then its standbys (rank -1), then ranks
// of earlier attempts still pending: a rank whose worker died stays
// pending, CANCEL_REQUESTED, until its heartbeat timeout.
func (r *Run) Status(ctx context.Context) (*Status, error) {
	return StatusOf(ctx, r.c, r.WorkflowID)
}

// StatusOf is Run.Status for a Fit named by its workflow ID (the latest run
// of that ID).
func StatusOf(ctx context.Context, c client.Client, workflowID string) (*Status, error) {
	v, err := c.QueryWorkflow(ctx, workflowID, "", api.QueryStatus)
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", workflowID, err)
	}
	var st Status
	if err := v.Get(&st); err != nil {
		return nil, fmt.Errorf("status of %s: %w", workflowID, err)
	}
	desc, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return &st, fmt.Errorf("ranks of %s: %w", workflowID, err)
	}
	pending := desc.GetPendingActivities()
	// Past 128 ranks an attempt's ranks are its rank groups' activities
	// (child workflows of the Fit).
	for _, ch := range desc.GetPendingChildren() {
		if ch.GetWorkflowTypeName() != api.GroupWorkflowType {
			continue
		}
		gd, err := c.DescribeWorkflowExecution(ctx, ch.GetWorkflowId(), ch.GetRunId())
		if err != nil {
			return &st, fmt.Errorf("ranks of %s: rank group %s: %w", workflowID, ch.GetWorkflowId(), err)
		}
		pending = append(pending, gd.GetPendingActivities()...)
	}
	for _, pa := range pending {
		if pa.GetActivityType().GetName() != api.ActivityRunRank {
			continue
		}
		rs := RankStatus{Worker: pa.GetLastWorkerIdentity(), State: pa.GetState().String(),
			Progress: api.Progress{Attempt: st.Attempt, Rank: -1, Slot: -1, Epoch: -1, Step: -1}}
		if t := pa.GetLastHeartbeatTime(); t != nil {
			rs.LastHeartbeat = t.AsTime()
		}
		// The default data converter's JSON payload; one a codec encrypted
		// is not readable here, and the rank is listed without its progress.
		ps := pa.GetHeartbeatDetails().GetPayloads()
		if len(ps) > 0 && string(ps[0].GetMetadata()["encoding"]) == "json/plain" {
			_ = json.Unmarshal(ps[0].GetData(), &rs.Progress)
		}
		// A bundle of ranks (ScalingConfig.RanksPerProcess) heartbeats
		// every rank's progress after its first's: one entry each.
		var bundle []api.Progress
		if len(ps) > 1 && string(ps[1].GetMetadata()["encoding"]) == "json/plain" && json.Unmarshal(ps[1].GetData(), &bundle) == nil && len(bundle) > 0 {
			for _, p := range bundle {
				lr := rs
				lr.Progress = p
				st.Ranks = append(st.Ranks, lr)
			}
			continue
		}
		st.Ranks = append(st.Ranks, rs)
	}
	sort.SliceStable(st.Ranks, func(i, j int) bool {
		a, b := st.Ranks[i], st.Ranks[j]
		if a.Attempt != b.Attempt {
			return a.Attempt > b.Attempt // the current attempt first
		}
		if (a.Rank < 0) != (b.Rank < 0) {
			return b.Rank < 0 // ranks of the group first, then standbys
		}
		if a.Rank != b.Rank {
			return a.Rank < b.Rank
		}
		return a.Slot < b.Slot
	})
	return &st, nil
}
