"""XGBoost 1.7's side of `go run ./bench/gbdt` (Debian python3-xgboost).

    python3 xgb_peer.py DIR PARAMS_JSON ROUNDS

reads DIR/train_x.bin, train_y.bin, test_x.bin (float32, shapes in
DIR/shape.json), trains with tree_method=hist on the given parameters for
ROUNDS rounds, timing xgb.train alone (the quantile sketch and the binning
happen inside it, at its first round, as ours happen inside its trainer),
writes the test set's predictions to DIR/xgb_pred.bin (float32) and prints
one JSON line: {"train_seconds": ..., "cpu_seconds": ..., "version": ...}
(cpu_seconds: the process's user and system time during xgb.train).
"""
import json
import os
import resource
import sys
import time

import numpy as np
import xgboost as xgb


def main():
    d, params, rounds = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    with open(os.path.join(d, "shape.json")) as f:
        shape = json.load(f)
    cols = shape["cols"]
    x = np.fromfile(os.path.join(d, "train_x.bin"), dtype=np.float32).reshape(-1, cols)
    y = np.fromfile(os.path.join(d, "train_y.bin"), dtype=np.float32)
    xt = np.fromfile(os.path.join(d, "test_x.bin"), dtype=np.float32).reshape(-1, cols)
    dtrain = xgb.DMatrix(x, label=y, nthread=params.get("nthread", 2))
    dtest = xgb.DMatrix(xt, nthread=params.get("nthread", 2))
    start, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    booster = xgb.train(params, dtrain, num_boost_round=rounds)
    secs, cpu1 = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    booster.predict(dtest).astype(np.float32).tofile(os.path.join(d, "xgb_pred.bin"))
    print(json.dumps({"train_seconds": secs, "cpu_seconds": cpu, "version": xgb.__version__}), flush=True)


if __name__ == "__main__":
    main()
