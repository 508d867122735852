package builtin

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/train"
)

// hxOrScratch and labOrScratch are batch buffers for targetStats, which
// runs before the model's tensors exist.
func (r *dsRunner) hxOrScratch() []float32 {
	if len(r.hx) < r.rankBatch*r.train.Width() {
		r.hx = make([]float32, r.rankBatch*r.train.Width())
	}
	return r.hx
}

func (r *dsRunner) labOrScratch() []float32 {
	if len(r.lab) < r.rankBatch {
		r.lab = make([]float32, r.rankBatch)
	}
	return r.lab
}

// labels32 turns the shard's labels into target values in place (class
// numbers into their values under the config's task override).
func (r *dsRunner) labels32(lab []float32) []float32 {
	if r.classValue != nil {
		for i, c := range lab {
			lab[i] = r.classValue[int(c)]
		}
	}
	return lab
}

// next reads the next batch of s into the model's input and target
// tensors; n is 0 at the end of the epoch. For a regression, lab holds
// the labels in their units and y the network's targets.
func (r *dsRunner) next(s *data.Shard) (x, y compute.Tensor, n int, err error) {
	n, err = s.Next(r.ctx, r.hx, r.lab)
	if errors.Is(err, io.EOF) {
		return x, y, 0, nil
	}
	if err != nil {
		if r.classValue != nil && errors.Is(err, data.ErrInvalid) {
			err = fmt.Errorf(`%w (config task "regression" reads the label through the train data's values: set "task": "regression" on every dataset)`, err)
		}
		return x, y, 0, invalid(err)
	}
	if r.info.Task == "regression" {
		r.labels32(r.lab[:n])
		mu, sd := r.info.TargetMean, r.info.TargetStd
		for i, v := range r.lab[:n] {
			r.hy[i] = float32((float64(v) - mu) / sd)
		}
	}
	x, y = r.x.Rows(0, n), r.y.Rows(0, n)
	if r.x.Data() == nil {
		r.be.Upload(x, r.hx[:x.Len()])
		r.be.Upload(y, r.hy[:n])
	}
	return x, y, n, nil
}

func (r *dsRunner) loop() error {
	cfg := r.cfg
	steps := r.stepsPerEpoch
	for epoch := r.startEpoch; epoch < cfg.Epochs; epoch++ {
		step := 0
		if epoch == r.startEpoch && r.resumeMid {
			step = r.startStep
		} else if err := r.train.SetEpoch(epoch); err != nil {
			return err
		}
		var acc [nTrainSums]float64
		seg, cpu0 := time.Now(), processCPU()
		for ; ; step++ {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			x, y, n, err := r.next(r.train)
			if err != nil {
				return fmt.Errorf("epoch %d step %d: %w", epoch, step, err)
			}
			if n == 0 {
				break
			}
			// The schedule's clock: a resumed epoch may take a step more
			// than the epoch of this world's steps (padding).
			global := epoch*steps + min(step, steps-1)
			r.m.SetDropoutSeed(stepSeed(cfg.Seed, global))
			out := r.m.Forward(x, true)
			var loss, hits float64
			var grad compute.Tensor
			if r.ce != nil {
				l, c := r.ce.Forward(out, y, true)
				loss, hits, grad = l, float64(c), r.ce.Grad(n)
			} else {
				loss = r.mse.Forward(out, y, true)
				hits, grad = loss*r.info.TargetStd*r.info.TargetStd, r.mse.Grad(n)
			}
			r.weight.apply(grad, n, r.world, r.train.StepRows())
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				return train.NonRetryable(fmt.Errorf("epoch %d step %d: the loss is %v: missing values reach the model (impute them: simple_imputer), or training diverged (lower lr)", epoch, step, loss))
			}
			if err := r.ddp.Backward(r.ctx, grad); err != nil {
				return fmt.Errorf("epoch %d step %d: %w", epoch, step, err)
			}
			r.opt.Step(r.sched.LR(global))
			acc[sumLoss] += loss
			acc[sumHits] += hits
			acc[sumRows] += float64(n)
			r.tc.AddSamples(n)
			r.tc.SetProgress(epoch, step+1)
			more := r.train.Left() > 0
			if every := cfg.CheckpointEverySteps; every > 0 && (step+1)%every == 0 && more {
				acc[sumSeconds] += time.Since(seg).Seconds()
				acc[sumCPU] += processCPU() - cpu0
				if err := r.midEpoch(epoch, step+1, &acc); err != nil {
					return err
				}
				seg, cpu0 = time.Now(), processCPU()
			} else if more {
				// A worker of the group is stopping: checkpoint here, so
				// the next attempt loses no finished step.
				stop, err := r.tc.ShouldStop(r.ctx)
				if err != nil {
					return fmt.Errorf("epoch %d step %d: %w", epoch, step, err)
				}
				if stop {
					acc[sumSeconds] += time.Since(seg).Seconds()
					acc[sumCPU] += processCPU() - cpu0
					if err := r.midEpoch(epoch, step+1, &acc); err != nil {
						return err
					}
					return fmt.Errorf("epoch %d step %d: %w", epoch, step+1, train.ErrPreempted)
				}
			}
			if h := r.o.AfterStep; h != nil {
				if err := h(r.tc, epoch, step+1); err != nil {
					return err
				}
			}
		}
		acc[sumSeconds] += time.Since(seg).Seconds()
		acc[sumCPU] += processCPU() - cpu0
		if err := r.endEpoch(epoch, &acc); err != nil {
			return err
		}
	}
	return nil
}

