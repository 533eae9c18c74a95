"""The cost model: predicts a candidate's time from its features (features.py).

What it learns is the *correction* to the analytic proxy, in log space:

    log(time_ms) = log(analytic_ms) + r(features)

so with no measurements it ranks as the proxy does, a few measurements move
every prediction by their mean ratio (`r` starts as that constant), and
more let the model learn where the proxy is wrong (a tile shape the GPU
likes better than the proxy thinks). Features are compressed with
sign(x) * log1p(|x|) first: counts span ten orders of magnitude.

Backends, the first that imports (or the one asked for):
  "lightgbm"  gradient-boosted trees (LightGBM; `pip install tcomp[search]`);
  "sklearn"   scikit-learn's GradientBoostingRegressor (the GPU machine has
              scikit-learn but no LightGBM);
  "ridge"     ridge regression in NumPy on standardised features: always
              there, the fallback;
  "analytic"  no learning: the proxy alone (what a search on the sim uses,
              since the sim measures no time).

`CostModel.fit(X, times_ms)` trains from scratch on every measurement so far
(a few hundred rows: milliseconds), `predict_ms(X)` predicts. Until
`min_samples` timed measurements exist the proxy alone ranks (a model fit
on three points only adds noise). Trained online during a run; across runs
the records are the training set: a resumed run re-lowers the schedules of
its records to get their features (tuner.py), so nothing besides the records
file needs to be kept, and features that change with tcomp stay consistent.
"""
from __future__ import annotations

import numpy as np

from .features import INDEX
from .space import SearchError

BACKENDS = ("auto", "lightgbm", "sklearn", "ridge", "analytic")


def available_backend() -> str:
    """The backend "auto" picks here."""
    for name in ("lightgbm", "sklearn"):
        if _importable(name):
            return name
    return "ridge"


def _importable(name: str) -> bool:
    try:
        if name == "lightgbm":
            import lightgbm  # noqa: F401
        else:
            import sklearn.ensemble  # noqa: F401
        return True
    except Exception:  # ImportError, or OSError when lightgbm's libgomp is missing
        return False


def transform(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    return np.sign(X) * np.log1p(np.abs(X))


class CostModel:
    """See the module docstring. `backend`: one of BACKENDS; `min_samples`:
    timed measurements before the model is used; `seed`: for the trees."""

    def __init__(self, backend: str = "auto", min_samples: int = 8, seed: int = 0):
        if backend not in BACKENDS:
            raise SearchError(f"CostModel: backend must be one of {', '.join(BACKENDS)}, "
                              f"got {backend!r}")
        if backend in ("lightgbm", "sklearn") and not _importable(backend):
            pkg = "lightgbm (pip install 'tcomp[search]')" if backend == "lightgbm" \
                else "scikit-learn (pip install scikit-learn)"
            raise SearchError(f"CostModel: backend '{backend}' needs {pkg}; or use "
                              f"backend='auto', which falls back to ridge regression")
        if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 2:
            raise SearchError(f"CostModel: min_samples must be an integer >= 2, got "
                              f"{min_samples!r}")
        self.backend = available_backend() if backend == "auto" else backend
        self.min_samples, self.seed = min_samples, seed
        self.samples = 0  # rows of the last fit
        self._predict = None

    @property
    def trained(self) -> bool:
        """Whether predictions come from a fitted model (else the proxy alone)."""
        return self._predict is not None

    def fit(self, X, times_ms) -> "CostModel":
        """Train on feature rows `X` and their measured median times (ms > 0)."""
        X = np.asarray(X, dtype=np.float64).reshape(-1, len(INDEX))
        t = np.asarray(times_ms, dtype=np.float64).reshape(-1)
        if len(X) != len(t):
            raise SearchError(f"CostModel.fit: {len(X)} feature rows but {len(t)} times")
        if not np.all(np.isfinite(t) & (t > 0)):
            raise SearchError("CostModel.fit: times_ms must be finite and > 0")
        self.samples = len(t)
        if self.backend == "analytic" or len(t) < self.min_samples:
            self._predict = None
            return self
        r = np.log(t) - X[:, INDEX["log_analytic_ms"]]
        Z = transform(X)
        if np.ptp(r) == 0:  # one ratio for every row: nothing more to learn
            self._predict = _constant(float(r[0]))
        else:
            self._predict = {"lightgbm": _lightgbm, "sklearn": _sklearn,
                             "ridge": _ridge}[self.backend](Z, r, self.seed)
        return self

    def predict_ms(self, X) -> np.ndarray:
        """Predicted times (ms) of feature rows `X`."""
        X = np.asarray(X, dtype=np.float64).reshape(-1, len(INDEX))
        base = X[:, INDEX["log_analytic_ms"]]
        if self._predict is None or not len(X):
            return np.exp(base)
        return np.exp(base + np.asarray(self._predict(transform(X)), dtype=np.float64))

    def __repr__(self) -> str:
        state = f"trained on {self.samples}" if self.trained else "analytic proxy"
        return f"<CostModel {self.backend}: {state}>"


def _constant(c: float):
    return lambda Z: np.full(len(Z), c)


def _lightgbm(Z, r, seed):
    import lightgbm as lgb
    params = {"objective": "regression", "learning_rate": 0.1, "num_leaves": 15,
              "min_data_in_leaf": 2, "min_data_in_bin": 1, "feature_fraction": 0.9,
              "bagging_fraction": 0.9, "bagging_freq": 1, "lambda_l2": 1.0, "seed": seed,
              "num_threads": 1, "verbose": -1, "deterministic": True}
    booster = lgb.train(params, lgb.Dataset(Z, r, params={"verbose": -1}),
                        num_boost_round=min(200, 20 + 4 * len(r)))
    return booster.predict


def _sklearn(Z, r, seed):
    from sklearn.ensemble import GradientBoostingRegressor
    m = GradientBoostingRegressor(n_estimators=min(200, 20 + 4 * len(r)), max_depth=3,
                                  learning_rate=0.1, subsample=0.9, min_samples_leaf=2,
                                  random_state=seed)
    m.fit(Z, r)
    return m.predict


def _ridge(Z, r, seed, alpha: float = 1.0):
    """Ridge regression on standardised columns (closed form)."""
    del seed
    mu, sd = Z.mean(axis=0), Z.std(axis=0)
    sd[sd == 0] = 1.0
    S = (Z - mu) / sd
    y0 = r.mean()
    w = np.linalg.solve(S.T @ S + alpha * np.eye(S.shape[1]), S.T @ (r - y0))
    return lambda Zq: y0 + ((Zq - mu) / sd) @ w
