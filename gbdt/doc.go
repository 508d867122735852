// Package gbdt is tempotrain's distributed gradient-boosted decision trees:
// XGBoost's "hist" algorithm, data-parallel over the ranks of a run (Ray
// Train's XGBoostTrainer), with XGBoost's parameters and its JSON model
// format.
//
// # Contract
//
//   - Data: each rank holds a disjoint shard of the table's rows as a
//     Dataset: Rows × Cols float32 features, row-major, NaN for missing
//     (±Inf is an error), a float32 label per row, optional non-negative
//     weights, optional global row ids. Every rank has the same Cols; a rank
//     may have no rows. NewTrainer copies what it needs from the training
//     shard (labels, weights and the binned features) and keeps no reference
//     to it; evaluation shards are read at every round.
//   - Collectives: every rank calls NewTrainer (or Resume), Step, Run, Train
//     with the same Params in the same order: they run collective operations
//     (Collective: *collective.Comm in production, Local() for one rank).
//     A failed collective fails the call on every rank.
//   - Parameters (Params, ParseParams) have XGBoost 1.7's names and
//     defaults; an unknown name, objective or metric is an error that lists
//     the valid ones, and a value out of range names the field and the value.
//     Labels that do not fit the objective (negative counts for
//     count:poisson, classes outside 0..num_class-1, logistic labels outside
//     [0, 1]) are errors naming the row and the value.
//   - Determinism: for the same rows (the same multiset of (features, label,
//     weight, row id)), 1, 2, 3 or any number of ranks, with the rows split
//     in any way, produce the byte-identical model, identical metrics and
//     identical early stopping. The quantile cuts are the exact weighted
//     quantiles of the whole table (sketch.go: three rounds of all-gathered
//     sparse counts); histograms are sums of gradients quantised to integers
//     in a fixed point chosen per round from the global maxima (as XGBoost's
//     GPU hist), exact in float64 in any order of addition; metrics sum
//     quantised terms the same way; AUC merges the ranks' exact prediction
//     counts; subsample and colsample_bytree draw from a hash of (seed,
//     round, group, row id or feature). Row ids default to the position in
//     rank order (rank 0's rows first), which is the table's order when the
//     shards are consecutive slices of it; give Dataset.RowID when shards are
//     strided and subsample < 1.
//   - Resumption: Trainer.State after any round (JSON: the model in
//     XGBoost's format, the cuts, the round, the early-stopping state; no
//     random state exists) resumed with Resume, on any world size, finishes
//     with the byte-identical model an uninterrupted run gives.
//   - Models: Model.SaveJSON writes XGBoost 1.7's JSON model, which
//     xgboost.Booster(model_file=...) loads and predicts with (to within
//     float32 rounding of the transforms); LoadJSON reads XGBoost's JSON
//     models (gbtree, numerical splits). A split sends x < split_condition
//     left, NaN to the default side. Prediction sums leaves in float32 in
//     tree order, as XGBoost's CPU predictor.
//
// # Algorithm
//
// Per round: gradients and hessians of every row for every output group
// (one tree per class per round for multi-class objectives), quantised;
// per tree: the rows sampled; the root histogram (per feature and bin, the
// sums of quantised g and h) built by every rank over its rows and summed by
// one all-reduce; depthwise growth builds, per level, the histogram of the
// smaller child of every split (by hessian) and gets the larger by
// subtraction from the parent, one all-reduce per level; lossguide growth
// expands the node of largest loss change first, one all-reduce per
// expansion, up to max_leaves. Split finding is XGBoost's: gain
// G_L²/(H_L+λ) + G_R²/(H_R+λ) − G²/(H+λ) with L1 soft-thresholding of G by
// alpha and max_delta_step's variant, both children at least
// min_child_weight, a split kept when its gain exceeds 1e-6 and gamma;
// missing values go to the side that gains more (a scan with them right,
// then one with them left), learnt per split. Ranks divide the features of
// the split search among themselves and all-gather their best splits. Leaf
// values are eta × −ThresholdL1(G, alpha)/(H+λ). A feature with at most
// max_bin distinct values gets a bin per value; with missing values and
// max_bin = 256 it gets at most 255, so its codes (bins plus the missing
// code) fit a byte. A constant feature has one bin and is never split on.
//
// AUC (metric auc) is computed exactly over all ranks: each rank sends its
// distinct predictions with their positive and negative weights (in a fixed
// point), every rank merges them and computes the same area (ties count a
// half); multi-class AUC is the class-weighted mean of one-vs-rest AUCs.
//
// # Hot loops
//
// Binning, gradient quantisation, histogram building, row partitioning,
// split finding and prediction run in C (kern.c, and forest.c for the one
// tree walk, Forest, which PredictMargin, the evaluation margins and
// package predict use; -O3, no FMA contraction); each has a Go reference
// and the tests require the same bits from both. Measured on the
// project's 2-core VM (BenchmarkKernels, C against Go): binning 4×,
// histograms 3×, partitions 1.5×, prediction 5× faster; split
// finding, profiled on Fashion-MNIST, 4× (10 s of Go against 2.5 s of C over
// 3 rounds). The histogram loop reads each row once and leaves out each
// feature's most frequent code, whose slot it recovers by subtraction from
// the node's totals (exact in integer arithmetic): on Fashion-MNIST, where
// half the pixels are 0, that halves the work (2.2 against 5.6 ns per value
// in a microbenchmark; column-wise blocking, XGBoost's choice for wide
// tables, measured 3.2). Split finding skips empty bins (a repeat of the
// previous candidate). Measured and not kept: a branch-free partition (40%
// slower) and a vectorised gain loop (no faster).
//
// # Performance
//
// bench/gbdt against XGBoost 1.7.4 (tree_method=hist, nthread=2) with the
// same parameters (max_depth 6, eta 0.3, max_bin 256), ours as 2 ranks of
// one thread over loopback; go run ./bench/gbdt -reps 3, medians, on the
// project's 2-core VM shared with other work (wall times vary 2× from one
// repetition to the next; processor seconds are steadier):
//
//	fashion (60,000×784, multi:softprob, 10 rounds): XGBoost 38.0 s (46.7 cpu-s),
//	        ours 23.2 s (35.4 cpu-s), 0.61×; 1 rank 29.0 s (25.5 cpu-s);
//	        test accuracy 0.8541 both
//	binary  (1,000,000×28, binary:logistic, 100 rounds): XGBoost 43.2 s (33.7 cpu-s),
//	        ours 22.9 s (17.4 cpu-s), 0.53×; 1 rank 20.0 s (16.4 cpu-s);
//	        test AUC 0.91845 XGBoost, 0.91814 ours; accuracy 0.8353, 0.8355
//
// Two ranks cost more processor time than one on Fashion-MNIST (+40%):
// every rank pays, per node, for the whole histogram (784 features × 256
// bins: clearing it, the all-reduce, the subtraction) while only the rows
// are divided; on the narrow table the overhead is 6%.
package gbdt