// stepSeed is the dropout seed of a global step: a function of (seed,
// step) alone, so a resumed run draws the same masks with no generator
// state in the checkpoint.
func stepSeed(seed uint64, step int) uint64 {
	z := seed ^ uint64(step)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// midEpoch checkpoints after step steps of epoch: the ranks sum their
// metrics so far into rank 0's carry, so the epoch's metrics come out the
// same, bit for bit, whether or not the run was interrupted here.
func (r *dsRunner) midEpoch(epoch, step int, acc *[nTrainSums]float64) error {
	sums := *acc
	if err := r.ddp.SumFloat64(r.ctx, sums[:]); err != nil {
		return err
	}
	if r.rank == 0 {
		for i := range sums {
			r.carry[i] += sums[i]
		}
	}
	*acc = [nTrainSums]float64{}
	if err := r.ddp.SyncBuffers(r.ctx); err != nil {
		return err
	}
	steps := max(r.stepsPerEpoch, 1)
	global := epoch*steps + min(step, steps-1)
	metrics := train.Metrics{"epoch": float64(epoch) + float64(min(step, steps-1))/float64(steps), "steps": float64(global)}
	var ckpt *train.Checkpoint
	if r.rank == 0 {
		var err error
		if ckpt, err = r.save(epoch, step); err != nil {
			return err
		}
	}
	if err := r.tc.Report(metrics, ckpt); err != nil {
		return fmt.Errorf("report epoch %d step %d: %w", epoch, step, err)
	}
	return nil
}

// endEpoch evaluates, reports the epoch's metrics and checkpoints.
func (r *dsRunner) endEpoch(epoch int, acc *[nTrainSums]float64) error {
	if err := r.ddp.SyncBuffers(r.ctx); err != nil {
		return err
	}
	sums := make([]float64, nTrainSums, nTrainSums+nEvalSums*len(r.evals))
	for i := range acc {
		sums[i] = acc[i] + r.carry[i]
	}
	r.carry = [nTrainSums]float64{}
	for _, e := range r.evals {
		es, err := r.evaluate(e)
		if err != nil {
			return fmt.Errorf("epoch %d: evaluate %s: %w", epoch, e.name, err)
		}
		sums = append(sums, es[:]...)
	}
	if err := r.ddp.SumFloat64(r.ctx, sums); err != nil {
		return err
	}
	rows := max(sums[sumRows], 1)
	secs := sums[sumSeconds] / float64(r.world)
	metrics := train.Metrics{
		"epoch":         float64(epoch + 1),
		"train_loss":    sums[sumLoss] / rows,
		"samples_per_s": sums[sumRows] / secs,
		"epoch_time_s":  secs,
		"cpu_s":         sums[sumCPU],
	}
	if r.info.Task == "classification" {
		metrics["train_accuracy"] = sums[sumHits] / rows
	} else {
		metrics["train_rmse"] = math.Sqrt(sums[sumHits] / rows)
	}
	for i, e := range r.evals {
		es := sums[nTrainSums+i*nEvalSums : nTrainSums+(i+1)*nEvalSums]
		n := max(es[evalRows], 1)
		metrics[e.name+"_loss"] = es[evalLoss] / n
		if r.info.Task == "classification" {
			metrics[e.name+"_accuracy"] = es[evalHits] / n
			continue
		}
		metrics[e.name+"_rmse"] = math.Sqrt(es[evalHits] / n)
		metrics[e.name+"_mae"] = es[evalAbs] / n
		// Deviations from the train mean, which is close to this set's:
		// no cancellation to speak of.
		ssTot := es[evalY2] - es[evalY]*es[evalY]/n
		if ssTot > 0 {
			metrics[e.name+"_r2"] = 1 - es[evalHits]/ssTot
		}
	}
	var ckpt *train.Checkpoint
	if r.rank == 0 {
		var err error
		if ckpt, err = r.save(epoch+1, 0); err != nil {
			return err
		}
	}
	if err := r.tc.Report(metrics, ckpt); err != nil {
		return fmt.Errorf("report epoch %d: %w", epoch+1, err)
	}
	return nil
}

// The sums of an evaluation, per rank, then over ranks.
const (
	evalLoss = iota // the loss, summed over rows
	evalHits        // correct rows, or squared error in label units
	evalRows
	evalAbs // absolute error in label units (regression)
	evalY   // labels minus the train mean, and their squares (regression)
	evalY2
	nEvalSums
)

// evaluate runs the model over this rank's rows of an evaluation dataset.
func (r *dsRunner) evaluate(e *evalSet) ([nEvalSums]float64, error) {
	var s [nEvalSums]float64
	if err := e.s.SetEpoch(0); err != nil {
		return s, err
	}
	left := e.count
	var host []float32
	r.m.Freeze() // as in runner.evaluate: the predictor's arithmetic, row for row
	for left != 0 {
		x, y, n, err := r.next(e.s)
		if err != nil {
			return s, err
		}
		if n == 0 {
			break
		}
		if left > 0 {
			n = int(min(int64(n), left))
			left -= int64(n)
			x, y = x.Rows(0, n), y.Rows(0, n)
		}
		out := r.m.Forward(x, false)
		s[evalRows] += float64(n)
		if r.ce != nil {
			l, c := r.ce.Forward(out, y, false)
			s[evalLoss] += l
			s[evalHits] += float64(c)
			continue
		}
		s[evalLoss] += r.mse.Forward(out, y, false)
		p := out.Data()
		if p == nil {
			host = slices.Grow(host[:0], n)[:n]
			r.be.Download(host, out)
			p = host
		}
		mu, sd := r.info.TargetMean, r.info.TargetStd
		for i, v := range r.lab[:n] {
			d := float64(p[i])*sd + mu - float64(v)
			s[evalHits] += d * d
			s[evalAbs] += math.Abs(d)
			c := float64(v) - mu
			s[evalY] += c
			s[evalY2] += c * c
		}
	}
	return s, nil
}
