package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tempotrain/tempotrain/bench/internal/benchdata"
	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/builtin"
)

// mlpFlags are the tabular-mlp job's sizes and training settings, the
// same on both sides.
type mlpFlags struct {
	rows, validRows int
	epochs, batch   int
	lr              float64
	optimizer       string
	hidden          string
	torchThreads    int
}

func mlpFlagSet(m *mlpFlags) {
	flag.IntVar(&m.rows, "mlp-rows", 200_000, "mlp: training rows")
	flag.IntVar(&m.validRows, "mlp-valid-rows", 50_000, "mlp: validation rows")
	flag.IntVar(&m.epochs, "epochs", 5, "mlp: epochs")
	flag.IntVar(&m.batch, "batch", 256, "mlp: rows of a step over all ranks (ours: batch_semantics global)")
	flag.Float64Var(&m.lr, "lr", 0.05, "mlp: learning rate")
	flag.StringVar(&m.optimizer, "optimizer", "sgd", `mlp: "sgd" (momentum 0.9) or "adam"`)
	flag.StringVar(&m.hidden, "hidden", "64,32", "mlp: hidden layer sizes")
	flag.IntVar(&m.torchThreads, "torch-threads", 1, "mlp: PyTorch's threads (torch.set_num_threads); 2 was 5× slower on the busy 2-core machine")
}

// config is the training config both sides read: tabular-mlp's JSON
// config, which mlp_e2e.py reads too.
func (m *mlpFlags) config(world int) (map[string]any, error) {
	hidden := []int{}
	for _, h := range strings.Split(m.hidden, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-hidden %q: %q is not a layer size", m.hidden, h)
		}
		hidden = append(hidden, n)
	}
	if m.optimizer != "sgd" && m.optimizer != "adam" {
		return nil, fmt.Errorf(`-optimizer %q: want "sgd" or "adam"`, m.optimizer)
	}
	if m.batch < world {
		return nil, fmt.Errorf("-batch %d: fewer rows than the %d ranks", m.batch, world)
	}
	cfg := map[string]any{"epochs": m.epochs, "batch_size": m.batch, "batch_semantics": builtin.GlobalBatch,
		"optimizer": m.optimizer, "lr": m.lr, "hidden": hidden, "seed": 1}
	if m.optimizer == "sgd" {
		cfg["momentum"] = 0.9
	}
	return cfg, nil
}

// mlpPeer is what mlp_e2e.py prints.
type mlpPeer struct {
	InScript      float64 `json:"seconds_in_script"`
	Read          float64 `json:"read_seconds"`
	Train         float64 `json:"train_seconds"`
	TrainLoss     float64 `json:"train_loss"`
	TrainAccuracy float64 `json:"train_accuracy"`
	ValidLoss     float64 `json:"valid_loss"`
	ValidAccuracy float64 `json:"valid_accuracy"`
	Version       string  `json:"version"`
}

// runMLP is the tabular-mlp job: Fit of tabular-mlp on the train and valid
// CSV files against mlp_e2e.py.
func runMLP(f *flags, quiet *hostinfo.Options) error {
	m := &f.mlp
	cfg, err := m.config(f.world)
	if err != nil {
		return err
	}
	dir, trainCSV, validCSV, cleanup, err := tables(f, m.rows, m.validRows)
	if err != nil {
		return err
	}
	defer cleanup()

	host := hostinfo.Start(os.Stdout, quiet)
	reps := f.repsOr(3)
	fmt.Printf("tabular-mlp from CSV: train %d × %d, valid %d, hidden %v, %s lr %g, batch %d, %d epochs, mean imputation and standardisation, train loss/accuracy and valid loss/accuracy every epoch; ours %d ranks (batch_semantics global), PyTorch %d threads; %d repetitions in rotating order, medians\n",
		m.rows, benchdata.BinaryCols, m.validRows, cfg["hidden"], m.optimizer, m.lr, m.batch, m.epochs, f.world, m.torchThreads, reps)
	cj, _ := json.Marshal(cfg)
	var ours []childResult
	var peers []mlpPeer
	sides := []hostinfo.Side{{Name: "ours", Run: func(rep int) (hostinfo.Sample, error) {
		s, res, err := runOurs(f, rep, builtin.TabularMLP, dir, trainCSV, validCSV, cj)
		if err != nil {
			return s, err
		}
		ours = append(ours, res)
		mt := res.Metrics
		log.Printf("rep %d: ours %.2fs (cpu %.2fs): server %.2fs, Fit %.2fs (first epoch's report %.2fs, then %.3fs an epoch), train loss %.5f, valid loss %.5f accuracy %.5f",
			rep, s.Wall, s.CPU, res.ServerSeconds, res.FitSeconds, res.FirstReport, res.PerRound, mt["train_loss"], mt["valid_loss"], mt["valid_accuracy"])
		return s, nil
	}}, {Name: "pandas + PyTorch", Run: func(rep int) (hostinfo.Sample, error) {
		script := filepath.Join(dir, "mlp_e2e.py")
		if err := os.WriteFile(script, []byte(mlpScript), 0o644); err != nil {
			return hostinfo.Sample{}, err
		}
		pc := map[string]any{"threads": m.torchThreads}
		for k, v := range cfg {
			pc[k] = v
		}
		pj, _ := json.Marshal(pc)
		model := filepath.Join(dir, "torch-model.pt")
		defer os.Remove(model)
		var res mlpPeer
		s, err := timed(exec.Command(f.python, script, trainCSV, validCSV, "label", string(pj), model), &res)
		if err != nil {
			return s, err
		}
		peers = append(peers, res)
		log.Printf("rep %d: pytorch %.2fs (cpu %.2fs): imports %.2fs, read+standardise %.2fs, train+evaluate+save %.2fs, train loss %.5f, valid loss %.5f accuracy %.5f",
			rep, s.Wall, s.CPU, res.InScript-res.Read-res.Train, res.Read, res.Train, res.TrainLoss, res.ValidLoss, res.ValidAccuracy)
		return s, nil
	}}}
	samples, err := alternate(f, reps, sides)
	if err != nil {
		return err
	}
	om := ours[0].Metrics
	fmt.Printf("%s; train loss %.5f, valid loss %.5f, valid accuracy %.5f\n", oursLine(samples[0], ours, "first epoch's report", "an epoch"),
		om["train_loss"], om["valid_loss"], om["valid_accuracy"])
	if !f.skipPeer {
		p := hostinfo.Medians(samples[1])
		fmt.Printf("pandas + PyTorch: wall %.2f s, CPU %.2f s; imports %.2f s, read + standardise %.2f s, train + evaluate + save %.2f s; train loss %.5f, valid loss %.5f, valid accuracy %.5f (torch %s)\n",
			p.Wall, p.CPU, med(peers, func(r mlpPeer) float64 { return r.InScript - r.Read - r.Train }), med(peers, func(r mlpPeer) float64 { return r.Read }),
			med(peers, func(r mlpPeer) float64 { return r.Train }), peers[0].TrainLoss, peers[0].ValidLoss, peers[0].ValidAccuracy, peers[0].Version)
		fmt.Printf("ours / peer:      %s; valid accuracy difference %+.5f\n", hostinfo.Ratio(samples[0], samples[1]), om["valid_accuracy"]-peers[0].ValidAccuracy)
	}
	host.End()
	return nil
}
