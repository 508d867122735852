"""XGBoost 1.7's side of `go run ./bench/e2e` (Debian python3-xgboost):
a user's whole job from CSV files, timed from process start.

    python3 xgb_e2e.py TRAIN_CSV VALID_CSV LABEL PARAMS_JSON ROUNDS MODEL_OUT

reads both CSV files with pandas, builds DMatrix objects, trains with
evals=[(train, "train"), (valid, "valid")] (the metrics of PARAMS_JSON every
round), saves the model to MODEL_OUT (JSON) and prints one JSON line:
{"seconds_in_script": ..., "read_seconds": ..., "train_seconds": ...,
"train_auc": ..., "valid_auc": ..., "version": ...}.
"""
import time

T0 = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402

import pandas as pd  # noqa: E402
import xgboost as xgb  # noqa: E402


def main():
    train_csv, valid_csv, label, params, rounds, out = sys.argv[1:7]
    params, rounds = json.loads(params), int(rounds)
    t_read = time.perf_counter()
    tr = pd.read_csv(train_csv)
    va = pd.read_csv(valid_csv)
    nthread = params.get("nthread", 2)
    dtrain = xgb.DMatrix(tr.drop(columns=[label]), label=tr[label], nthread=nthread)
    dvalid = xgb.DMatrix(va.drop(columns=[label]), label=va[label], nthread=nthread)
    t_train = time.perf_counter()
    hist = {}
    booster = xgb.train(params, dtrain, num_boost_round=rounds, evals=[(dtrain, "train"), (dvalid, "valid")],
                        evals_result=hist, verbose_eval=False)
    booster.save_model(out)
    t_end = time.perf_counter()
    metric = params.get("eval_metric", "auc")
    if isinstance(metric, list):
        metric = metric[-1]
    print(json.dumps({
        "seconds_in_script": t_end - T0,
        "read_seconds": t_train - t_read,
        "train_seconds": t_end - t_train,
        "train_auc": hist["train"][metric][-1],
        "valid_auc": hist["valid"][metric][-1],
        "version": xgb.__version__,
    }), flush=True)


if __name__ == "__main__":
    main()
