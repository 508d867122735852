// Package predict uses a checkpoint for inference: Ray Train's Predictor.
//
// Load(ctx, uri) opens any committed checkpoint (local or S3) and returns a
// Predictor for it, chosen by the checkpoint's format (its manifest's Meta
// "format"): the built-in trainers' checkpoints (StateFormat, GBDTFormat)
// are known; a user's own training function plugs its format in with
// Register, as it registers its training function. A uri ending in .json is
// an XGBoost JSON model file instead (LoadXGBoost): one "features" input.
//
// A Predictor speaks in named tensors, as the Open Inference Protocol (KServe
// v2, Triton, MLServer) does: a Batch holds input tensors whose first
// dimension is the batch, a prediction is a list of output tensors.
// Metadata says which inputs a model takes (name, datatype, shape with -1
// for the batch dimension) and which outputs it gives, so the HTTP server,
// BatchPredict and a caller all check inputs the same way and name the
// offending input in their errors.
//
// A Predictor is safe for concurrent use unless its doc says otherwise; it
// keeps no reference to a Batch after Predict returns.
package predict
