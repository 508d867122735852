"""XGBoost 1.7's side of `go run ./bench/predict -gbdt` (Debian
python3-xgboost).

    python3 xgb_peer.py DIR NAME

loads DIR/NAME.json (our model, exported in XGBoost's JSON format) with
nthread=1 and the rows DIR/NAME.x (float32, shape in DIR/NAME.shape.json),
prints "ready XGBOOST_VERSION", then answers one command a line on stdin:
  check  writes inplace_predict's predictions to DIR/NAME.pred (float32),
         prints "ok";
  round  times inplace_predict over every row, repeated until a second has
         passed, and prints rows per second of wall time and of processor
         time (time.process_time: user and system time).
It exits at the end of stdin.
"""
import json
import os
import sys
import time

import numpy as np
import xgboost as xgb


def main():
    d, name = sys.argv[1], sys.argv[2]
    with open(os.path.join(d, name + ".shape.json")) as f:
        shape = json.load(f)
    x = np.fromfile(os.path.join(d, name + ".x"), dtype=np.float32).reshape(shape["rows"], shape["cols"])
    booster = xgb.Booster(model_file=os.path.join(d, name + ".json"))
    booster.set_param({"nthread": 1})
    booster.inplace_predict(x[:100])
    print("ready", xgb.__version__, flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "check":
            booster.inplace_predict(x).astype(np.float32).tofile(os.path.join(d, name + ".pred"))
            print("ok", flush=True)
        elif cmd == "round":
            n, start, cpu = 0, time.perf_counter(), time.process_time()
            while True:
                booster.inplace_predict(x)
                n += 1
                elapsed = time.perf_counter() - start
                if elapsed >= 1:
                    break
            cpu = time.process_time() - cpu
            print(n * shape["rows"] / elapsed, n * shape["rows"] / cpu, flush=True)
        else:
            print("unknown command " + cmd, flush=True)


if __name__ == "__main__":
    main()
